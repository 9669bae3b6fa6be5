//! The `/conf` directory of a Job, written as its projected volume writes it: `hosts.yml`, and vars.yml as
//! `group_vars/all.yml`, so an entry script run outside a pod (`KOK_CONF_DIR`) finds what it finds in one.

use std::path::Path;

use kok::api::{HOSTS_KEY, VARS_INVENTORY_PATH};

/// Writes `hosts` and `vars` into `conf` (created when missing) where the Job mounts them.
pub fn write_conf(conf: &Path, hosts: &str, vars: &str) {
    let vars_path = conf.join(VARS_INVENTORY_PATH);
    std::fs::create_dir_all(vars_path.parent().expect("group_vars/")).expect("conf directory");
    std::fs::write(conf.join(HOSTS_KEY), hosts).expect("hosts.yml");
    std::fs::write(vars_path, vars).expect("group_vars/all.yml");
}
