//! `kok reference`: print the command-line or the CRD reference page as markdown, generated from clap
//! and from the CRD schemas, so that docs/reference/ cannot drift from the code.

use std::io::Write;
use std::process::ExitCode;

use clap::builder::PossibleValue;
use clap::{Arg, ArgAction, CommandFactory, ValueEnum};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSONSchemaProps, JSONSchemaPropsOrArray,
    JSONSchemaPropsOrBool,
};

/// Arguments of `kok reference`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The page to print: `cli` (every subcommand and flag) or `crds` (every field of kok's CRDs).
    #[arg(value_enum)]
    pub page: Page,
}

/// A generated reference page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Page {
    /// docs/reference/cli.md: every subcommand and flag, with its environment twin.
    Cli,
    /// docs/reference/crds.md: every field of kok's CustomResourceDefinitions.
    Crds,
}

impl Page {
    /// Where the page is checked in, relative to the repository's root.
    pub fn path(self) -> &'static str {
        match self {
            Page::Cli => "docs/reference/cli.md",
            Page::Crds => "docs/reference/crds.md",
        }
    }

    /// The command that regenerates the checked-in page, run in the repository's root.
    pub fn regenerate_command(self) -> String {
        let name = match self {
            Page::Cli => "cli",
            Page::Crds => "crds",
        };
        format!("cargo run -q -- reference {name} > {}", self.path())
    }

    /// The page's markdown, as generated from this build of kok.
    pub fn markdown(self) -> String {
        match self {
            Page::Cli => cli_markdown(super::Cli::command()),
            Page::Crds => crds_markdown(&crate::api::crds()),
        }
    }
}

/// Runs `kok reference`: writes the page's markdown to stdout.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    std::io::stdout()
        .lock()
        .write_all(args.page.markdown().as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Escapes `text` for a markdown table cell: lines joined (a blank line becomes `<br><br>`), `|` escaped
/// everywhere, `<` and `*` escaped outside code spans so that `<name>` is not taken for an HTML tag nor
/// `refs/pull/*/head` for emphasis.
pub fn cell(text: &str) -> String {
    let paragraphs: Vec<String> = text
        .trim()
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect();
    let mut out = String::new();
    for (i, paragraph) in paragraphs.iter().enumerate() {
        if i > 0 {
            out.push_str("<br><br>");
        }
        let mut in_code = false;
        for c in paragraph.chars() {
            match c {
                '`' => {
                    in_code = !in_code;
                    out.push(c);
                }
                '|' => out.push_str("\\|"),
                '<' if !in_code => out.push_str("&lt;"),
                '*' if !in_code => out.push_str("\\*"),
                _ => out.push(c),
            }
        }
    }
    out
}

/// `text` as a sentence: clap drops the final period of a one-line doc comment; this puts it back.
fn sentence(text: &str) -> String {
    let text = text.trim();
    match text.chars().last() {
        None => String::new(),
        Some('.' | '!' | '?' | ':') => text.to_string(),
        Some(_) => format!("{text}."),
    }
}

/// `text` as a code span (for a table cell: `|` escaped).
fn code(text: &str) -> String {
    let fence = if text.contains('`') { "``" } else { "`" };
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{}{pad}{fence}", text.replace('|', "\\|"))
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line);
    out.push('\n');
}

/// Ends a page with its `## Where to go next` section, one list item per link.
fn where_to_go_next(out: &mut String, links: &[&str]) {
    push_line(out, "## Where to go next");
    push_line(out, "");
    for link in links {
        push_line(out, link);
    }
}

// ---------------------------------------------------------------------------------------------------------
// The command-line reference.

/// The command-line reference page of `cmd` (kok's is `Cli::command()`): the top-level command with its
/// global flags, then one section per subcommand (nested ones too) with its usage, arguments and flags.
pub fn cli_markdown(mut cmd: clap::Command) -> String {
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut out = String::new();
    push_line(&mut out, "# Command-line reference");
    push_line(&mut out, "");
    push_line(
        &mut out,
        &format!(
            "This page lists every subcommand of `{name}` and every flag it takes, with the environment \
             variable that sets the same flag, its default and its possible values: use it to look up a \
             flag, or to configure `{name} run` from a Deployment's environment. A flag given on the \
             command line wins over its environment variable. The page is generated from the code: \
             regenerate it with `{}` (a test fails when it differs).",
            Page::Cli.regenerate_command()
        ),
    );
    push_line(&mut out, "");
    top_section(&mut out, &cmd);
    for sub in visible_subcommands(&cmd) {
        command_section(&mut out, sub);
    }
    where_to_go_next(
        &mut out,
        &[
            "- [Getting started](../getting-started.md): run kok on the example and make a first operation.",
            "- [The repository](../repository.md): the files kok reads, which these commands take.",
            "- [Deploying](../deploying.md): run `kok run` in a meta-cluster with these flags as environment variables.",
            "- [Troubleshooting](../troubleshooting.md): what the messages of these commands mean.",
            "- [CRD reference](crds.md): the objects `kok run` writes.",
        ],
    );
    out
}

/// Subcommands worth a section: not hidden, not clap's own `help`.
fn visible_subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// The full name of a (built) command, e.g. `kok run`.
fn full_name(cmd: &clap::Command) -> String {
    cmd.get_bin_name()
        .map(str::to_string)
        .unwrap_or_else(|| cmd.get_name().to_string())
}

fn about(cmd: &clap::Command) -> String {
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    sentence(&about)
}

/// The usage line clap prints, without its `Usage: ` prefix.
fn usage(cmd: &clap::Command) -> String {
    let rendered = cmd.clone().render_usage().to_string();
    rendered
        .strip_prefix("Usage: ")
        .unwrap_or(&rendered)
        .trim()
        .to_string()
}

/// clap's own `--help` and `--version`, which take no environment variable.
fn is_builtin(arg: &Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

fn top_section(out: &mut String, cmd: &clap::Command) {
    let name = full_name(cmd);
    push_line(out, &format!("## {name}"));
    push_line(out, "");
    push_paragraphs(out, &about(cmd));
    usage_block(out, cmd);
    push_line(out, "Subcommands:");
    push_line(out, "");
    for sub in visible_subcommands(cmd) {
        let sub_name = full_name(sub);
        let summary = sub.get_about().map(|s| s.to_string()).unwrap_or_default();
        push_line(
            out,
            &format!(
                "- [`{sub_name}`](#{}): {}",
                slug(&sub_name),
                cell(&sentence(&summary))
            ),
        );
    }
    push_line(out, "");
    let builtins: Vec<String> = cmd
        .get_arguments()
        .filter(|a| is_builtin(a) && !a.is_hide_set())
        .map(flag_form)
        .collect();
    if !builtins.is_empty() {
        push_line(
            out,
            &format!(
                "{} print the help or the version and exit; `--help` works after every subcommand too.",
                builtins.join(", ")
            ),
        );
        push_line(out, "");
    }
    let globals: Vec<&Arg> = documented_args(cmd).filter(|a| !a.is_positional()).collect();
    if !globals.is_empty() {
        push_line(out, "### Global flags");
        push_line(out, "");
        push_line(
            out,
            &format!(
                "These flags apply to `{name}` and to every subcommand; the sections below leave them out."
            ),
        );
        push_line(out, "");
        flag_table(out, &globals);
    }
}

fn command_section(out: &mut String, cmd: &clap::Command) {
    push_line(out, &format!("## {}", full_name(cmd)));
    push_line(out, "");
    push_paragraphs(out, &about(cmd));
    usage_block(out, cmd);
    let own: Vec<&Arg> = documented_args(cmd).filter(|a| !a.is_global_set()).collect();
    let positionals: Vec<&Arg> = own.iter().copied().filter(|a| a.is_positional()).collect();
    let flags: Vec<&Arg> = own.iter().copied().filter(|a| !a.is_positional()).collect();
    if !positionals.is_empty() {
        push_line(out, "| Argument | Environment variable | Default | Description |");
        push_line(out, "|---|---|---|---|");
        for arg in positionals {
            let value = arg
                .get_value_names()
                .and_then(|names| names.first())
                .map(|n| n.to_string())
                .unwrap_or_else(|| arg.get_id().to_string());
            push_line(out, &arg_row(arg, &code(&format!("<{value}>"))));
        }
        push_line(out, "");
    }
    if flags.is_empty() {
        push_line(out, "No flags but the [global ones](#global-flags).");
        push_line(out, "");
    } else {
        flag_table(out, &flags);
    }
    let subs: Vec<&clap::Command> = visible_subcommands(cmd).collect();
    for sub in subs {
        command_section(out, sub);
    }
}

/// Arguments documented in a table: not hidden, not clap's `--help`/`--version`.
fn documented_args(cmd: &clap::Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| !a.is_hide_set() && !is_builtin(a))
}

/// Writes `text` paragraph by paragraph, each on one line and escaped as in [`cell`].
fn push_paragraphs(out: &mut String, text: &str) {
    for paragraph in text.split("\n\n").map(cell).filter(|p| !p.is_empty()) {
        push_line(out, &paragraph);
        push_line(out, "");
    }
}

fn usage_block(out: &mut String, cmd: &clap::Command) {
    push_line(out, "```text");
    push_line(out, &usage(cmd));
    push_line(out, "```");
    push_line(out, "");
}

fn flag_table(out: &mut String, flags: &[&Arg]) {
    push_line(out, "| Flag | Environment variable | Default | Description |");
    push_line(out, "|---|---|---|---|");
    for arg in flags {
        push_line(out, &arg_row(arg, &flag_form(arg)));
    }
    push_line(out, "");
}

/// How a flag is written: `` `-n`, `--namespace <NAMESPACE>` ``, with visible aliases.
pub fn flag_form(arg: &Arg) -> String {
    let mut forms: Vec<String> = Vec::new();
    if let Some(short) = arg.get_short() {
        forms.push(format!("-{short}"));
    }
    forms.extend(
        arg.get_visible_short_aliases()
            .into_iter()
            .flatten()
            .map(|s| format!("-{s}")),
    );
    if let Some(long) = arg.get_long() {
        forms.push(format!("--{long}"));
    }
    forms.extend(
        arg.get_visible_aliases()
            .into_iter()
            .flatten()
            .map(|l| format!("--{l}")),
    );
    let value = if arg.get_action().takes_values() {
        let names: Vec<String> = arg
            .get_value_names()
            .map(|names| names.iter().map(|n| format!("<{n}>")).collect())
            .unwrap_or_else(|| vec![format!("<{}>", arg.get_id().to_string())]);
        format!(" {}", names.join(" "))
    } else {
        String::new()
    };
    let count = forms.len();
    forms
        .into_iter()
        .enumerate()
        .map(|(i, form)| {
            let form = if i + 1 == count {
                format!("{form}{value}")
            } else {
                form
            };
            code(&form)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn arg_row(arg: &Arg, form: &str) -> String {
    let env = arg
        .get_env()
        .map(|e| code(&e.to_string_lossy()))
        .unwrap_or_else(|| "none".to_string());
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let default = if defaults.is_empty() || !arg.get_action().takes_values() {
        String::new()
    } else {
        code(&defaults.join(","))
    };
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut description = vec![cell(&sentence(&help))];
    if arg.is_required_set() {
        description.insert(0, "Required.".to_string());
    }
    if !arg.get_action().takes_values() {
        description.push("Takes no value.".to_string());
    } else {
        let values = possible_values(arg);
        if !values.is_empty() {
            description.push(format!("Possible values: {}.", values.join(", ")));
        }
        if let Some(delimiter) = arg.get_value_delimiter() {
            description.push(format!(
                "Several values are separated by {}.",
                code(&delimiter.to_string())
            ));
        }
        if matches!(arg.get_action(), ArgAction::Append) {
            description.push("May be given more than once.".to_string());
        }
    }
    let description: Vec<String> = description.into_iter().filter(|d| !d.is_empty()).collect();
    format!("| {form} | {env} | {default} | {} |", description.join(" "))
}

fn possible_values(arg: &Arg) -> Vec<String> {
    arg.get_possible_values()
        .iter()
        .filter(|v: &&PossibleValue| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(help) => format!(
                "{} ({})",
                code(v.get_name()),
                cell(&help.to_string()).trim_end_matches('.')
            ),
            None => code(v.get_name()),
        })
        .collect()
}

/// GitHub's anchor of a heading: lowercase; punctuation but `-` and `_` dropped; spaces become `-`.
pub fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------
// The CRD reference.

/// One row of a CRD's field table: a field of the schema, by its path (`spec.varsFiles[].path`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRow {
    /// Path from the object's root: `.` between fields, `[]` for an array's items, `.*` for a map's values.
    pub path: String,
    /// The field's type in words: `string`, `integer (int64)`, `array of object`, `map of string`, ...
    pub type_: String,
    /// Whether the object holding the field requires it.
    pub required: bool,
    /// The schema's description, with its constraints (default, bounds, pattern, rules) after it.
    pub description: String,
    /// Whether the schema has a description of the field itself.
    pub documented: bool,
}

/// The fields of an object schema, depth first in the schema's (alphabetical) order. Array items and map
/// values get no row of their own: their fields are listed under `field[]` and `field.*`, their
/// description goes with the field's.
pub fn field_rows(root: &JSONSchemaProps) -> Vec<FieldRow> {
    let mut rows = Vec::new();
    descend("", root, &mut rows);
    rows
}

fn descend(path: &str, node: &JSONSchemaProps, rows: &mut Vec<FieldRow>) {
    let required = node.required.as_deref().unwrap_or_default();
    for (name, child) in node.properties.iter().flatten() {
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        rows.push(field_row(&child_path, child, required.contains(name)));
        descend(&child_path, child, rows);
    }
    if let Some(items) = items(node) {
        descend(&format!("{path}[]"), items, rows);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(value)) = &node.additional_properties {
        descend(&format!("{path}.*"), value, rows);
    }
    for alternative in alternatives(node) {
        descend(path, alternative, rows);
    }
}

fn items(node: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match &node.items {
        Some(JSONSchemaPropsOrArray::Schema(items)) => Some(items),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.first(),
        None => None,
    }
}

/// The `anyOf`/`oneOf`/`allOf` subschemas of a node.
fn alternatives(node: &JSONSchemaProps) -> impl Iterator<Item = &JSONSchemaProps> {
    [&node.any_of, &node.one_of, &node.all_of]
        .into_iter()
        .flat_map(|list| list.iter().flatten())
}

fn field_row(path: &str, node: &JSONSchemaProps, required: bool) -> FieldRow {
    let own = node.description.as_deref().map(str::trim).unwrap_or_default();
    let mut parts = vec![cell(own)];
    let element = items(node)
        .map(|i| ("Each item", i))
        .or(match &node.additional_properties {
            Some(JSONSchemaPropsOrBool::Schema(value)) => Some(("Each value", &**value)),
            _ => None,
        });
    if let Some((what, element)) = element {
        if let Some(d) = element.description.as_deref().filter(|d| !d.trim().is_empty()) {
            parts.push(format!("{what}: {}", cell(d)));
        }
    }
    parts.extend(constraints(node));
    let parts: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    FieldRow {
        path: path.to_string(),
        type_: type_name(node),
        required,
        description: parts.join(" "),
        documented: !own.is_empty(),
    }
}

/// A schema's type in words.
pub fn type_name(node: &JSONSchemaProps) -> String {
    if node.x_kubernetes_int_or_string == Some(true) {
        return "integer or string".to_string();
    }
    let mut name = match node.type_.as_deref() {
        Some("array") => match items(node) {
            Some(items) => format!("array of {}", type_name(items)),
            None => "array".to_string(),
        },
        Some("object") if node.properties.is_none() => match &node.additional_properties {
            Some(JSONSchemaPropsOrBool::Schema(value)) => format!("map of {}", type_name(value)),
            Some(JSONSchemaPropsOrBool::Bool(true)) => "map of any".to_string(),
            _ if node.x_kubernetes_preserve_unknown_fields == Some(true) => "object (any fields)".to_string(),
            _ => "object".to_string(),
        },
        Some(other) => match &node.format {
            Some(format) => format!("{other} ({format})"),
            None => other.to_string(),
        },
        None => {
            let kinds: Vec<String> = alternatives(node).map(type_name).filter(|t| t != "any").collect();
            let mut unique: Vec<String> = Vec::new();
            for kind in kinds {
                if !unique.contains(&kind) {
                    unique.push(kind);
                }
            }
            if unique.is_empty() {
                "any".to_string()
            } else {
                unique.join(" or ")
            }
        }
    };
    if let Some(values) = node.enum_.as_ref().filter(|v| !v.is_empty()) {
        let values: Vec<String> = values.iter().map(|v| code(&json_text(&v.0))).collect();
        name.push_str(&format!(", one of {}", values.join(", ")));
    }
    match node.x_kubernetes_list_type.as_deref() {
        Some("map") => {
            let keys: Vec<String> = node
                .x_kubernetes_list_map_keys
                .iter()
                .flatten()
                .map(|k| code(k))
                .collect();
            name.push_str(&format!(", a list map keyed by {}", keys.join(" and ")));
        }
        Some("set") => name.push_str(", a set"),
        _ => {}
    }
    if node.x_kubernetes_preserve_unknown_fields == Some(true) && node.properties.is_some() {
        name.push_str(", unknown fields kept");
    }
    name
}

/// A JSON value as written in YAML: strings bare, the rest as JSON.
fn json_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The constraints a schema puts on its field, as sentences.
fn constraints(node: &JSONSchemaProps) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(default) = &node.default {
        out.push(format!("Default: {}.", code(&json_text(&default.0))));
    }
    match (node.min_length, node.max_length) {
        (Some(min), Some(max)) => out.push(format!("Length: {min} to {max}.")),
        (Some(min), None) => out.push(format!("Length: at least {min}.")),
        (None, Some(max)) => out.push(format!("Length: at most {max}.")),
        (None, None) => {}
    }
    match (node.min_items, node.max_items) {
        (Some(min), Some(max)) => out.push(format!("Items: {min} to {max}.")),
        (Some(min), None) => out.push(format!("Items: at least {min}.")),
        (None, Some(max)) => out.push(format!("Items: at most {max}.")),
        (None, None) => {}
    }
    if let Some(min) = node.minimum {
        let strict = if node.exclusive_minimum == Some(true) {
            " (exclusive)"
        } else {
            ""
        };
        out.push(format!("Minimum: {min}{strict}."));
    }
    if let Some(max) = node.maximum {
        let strict = if node.exclusive_maximum == Some(true) {
            " (exclusive)"
        } else {
            ""
        };
        out.push(format!("Maximum: {max}{strict}."));
    }
    if let Some(pattern) = &node.pattern {
        out.push(format!("Pattern: {}.", code(pattern)));
    }
    for rule in node.x_kubernetes_validations.iter().flatten() {
        let message = rule
            .message
            .as_deref()
            .map(|m| format!(" ({})", cell(m)))
            .unwrap_or_default();
        out.push(format!("Rule: {}{message}.", code(&rule.rule)));
    }
    out
}

/// The CRD reference page of `crds`: per CRD its names, scope, printer columns and every field.
pub fn crds_markdown(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::new();
    push_line(&mut out, "# CRD reference");
    push_line(&mut out, "");
    push_line(
        &mut out,
        &format!(
            "This page describes the custom resources kok writes into the meta-cluster: for each \
             CustomResourceDefinition its names, scope and the columns `kubectl get` shows, then every \
             field of `spec` and `status` with its type, whether it is required and what it means (the \
             text `kubectl explain` prints). Use it to read kok's objects or to write tools that watch \
             them; kok writes them from the repository, so you do not edit them by hand. The page is \
             generated from the CRD schemas (`kok crds`): regenerate it with `{}` (a test fails when it \
             differs).",
            Page::Crds.regenerate_command()
        ),
    );
    push_line(&mut out, "");
    let kinds: Vec<String> = crds
        .iter()
        .map(|c| {
            let kind = &c.spec.names.kind;
            format!("[{kind}](#{})", slug(kind))
        })
        .collect();
    push_line(
        &mut out,
        &format!(
            "Fields are written as paths from the object's root: `[]` stands for each item of an array, \
             `.*` for each value of a map. Every object also has the usual `apiVersion`, `kind` and \
             `metadata`. The kinds: {}.",
            kinds.join(", ")
        ),
    );
    push_line(&mut out, "");
    for crd in crds {
        crd_section(&mut out, crd);
    }
    where_to_go_next(
        &mut out,
        &[
            "- [The repository](../repository.md): the files these objects are rendered from.",
            "- [Deploying](../deploying.md): install the CRDs and run kok in a meta-cluster.",
            "- [Troubleshooting](../troubleshooting.md): what the messages in these statuses mean.",
            "- [Command-line reference](cli.md): the flags of `kok run`, `kok crds` and the other commands.",
        ],
    );
    out
}

fn crd_section(out: &mut String, crd: &CustomResourceDefinition) {
    let names = &crd.spec.names;
    let kind = &names.kind;
    push_line(out, &format!("## {kind}"));
    push_line(out, "");
    let root_description = crd
        .spec
        .versions
        .iter()
        .find_map(|v| schema(v).and_then(|s| s.description.clone()))
        .unwrap_or_default();
    push_paragraphs(out, &root_description);
    let list = |values: &Option<Vec<String>>| {
        let values: Vec<String> = values.iter().flatten().map(|v| code(v)).collect();
        if values.is_empty() {
            "none".to_string()
        } else {
            values.join(", ")
        }
    };
    let versions: Vec<String> = crd
        .spec
        .versions
        .iter()
        .map(|v| {
            let mut roles = Vec::new();
            if v.served {
                roles.push("served");
            }
            if v.storage {
                roles.push("stored");
            }
            format!("{} ({})", code(&v.name), roles.join(", "))
        })
        .collect();
    for (label, value) in [
        ("Group", code(&crd.spec.group)),
        ("Versions", versions.join(", ")),
        ("Kind", code(kind)),
        ("Plural", code(&names.plural)),
        (
            "Singular",
            names
                .singular
                .as_deref()
                .map(code)
                .unwrap_or_else(|| "none".into()),
        ),
        ("Short names", list(&names.short_names)),
        ("Categories", list(&names.categories)),
        ("Scope", crd.spec.scope.clone()),
    ] {
        push_line(out, &format!("- {label}: {value}"));
    }
    push_line(out, "");
    let several = crd.spec.versions.len() > 1;
    for version in &crd.spec.versions {
        let suffix = if several {
            format!(" ({})", version.name)
        } else {
            String::new()
        };
        printer_columns(out, kind, &names.plural, version, &suffix);
        if let Some(root) = schema(version) {
            push_line(out, &format!("### {kind} fields{suffix}"));
            push_line(out, "");
            push_line(out, "| Field | Type | Required | Description |");
            push_line(out, "|---|---|---|---|");
            for row in field_rows(root) {
                let required = if row.required { "yes" } else { "no" };
                push_line(
                    out,
                    &format!(
                        "| {} | {} | {required} | {} |",
                        code(&row.path),
                        row.type_,
                        row.description
                    ),
                );
            }
            push_line(out, "");
        }
    }
}

fn schema(version: &CustomResourceDefinitionVersion) -> Option<&JSONSchemaProps> {
    version.schema.as_ref()?.open_api_v3_schema.as_ref()
}

fn printer_columns(
    out: &mut String,
    kind: &str,
    plural: &str,
    version: &CustomResourceDefinitionVersion,
    suffix: &str,
) {
    let columns = version.additional_printer_columns.as_deref().unwrap_or_default();
    if columns.is_empty() {
        return;
    }
    push_line(out, &format!("### {kind} printer columns{suffix}"));
    push_line(out, "");
    push_line(
        out,
        &format!("`kubectl get {plural}` shows these columns; those of priority 1 only with `-o wide`."),
    );
    push_line(out, "");
    let described = columns.iter().any(|c| c.description.is_some());
    if described {
        push_line(out, "| Column | Type | JSON path | Priority | Description |");
        push_line(out, "|---|---|---|---|---|");
    } else {
        push_line(out, "| Column | Type | JSON path | Priority |");
        push_line(out, "|---|---|---|---|");
    }
    for column in columns {
        let mut row = format!(
            "| {} | {} | {} | {} |",
            cell(&column.name),
            column.type_,
            code(&column.json_path),
            column.priority.unwrap_or(0),
        );
        if described {
            row.push_str(&format!(
                " {} |",
                cell(column.description.as_deref().unwrap_or_default())
            ));
        }
        push_line(out, &row);
    }
    push_line(out, "");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_escape_pipes_everywhere_and_angle_brackets_outside_code() {
        assert_eq!(
            cell("a | b `x|<y>*` <name> */\nnext\n\nsecond"),
            "a \\| b `x\\|<y>*` &lt;name> \\*/ next<br><br>second"
        );
    }

    #[test]
    fn slugs_follow_github() {
        assert_eq!(slug("kok run"), "kok-run");
        assert_eq!(slug("ClusterOperation"), "clusteroperation");
        assert_eq!(slug("Where to go next"), "where-to-go-next");
    }

    fn schema(json: serde_json::Value) -> JSONSchemaProps {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn field_rows_walk_arrays_and_maps_and_name_their_types() {
        let root = schema(serde_json::json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "description": "The spec.",
                    "required": ["files"],
                    "properties": {
                        "files": {"type": "array", "description": "Files.", "items": {
                            "type": "object", "required": ["path"],
                            "properties": {"path": {"type": "string", "description": "Path.", "minLength": 1}}
                        }},
                        "limits": {"type": "object", "description": "Limits.", "additionalProperties": {
                            "x-kubernetes-int-or-string": true, "description": "A quantity."
                        }},
                        "hosts": {"type": "object", "additionalProperties": {
                            "type": "object", "properties": {"ok": {"type": "integer", "format": "int32"}}
                        }},
                        "kind": {"type": "string", "enum": ["a", "b"], "default": "a", "description": "Kind."},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "Any."}
                    }
                }
            }
        }));
        let rows = field_rows(&root);
        let paths: Vec<&str> = rows.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec",
                "spec.files",
                "spec.files[].path",
                "spec.free",
                "spec.hosts",
                "spec.hosts.*.ok",
                "spec.kind",
                "spec.limits"
            ]
        );
        let row = |p: &str| rows.iter().find(|r| r.path == p).unwrap().clone();
        assert_eq!(row("spec.files").type_, "array of object");
        assert!(row("spec.files").required);
        assert!(row("spec.files[].path").required);
        assert!(row("spec.files[].path")
            .description
            .contains("Length: at least 1."));
        assert_eq!(row("spec.free").type_, "object (any fields)");
        assert_eq!(row("spec.hosts").type_, "map of object");
        assert!(!row("spec.hosts").documented);
        assert_eq!(row("spec.hosts.*.ok").type_, "integer (int32)");
        assert_eq!(row("spec.kind").type_, "string, one of `a`, `b`");
        assert_eq!(row("spec.kind").description, "Kind. Default: `a`.");
        assert_eq!(row("spec.limits").type_, "map of integer or string");
        assert_eq!(row("spec.limits").description, "Limits. Each value: A quantity.");
    }

    #[test]
    fn flags_are_listed_with_their_environment_twin_default_and_values() {
        let cmd = clap::Command::new("tool")
            .arg(
                Arg::new("format")
                    .long("format")
                    .short('f')
                    .env("TOOL_FORMAT")
                    .default_value("text")
                    .value_parser(["text", "json"])
                    .help("Output | format."),
            )
            .subcommand(
                clap::Command::new("go").about("Goes.").arg(
                    Arg::new("fast")
                        .long("fast")
                        .env("TOOL_FAST")
                        .action(ArgAction::SetTrue),
                ),
            );
        let page = cli_markdown(cmd);
        assert!(page.contains(
            "| `-f`, `--format <format>` | `TOOL_FORMAT` | `text` | Output \\| format. \
             Possible values: `text`, `json`. |"
        ));
        assert!(page.contains("## tool go\n\nGoes.\n\n```text\ntool go [OPTIONS]\n```"));
        assert!(page.contains("| `--fast` | `TOOL_FAST` |  | Takes no value. |"));
        assert!(page.ends_with(".md): the objects `kok run` writes.\n"));
    }
}
