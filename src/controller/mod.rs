//! The embedded controller: ClusterOperations become ansible Jobs, one at a time per cluster.

pub mod job;
pub mod queue;
pub mod schedule;
