//! The health of workload clusters: what kok checks after an operation, from what it reads.
//!
//! - [`checks`]: the checks, pure functions from the pinned inventory and vars and what the cluster
//!   shows (Nodes, kube-system workloads, the API server's answer) to each check's result and one line.
//! - [`conditions`]: a verdict as the Cluster conditions the periodic checks keep (pure).
//! - [`certificates`]: the `notAfter` of the chain the API server presents and of the kubeconfig's client
//!   certificate, read each round, and the `CertificatesValid` condition they give.
//! - [`client`]: the one place that finds a cluster's kubeconfig, refuses what kok will not run, and
//!   makes its clients (one per check, dropped after it, so no connection stays open between checks).
//! - [`observe`]: the reads on a workload cluster (`/readyz`, Nodes, kube-system Deployments and
//!   DaemonSets), bounded in time, their failures said without credentials.

pub mod certificates;
pub mod checks;
pub mod client;
pub mod conditions;
pub mod observe;

pub use checks::{verify, Expected, NodeView, Observed, Verdict, WorkloadView};
pub use client::{access, Access, AccessError};
