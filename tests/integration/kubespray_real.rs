//! Local mode against real kubespray v2.27.0: `kok run --local --workdir <kubespray>` runs kubespray's own
//! playbooks, roles and `ansible.cfg` with the ansible release its `requirements.txt` pins, over real ssh
//! as root to hosts on 127.0.0.2-4 served by a throwaway sshd, logging in with the key from the cluster's
//! Secret in the embedded API server; outcomes come back on the commit as git notes.
//!
//! kubespray's own defaults would change the host it bootstraps; every cluster here sets what keeps this
//! machine as it is (see [`VARS`]), and the tests refuse to run where the bootstrap would still install
//! or change something (see `tests/integration/common/kubespray.rs`). The confirmation prompts of `remove-node.yml` and
//! `reset.yml` stop a run without a terminal where kok's rule 10 says, and the answers kok asks for pass them;
//! the inventories docs/day-two.md's recipes leave pass kubespray's assertions as they pass kok's.

use crate::gitkit;
use crate::local_e2e_support;

use std::path::Path;
use std::time::Duration;

use gitkit::{free_port, Sshd};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kok::api::{ClusterOperation, Phase};
use kok::layout::Severity;
use kok::preflight::{self, Finding, History};
use kube::api::{Api, PostParams};
use local_e2e_support::kubespray::{kubespray_or_skip, systemd_refusal, Kubespray};
use local_e2e_support::{finished_within, note_line, run_log, LocalKok, LocalRepo, CLUSTER, NS};

/// The addresses of the hosts; one sshd serves them all on one port.
const ADDRESSES: [&str; 4] = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
/// The Secret holding the cluster's ssh key (`sshAuthSecret`).
const SSH_SECRET: &str = "local-ssh";
/// Longest wait for one operation on real kubespray (a run takes under a minute on 2 idle cores).
const RUN_WAIT: Duration = Duration::from_secs(600);
/// Longest wait for the sshd to see the run's last session end once the run has finished; an ssh master
/// left behind would stay for kubespray's `ControlPersist=30m`.
const SESSION_WAIT: Duration = Duration::from_secs(20);

/// vars.yml of every cluster: kubespray logs in as root with the system's python3 (which has the apt
/// bindings), leaves the hostname, users and swap of this machine alone.
const VARS: &str = "\
ansible_user: root
ansible_python_interpreter: /usr/bin/python3
# bootstrap-os would rename this machine to the inventory name
override_system_hostname: false
# swapoff masks swap units through systemd
kubelet_fail_swap_on: false
# the kube user and kube-cert group kubernetes/preinstall would create
kube_owner: root
kube_cert_group: root
addusers:
  kube: {name: root, group: root}
";

/// A host of the inventory: its name, address, and its own `ansible_port` when it has one.
struct Node {
    name: String,
    address: &'static str,
    port: Option<u16>,
}

/// `count` nodes on [`ADDRESSES`], named `<prefix><n>-<pid>` so that no fact cache of an earlier run
/// (kubespray's `ansible.cfg` keeps them in /tmp by host name) answers for them.
fn nodes(prefix: &str, count: usize, port: Option<u16>) -> Vec<Node> {
    ADDRESSES
        .iter()
        .take(count)
        .enumerate()
        .map(|(i, address)| Node {
            name: format!("{prefix}{}-{}", i + 1, std::process::id()),
            address,
            port,
        })
        .collect()
}

/// hosts.yml: every node under `all`, the first the control plane, the others workers (the only node a
/// worker too), `etcd` holding the nodes named.
fn hosts_yml(nodes: &[Node], etcd: &[&Node]) -> String {
    let group = |members: &[&Node]| -> String {
        if members.is_empty() {
            return "      hosts: {}\n".to_string();
        }
        let mut text = "      hosts:\n".to_string();
        for node in members {
            text.push_str(&format!("        {}: {{}}\n", node.name));
        }
        text
    };
    let mut text = "all:\n  hosts:\n".to_string();
    for node in nodes {
        text.push_str(&format!(
            "    {}:\n      ansible_host: {}\n",
            node.name, node.address
        ));
        if let Some(port) = node.port {
            text.push_str(&format!("      ansible_port: {port}\n"));
        }
    }
    let all: Vec<&Node> = nodes.iter().collect();
    let workers = if all.len() > 1 { &all[1..] } else { &all[..] };
    text.push_str("  children:\n    kube_control_plane:\n");
    text.push_str(&group(&all[..1]));
    text.push_str("    kube_node:\n");
    text.push_str(&group(workers));
    text.push_str("    etcd:\n");
    text.push_str(&group(etcd));
    text.push_str(
        "    k8s_cluster:\n      children:\n        kube_control_plane: {}\n        kube_node: {}\n",
    );
    text
}

/// The one operation of a run, and what its cluster.yml says besides the ssh Secret.
#[derive(Clone, Copy)]
struct Entry<'a> {
    id: &'a str,
    action: &'a str,
    args: &'a [&'a str],
    /// False writes `preflight: false`: kok starts the run whatever its rules say, so that kubespray's own
    /// assertions are what stops an inventory kok would refuse.
    preflight: bool,
    /// More lines of cluster.yml (`factsPlaybook: none`).
    settings: &'a str,
}

impl<'a> Entry<'a> {
    /// `id` running `action args...`, pre-flight on, nothing more in cluster.yml.
    fn of((id, action, args): (&'a str, &'a str, &'a [&'a str])) -> Entry<'a> {
        Entry {
            id,
            action,
            args,
            preflight: true,
            settings: "",
        }
    }
}

/// The `local` cluster with one operation, committed, run by kok on kubespray's tree over the test's sshd.
struct KubesprayRun {
    sshd: Sshd,
    repo: LocalRepo,
    kok: LocalKok,
    sha: String,
    id: String,
}

impl KubesprayRun {
    /// Commits the cluster (`hosts`, `vars`, its ssh Secret named in cluster.yml) with the operation `id`
    /// running `action extra_args...`, starts kok on it, creates the Secret from the sshd's user key, and
    /// waits for the operation to finish.
    async fn start(
        kubespray: &Kubespray,
        sshd: Sshd,
        hosts: &str,
        vars: &str,
        entry: Entry<'_>,
    ) -> (KubesprayRun, ClusterOperation) {
        let files = [("hosts.yml", hosts.to_string()), ("vars.yml", vars.to_string())];
        KubesprayRun::start_with_files(kubespray, sshd, &files, entry).await
    }

    /// [`KubesprayRun::start`] with the cluster directory's inventory files given by path inside it.
    async fn start_with_files(
        kubespray: &Kubespray,
        sshd: Sshd,
        files: &[(&str, String)],
        entry: Entry<'_>,
    ) -> (KubesprayRun, ClusterOperation) {
        let Entry {
            id,
            action,
            args: extra_args,
            preflight,
            settings,
        } = entry;
        let repo = LocalRepo::new();
        // The harness's own short layout makes way for the files given.
        for file in ["hosts.yml", "vars.yml"] {
            std::fs::remove_file(repo.path().join(format!("clusters/{CLUSTER}/{file}")))
                .expect("the harness's cluster");
        }
        for (path, content) in files {
            repo.write(&format!("clusters/{CLUSTER}/{path}"), content);
        }
        repo.write(
            &format!("clusters/{CLUSTER}/cluster.yml"),
            &format!("sshAuthSecret: {SSH_SECRET}\n{settings}"),
        );
        let args: Vec<String> = extra_args.iter().map(|a| format!("{a:?}")).collect();
        let switch = if preflight { "" } else { "  preflight: false\n" };
        repo.write(
            &format!("clusters/{CLUSTER}/operations.yml"),
            &format!(
                "- id: {id}\n  action: {action}\n  extraArgs: [{}]\n{switch}",
                args.join(", ")
            ),
        );
        let sha = repo.commit(&format!("{id}: {action} on real kubespray"));
        let workdir = kubespray.tree.to_str().expect("kubespray's path is UTF-8");
        let mut kok = LocalKok::start_with_path(&repo, &["--workdir", workdir], kubespray.search_path());
        let client = kok.client(&repo).await;
        let key = std::fs::read(sshd.file("user_key")).expect("the sshd's user key");
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SSH_SECRET, "namespace": NS},
            "type": "kubernetes.io/ssh-auth",
        }))
        .expect("Secret");
        let secret = Secret {
            data: Some([("ssh-privatekey".to_string(), ByteString(key))].into()),
            ..secret
        };
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .expect("create the cluster's ssh Secret");
        let op = finished_within(&mut kok, &client, id, RUN_WAIT).await;
        let run = KubesprayRun {
            sshd,
            repo,
            kok,
            sha,
            id: id.to_string(),
        };
        (run, op)
    }

    /// The ansible output of the run, for failure messages.
    fn log(&self) -> String {
        run_log(&self.repo, &self.id)
    }

    /// The commit's note once it holds the operation's `state` (`success`, `failure`); its line.
    async fn note(&mut self, state: &str) -> String {
        let prefix = format!("kok/{CLUSTER}/{}: {state} ", self.id);
        let note = note_line(&mut self.kok, &self.repo, &self.sha, &prefix).await;
        note.lines()
            .find(|l| l.starts_with(&prefix))
            .expect("the line note_line found")
            .to_string()
    }

    /// Waits until the sshd holds no session of the finished run (an ssh master kept by `ControlPersist`
    /// is one), failing with the sessions left.
    async fn assert_no_ssh_session_outlives_it(&self) {
        let deadline = std::time::Instant::now() + SESSION_WAIT;
        loop {
            let left = self.sshd.sessions();
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ssh sessions of the finished run are still open (kubespray's ControlPersist=30m keeps \
                 its masters): {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops kok, which must exit 0.
    fn stop(mut self) {
        assert!(
            self.kok.stop(),
            "kok exits 0 on SIGTERM; its log:\n{}",
            self.kok.log()
        );
    }
}

fn phase(op: &ClusterOperation) -> (Phase, String) {
    let status = op.status.clone().unwrap_or_default();
    (status.phase, status.message.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn kubesprays_facts_playbook_succeeds_on_three_nodes_and_no_ssh_master_or_fact_cache_outlives_the_run()
{
    let Some(kubespray) = kubespray_or_skip("kubesprays_facts_playbook_succeeds_on_three_nodes") else {
        return;
    };
    let sshd = Sshd::start_on(&ADDRESSES);
    let nodes = nodes("facts", 3, Some(sshd.port));
    let hosts = hosts_yml(&nodes, &[&nodes[0]]);
    let operation = ("facts", "playbooks/facts.yml", &[][..]);
    let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, VARS, Entry::of(operation)).await;

    let (phase, message) = phase(&op);
    assert_eq!(
        phase,
        Phase::Succeeded,
        "{message}; the run's log:\n{}",
        run.log()
    );
    let line = run.note("success").await;
    assert!(
        line.ends_with(&format!(
            ": 3 hosts, {} changed; not verified: no kubeconfig",
            changed(&op)
        )),
        "{line}"
    );
    let summary = op.status.and_then(|s| s.summary).expect("the run's summary");
    for node in &nodes {
        let counts = summary.hosts.get(&node.name);
        assert!(
            counts.is_some_and(|c| c.ok > 0 && c.unreachable == 0 && c.failed == 0),
            "{} was reached: {summary:?}",
            node.name
        );
    }
    run.assert_no_ssh_session_outlives_it().await;
    for node in &nodes {
        let cached = Path::new("/tmp").join(&node.name);
        assert!(
            !cached.exists(),
            "the run's fact cache lives in its own directory, not in {}",
            cached.display()
        );
    }
    run.stop();
}

/// kubespray v2.27.0's own `inventory/sample/group_vars/` as it ships, by path inside the inventory directory.
fn sample_group_vars(kubespray: &Kubespray) -> Vec<(String, String)> {
    let sample = kubespray.tree.join("inventory/sample");
    let mut files = Vec::new();
    let mut todo = vec![sample.join("group_vars")];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("kubespray's sample inventory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let relative = path.strip_prefix(&sample).expect("inside the sample");
                let text = std::fs::read_to_string(&path).expect("a sample file");
                files.push((relative.to_str().expect("UTF-8").to_string(), text));
            }
        }
    }
    files.sort();
    files
}

/// inventory.ini as kubespray's sample describes it, filled in: every node in `kube_control_plane` (so in
/// `etcd`, its child there) and in `kube_node`, and [`VARS`] as `[all:vars]` (the lowest precedence of all, so
/// the sample's own group_vars are untouched). Run alone, `playbooks/facts.yml` reaches `etcd`'s hosts:
/// `k8s_cluster` is made by the boilerplate of kubespray's other playbooks.
fn inventory_ini(nodes: &[Node]) -> String {
    let mut lines = String::new();
    for node in nodes {
        let port = node
            .port
            .map(|p| format!(" ansible_port={p}"))
            .unwrap_or_default();
        lines.push_str(&format!("{} ansible_host={}{port}\n", node.name, node.address));
    }
    let names: String = nodes.iter().map(|n| format!("{}\n", n.name)).collect();
    format!(
        "[kube_control_plane]\n{lines}\n[etcd:children]\nkube_control_plane\n\n[kube_node]\n{names}\n\
         [all:vars]\nansible_user=root\nansible_python_interpreter=/usr/bin/python3\n\
         override_system_hostname=false\nkubelet_fail_swap_on=false\nkube_owner=root\nkube_cert_group=root\n\
         addusers={{'kube': {{'name': 'root', 'group': 'root'}}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn kubesprays_sample_inventory_as_it_ships_runs_its_facts_playbook_over_ssh() {
    let Some(kubespray) =
        kubespray_or_skip("kubesprays_sample_inventory_as_it_ships_runs_its_facts_playbook")
    else {
        return;
    };
    let sshd = Sshd::start_on(&ADDRESSES);
    let nodes = nodes("sample", 3, Some(sshd.port));
    let mut files: Vec<(String, String)> = sample_group_vars(&kubespray);
    assert!(
        files.len() > 20,
        "kubespray's sample has its group_vars: {files:?}"
    );
    files.push(("inventory.ini".into(), inventory_ini(&nodes)));
    let files: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let operation = ("facts", "playbooks/facts.yml", &[][..]);
    let (mut run, op) = KubesprayRun::start_with_files(&kubespray, sshd, &files, Entry::of(operation)).await;

    let (phase, message) = phase(&op);
    assert_eq!(
        phase,
        Phase::Succeeded,
        "{message}; the run's log:\n{}",
        run.log()
    );
    let line = run.note("success").await;
    assert!(line.contains(": 3 hosts, "), "{line}");
    let summary = op.status.and_then(|s| s.summary).expect("the run's summary");
    for node in &nodes {
        let counts = summary.hosts.get(&node.name);
        assert!(
            counts.is_some_and(|c| c.ok > 0 && c.unreachable == 0 && c.failed == 0),
            "{} was reached: {summary:?}",
            node.name
        );
    }
    run.assert_no_ssh_session_outlives_it().await;
    run.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_variable_in_hosts_yml_overrides_vars_yml_so_a_node_on_its_own_ssh_port_is_reached() {
    let Some(kubespray) = kubespray_or_skip("a_host_variable_in_hosts_yml_overrides_vars_yml") else {
        return;
    };
    let sshd = Sshd::start_on(&ADDRESSES[..1]);
    let nobody_listens = free_port();
    let nodes = nodes("port", 1, Some(sshd.port));
    let hosts = hosts_yml(&nodes, &[&nodes[0]]);
    let vars = format!("{VARS}# no sshd listens on this port\nansible_port: {nobody_listens}\n");
    let operation = ("own-port", "playbooks/facts.yml", &[][..]);
    let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, &vars, Entry::of(operation)).await;

    let (phase, message) = phase(&op);
    assert_eq!(
        phase,
        Phase::Succeeded,
        "{} has ansible_port {} in hosts.yml and vars.yml says {nobody_listens}: {message}; the run's log:\n{}",
        nodes[0].name,
        run.sshd.port,
        run.log()
    );
    run.note("success").await;
    run.assert_no_ssh_session_outlives_it().await;
    run.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn scale_yml_limited_to_one_node_gets_past_the_fact_cache_assertion_and_stops_at_the_systemd_one() {
    let test = "scale_yml_limited_to_one_node_gets_past_the_fact_cache_assertion";
    let Some(kubespray) = kubespray_or_skip(test) else {
        return;
    };
    if let Some(why) = systemd_refusal() {
        eprintln!("skipping {test}: {why}");
        return;
    }
    let sshd = Sshd::start_on(&ADDRESSES);
    let nodes = nodes("scale", 3, Some(sshd.port));
    let hosts = hosts_yml(&nodes, &[&nodes[0]]);
    let limit = format!("--limit={}", nodes[1].name);
    let operation = ("add-node", "scale.yml", &[limit.as_str()][..]);
    // A cluster installed by hand, as cluster.yml says: kok lets scale.yml come first (no operation-order),
    // with pre-flight on, and kubespray's fact-cache assertion is what the run meets.
    let entry = Entry {
        settings: "installed: true\n",
        ..Entry::of(operation)
    };
    let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, VARS, entry).await;
    let found = error_rules(&predicted(&run, &kubespray));
    assert_eq!(
        found,
        Vec::<&str>::new(),
        "installed: no operation-order; kok's facts step keeps the limited run past the fact-cache assertion \
         (no limit-facts)"
    );

    let (phase, message) = phase(&op);
    assert_eq!(phase, Phase::Failed, "{message}; the run's log:\n{}", run.log());
    let line = run.note("failure").await;
    let log = run.log();
    assert!(
        !line.contains("facts cache") && !log.contains("without a populated facts cache"),
        "kubespray's fact-cache assertion stopped the limited run: {line}\n{log}"
    );
    // The assertion after the fact-cache one (and the two about empty groups) in
    // roles/kubernetes/preinstall/tasks/0040-verify-settings.yml; pid 1 is not systemd here.
    assert!(
        line.contains(&format!(
            " - failed at TASK [kubernetes/preinstall : Stop if non systemd OS type] on {}: Assertion failed",
            nodes[1].name
        )),
        "{line}\nthe run's log:\n{log}"
    );
    run.assert_no_ssh_session_outlives_it().await;
    run.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn kubesprays_assertion_on_an_empty_etcd_group_comes_back_on_the_commit_word_for_word() {
    let Some(kubespray) = kubespray_or_skip("kubesprays_assertion_on_an_empty_etcd_group") else {
        return;
    };
    let sshd = Sshd::start_on(&ADDRESSES);
    let nodes = nodes("etcd", 3, Some(sshd.port));
    let hosts = hosts_yml(&nodes, &[]);
    let operation = ("asserts", "cluster.yml", &["--tags", "asserts"][..]);
    // kok refuses it too (group-not-empty); let through, kubespray says it in its own words.
    let entry = Entry {
        preflight: false,
        ..Entry::of(operation)
    };
    let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, VARS, entry).await;
    assert_eq!(error_rules(&predicted(&run, &kubespray)), ["group-not-empty"]);

    let (phase, message) = phase(&op);
    assert_eq!(phase, Phase::Failed, "{message}; the run's log:\n{}", run.log());
    let line = run.note("failure").await;
    let expected = format!(
        " - failed at TASK [kubernetes/preinstall : Stop if etcd group is empty in external etcd mode] on {}: \
         Group 'etcd' cannot be empty in external etcd mode",
        nodes[0].name
    );
    assert!(line.contains(&expected), "{line}\nthe run's log:\n{}", run.log());
    let result = op.status.and_then(|s| s.result).unwrap_or_default();
    assert!(
        result.contains(&expected[" - ".len()..]),
        "the operation's result: {result}"
    );
    run.assert_no_ssh_session_outlives_it().await;
    run.stop();
}

/// What kok's pre-flight finds on the cluster a run committed, as the pass sees a cluster kok never ran
/// anything on, with the rules of every entry checked (`preflight: false` only let the run start) and the
/// checked-out kubespray tree's own playbooks and checksums.
fn predicted(run: &KubesprayRun, kubespray: &Kubespray) -> Vec<Finding> {
    let parsed = kok::layout::parse_repo(&kok::layout::DiskTree::new(run.repo.path()), "clusters");
    let mut cluster = parsed
        .clusters
        .into_iter()
        .find(|c| c.name == CLUSTER)
        .unwrap_or_else(|| panic!("the cluster validates: {:?}", parsed.diagnostics));
    for op in &mut cluster.operations {
        op.preflight = true;
    }
    let operations = cluster.operations.iter().map(|o| (o, true)).collect();
    let tree = kok::local::kubespray::read_tree(&kubespray.tree);
    assert!(tree.is_some(), "kok reads kubespray's checkout");
    let facts = preflight::cluster_facts(&cluster, operations, History::default(), tree);
    preflight::check_embedded(&facts)
}

/// The ids of the rules `found` says are broken (errors), in order.
fn error_rules(found: &[Finding]) -> Vec<&'static str> {
    found
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.rule.id())
        .collect()
}

/// `-e ansible_service_mgr=systemd`: pid 1 is not systemd here, and kubespray's "Stop if non systemd OS
/// type" comes before the assertions on the network plugin, the Kubernetes version and the etcd count.
/// The extra var outranks the gathered fact, so `--tags asserts` goes on to them (nothing but assertions
/// runs: a `--tags asserts` run changes nothing on the hosts).
const PAST_SYSTEMD: [&str; 2] = ["-e", "ansible_service_mgr=systemd"];

#[tokio::test(flavor = "multi_thread")]
async fn kubesprays_own_assertions_stop_where_kok_s_preflight_said_and_let_through_what_it_passed() {
    let Some(kubespray) = kubespray_or_skip("kubesprays_own_assertions_stop_where_kok_s_preflight_said")
    else {
        return;
    };
    let asserts = ["--tags", "asserts", PAST_SYSTEMD[0], PAST_SYSTEMD[1]];
    /// An inventory kok refuses: its nodes' prefix, how many nodes (the first the control plane) and how
    /// many of them etcd members, vars.yml, the operation (`{second}` is the second node), more of
    /// cluster.yml, the rule kok names, and the task of kubespray's that stops it with what it says.
    struct Case<'a> {
        name: &'a str,
        nodes: usize,
        etcd: usize,
        vars: String,
        action: &'a str,
        args: Vec<String>,
        settings: &'a str,
        rule: &'a str,
        task: &'a str,
        says: &'a str,
    }
    let cases = [
        // The pull request that adds a fourth etcd host.
        Case {
            name: "even",
            nodes: 4,
            etcd: 4,
            vars: VARS.to_string(),
            action: "cluster.yml",
            args: asserts.iter().map(|a| a.to_string()).collect(),
            settings: "",
            rule: "etcd-odd",
            task: "Stop if even number of etcd hosts",
            says: "Assertion failed",
        },
        Case {
            name: "old",
            nodes: 3,
            etcd: 1,
            vars: format!("{VARS}kube_version: v1.28.6\n"),
            action: "cluster.yml",
            args: asserts.iter().map(|a| a.to_string()).collect(),
            settings: "",
            rule: "kube-version-supported",
            task: "Stop if unsupported version of Kubernetes",
            says: "The current release of Kubespray only support newer version of Kubernetes than v1.29.0 - You \
                   are trying to apply v1.28.6",
        },
        Case {
            name: "plugin",
            nodes: 3,
            etcd: 1,
            vars: format!("{VARS}kube_network_plugin: flannel2\n"),
            action: "cluster.yml",
            args: asserts.iter().map(|a| a.to_string()).collect(),
            settings: "",
            rule: "setting-accepted",
            task: "Stop if unknown network plugin",
            says: "flannel2 is not supported",
        },
        Case {
            name: "nocache",
            nodes: 3,
            etcd: 1,
            vars: VARS.to_string(),
            action: "scale.yml",
            args: vec!["--limit={second}".into(), "--tags".into(), "asserts".into()],
            settings: "factsPlaybook: none\n",
            rule: "limit-facts",
            task: "Stop if any host not in '--limit' does not have a fact cache",
            says: "Kubespray does not support '--limit' without a populated facts cache for the excluded hosts",
        },
    ];
    for case in &cases {
        let sshd = Sshd::start_on(&ADDRESSES);
        let nodes = nodes(case.name, case.nodes, Some(sshd.port));
        let etcd: Vec<&Node> = nodes.iter().take(case.etcd).collect();
        let hosts = hosts_yml(&nodes, &etcd);
        let names = |text: &str| {
            text.replace("{first}", &nodes[0].name)
                .replace("{second}", &nodes[1].name)
        };
        let args: Vec<String> = case.args.iter().map(|a| names(a)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let entry = Entry {
            preflight: false,
            settings: case.settings,
            ..Entry::of(("asserts", case.action, &args))
        };
        let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, &case.vars, entry).await;
        let found = predicted(&run, &kubespray);
        if case.name == "even" {
            let odd = found.iter().find(|f| f.rule.id() == "etcd-odd");
            assert!(
                odd.is_some_and(|f| f.message.starts_with("etcd has 4 hosts")),
                "{found:#?}"
            );
        }
        assert!(
            error_rules(&found).contains(&case.rule),
            "{}: kok's pre-flight names {}: {found:#?}",
            case.name,
            case.rule
        );
        let (phase, message) = phase(&op);
        assert_eq!(
            phase,
            Phase::Failed,
            "{}: {message}; the run's log:\n{}",
            case.name,
            run.log()
        );
        let line = run.note("failure").await;
        let expected = format!(" - failed at TASK [kubernetes/preinstall : {}] on ", case.task);
        assert!(
            line.contains(&expected) && line.contains(case.says),
            "{}: kubespray stops where kok said ({}), expected {expected:?} and {:?} in: {line}\nthe run's \
             log:\n{}",
            case.name,
            case.rule,
            case.says,
            run.log()
        );
        run.assert_no_ssh_session_outlives_it().await;
        run.stop();
    }

    // What kok passes gets past every one of those assertions, with pre-flight on.
    let sshd = Sshd::start_on(&ADDRESSES);
    let nodes = nodes("passes", 3, Some(sshd.port));
    let hosts = hosts_yml(&nodes, &[&nodes[0]]);
    let entry = Entry::of(("asserts", "cluster.yml", &asserts));
    let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, VARS, entry).await;
    let found = predicted(&run, &kubespray);
    assert_eq!(error_rules(&found), Vec::<&str>::new(), "{found:#?}");
    let log = run.log();
    let last = "TASK [kubernetes/preinstall : Stop if even number of etcd hosts]";
    assert!(
        log.contains(last),
        "the run reached the etcd count, the last assertion checked; its log:\n{log}"
    );
    let (phase, message) = phase(&op);
    if phase == Phase::Failed {
        // A later assertion may stop it on this machine (its memory, its resolver: here "Stop if
        // /etc/resolv.conf has no configured nameservers"), not one kok checks.
        let line = run.note("failure").await;
        for case in &cases {
            assert!(
                !line.contains(case.task),
                "kubespray stopped at {:?}, which kok passed: {line}\n{log}",
                case.task
            );
        }
        assert!(!line.contains("Stop if etcd group is empty"), "{line}");
        assert!(!line.contains("Stop if non systemd OS type"), "{line}");
    } else {
        assert_eq!(phase, Phase::Succeeded, "{message}\n{log}");
    }
    run.assert_no_ssh_session_outlives_it().await;
    run.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn kubesprays_confirmation_prompts_stop_a_run_without_a_terminal_where_kok_said_and_the_answers_pass_them(
) {
    let Some(kubespray) = kubespray_or_skip("kubesprays_confirmation_prompts_stop_a_run_without_a_terminal")
    else {
        return;
    };
    // Past the prompt, nothing may change this machine: no node is reset (reset_nodes=false, the reset
    // role's tag skipped), no drain (pre-remove skipped), no resolv.conf (preinstall's resolvconf tag).
    let remove = [
        "-e",
        "node={second}",
        "-e",
        "reset_nodes=false",
        "--skip-tags",
        "pre-remove,reset,post-remove",
    ];
    let reset = ["--skip-tags", "resolvconf,reset"];
    /// A run of `action` with `args` plus `answer`; kok's rule 10 refuses it (`refused`) or passes it; the
    /// task that stops it without a terminal and what it says, or `None` where the answer lets it through.
    struct Case<'a> {
        name: &'a str,
        action: &'a str,
        args: &'a [&'a str],
        answer: &'a [&'a str],
        refused: bool,
        stops: Option<(&'a str, &'a str)>,
    }
    let cases = [
        Case {
            name: "rmask",
            action: "remove-node.yml",
            args: &remove,
            answer: &[],
            refused: true,
            stops: Some((
                "Fail if user does not confirm deletion",
                "Delete nodes confirmation failed",
            )),
        },
        Case {
            name: "rmyes",
            action: "remove-node.yml",
            args: &remove,
            answer: &["-e", "skip_confirmation=true"],
            refused: false,
            stops: None,
        },
        Case {
            name: "resetask",
            action: "reset.yml",
            args: &reset,
            answer: &[],
            refused: true,
            stops: Some(("Check confirmation", "Reset confirmation failed")),
        },
        // kubespray v2.27.0's "Check confirmation" fails with skip_confirmation alone: kok asks for
        // reset_confirmation=yes.
        Case {
            name: "resetskip",
            action: "reset.yml",
            args: &reset,
            answer: &["-e", "skip_confirmation=true"],
            refused: true,
            stops: Some(("Check confirmation", "Reset confirmation failed")),
        },
        Case {
            name: "resetyes",
            action: "reset.yml",
            args: &reset,
            answer: &["-e", "reset_confirmation=yes"],
            refused: false,
            stops: None,
        },
    ];
    for case in &cases {
        let sshd = Sshd::start_on(&ADDRESSES);
        let nodes = nodes(case.name, 3, Some(sshd.port));
        let hosts = hosts_yml(&nodes, &[&nodes[0]]);
        let args: Vec<String> = case
            .args
            .iter()
            .chain(case.answer)
            .map(|a| a.replace("{second}", &nodes[1].name))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // What kok refuses is let through (preflight: false) for kubespray to stop in its own words.
        let entry = Entry {
            preflight: !case.refused,
            settings: "installed: true\n",
            ..Entry::of(("prompt", case.action, &args))
        };
        let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, VARS, entry).await;
        let found = predicted(&run, &kubespray);
        let prompt = found.iter().any(|f| f.rule.id() == "confirmation-prompt");
        assert_eq!(prompt, case.refused, "{}: kok's rule 10: {found:#?}", case.name);
        assert!(
            error_rules(&found).iter().all(|r| *r == "confirmation-prompt"),
            "{}: nothing else refuses it: {found:#?}",
            case.name
        );
        let (phase, message) = phase(&op);
        let log = run.log();
        match case.stops {
            Some((task, says)) => {
                assert_eq!(
                    phase,
                    Phase::Failed,
                    "{}: {message}; the run's log:\n{log}",
                    case.name
                );
                assert!(
                    log.contains("Not waiting for response to prompt as stdin is not interactive")
                        || case.name == "resetskip",
                    "{}: ansible met the prompt without a terminal: {log}",
                    case.name
                );
                let line = run.note("failure").await;
                assert!(
                    line.contains(&format!(" - failed at TASK [{task}] on ")) && line.contains(says),
                    "{}: expected {task:?} and {says:?} in: {line}\nthe run's log:\n{log}",
                    case.name
                );
            }
            None => {
                assert!(
                    !log.contains("Not waiting for response to prompt"),
                    "{}: the answer skips the prompt: {log}",
                    case.name
                );
                assert!(
                    !log.contains("confirmation failed"),
                    "{}: the run passed the confirmation: {log}",
                    case.name
                );
                assert_eq!(
                    phase,
                    Phase::Succeeded,
                    "{}: {message}; the run's log:\n{log}",
                    case.name
                );
            }
        }
        run.assert_no_ssh_session_outlives_it().await;
        run.stop();
    }
}

/// The inventories (hosts.yml, vars.yml) docs/day-two.md leaves a cluster in: its starting cluster's, and each
/// recipe's after its last commit, by section title; files a recipe does not show are the start's.
fn day_two_inventories() -> Vec<(String, String, String)> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/day-two.md"))
        .expect("docs/day-two.md");
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut section = String::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if let Some(title) = line.strip_prefix("## ") {
            section = title.to_string();
            if let Some((_, hosts, vars)) = out.first().cloned() {
                out.push((section.clone(), hosts, vars));
            }
        } else if line.starts_with("```yaml") {
            let block: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
            let text: String = block.iter().map(|l| format!("{l}\n")).collect();
            if out.is_empty() {
                out.push((section.clone(), String::new(), String::new()));
            }
            let last = out.last_mut().expect("an inventory");
            match block.first().copied() {
                Some("# clusters/prod-bj/hosts.yml") => last.1 = text,
                Some("# clusters/prod-bj/vars.yml") => last.2 = text,
                _ => {}
            }
        }
    }
    out.retain(|(title, ..)| title != "Where to go next");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_day_two_recipes_inventories_pass_kubesprays_own_assertions_as_kok_passes_them() {
    let Some(kubespray) = kubespray_or_skip("the_day_two_recipes_inventories_pass_kubesprays_own_assertions")
    else {
        return;
    };
    let asserts = ["--tags", "asserts", PAST_SYSTEMD[0], PAST_SYSTEMD[1]];
    let inventories = day_two_inventories();
    assert_eq!(
        inventories.first().map(|(t, ..)| t.as_str()),
        Some("The cluster the recipes start from"),
        "{inventories:?}"
    );
    let mut seen = std::collections::BTreeSet::new();
    for (title, hosts, vars) in &inventories {
        // kubespray v2.28's inventory (kube_version without its v) is not v2.27.0's to check.
        if vars.contains("kube_version: 1.") || !seen.insert((hosts.clone(), vars.clone())) {
            eprintln!("{title}: not run (another release's, or an inventory already run)");
            continue;
        }
        let sshd = Sshd::start_on(&ADDRESSES[..1]);
        let tag = format!("{}", seen.len());
        // Every node of the page on the sshd's one address, named apart from earlier runs' fact caches.
        let mut hosts = hosts.clone();
        for n in 1..=9 {
            hosts = hosts.replace(&format!("node{n}"), &format!("d{tag}n{n}-{}", std::process::id()));
        }
        let hosts = (11..=24).fold(hosts, |h, last| {
            h.replace(
                &format!("ansible_host: 10.20.0.{last}"),
                &format!("ansible_host: {}, ansible_port: {}", ADDRESSES[0], sshd.port),
            )
        });
        assert!(
            !hosts.contains("10.20."),
            "{title}: every address mapped: {hosts}"
        );
        let vars = format!(
            "{VARS}{}",
            vars.lines()
                .filter(|l| !l.starts_with('#'))
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
        let entry = Entry {
            settings: "installed: true\n",
            ..Entry::of(("asserts", "cluster.yml", &asserts))
        };
        let (mut run, op) = KubesprayRun::start(&kubespray, sshd, &hosts, &vars, entry).await;
        let found = predicted(&run, &kubespray);
        assert_eq!(
            error_rules(&found),
            Vec::<&str>::new(),
            "{title}: kok passes it: {found:#?}"
        );
        let log = run.log();
        assert!(
            log.contains("TASK [kubernetes/preinstall : Stop if even number of etcd hosts]"),
            "{title}: the run reached the etcd count, the last assertion kok repeats; its log:\n{log}"
        );
        let (phase, message) = phase(&op);
        if phase == Phase::Failed {
            // A later assertion may stop it on this machine, not one kok checks.
            let line = run.note("failure").await;
            for task in [
                "Stop if even number of etcd hosts",
                "Stop if unsupported version of Kubernetes",
                "Stop if unknown network plugin",
                "Stop if etcd group is empty in external etcd mode",
                "Stop if kube_control_plane group is empty",
                "Stop if unsupported options selected",
            ] {
                assert!(
                    !line.contains(task),
                    "{title}: kubespray stopped at {task:?}, which kok passed: {line}\n{log}"
                );
            }
        } else {
            assert_eq!(phase, Phase::Succeeded, "{title}: {message}\n{log}");
        }
        eprintln!("{title}: kubespray's assertions agree with kok");
        run.assert_no_ssh_session_outlives_it().await;
        run.stop();
    }
}

/// The number of changed task results of the run, as its summary counts them.
fn changed(op: &ClusterOperation) -> u32 {
    op.status
        .as_ref()
        .and_then(|s| s.summary.as_ref())
        .map_or(0, |s| s.total.changed)
}
