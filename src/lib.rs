//! kok: git in, cluster operations out, statuses back.
//!
//! - [`layout`] parses and validates the repository contract (pure).
//! - [`preflight`] checks a cluster against kubespray's rules for its release, before anything runs (pure).
//! - [`source`] fetches the git repository, polls cheaply and diffs commits into changed clusters.
//! - [`materialize`] renders clusters into desired objects (pure) and applies/prunes them.
//! - [`api`] holds the CRD types and every shared constant.
//! - [`plan`] decides what a commit range would write and run, without writing: `kok plan` and `kok/plan`.
//! - [`pulls`] plans open pull requests in the service: `kok/plan` and the plan comment, nothing run.
//! - [`controller`] turns ClusterOperations into ansible Jobs, one at a time per cluster.
//! - [`health`] verifies workload clusters after operations: pure checks, and the one place that makes their clients.
//! - [`report`] delivers commit statuses (git notes, GitHub, GitLab, Gitea) and notifications (webhooks, Slack,
//!   Teams), durably and once.
//! - [`events`] publishes the Events of transitions.
//! - [`server`] is the HTTP listener: health, metrics, webhooks.
//! - [`metrics`] is the one Prometheus registry (prometheus-client) the service owns and the others call; the
//!   controller's caches feed its fleet gauges at each scrape.
//! - [`web`] is the read-only web view on that listener, above controller, report and local: it reads their
//!   watch caches and log files through a read-only view and writes nothing.
//! - [`redact`] holds the secrets kok knows and scrubs them from every text that comes back from outside.
//! - [`cli`] wires the subcommands; `main.rs` only parses arguments and calls it.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod controller;
pub mod events;
pub mod health;
pub use kok_layout as layout;
pub mod leader;
pub mod local;
pub mod materialize;
pub mod metrics;
pub mod plan;
pub mod preflight;
pub mod pulls;
pub mod reconcile;
pub mod redact;
pub mod report;
pub mod server;
pub mod service;
pub mod source;
pub mod web;
