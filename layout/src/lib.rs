//! The repository contract: parse and validate a tree into typed cluster directories (pure, reads only through [`TreeReader`]).
//!
//! [`parse_repo`] reads `kok.yml` and every cluster directory under the root; [`parse_clusters`] reads only
//! some of them. Every problem becomes a [`Diagnostic`] with a path, line and column; a cluster with any
//! error lands in [`Parsed::invalid`] and the others are unaffected.

#![forbid(unsafe_code)]

pub mod ansible;
mod diag;
pub use diag::join;
mod disk;
mod inventory;
mod inventory_dir;
mod labels;
mod maintenance;
pub mod model;
mod names;
pub mod notifications;
mod operations;
pub mod playbooks;
pub mod reader;
mod repo;
pub mod rollouts;
mod scaledown;
mod settings;
pub mod spec;
mod yaml;

pub use ansible::{
    read_inventory_dir, AnsibleInventory, GroupVar, InventorySource, Known, Origin, Setting, Unknown,
};
pub use disk::DiskTree;
pub use inventory::read_inventory;
pub use inventory_dir::{cluster_var, InventoryGroup, KubesprayView, KUBESPRAY_VARS};
pub use labels::{label_key_problem, label_value_problem};
pub use maintenance::{parse_duration, parse_hhmm, parse_weekday};
pub use model::*;
pub use names::{did_you_mean, dns1123_label_problem, is_dns1123_label, is_dns1123_subdomain, is_host_name};
pub use operations::{
    duration_seconds, schedule_problem, HOOK_KEYS, MAX_OPERATION_ID, MAX_VERIFY_TIMEOUT_SECONDS,
    OPERATION_KEYS,
};
pub use reader::*;
pub use repo::{
    is_vault_file, layout_root, parse_clusters, parse_repo, parse_repo_settings, read_inventory_dir_at,
    settings_path, CLUSTER_FILES, CLUSTER_YML, HOSTS_YAML, HOSTS_YML, INVENTORY_FILES, INVENTORY_INI,
    KOK_YML, MAX_CLUSTER_NAME, MAX_INVENTORY_BYTES, OPERATIONS_YML, VARS_DIRS, VARS_YML,
};
pub use scaledown::{host_references, limits_hosts, unknown_hosts, HostRef};
pub use settings::{is_quantity, merge_settings, SETTINGS_KEYS};

/// Largest file the parser accepts (1 MiB).
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// Default root directory of the cluster directories.
pub const DEFAULT_ROOT: &str = "clusters";
