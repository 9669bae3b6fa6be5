//! deploy/monitoring/ checked without a cluster: the rules file passes `promtool check rules`, the
//! PrometheusRule holds the same groups, every alert links to a section of docs/runbooks.md, the unit tests
//! of tests/monitoring/kok.rules.test.yml feed series kok really exports and pass `promtool test rules`,
//! and the kustomize component renders its ServiceMonitor, PrometheusRule and dashboard.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kok::api::Phase;
use kok::metrics::{ClusterGauges, Fleet, FleetView, Held, Metrics, RolloutGauges, Waiting};

use crate::common::tools;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rules() -> serde_json::Value {
    yaml(&repo().join("deploy/monitoring/kok.rules.yml"))
}

fn alerts() -> Vec<serde_json::Value> {
    rules()["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

/// Runs a promtool subcommand in `dir`; panics with its output when it fails.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = tools::command("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
    text
}

/// One of each gauge kok's fleet view produces, so that every metric kok exports shows its labels.
struct EveryGauge;

impl FleetView for EveryGauge {
    fn fleet(&self) -> Fleet {
        Fleet {
            clusters: vec![ClusterGauges {
                name: "prod".into(),
                conditions: vec![("Reachable".into(), "True".into())],
                nodes: Some((3, 3)),
                certificate_expiry: Some(1_800_000_000),
                phases: vec![(Phase::Queued, 1), (Phase::Failed, 1)],
                oldest_waiting: Some(Waiting {
                    operation: "scale".into(),
                    reason: "held",
                    seconds: 1.0,
                }),
                held_by: vec![Held {
                    operation: "upgrade".into(),
                    commit: "0123456789ab".into(),
                }],
            }],
            rollouts: vec![RolloutGauges {
                name: "r".into(),
                phase: "Halted".into(),
                waves: vec![("canary".into(), 0, 0, 0, 1)],
            }],
        }
    }
}

/// Metric name → label names, of every series a kok with one of everything exports (the Prometheus text
/// format, as a scrape stores it), plus the `job` and `instance` labels a scrape adds.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let m = Metrics::new();
    m.watch_fleet(Arc::new(EveryGauge));
    m.poll("error");
    m.fetch("ok");
    m.status_delivery("github", "retry");
    m.set_status_waiting("github", 1);
    m.notification("oncall", "retry");
    m.set_notifications_waiting("oncall", 1);
    m.signature_refusal("unsigned");
    m.observe_job("cluster.yml", "failed", std::time::Duration::from_secs(1));
    let mut names = BTreeMap::new();
    for line in m.render_text().lines().filter(|l| !l.starts_with('#')) {
        let (series, _) = line.rsplit_once(' ').expect("a sample line");
        let (name, labels) = parse_series(series);
        let mut keys: BTreeSet<String> = labels.into_keys().collect();
        keys.extend(["job".to_string(), "instance".to_string()]);
        keys.remove("le");
        names.insert(name, keys);
    }
    names
}

/// `name{a="x",b="y"}` → (name, labels); values hold no `,` or `"` here.
fn parse_series(series: &str) -> (String, BTreeMap<String, String>) {
    let Some((name, rest)) = series.split_once('{') else {
        return (series.trim().to_string(), BTreeMap::new());
    };
    let labels = rest
        .trim_end_matches('}')
        .split(',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').expect("label=value");
            (k.trim().to_string(), v.trim().trim_matches('"').to_string())
        })
        .collect();
    (name.trim().to_string(), labels)
}

#[test]
fn the_rules_file_passes_promtool_check_rules() {
    if !tools::prometheus_or_skip("the_rules_file_passes_promtool_check_rules") {
        return;
    }
    let out = promtool(
        &repo().join("deploy/monitoring"),
        &["check", "rules", "kok.rules.yml"],
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn the_prometheus_rule_holds_the_groups_of_the_rules_file() {
    let rule = yaml(&repo().join("deploy/monitoring/prometheusrule.yaml"));
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(
        rule["spec"],
        rules(),
        "prometheusrule.yaml's spec must be kok.rules.yml"
    );
}

#[test]
fn every_alert_says_cluster_or_scope_and_links_to_its_runbook_section() {
    let runbooks = std::fs::read_to_string(repo().join("docs/runbooks.md")).expect("docs/runbooks.md");
    let headings: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let names: Vec<String> = alerts()
        .iter()
        .map(|a| a["alert"].as_str().expect("alert name").to_string())
        .collect();
    for wanted in [
        "KokOperationFailed",
        "KokClusterUnhealthy",
        "KokClusterDrifting",
        "KokQueueStuck",
        "KokGitUnreachable",
        "KokGitStale",
        "KokStatusesNotDelivered",
        "KokNotificationsNotDelivered",
        "KokNoLeader",
        "KokRolloutHalted",
    ] {
        assert!(names.iter().any(|n| n == wanted), "no alert {wanted}");
    }
    for alert in alerts() {
        let name = alert["alert"].as_str().unwrap();
        let annotations = &alert["annotations"];
        for key in ["summary", "description", "runbook_url"] {
            assert!(annotations[key].is_string(), "{name} has no {key}");
        }
        let url = annotations["runbook_url"].as_str().unwrap();
        let anchor = url.rsplit_once('#').map(|(_, a)| a).unwrap_or_default();
        assert_eq!(anchor, name.to_lowercase(), "{name}'s runbook_url {url}");
        assert!(
            headings.contains(anchor),
            "docs/runbooks.md has no section ## {name}"
        );
        let expr = alert["expr"].as_str().unwrap();
        for label in ["cluster", "operation"] {
            if expr.contains(&format!("by ({label}")) || expr.contains(&format!(", {label}")) {
                let description = annotations["description"].as_str().unwrap();
                assert!(
                    description.contains(&format!("$labels.{label}")),
                    "{name} keeps the {label} label but its description does not say it"
                );
            }
        }
    }
}

#[test]
fn the_rule_tests_feed_series_shaped_like_koks_own() {
    let exported = exported();
    let tests = yaml(&repo().join("tests/monitoring/kok.rules.test.yml"));
    let mut seen = BTreeSet::new();
    for test in tests["tests"].as_array().expect("tests") {
        for input in test["input_series"].as_array().expect("input_series") {
            let series = input["series"].as_str().expect("series");
            let (name, labels) = parse_series(series);
            let Some(keys) = exported.get(&name) else {
                panic!(
                    "{series}: kok exports no {name}; it exports {:?}",
                    exported.keys()
                );
            };
            let given: BTreeSet<String> = labels.into_keys().collect();
            assert_eq!(&given, keys, "{series}: kok's {name} has the labels {keys:?}");
            seen.insert(name);
        }
    }
    for alert in alerts() {
        let expr = alert["expr"].as_str().unwrap();
        for name in exported.keys().filter(|n| expr.contains(n.as_str())) {
            assert!(
                seen.contains(name),
                "no rule test feeds {name}, which {alert} reads"
            );
        }
    }
}

#[test]
fn every_alert_passes_its_promtool_unit_tests() {
    if !tools::prometheus_or_skip("every_alert_passes_its_promtool_unit_tests") {
        return;
    }
    let tests = std::fs::read_to_string(repo().join("tests/monitoring/kok.rules.test.yml")).unwrap();
    for alert in alerts() {
        let name = alert["alert"].as_str().unwrap();
        assert!(
            tests.contains(&format!(
                "alertname: {name}\n        exp_alerts:\n          - exp_labels"
            )),
            "no promtool test sees {name} fire"
        );
    }
    let out = promtool(
        &repo().join("tests/monitoring"),
        &["test", "rules", "kok.rules.test.yml"],
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn the_monitoring_component_adds_a_service_monitor_the_rules_and_the_dashboard() {
    if !tools::kubectl_or_skip("the_monitoring_component_adds_a_service_monitor_the_rules_and_the_dashboard")
    {
        return;
    }
    let overlay = tempfile::Builder::new()
        .prefix("overlay")
        .tempdir_in(repo().join("target"))
        .expect("overlay dir");
    let up = Path::new("../..");
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "resources:\n  - {}\ncomponents:\n  - {}\n",
            up.join("deploy").display(),
            up.join("deploy/monitoring").display()
        ),
    )
    .unwrap();
    let out = tools::command("kubectl")
        .args(["kustomize"])
        .arg(overlay.path())
        .output()
        .expect("kubectl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for kind in ["ServiceMonitor", "PrometheusRule", "Deployment"] {
        assert!(text.contains(&format!("kind: {kind}\n")), "no {kind} in:\n{text}");
    }
    assert!(text.contains("name: kok-grafana-dashboard\n"), "{text}");
    assert!(text.contains("grafana_dashboard: \"1\""), "{text}");
    // deploy/ alone is unchanged: no Prometheus Operator kinds.
    let plain = tools::command("kubectl")
        .args(["kustomize"])
        .arg(repo().join("deploy"))
        .output()
        .expect("kubectl runs");
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(
        !plain.contains("ServiceMonitor") && !plain.contains("PrometheusRule"),
        "{plain}"
    );
}

#[test]
fn the_dashboard_reads_its_datasource_from_a_variable_and_only_koks_metrics() {
    let dashboard = std::fs::read_to_string(repo().join("deploy/monitoring/grafana-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard JSON");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(variables
        .iter()
        .any(|v| v["name"] == "datasource" && v["type"] == "datasource"));
    let exported = exported();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            queries += 1;
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("kok_"))
                .collect();
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| {
                        name.strip_suffix(s)
                            .filter(|b| exported.contains_key(&format!("{b}_bucket")))
                    })
                    .map(|b| format!("{b}_bucket"))
                    .unwrap_or_else(|| name.to_string());
                assert!(exported.contains_key(&base), "{expr}: kok exports no {name}");
            }
        }
    }
    assert!(queries >= 20, "{queries} queries");
}
