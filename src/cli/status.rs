//! `kok status`: the fleet as a table for the terminal (or JSON): each cluster's version, nodes, health,
//! what its queue does and its last outcome; `--watch` redraws it from watches as things change.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::ResourceExt;
use serde::Serialize;

use super::OutputFormat;
use crate::api::{Cluster, ClusterOperation, NodeCounts, DEFAULT_NAMESPACE, LABEL_CLUSTER};
use crate::health::conditions::HEALTHY;
use crate::web::pages::{cluster_row, cluster_row_from_status, CertificateDays, OpLine, State};

/// How long `--watch` gathers events before it redraws, so that a burst of changes redraws once.
const SETTLE: Duration = Duration::from_millis(200);
/// How often `--watch` renders again without an event (the running operations' elapsed time).
const TICK: Duration = Duration::from_secs(1);

/// Arguments of `kok status`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this cluster.
    pub cluster: Option<String>,
    /// Namespace of kok's objects in the meta-cluster.
    #[arg(long, default_value = DEFAULT_NAMESPACE, env = "KOK_NAMESPACE")]
    pub namespace: String,
    /// Kubeconfig of the meta-cluster; without it, as kubectl: `KUBECONFIG`, `~/.kube/config`, in-cluster.
    #[arg(long, env = "KOK_KUBECONFIG", conflicts_with = "state_dir")]
    pub kubeconfig: Option<PathBuf>,
    /// Local mode's state directory (`kok run --local --state-dir`): read its embedded API server.
    #[arg(long, env = "KOK_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Keep redrawing the table as clusters and operations change, until interrupted.
    #[arg(long, short = 'w', env = "KOK_WATCH")]
    pub watch: bool,
    /// Output format: a table, or JSON (one object per cluster).
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Text, env = "KOK_OUTPUT")]
    pub output: OutputFormat,
}

/// One cluster as `kok status` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    /// Cluster name.
    pub cluster: String,
    /// The API server's version from the last health check.
    pub version: Option<String>,
    /// The kubelet versions seen by the last health check.
    pub kubelet_versions: Vec<String>,
    /// Nodes Ready and in all, from the last health check.
    pub nodes: Option<NodeCounts>,
    /// `healthy`, `unhealthy`, or `unknown` before the first health check.
    pub health: &'static str,
    /// Why it is unhealthy (the `Healthy` condition's message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_message: Option<String>,
    /// The first of its certificates to expire: days left, `CertificatesValid` and its message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificates: Option<CertificateDays>,
    /// The state of its queue.
    pub state: State,
    /// What its queue does, in a sentence: the running operation and for how long, or the next and why
    /// it waits.
    pub queue: String,
    /// The running or next operation.
    pub current: Option<OpLine>,
    /// The last finished operation.
    pub last: Option<OpLine>,
}

/// Whether `cluster`'s status says what its queue does: it names the running or next operation or the
/// last finished one, or counts no operation. A Cluster not yet reconciled (or written by a kok before
/// `currentOperation` and `lastFinished`) does not, and its row is made from its runs.
pub fn queue_in_status(cluster: &Cluster) -> bool {
    cluster.status.as_ref().is_some_and(|s| {
        s.current_operation.is_some()
            || s.last_finished.is_some()
            || s.operations
                .as_ref()
                .is_some_and(|n| n.pending + n.running + n.succeeded + n.failed == 0)
    })
}

/// The rows of `clusters` (only `only`, when given) at `now`: from what each Cluster's status says of its
/// queue, or, for a Cluster whose status does not ([`queue_in_status`]), from its runs among `ops`.
pub fn rows(
    clusters: &[Cluster],
    ops: &[ClusterOperation],
    only: Option<&str>,
    now: Timestamp,
) -> Vec<StatusRow> {
    let mut by_cluster: HashMap<&str, Vec<ClusterOperation>> = HashMap::new();
    for op in ops {
        by_cluster
            .entry(op.spec.cluster.as_str())
            .or_default()
            .push(op.clone());
    }
    let mut rows: Vec<StatusRow> = clusters
        .iter()
        .filter(|c| only.is_none_or(|o| c.name_any() == o))
        .map(|c| {
            let name = c.name_any();
            let row = if queue_in_status(c) {
                cluster_row_from_status(c, now)
            } else {
                let mine = by_cluster.remove(name.as_str()).unwrap_or_default();
                cluster_row(&name, Some(c), &mine, now)
            };
            let status = c.status.clone().unwrap_or_default();
            let healthy = status.conditions.iter().find(|c| c.type_ == HEALTHY);
            StatusRow {
                cluster: name,
                version: status.kubernetes_version,
                kubelet_versions: status.kubelet_versions,
                nodes: status.nodes,
                health: row.health.word.as_str(),
                health_message: healthy.filter(|c| c.status == "False").map(|c| c.message.clone()),
                certificates: row.health.certificates.clone(),
                state: row.state,
                queue: row.queue_words(),
                current: row.current,
                last: row.last,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    rows
}

/// The last outcome in a few words: `<id> <phase>: <what it did>`.
fn last_words(last: Option<&OpLine>) -> String {
    match last {
        None => "-".to_string(),
        Some(op) if op.outcome.is_empty() => format!("{} {}", op.id, op.phase.to_lowercase()),
        Some(op) => format!("{} {}: {}", op.id, op.phase.to_lowercase(), op.outcome),
    }
}

/// The certificates column: days left (`312d`, `expired`), with `CertificatesValid=False` when inside the
/// window, `-` before a check read any.
fn certificate_words(days: Option<&CertificateDays>) -> String {
    match days {
        None => "-".to_string(),
        Some(d) if d.renew() => format!("{} CertificatesValid=False", d.short),
        Some(d) => d.short.clone(),
    }
}

/// The table of `rows`, columns aligned, with a header line.
pub fn table(rows: &[StatusRow]) -> String {
    let mut lines =
        vec![["CLUSTER", "VERSION", "NODES", "HEALTH", "CERTS", "QUEUE", "LAST"].map(String::from)];
    for r in rows {
        lines.push([
            r.cluster.clone(),
            r.version.clone().unwrap_or_else(|| "-".to_string()),
            r.nodes
                .as_ref()
                .map_or_else(|| "-".to_string(), |n| format!("{}/{}", n.ready, n.total)),
            r.health.to_string(),
            certificate_words(r.certificates.as_ref()),
            r.queue.clone(),
            last_words(r.last.as_ref()),
        ]);
    }
    let mut widths = [0usize; 7];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// What `kok status` prints for `clusters` and `ops` at `now`: the table, or a JSON array of the rows
/// (one line of it when `compact`).
pub fn render(
    clusters: &[Cluster],
    ops: &[ClusterOperation],
    only: Option<&str>,
    format: OutputFormat,
    compact: bool,
    now: Timestamp,
) -> String {
    let rows = rows(clusters, ops, only, now);
    match format {
        OutputFormat::Text => table(&rows),
        OutputFormat::Json if compact => serde_json::to_string(&rows).unwrap_or_default() + "\n",
        OutputFormat::Json => serde_json::to_string_pretty(&rows).unwrap_or_default() + "\n",
    }
}

/// Runs `kok status`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let client = meta_cluster(&args).await?;
        if args.watch {
            tokio::select! {
                result = watch(&client, &args) => result,
                _ = tokio::signal::ctrl_c() => Ok(ExitCode::SUCCESS),
            }
        } else {
            once(&client, &args).await
        }
    })
}

/// The meta-cluster: local mode's embedded server under `--state-dir`, `--kubeconfig`, or as kubectl finds it.
async fn meta_cluster(args: &Args) -> anyhow::Result<kube::Client> {
    let path = match (&args.state_dir, &args.kubeconfig) {
        (Some(dir), _) => Some(dir.join(crate::local::embedded::KUBECONFIG_FILE)),
        (None, Some(path)) => Some(path.clone()),
        (None, None) => None,
    };
    let config = match path {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(&path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("loading the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding the meta-cluster (--kubeconfig, KUBECONFIG, ~/.kube/config or in-cluster)")?,
    };
    kube::Client::try_from(config).context("connecting to the meta-cluster")
}

/// Objects per page of `kok status`'s lists.
const PAGE: u32 = 500;

/// Every object `params` selects, read page by page (a fleet's runs do not fit one response), each made
/// small by `slim` as it arrives.
async fn list_paged<K>(api: &Api<K>, params: ListParams, slim: impl Fn(&mut K)) -> kube::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(PAGE);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items.into_iter().map(|mut item| {
            slim(&mut item);
            item
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// What `kok status` does not show of a run: its pinned files, hooks and field managers.
fn slim_operation(op: &mut ClusterOperation) {
    op.metadata.managed_fields = None;
    op.spec.vars_files = Vec::new();
    op.spec.repository_files = Vec::new();
    op.spec.pre_hooks = Vec::new();
    op.spec.post_hooks = Vec::new();
}

/// At most this many Clusters whose status does not say what their queue does have their runs listed one
/// cluster at a time; more, and every run is listed once.
const LISTS_PER_CLUSTER: usize = 20;

/// Lists once and prints: the Clusters, and the runs only of those whose status does not say what their
/// queue does (none once the controller has reconciled them), so a fleet of any history reads one object
/// per cluster.
async fn once(client: &kube::Client, args: &Args) -> anyhow::Result<ExitCode> {
    let clusters = list_paged(
        &Api::<Cluster>::namespaced(client.clone(), &args.namespace),
        ListParams::default(),
        |c: &mut Cluster| {
            c.metadata.managed_fields = None;
            c.spec.vars_files = Vec::new();
        },
    )
    .await
    .with_context(|| format!("listing the Clusters of namespace {}", args.namespace))?;
    if let Some(name) = &args.cluster {
        if !clusters.iter().any(|c| &c.name_any() == name) {
            anyhow::bail!("no Cluster {name} in namespace {}", args.namespace);
        }
    }
    let unknown: Vec<String> = clusters
        .iter()
        .filter(|c| args.cluster.as_ref().is_none_or(|name| &c.name_any() == name))
        .filter(|c| !queue_in_status(c))
        .map(|c| c.name_any())
        .collect();
    let ops_api = Api::<ClusterOperation>::namespaced(client.clone(), &args.namespace);
    let listing = || format!("listing the ClusterOperations of namespace {}", args.namespace);
    let mut ops = Vec::new();
    if unknown.len() > LISTS_PER_CLUSTER {
        ops = list_paged(&ops_api, ListParams::default(), slim_operation)
            .await
            .with_context(listing)?;
    } else {
        for name in &unknown {
            let mine = ListParams::default().labels(&format!("{LABEL_CLUSTER}={name}"));
            ops.extend(
                list_paged(&ops_api, mine, slim_operation)
                    .await
                    .with_context(listing)?,
            );
        }
    }
    let text = render(
        &clusters,
        &ops,
        args.cluster.as_deref(),
        args.output,
        false,
        Timestamp::now(),
    );
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// Watches the Clusters and prints the rendering each time it changes: each row from what its Cluster's
/// status says of the queue (a Cluster not yet reconciled shows its queue once it is, within a second).
async fn watch(client: &kube::Client, args: &Args) -> anyhow::Result<ExitCode> {
    let (clusters, writer) = reflector::store::<Cluster>();
    let events = reflector(
        writer,
        watcher(
            Api::<Cluster>::namespaced(client.clone(), &args.namespace),
            watcher::Config::default(),
        ),
    )
    .default_backoff();
    let mut events = std::pin::pin!(events);
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut listed = false;
    let mut shown = String::new();
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return Ok(ExitCode::SUCCESS) };
                listed |= seen(event);
                // Gather the rest of a burst before drawing.
                tokio::time::sleep(SETTLE).await;
                while let Some(Some(event)) = events.next().now_or_never() {
                    listed |= seen(event);
                }
            }
            _ = tick.tick() => {}
        }
        if !listed {
            continue;
        }
        let clusters: Vec<Cluster> = clusters.state().iter().map(|c| (**c).clone()).collect();
        let text = render(
            &clusters,
            &[],
            args.cluster.as_deref(),
            args.output,
            true,
            Timestamp::now(),
        );
        if text != shown {
            draw(&text, terminal)?;
            shown = text;
        }
    }
}

/// Whether a watch event completes the initial list; warns of a failed watch.
fn seen<K>(event: Result<watcher::Event<K>, watcher::Error>) -> bool {
    match event {
        Ok(e) => matches!(e, watcher::Event::InitDone),
        Err(e) => {
            eprintln!("warning: watching the meta-cluster: {e}");
            false
        }
    }
}

/// Prints `text`: over the previous drawing on a terminal, after it (a blank line between) otherwise.
fn draw(text: &str, terminal: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if terminal {
        write!(out, "\x1b[H\x1b[2J{text}")?;
    } else {
        writeln!(out, "{text}")?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ClusterOperationSpec, ClusterOperationStatus, ClusterSpec, ClusterStatus, OperationSource, Phase,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn cluster(name: &str, healthy: Option<bool>) -> Cluster {
        let spec = ClusterSpec::for_test();
        let mut c = Cluster::new(name, spec);
        if let Some(healthy) = healthy {
            c.status = Some(ClusterStatus {
                conditions: vec![Condition {
                    type_: HEALTHY.into(),
                    status: if healthy { "True" } else { "False" }.into(),
                    reason: "R".into(),
                    message: "node3 is NotReady".into(),
                    last_transition_time: Time(now()),
                    observed_generation: None,
                }],
                kubernetes_version: Some("v1.31.4".into()),
                nodes: Some(NodeCounts {
                    ready: 2,
                    total: 3,
                    summary: "2/3".into(),
                }),
                ..Default::default()
            });
        }
        c
    }

    fn op(cluster: &str, id: &str, phase: Phase, message: &str) -> ClusterOperation {
        let mut op = ClusterOperation::new(
            &format!("{cluster}-{id}"),
            ClusterOperationSpec {
                cluster: cluster.into(),
                id: id.into(),
                action: "cluster.yml".into(),
                source: OperationSource {
                    commit: "c0ffee0123456789".into(),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        op.status = Some(ClusterOperationStatus {
            phase,
            start_time: matches!(phase, Phase::Running | Phase::Succeeded).then_some(Time(start)),
            end_time: phase
                .is_terminal()
                .then(|| Time(start + jiff::SignedDuration::from_secs(192))),
            message: Some(message.into()),
            ..Default::default()
        });
        op
    }

    fn fleet() -> (Vec<Cluster>, Vec<ClusterOperation>) {
        let clusters = vec![
            cluster("prod", Some(false)),
            cluster("dev", Some(true)),
            cluster("new", None),
        ];
        let ops = vec![
            op("prod", "install", Phase::Succeeded, "succeeded in 3m12s"),
            op("prod", "upgrade", Phase::Running, "running"),
            op("dev", "install", Phase::Succeeded, "succeeded in 3m12s"),
            op(
                "dev",
                "scale",
                Phase::Queued,
                "waiting for the maintenance window",
            ),
        ];
        (clusters, ops)
    }

    #[test]
    fn the_table_shows_version_nodes_health_queue_and_last_outcome_per_cluster() {
        let (clusters, ops) = fleet();
        let text = render(&clusters, &ops, None, OutputFormat::Text, false, now());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("CLUSTER"), "{text}");
        assert!(lines[1].starts_with("dev "), "sorted by name: {text}");
        assert!(lines[1].contains("v1.31.4"), "{text}");
        assert!(lines[1].contains("2/3"), "{text}");
        assert!(lines[1].contains("healthy"), "{text}");
        assert!(
            lines[1].contains("next: scale, waiting for the maintenance window"),
            "{text}"
        );
        assert!(
            lines[1].contains("install succeeded: succeeded in 3m12s"),
            "{text}"
        );
        assert!(lines[2].starts_with("new "), "{text}");
        assert!(lines[2].contains("unknown"), "{text}");
        assert!(lines[2].contains("nothing to run"), "{text}");
        assert!(lines[3].contains("unhealthy"), "{text}");
        assert!(lines[3].contains("running upgrade for 10m"), "{text}");
        let health = lines[0].find("HEALTH").unwrap();
        assert!(
            lines[1..].iter().all(|l| l[health..].starts_with("healthy")
                || l[health..].starts_with("unknown")
                || l[health..].starts_with("unhealthy")),
            "columns aligned: {text}"
        );
    }

    #[test]
    fn the_days_left_on_the_certificates_show_and_a_cluster_inside_its_window_says_certificates_valid_false()
    {
        let (mut clusters, ops) = fleet();
        let certificate = |days: i64| crate::api::CertificateExpiry {
            source: crate::api::CertificateSource::ApiServer,
            subject: "kube-apiserver".into(),
            not_after: Time(now() + jiff::SignedDuration::from_hours(24 * days + 1)),
        };
        let valid = |status: &str| Condition {
            type_: crate::health::certificates::CERTIFICATES_VALID.into(),
            status: status.into(),
            reason: "R".into(),
            message: "the API server's certificate \"kube-apiserver\" expires soon".into(),
            last_transition_time: Time(now()),
            observed_generation: None,
        };
        for (cluster, days, status) in [(0, 10, "False"), (1, 300, "True")] {
            let s = clusters[cluster].status.as_mut().unwrap();
            s.certificates = vec![certificate(days)];
            s.conditions.push(valid(status));
        }
        let text = render(&clusters, &ops, None, OutputFormat::Text, false, now());
        let lines: Vec<&str> = text.lines().collect();
        let certs = lines[0].find("CERTS").unwrap();
        assert!(lines[1][certs..].starts_with("300d "), "dev: {text}");
        assert!(lines[2][certs..].starts_with("- "), "new: {text}");
        assert!(
            lines[3][certs..].starts_with("10d CertificatesValid=False "),
            "prod: {text}"
        );

        let json = render(&clusters, &ops, Some("prod"), OutputFormat::Json, true, now());
        let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
        let certificates = &rows[0]["certificates"];
        assert_eq!(certificates["daysLeft"], 10, "{json}");
        assert_eq!(certificates["valid"], "False", "{json}");
        assert_eq!(
            certificates["certificate"], "the API server's certificate \"kube-apiserver\"",
            "{json}"
        );
    }

    #[test]
    fn the_rows_from_the_clusters_status_alone_are_the_rows_from_their_runs() {
        let (clusters, ops) = fleet();
        let reconciled: Vec<Cluster> = clusters
            .iter()
            .map(|c| {
                let mine: Vec<&ClusterOperation> =
                    ops.iter().filter(|o| o.spec.cluster == c.name_any()).collect();
                let mut status = crate::controller::cluster::cluster_status(c, &mine, Ok("NoSecret"));
                crate::controller::health::carry(&mut status, c.status.as_ref());
                let mut c = c.clone();
                c.status = Some(status);
                c
            })
            .collect();
        assert!(reconciled.iter().all(queue_in_status));
        assert!(!clusters.iter().any(queue_in_status), "no status says it yet");
        for format in [OutputFormat::Text, OutputFormat::Json] {
            assert_eq!(
                render(&reconciled, &[], None, format, false, now()),
                render(&clusters, &ops, None, format, false, now()),
            );
        }
        // A Cluster whose status says nothing of its queue takes its row from the runs.
        let text = render(&clusters, &ops, Some("prod"), OutputFormat::Text, false, now());
        assert!(text.contains("running upgrade for 10m"), "{text}");
    }

    #[test]
    fn a_named_cluster_is_the_only_row() {
        let (clusters, ops) = fleet();
        let text = render(&clusters, &ops, Some("prod"), OutputFormat::Text, false, now());
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.lines().nth(1).unwrap().starts_with("prod "), "{text}");
    }

    #[test]
    fn json_has_one_object_per_cluster_with_the_health_message() {
        let (clusters, ops) = fleet();
        let text = render(&clusters, &ops, None, OutputFormat::Json, true, now());
        assert_eq!(text.lines().count(), 1, "compact is one line: {text}");
        let rows: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), 3);
        let prod = &rows[2];
        assert_eq!(prod["cluster"], "prod");
        assert_eq!(prod["health"], "unhealthy");
        assert_eq!(prod["healthMessage"], "node3 is NotReady");
        assert_eq!(prod["nodes"]["ready"], 2);
        assert_eq!(prod["state"], "running");
        assert_eq!(prod["current"]["id"], "upgrade");
        assert_eq!(prod["last"]["id"], "install");
        assert!(rows[1]["version"].is_null(), "{text}");
    }
}
