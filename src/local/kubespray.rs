//! What a checked-out kubespray tree says of itself, read from disk for pre-flight: its playbooks and the
//! Kubernetes versions its checksums file installs (they win over kok's release data).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::preflight::{kube_versions_from_checksums, Tree, Trees, CHECKSUMS_PATHS};

/// The playbooks of the tree at `dir` (`*.yml` and `*.yaml` at its top and under `playbooks/`) and the
/// versions of its checksums file; `None` when it has neither (not a kubespray tree, or unreadable).
pub fn read_tree(dir: &Path) -> Option<Tree> {
    let mut playbooks = BTreeSet::new();
    for (sub, prefix) in [(dir.to_path_buf(), ""), (dir.join("playbooks"), "playbooks/")] {
        let Ok(entries) = std::fs::read_dir(&sub) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = entry.file_type().is_ok_and(|t| t.is_file() || t.is_symlink());
            if is_file && (name.ends_with(".yml") || name.ends_with(".yaml")) {
                playbooks.insert(format!("{prefix}{name}"));
            }
        }
    }
    let kube_versions = CHECKSUMS_PATHS.iter().find_map(|path| {
        let text = std::fs::read_to_string(dir.join(path)).ok()?;
        kube_versions_from_checksums(&text).ok()
    });
    let tree = Tree {
        playbooks: (!playbooks.is_empty()).then_some(playbooks),
        kube_versions,
    };
    (tree != Tree::default()).then_some(tree)
}

/// The trees of `--workdir` (for every image the map does not name) and `--image-workdir` (by image).
pub fn read_trees(workdir: Option<&Path>, by_image: &BTreeMap<String, PathBuf>) -> Trees {
    Trees {
        by_image: by_image
            .iter()
            .filter_map(|(image, dir)| Some((image.clone(), read_tree(dir)?)))
            .collect(),
        fallback: workdir.and_then(read_tree),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubespray_tree_gives_its_playbooks_and_the_versions_of_its_checksums() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path();
        std::fs::create_dir_all(top.join("playbooks")).unwrap();
        std::fs::create_dir_all(top.join("roles/kubespray-defaults/defaults/main")).unwrap();
        for file in ["cluster.yml", "scale.yml", "README.md", "playbooks/facts.yml"] {
            std::fs::write(top.join(file), "").unwrap();
        }
        std::fs::write(
            top.join(CHECKSUMS_PATHS[1]),
            "kubeadm_checksums:\n  amd64:\n    v1.30.1: abc\n    v1.30.0: 0\n    v1.29.5: def\n",
        )
        .unwrap();
        let tree = read_tree(top).unwrap();
        let playbooks: Vec<&str> = tree.playbooks.iter().flatten().map(String::as_str).collect();
        assert_eq!(playbooks, ["cluster.yml", "playbooks/facts.yml", "scale.yml"]);
        let versions: Vec<String> = tree
            .kube_versions
            .iter()
            .flatten()
            .map(ToString::to_string)
            .collect();
        assert_eq!(versions, ["v1.29.5", "v1.30.1"]);
        assert_eq!(read_tree(&top.join("nothing-here")), None);
        let trees = read_trees(None, &[("img:1".to_string(), top.to_path_buf())].into());
        assert!(trees.for_image("img:1").is_some() && trees.for_image("img:2").is_none());
    }
}
