//! A real Prometheus and a real Alertmanager on loopback for one test: Prometheus scrapes kok every
//! second and evaluates a rules file, Alertmanager takes its alerts and posts them to a webhook. Both
//! are child processes in a temp directory, killed when the harness is dropped; clustering of
//! Alertmanager is off, so nothing listens beyond 127.0.0.1.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A free port on 127.0.0.1 (bound and released: the process that takes it binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Prometheus and Alertmanager, running.
pub struct Monitoring {
    prometheus: Child,
    alertmanager: Child,
    /// `http://127.0.0.1:<port>` of Prometheus.
    pub prometheus_url: String,
    /// `http://127.0.0.1:<port>` of Alertmanager.
    pub alertmanager_url: String,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Drop for Monitoring {
    fn drop(&mut self) {
        for child in [&mut self.prometheus, &mut self.alertmanager] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(program: &str, args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    // Both come from apt: they are on PATH, not in the set-up's virtual environment.
    std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{program} starts: {e}"))
}

impl Monitoring {
    /// Starts Alertmanager (every alert to `webhook`, at once, resolved ones too) and Prometheus
    /// (scraping `targets` as job `kok` every second, evaluating `rules` every second), and waits until
    /// both answer.
    pub async fn start(targets: &[String], rules: &Path, webhook: &str) -> Monitoring {
        let dir = tempfile::tempdir().expect("temp dir");
        let (prometheus_port, alertmanager_port) = (free_port(), free_port());
        let alertmanager_yml = format!(
            "route:\n  receiver: test\n  group_by: [alertname, cluster, operation, rollout]\n  group_wait: 1s\n  \
             group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: test\n    webhook_configs:\n      \
             - url: {webhook}\n        send_resolved: true\n"
        );
        std::fs::write(dir.path().join("alertmanager.yml"), alertmanager_yml).unwrap();
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let prometheus_yml = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\"127.0.0.1:{alertmanager_port}\"]\n\
             scrape_configs:\n  - job_name: kok\n    static_configs:\n      - targets: [{}]\n",
            rules.display(),
            targets.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), prometheus_yml).unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let alertmanager = spawn(
            "prometheus-alertmanager",
            &[
                format!("--config.file={}", path("alertmanager.yml")),
                format!("--storage.path={}", path("alertmanager-data")),
                format!("--web.listen-address=127.0.0.1:{alertmanager_port}"),
                "--cluster.listen-address=".to_string(),
            ],
            &dir.path().join("alertmanager.log"),
        );
        let prometheus = spawn(
            "prometheus",
            &[
                format!("--config.file={}", path("prometheus.yml")),
                format!("--storage.tsdb.path={}", path("prometheus-data")),
                format!("--web.listen-address=127.0.0.1:{prometheus_port}"),
            ],
            &dir.path().join("prometheus.log"),
        );
        let monitoring = Monitoring {
            prometheus,
            alertmanager,
            prometheus_url: format!("http://127.0.0.1:{prometheus_port}"),
            alertmanager_url: format!("http://127.0.0.1:{alertmanager_port}"),
            dir,
            http: reqwest::Client::new(),
        };
        for url in [
            format!("{}/-/ready", monitoring.prometheus_url),
            format!("{}/-/ready", monitoring.alertmanager_url),
        ] {
            monitoring
                .wait(
                    &format!("{url} to answer 200"),
                    Duration::from_secs(30),
                    || async {
                        let ok = monitoring.http.get(&url).send().await.ok()?.status().is_success();
                        ok.then_some(())
                    },
                )
                .await;
        }
        monitoring
    }

    /// Prometheus' and Alertmanager's logs, for failure messages.
    pub fn logs(&self) -> String {
        ["prometheus.log", "alertmanager.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                format!(
                    "--- {f} (last lines)\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Polls `check` every 250 ms until it gives a value; panics with both logs after `patience`.
    pub async fn wait<T, F, Fut>(&self, what: &str, patience: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "waited {patience:?} for {what}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn get_json(&self, url: &str, query: &[(&str, String)]) -> Option<Value> {
        let response = self.http.get(url).query(query).send().await.ok()?;
        response.json().await.ok()
    }

    /// The alerts Alertmanager holds as active (its API v2).
    pub async fn active_alerts(&self) -> Vec<Value> {
        let url = format!("{}/api/v2/alerts", self.alertmanager_url);
        self.get_json(&url, &[("active", "true".into())])
            .await
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// The health of Prometheus' scrape targets (`up`, `down`, `unknown`).
    pub async fn targets_health(&self) -> Vec<String> {
        let url = format!("{}/api/v1/targets", self.prometheus_url);
        let targets = self.get_json(&url, &[]).await.unwrap_or_default();
        targets["data"]["activeTargets"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| t["health"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A range query from `start` to now, every second: the `data.result` array, or the error Prometheus
    /// gave.
    pub async fn query_range(&self, expr: &str, start: f64) -> Result<Vec<Value>, String> {
        let url = format!("{}/api/v1/query_range", self.prometheus_url);
        let end = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
        let answer = self
            .get_json(
                &url,
                &[
                    ("query", expr.to_string()),
                    ("start", format!("{start:.3}")),
                    ("end", format!("{end:.3}")),
                    ("step", "1".into()),
                ],
            )
            .await
            .ok_or_else(|| format!("no JSON answer to {expr}"))?;
        if answer["status"] != "success" {
            return Err(format!("{expr}: {answer}"));
        }
        Ok(answer["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

/// Whether a range query's result holds at least one sample that is a number (not NaN).
pub fn has_numbers(result: &[Value]) -> bool {
    result.iter().any(|series| {
        series["values"].as_array().is_some_and(|values| {
            values.iter().any(|v| {
                v[1].as_str()
                    .is_some_and(|s| s.parse::<f64>().is_ok_and(|x| x.is_finite()))
            })
        })
    })
}
