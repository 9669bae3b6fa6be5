//! One binary for the integration tests: a module per area, the shared helpers beside them.

// kok's tool checks (kubectl); the rest of the file serves kok's own tests.
#[allow(dead_code)]
#[path = "../../../tests/integration/common/tools.rs"]
mod tools;

mod common;

mod api;
mod auth_reviews;
mod discovery;
mod kubectl;
mod nodes;
mod persist;
mod protobuf;
mod realapi;
mod realapi_events;
mod realapi_pod_logs;
mod realapi_tables;
mod watch;
