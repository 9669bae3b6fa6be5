//! Helpers every area of the tests may use: tools on PATH, git, the kok process, forges, browsers, Prometheus.

pub mod browser;
pub mod conf;
pub mod git;
pub mod kok;
pub mod kubespray;
pub mod operation;
pub mod prometheus;
pub mod receivers;
pub mod signing;
pub mod tls;
pub mod tools;
pub mod web;
