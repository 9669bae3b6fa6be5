//! The generated references in docs/reference/ are what `kok reference cli|crds` prints, and they cover
//! every flag (with its environment twin) and every CRD field (with a description).

use crate::common::kok as kok_process;

use clap::{ArgAction, CommandFactory};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kok::cli::reference::Page;

fn checked_in(page: Page) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(page.path());
    std::fs::read_to_string(&path).unwrap_or_default()
}

/// What the real binary prints for `kok reference <page>`.
fn generated(name: &str) -> String {
    let cache = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = kok_process::kok(&["reference", name], cache.path());
    assert!(ok, "kok reference {name} failed: {stderr}");
    stdout
}

/// Fails naming the first line where the checked-in page differs from the generated one, and the command
/// that regenerates it. `KOK_UPDATE_GOLDEN=1` rewrites the page instead.
fn assert_page_is_generated(page: Page, name: &str) {
    let generated = generated(name);
    if std::env::var_os("KOK_UPDATE_GOLDEN").is_some() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(page.path());
        std::fs::write(&path, &generated).unwrap();
        eprintln!("rewrote {}", page.path());
        return;
    }
    let on_disk = checked_in(page);
    if on_disk == generated {
        return;
    }
    let mut disk_lines = on_disk.split_inclusive('\n');
    let mut generated_lines = generated.split_inclusive('\n');
    let mut number = 1;
    let (disk_line, generated_line) = loop {
        match (disk_lines.next(), generated_lines.next()) {
            (Some(a), Some(b)) if a == b => number += 1,
            (a, b) => break (a, b),
        }
    };
    panic!(
        "{} differs from `kok reference {name}` at line {number}:\n  checked in: {:?}\n  generated:  {:?}\n\
         Regenerate it with\n  {}\nand commit the result.",
        page.path(),
        disk_line.unwrap_or("(end of file)"),
        generated_line.unwrap_or("(end of file)"),
        page.regenerate_command()
    );
}

#[test]
fn checked_in_cli_page_is_what_kok_reference_cli_prints() {
    assert_page_is_generated(Page::Cli, "cli");
}

#[test]
fn checked_in_crds_page_is_what_kok_reference_crds_prints() {
    assert_page_is_generated(Page::Crds, "crds");
}

/// The page's `## ` sections by heading.
fn sections(page: &str) -> Vec<(String, String)> {
    page.split("\n## ")
        .skip(1)
        .map(|s| {
            let (heading, body) = s.split_once('\n').unwrap_or((s, ""));
            (heading.to_string(), body.to_string())
        })
        .collect()
}

fn section<'a>(sections: &'a [(String, String)], heading: &str) -> &'a str {
    sections
        .iter()
        .find(|(h, _)| h == heading)
        .map(|(_, body)| body.as_str())
        .unwrap_or_else(|| panic!("no section `## {heading}`"))
}

#[test]
fn both_pages_follow_the_docs_conventions() {
    for (page, title) in [
        (Page::Cli, "# Command-line reference"),
        (Page::Crds, "# CRD reference"),
    ] {
        let text = checked_in(page);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(title), "{}", page.path());
        assert_eq!(lines.next(), Some(""), "{}", page.path());
        let intro = lines.next().unwrap_or_default();
        assert!(
            intro.contains(&page.regenerate_command()),
            "{}: {intro}",
            page.path()
        );
        let all = sections(&text);
        let (last, body) = all.last().expect("sections");
        assert_eq!(last, "Where to go next", "{}", page.path());
        assert!(
            body.contains("](../") || body.contains(".md)"),
            "{}: {body}",
            page.path()
        );
    }
}

/// Every subcommand of kok (nested ones too) with its full name, e.g. `kok run`.
fn subcommands(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
    for sub in cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
    {
        out.push(sub.clone());
        subcommands(sub, out);
    }
}

fn is_builtin(arg: &clap::Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

/// True when `body` has a table row naming `form` and `env` in code spans.
fn has_row(body: &str, form: &str, env: &str) -> bool {
    body.lines().any(|line| {
        line.starts_with("| ") && line.contains(&format!("`{form}")) && line.contains(&format!("`{env}`"))
    })
}

#[test]
fn every_flag_of_every_subcommand_is_in_the_cli_page_with_its_environment_twin() {
    let page = checked_in(Page::Cli);
    let all = sections(&page);
    let mut cmd = kok::cli::Cli::command();
    cmd.build();
    let top = section(&all, "kok");
    let mut without_env = vec![];
    let mut missing = vec![];
    let mut checked = 0;
    for arg in cmd.get_arguments().filter(|a| !is_builtin(a) && !a.is_hide_set()) {
        let long = format!("--{}", arg.get_long().expect("a global flag has a long form"));
        match arg.get_env() {
            Some(env) if has_row(top, &long, &env.to_string_lossy()) => checked += 1,
            Some(_) => missing.push(format!("kok {long}")),
            None => without_env.push(format!("kok {long}")),
        }
    }
    let mut subs = vec![];
    subcommands(&cmd, &mut subs);
    assert!(subs.len() >= 9, "kok's subcommands: {}", subs.len());
    for sub in &subs {
        let name = sub.get_bin_name().expect("built").to_string();
        let body = section(&all, &name);
        for arg in sub
            .get_arguments()
            .filter(|a| !is_builtin(a) && !a.is_hide_set() && !a.is_global_set())
        {
            let form = match arg.get_long() {
                Some(long) => format!("--{long}"),
                None if arg.is_positional() => {
                    let value = arg
                        .get_value_names()
                        .and_then(|n| n.first().map(|n| n.to_string()))
                        .unwrap_or_else(|| arg.get_id().to_string());
                    format!("<{value}>")
                }
                None => format!("-{}", arg.get_short().expect("a flag has a short or long form")),
            };
            match arg.get_env() {
                Some(env) if has_row(body, &form, &env.to_string_lossy()) => checked += 1,
                Some(_) => missing.push(format!("{name} {form}")),
                // Positional arguments may go without a twin; the page still lists them.
                None if arg.is_positional() => {
                    let listed = body.lines().any(|l| l.starts_with(&format!("| `{form}` | ")));
                    assert!(listed, "{name} {form} is missing from {}", Page::Cli.path());
                    checked += 1;
                }
                None => without_env.push(format!("{name} {form}")),
            }
        }
    }
    assert!(
        without_env.is_empty(),
        "flags without a KOK_* environment twin: {without_env:?}"
    );
    assert!(
        missing.is_empty(),
        "flags missing from {} (or listed without their environment twin): {missing:?}; regenerate it with {}",
        Page::Cli.path(),
        Page::Cli.regenerate_command()
    );
    assert!(checked > 50, "only {checked} flags checked");
}

/// Every field path of a schema, as the page writes them: `.` between fields, `[]` for array items,
/// `.*` for map values; with whether the field has a description of its own.
fn field_paths(path: &str, node: &JSONSchemaProps, out: &mut Vec<(String, bool)>) {
    for (name, child) in node.properties.iter().flatten() {
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        let documented = child.description.as_deref().is_some_and(|d| !d.trim().is_empty());
        out.push((child_path.clone(), documented));
        field_paths(&child_path, child, out);
    }
    match &node.items {
        Some(JSONSchemaPropsOrArray::Schema(items)) => field_paths(&format!("{path}[]"), items, out),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items
            .iter()
            .for_each(|i| field_paths(&format!("{path}[]"), i, out)),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(value)) = &node.additional_properties {
        field_paths(&format!("{path}.*"), value, out);
    }
    for alternative in [&node.any_of, &node.one_of, &node.all_of]
        .into_iter()
        .flatten()
        .flatten()
    {
        field_paths(path, alternative, out);
    }
}

/// Per CRD kind, its field paths.
fn crd_fields() -> Vec<(String, Vec<(String, bool)>)> {
    kok::api::crds()
        .into_iter()
        .map(|crd| {
            let mut fields = vec![];
            for version in &crd.spec.versions {
                let root = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref());
                field_paths("", root.expect("a schema"), &mut fields);
            }
            (crd.spec.names.kind, fields)
        })
        .collect()
}

#[test]
fn every_field_of_every_crd_is_in_the_crd_page() {
    let page = checked_in(Page::Crds);
    let all = sections(&page);
    let mut missing = vec![];
    let mut checked = 0;
    for (kind, fields) in crd_fields() {
        let body = section(&all, &kind);
        for (path, _) in fields {
            if body.lines().any(|l| l.starts_with(&format!("| `{path}` | "))) {
                checked += 1;
            } else {
                missing.push(format!("{kind} {path}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "fields missing from {}: {missing:?}; regenerate it with {}",
        Page::Crds.path(),
        Page::Crds.regenerate_command()
    );
    assert!(checked > 150, "only {checked} fields checked");
}

#[test]
fn no_crd_field_lacks_a_description() {
    let undocumented: Vec<String> = crd_fields()
        .into_iter()
        .flat_map(|(kind, fields)| {
            fields
                .into_iter()
                .filter(|(_, documented)| !documented)
                .map(move |(path, _)| format!("{kind} {path}"))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "{} CRD fields have no description, e.g. {:?}: give their Rust fields in src/api/ a `///` line \
         (it becomes the schema's description), then run\n  cargo run -q -- crds > crds/crds.yaml\n  {}",
        undocumented.len(),
        &undocumented[..undocumented.len().min(5)],
        Page::Crds.regenerate_command()
    );
}
