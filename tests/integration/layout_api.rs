//! The public layout API as other modules use it: any TreeReader, raw texts, entries, settings, partial parses.

use std::collections::BTreeMap;

use kok::layout::{
    parse_clusters, parse_repo, parse_repo_settings, Entry, EntryKind, ReadError, Severity, TreeReader,
    DEFAULT_ROOT,
};

/// A tree held in memory: file path → content; directories are implied by the paths.
#[derive(Default)]
struct MemTree(BTreeMap<String, Vec<u8>>);

impl MemTree {
    fn file(mut self, path: &str, text: &str) -> Self {
        self.0.insert(path.to_string(), text.as_bytes().to_vec());
        self
    }

    fn cluster(self, name: &str) -> Self {
        self.file(
            &format!("clusters/{name}/hosts.yml"),
            "all:\n  hosts:\n    node1:\n",
        )
        .file(&format!("clusters/{name}/vars.yml"), "{}\n")
    }
}

impl TreeReader for MemTree {
    fn list(&self, path: &str) -> Result<Vec<Entry>, ReadError> {
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let mut entries: BTreeMap<String, EntryKind> = BTreeMap::new();
        for key in self.0.keys().filter_map(|k| k.strip_prefix(&prefix)) {
            match key.split_once('/') {
                Some((dir, _)) => entries.insert(dir.to_string(), EntryKind::Dir),
                None => entries.insert(key.to_string(), EntryKind::File),
            };
        }
        if entries.is_empty() {
            return Err(ReadError::NotFound {
                path: path.to_string(),
            });
        }
        Ok(entries
            .into_iter()
            .map(|(name, kind)| Entry { name, kind })
            .collect())
    }

    fn read(&self, path: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        let bytes = self.0.get(path).ok_or_else(|| ReadError::NotFound {
            path: path.to_string(),
        })?;
        if bytes.len() as u64 > limit {
            return Err(ReadError::TooLarge {
                path: path.to_string(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok(bytes.clone())
    }

    fn kind(&self, path: &str) -> Result<Option<EntryKind>, ReadError> {
        if self.0.contains_key(path) {
            return Ok(Some(EntryKind::File));
        }
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        Ok(self
            .0
            .keys()
            .any(|k| k.starts_with(&prefix))
            .then_some(EntryKind::Dir))
    }
}

#[test]
fn any_tree_reader_serves_the_parser() {
    let tree = MemTree::default().cluster("a").cluster("b");
    let parsed = parse_repo(&tree, DEFAULT_ROOT);
    assert_eq!(parsed.diagnostics, vec![]);
    let names: Vec<_> = parsed.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(parsed.clusters[0].path, "clusters/a");
    assert!(parsed.clusters[0].inventory.hosts.contains("node1"));
}

#[test]
fn hosts_and_vars_are_kept_byte_for_byte() {
    let hosts = "# the inventory\nall:\n  hosts:\n    node1:   {ansible_host: 10.0.0.1}   # cp\r\n";
    let vars = "---\nkube_version:    v1.33.0\n\n# trailing comment";
    let tree = MemTree::default()
        .file("clusters/a/hosts.yml", hosts)
        .file("clusters/a/vars.yml", vars);
    let parsed = parse_repo(&tree, DEFAULT_ROOT);
    assert_eq!(parsed.diagnostics, vec![]);
    assert_eq!(parsed.clusters[0].inventory_dir.hosts_yml, hosts);
    assert_eq!(parsed.clusters[0].inventory_dir.vars_yml.as_deref(), Some(vars));
}

#[test]
fn operation_entries_are_typed_json_independent_of_key_order_and_style() {
    let block = "- id: scale\n  action: scale.yml\n  extraArgs:\n    - --limit=node1\n  rerun: 2\n  activeDeadlineSeconds: 60\n";
    let flow = "- {activeDeadlineSeconds: 60, rerun: 2, extraArgs: ['--limit=node1'], action: \"scale.yml\", id: scale}\n";
    let entry = |ops: &str| {
        let tree = MemTree::default()
            .cluster("a")
            .file("clusters/a/operations.yml", ops);
        let parsed = parse_repo(&tree, DEFAULT_ROOT);
        assert_eq!(parsed.diagnostics, vec![]);
        parsed.clusters[0].operations[0].entry.clone()
    };
    let (a, b) = (entry(block), entry(flow));
    assert_eq!(a, b);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    assert_eq!(a["rerun"], serde_json::json!(2));
    assert_eq!(a["extraArgs"], serde_json::json!(["--limit=node1"]));
}

#[test]
fn operations_keep_file_order_lines_and_indexes() {
    let ops = "# first\n- id: install\n  action: cluster.yml\n\n- id: scale\n  action: scale.yml\n";
    let tree = MemTree::default()
        .cluster("a")
        .file("clusters/a/operations.yml", ops);
    let parsed = parse_repo(&tree, DEFAULT_ROOT);
    let got: Vec<_> = parsed.clusters[0]
        .operations
        .iter()
        .map(|o| (o.id.as_str(), o.line, o.index))
        .collect();
    assert_eq!(got, [("install", 2, 0), ("scale", 5, 1)]);
}

#[test]
fn cluster_yml_wins_over_kok_yml_key_by_key() {
    let tree = MemTree::default()
        .file(
            "kok.yml",
            "image: base:1\nsshAuthSecret: repo-key\nhistoryLimit: 9\n",
        )
        .cluster("a")
        .cluster("b")
        .file(
            "clusters/b/cluster.yml",
            "sshAuthSecret: b-key\nactiveDeadlineSeconds: 30\n",
        );
    let parsed = parse_repo(&tree, DEFAULT_ROOT);
    assert_eq!(parsed.diagnostics, vec![]);
    let (a, b) = (&parsed.clusters[0].settings, &parsed.clusters[1].settings);
    assert_eq!(a.ssh_auth_secret.as_deref(), Some("repo-key"));
    assert_eq!(b.ssh_auth_secret.as_deref(), Some("b-key"));
    assert_eq!(b.defaults.image.as_deref(), Some("base:1"));
    assert_eq!(b.defaults.history_limit, Some(9));
    assert_eq!(b.defaults.active_deadline_seconds, Some(30));
    assert_eq!(a.defaults.active_deadline_seconds, None);
}

#[test]
fn kok_yml_errors_make_every_cluster_invalid() {
    let tree = MemTree::default()
        .file("kok.yml", "historyLimit: 0\n")
        .cluster("a")
        .cluster("b");
    let parsed = parse_repo(&tree, DEFAULT_ROOT);
    assert_eq!(parsed.clusters, vec![]);
    assert_eq!(parsed.invalid, ["a", "b"]);
    assert_eq!(parsed.diagnostics.len(), 1);
    assert_eq!(parsed.diagnostics[0].path, "kok.yml");
    assert_eq!(parsed.diagnostics[0].cluster, None);
    assert!(parse_repo_settings(&tree, "clusters").is_err());
}

#[test]
fn repo_settings_are_defaults_without_kok_yml() {
    let tree = MemTree::default().cluster("a");
    assert_eq!(
        parse_repo_settings(&tree, "clusters").unwrap(),
        Default::default()
    );
    let tree = tree.file("kok.yml", "image: x:1\n");
    assert_eq!(
        parse_repo_settings(&tree, "clusters")
            .unwrap()
            .defaults
            .image
            .as_deref(),
        Some("x:1")
    );
}

#[test]
fn kok_yml_is_read_beside_a_nested_cluster_root() {
    assert_eq!(kok::layout::settings_path("clusters"), "kok.yml");
    assert_eq!(kok::layout::settings_path("infra/clusters/"), "infra/kok.yml");
    assert_eq!(kok::layout::layout_root("clusters/a"), "");
    assert_eq!(kok::layout::layout_root("infra/clusters/a"), "infra");
    assert_eq!(kok::layout::layout_root("x/infra/clusters/a/"), "x/infra");
    let tree = MemTree::default()
        .file("kok.yml", "image: top:1\n")
        .file("infra/kok.yml", "image: infra:1\n")
        .file("infra/clusters/a/hosts.yml", "all:\n  hosts:\n    node1:\n")
        .file("infra/clusters/a/vars.yml", "{}\n");
    let parsed = parse_repo(&tree, "infra/clusters");
    assert_eq!(parsed.diagnostics, vec![]);
    assert_eq!(
        parsed.clusters[0].settings.defaults.image.as_deref(),
        Some("infra:1")
    );
}

#[test]
fn parse_clusters_reads_only_the_named_directories() {
    let tree = MemTree::default()
        .cluster("a")
        .cluster("b")
        .file("clusters/c/hosts.yml", "all: {}\n");
    let names = ["b".to_string(), "c".to_string(), "gone".to_string()];
    let parsed = parse_clusters(&tree, DEFAULT_ROOT, &names);
    let valid: Vec<_> = parsed.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(valid, ["b"]);
    assert_eq!(parsed.invalid, ["c"]);
    assert!(parsed
        .diagnostics
        .iter()
        .all(|d| d.cluster.as_deref() == Some("c")));
}

#[test]
fn an_existing_empty_root_has_no_clusters_and_no_errors_but_a_missing_one_is_an_error() {
    let tree = MemTree::default().file("clusters/README.md", "clusters go here\n");
    let parsed = parse_repo(&tree, DEFAULT_ROOT);
    assert_eq!((parsed.clusters.len(), parsed.diagnostics.len()), (0, 0));
    let parsed = parse_repo(&MemTree::default().file("other/x", ""), DEFAULT_ROOT);
    assert!(parsed.has_errors());
    assert_eq!(parsed.diagnostics[0].path, "clusters");
}

#[test]
fn diagnostics_are_sorted_and_errors_in_one_cluster_do_not_hide_another() {
    let tree = MemTree::default()
        .file("clusters/b/hosts.yml", "all: {}\n")
        .file("clusters/b/vars.yml", "[]\n")
        .file("clusters/a/hosts.yml", "all:\n  hosts:\n    bad host:\n")
        .file("clusters/a/vars.yml", "{}\n");
    let parsed = parse_repo(&tree, DEFAULT_ROOT);
    assert_eq!(parsed.invalid, ["a", "b"]);
    let paths: Vec<_> = parsed.diagnostics.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "clusters/a/hosts.yml",
            "clusters/b/hosts.yml",
            "clusters/b/vars.yml"
        ]
    );
    assert!(parsed.diagnostics.iter().all(|d| d.severity == Severity::Error));
}
