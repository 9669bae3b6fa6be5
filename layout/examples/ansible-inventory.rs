//! Prints an inventory directory as `ansible-inventory -i DIR/FILE --list` prints it, without ansible:
//! groups with their hosts and children, and every host's variables in ansible's precedence.
//!
//! ```text
//! cargo run -p kok-layout --example ansible-inventory -- inventory/mycluster
//! ```
//!
//! The directory holds one inventory file (`inventory.ini`, `hosts.yml` or `hosts.yaml`) with its
//! `group_vars/` and `host_vars/` beside it (kok's `vars.yml` is read as `group_vars/all.yml`). Problems
//! ansible would refuse the directory for go to standard error with their file and line, and the exit
//! status is 1; so do the variables that cannot be known without ansible-vault's password, which are
//! left out of the JSON.

use std::path::Path;
use std::process::ExitCode;

use kok_layout::{read_inventory_dir, read_inventory_dir_at, DiskTree, InventorySource, Severity};

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: ansible-inventory DIR (a directory with inventory.ini or hosts.yml)");
        return ExitCode::from(2);
    };
    let dir = Path::new(&dir);
    let (parent, name) = match (dir.parent(), dir.file_name().and_then(|n| n.to_str())) {
        (Some(parent), Some(name)) => (parent, name),
        _ => {
            eprintln!("{}: name a directory", dir.display());
            return ExitCode::from(2);
        }
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let Some(files) = read_inventory_dir_at(&DiskTree::new(parent), name) else {
        eprintln!(
            "{}: no inventory: the directory needs exactly one of inventory.ini, hosts.yml, hosts.yaml",
            dir.display()
        );
        return ExitCode::from(1);
    };
    let vars = files.ansible_files();
    let source = InventorySource {
        dir: name,
        cluster: None,
        inventory_name: &files.inventory_file,
        inventory_text: &files.hosts_yml,
        files: &vars,
    };
    let mut problems = Vec::new();
    let inventory = read_inventory_dir(&source, &mut problems);
    for problem in &problems {
        eprintln!("{problem}");
    }
    let Some(inventory) = inventory else {
        return ExitCode::from(1);
    };
    let (list, unknown) = inventory.list();
    match serde_json::to_string_pretty(&list) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("cannot print the inventory: {e}");
            return ExitCode::from(1);
        }
    }
    for (host, name) in &unknown {
        eprintln!("{host}: {name} is left out: only ansible-vault's password opens it");
    }
    let errors = problems.iter().any(|p| p.severity == Severity::Error);
    if errors || !unknown.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
