//! An INI inventory (`inventory.ini`) read as ansible's `ini` plugin reads it: `[group]`,
//! `[group:children]`, `[group:vars]`, `host key=value...` lines split like a POSIX shell, host ranges, and
//! values typed as Python literals.

use std::collections::BTreeMap;

use super::graph::{Graph, UNGROUPED};
use super::hostpattern::expand_host_pattern;
use super::pyliteral::literal_eval;
use super::value::{judge, Known, Unknown, Var};
use crate::diag::FileDiags;

/// A `[group:children]` or `[group:vars]` whose group has not been declared yet.
struct Pending {
    line: usize,
    children: bool,
    parents: Vec<usize>,
}

/// Reads INI inventory `text` into a graph (not yet reconciled), reporting every problem ansible would
/// refuse; `None` when there was one.
pub(crate) fn parse_ini(text: &str, diags: &mut FileDiags<'_>) -> Option<Graph> {
    let errors_before = diags.error_count();
    let mut reader = Reader {
        graph: Graph::new(),
        pending: BTreeMap::new(),
        group: UNGROUPED,
        state: State::Hosts,
    };
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let col = 1 + raw.chars().take_while(|c| c.is_whitespace()).count();
        let mut error = |message: String| diags.error_at(number, col, message);
        if let Some(header) = section(line) {
            reader.enter_section(line, header, number, &mut error);
            continue;
        }
        match reader.state {
            State::Skip => {}
            State::Hosts => host_line(line, number, col, reader.group, &mut reader.graph, diags),
            State::Vars => reader.var_line(line, number, &mut error),
            State::Children => reader.child_line(line, number, &mut error),
        }
    }
    report_undeclared(reader.pending, &reader.graph, diags);
    (diags.error_count() == errors_before).then_some(reader.graph)
}

/// The graph being read, the groups named before their section, and the section the reader is in.
struct Reader {
    graph: Graph,
    pending: BTreeMap<String, Pending>,
    /// The group of the current section.
    group: usize,
    state: State,
}

impl Reader {
    /// Enters the section of header `line` (`header` as [`section`] read it), declaring its group.
    fn enter_section(
        &mut self,
        line: &str,
        header: Option<(&str, Option<&str>)>,
        number: usize,
        error: &mut impl FnMut(String),
    ) {
        let Some((name, kind)) = header else {
            error(format!(
                "invalid section header {line}: write [group], [group:children] or [group:vars], \
                 without spaces inside the brackets"
            ));
            return;
        };
        self.state = match kind {
            None | Some("hosts") => State::Hosts,
            Some("children") => State::Children,
            Some("vars") => State::Vars,
            Some(other) => {
                error(format!(
                    "section [{name}:{other}] has unknown type \"{other}\": use [{name}], \
                     [{name}:children] or [{name}:vars]"
                ));
                State::Skip
            }
        };
        if self.graph.group(name).is_none() && self.state == State::Vars && !self.pending.contains_key(name) {
            self.pending.insert(
                name.to_string(),
                Pending {
                    line: number,
                    children: false,
                    parents: vec![],
                },
            );
        }
        self.group = self.graph.add_group(name);
        if self.state != State::Vars {
            self.graph.defined_at(self.group, number);
            if let Some(p) = self.pending.get(name) {
                if p.children {
                    add_pending_children(name, &mut self.pending, &mut self.graph, error);
                } else {
                    self.pending.remove(name);
                }
            }
        }
    }

    /// A `key=value` line of a `[group:vars]` section.
    fn var_line(&mut self, line: &str, number: usize, error: &mut impl FnMut(String)) {
        let Some((key, value)) = line.split_once('=') else {
            error(format!(
                "expected key=value in [{}:vars], got \"{line}\": write one variable per line",
                self.graph.groups[self.group].name
            ));
            return;
        };
        let var = Var {
            value: python_value(value.trim()),
            line: Some(number),
        };
        if let Err(message) = self.graph.set_group_var(self.group, key.trim(), var) {
            error(message);
        }
    }

    /// A group name line of a `[group:children]` section; a group not declared yet waits in `pending`.
    fn child_line(&mut self, line: &str, number: usize, error: &mut impl FnMut(String)) {
        let Some(child) = group_name(line) else {
            error(format!(
                "expected a group name in [{}:children], got \"{line}\": write one group per line",
                self.graph.groups[self.group].name
            ));
            return;
        };
        match self.graph.group(child) {
            Some(c) => {
                if let Err(message) = self.graph.add_child(self.group, c) {
                    error(message);
                }
            }
            None => {
                self.pending
                    .entry(child.to_string())
                    .or_insert(Pending {
                        line: number,
                        children: true,
                        parents: vec![],
                    })
                    .parents
                    .push(self.group);
            }
        }
    }
}

/// Reports each group named by a `:children` or `:vars` section that no section declares.
fn report_undeclared(pending: BTreeMap<String, Pending>, graph: &Graph, diags: &mut FileDiags<'_>) {
    for (name, p) in pending {
        let message = if p.children {
            let parent = p.parents.last().map_or("", |g| graph.groups[*g].name.as_str());
            format!(
                "section [{parent}:children] names group \"{name}\", which no section declares: \
                 add a [{name}] section (it may be empty) or remove the line"
            )
        } else {
            format!(
                "section [{name}:vars] is for group \"{name}\", which no section declares: add a [{name}] \
                 section listing its hosts, or a [{name}:children] section"
            )
        };
        diags.error_at(p.line, 1, message);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Hosts,
    Children,
    Vars,
    /// After a section of unknown type: its lines are ignored (the section was reported).
    Skip,
}

/// Links the groups waiting for `name` as their child, then those waiting for them, as ansible does once
/// `name` is declared.
fn add_pending_children(
    name: &str,
    pending: &mut BTreeMap<String, Pending>,
    graph: &mut Graph,
    error: &mut impl FnMut(String),
) {
    let Some(p) = pending.remove(name) else {
        return;
    };
    let child = graph.add_group(name);
    for parent in p.parents {
        if let Err(message) = graph.add_child(parent, child) {
            error(message);
        }
        let parent_name = graph.groups[parent].name.clone();
        if pending.get(&parent_name).is_some_and(|q| q.children) {
            add_pending_children(&parent_name, pending, graph, error);
        }
    }
}

/// A section header `[name]` / `[name:type]` (an optional `# comment` after it): `Some(Some((name, type)))`,
/// `Some(None)` for a bracketed line that is not a valid header, `None` for any other line.
fn section(line: &str) -> Option<Option<(&str, Option<&str>)>> {
    if !line.starts_with('[') {
        return None;
    }
    let valid = (|| {
        let close = line.find(']')?;
        let rest = line[close + 1..].trim_start();
        if !(rest.is_empty() || rest.starts_with('#')) {
            return None;
        }
        let inner = &line[1..close];
        let (name, kind) = match inner.split_once(':') {
            Some((name, kind)) => (name, Some(kind)),
            None => (inner, None),
        };
        let name_ok = !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || c == ']');
        let kind_ok =
            kind.is_none_or(|k| !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_'));
        (name_ok && kind_ok).then_some((name, kind))
    })();
    match valid {
        Some(header) => Some(Some(header)),
        None if line.ends_with(']') => Some(None),
        None => None,
    }
}

/// A group name line in a `:children` section (`name`, optionally followed by `# comment`).
fn group_name(line: &str) -> Option<&str> {
    let end = line
        .find(|c: char| c.is_whitespace() || c == '#')
        .unwrap_or(line.len());
    let (name, rest) = line.split_at(end);
    let rest = rest.trim_start();
    let ok = !name.is_empty() && !name.contains([':', ']']) && (rest.is_empty() || rest.starts_with('#'));
    ok.then_some(name)
}

/// A host line: a host (or range, with an optional `:port`) and `key=value` variables.
fn host_line(
    line: &str,
    number: usize,
    col: usize,
    group: usize,
    graph: &mut Graph,
    diags: &mut FileDiags<'_>,
) {
    let tokens = match shlex_split(line) {
        Ok(tokens) => tokens,
        Err(why) => {
            diags.error_at(
                number,
                col,
                format!("cannot split host line \"{line}\": {why}; close the quote or escape the character"),
            );
            return;
        }
    };
    let Some((pattern, assignments)) = tokens.split_first() else {
        return;
    };
    let (names, port) = match expand_host_pattern(pattern) {
        Ok(expanded) => expanded,
        Err(message) => {
            diags.error_at(number, col, message);
            return;
        }
    };
    let mut vars: Vec<(String, Known)> = Vec::new();
    for token in assignments {
        let Some((key, value)) = token.split_once('=') else {
            let at = line
                .find(token.as_str())
                .map_or(col, |i| col + line[..i].chars().count());
            diags.error_at(
                number,
                at,
                format!(
                    "expected key=value after host \"{pattern}\", got \"{token}\": quote a value with spaces \
                     (key=\"a b\"), and start comments with #"
                ),
            );
            return;
        };
        vars.push((key.to_string(), python_value(value)));
    }
    for name in names {
        if name.is_empty() {
            diags.error_at(number, col, "empty host name: name the host first on the line");
            return;
        }
        let h = graph.add_host(&name, Some(group), port.map(|p| (p, Some(number))));
        for (key, value) in &vars {
            graph.hosts[h].vars.insert(
                key.clone(),
                Var {
                    value: value.clone(),
                    line: Some(number),
                },
            );
        }
    }
}

/// An INI value as ansible types it: a Python literal when it is one, else the text.
fn python_value(text: &str) -> Known {
    match literal_eval(text) {
        Some(Ok(value)) => judge(value),
        Some(Err(what)) => Known::Unknown(Unknown::Unsupported(what)),
        None => judge(serde_json::Value::String(text.to_string())),
    }
}

/// `line` split as Python's `shlex.split(line, comments=True)` splits it (POSIX rules): whitespace
/// separates words, quotes group, a backslash escapes, `#` starts a comment.
pub(crate) fn shlex_split(line: &str) -> Result<Vec<String>, &'static str> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    let mut word = String::new();
    let mut in_word = false;
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\r' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' => break,
            '\\' => {
                word.push(chars.next().ok_or("no character after the backslash")?);
                in_word = true;
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next().ok_or("no closing quotation")? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next().ok_or("no closing quotation")? {
                        '"' => break,
                        '\\' => {
                            let next = chars.next().ok_or("no closing quotation")?;
                            if next != '"' && next != '\\' {
                                word.push('\\');
                            }
                            word.push(next);
                        }
                        other => word.push(other),
                    }
                }
            }
            other => {
                word.push(other);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ansible::graph::ALL;
    use crate::Diagnostic;
    use serde_json::json;

    fn read(text: &str) -> (Option<Graph>, Vec<String>) {
        let mut out = Vec::new();
        let graph = parse_ini(text, &mut FileDiags::new("inventory.ini", None, &mut out));
        (graph, out.iter().map(Diagnostic::to_string).collect())
    }

    fn graph(text: &str) -> Graph {
        let (graph, errors) = read(text);
        assert_eq!(errors, Vec::<String>::new());
        let mut graph = graph.unwrap();
        graph.reconcile();
        graph
    }

    fn names(g: &Graph, group: &str) -> Vec<String> {
        let group = g.group(group).unwrap();
        g.groups[group]
            .hosts
            .iter()
            .map(|h| g.hosts[*h].name.clone())
            .collect()
    }

    fn var(g: &Graph, host: &str, name: &str) -> Known {
        g.hosts[g.host(host).unwrap()].vars[name].value.clone()
    }

    #[test]
    fn shlex_splits_like_a_posix_shell_and_drops_comments() {
        assert_eq!(
            shlex_split("a b='x y' c=\"q\\\"r\" d\\ e").unwrap(),
            ["a", "b=x y", "c=q\"r", "d e"]
        );
        assert_eq!(shlex_split("a x=1#c d").unwrap(), ["a", "x=1"]);
        assert_eq!(shlex_split("a x='#' ''").unwrap(), ["a", "x=#", ""]);
        assert_eq!(shlex_split("a \"\\d\"").unwrap(), ["a", "\\d"]);
        assert!(shlex_split("a 'open").is_err());
    }

    #[test]
    fn sections_declare_groups_children_and_vars() {
        let g = graph(
            "top1\n[kube_control_plane]\nnode1 ansible_host=10.0.0.1 # first\nnode2:2222\n\n[etcd:children]\n\
             kube_control_plane\n\n[kube_node]\nnode[3:4]\nnode1\n; a comment\n[kube_node:vars]\nv = 7 # c\n\
             w = x # c\n[all:vars]\nv=all\n",
        );
        assert_eq!(names(&g, "kube_control_plane"), ["node1", "node2"]);
        assert_eq!(names(&g, "kube_node"), ["node3", "node4", "node1"]);
        assert_eq!(names(&g, "ungrouped"), ["top1"]);
        let etcd = g.group("etcd").unwrap();
        assert_eq!(g.groups[etcd].children, [g.group("kube_control_plane").unwrap()]);
        let all_children: Vec<&str> = g.groups[ALL]
            .children
            .iter()
            .map(|c| g.groups[*c].name.as_str())
            .collect();
        assert_eq!(all_children, ["ungrouped", "etcd", "kube_node"]);
        assert_eq!(var(&g, "node2", "ansible_port"), Known::Value(json!(2222)));
        assert_eq!(var(&g, "node1", "ansible_host"), Known::Value(json!("10.0.0.1")));
        let kube_node = &g.groups[g.group("kube_node").unwrap()];
        assert_eq!(kube_node.vars["v"].value, Known::Value(json!(7)));
        assert_eq!(kube_node.vars["w"].value, Known::Value(json!("x # c")));
        assert_eq!(kube_node.vars["v"].line, Some(14));
    }

    #[test]
    fn host_values_are_unquoted_by_the_shell_split_then_typed_as_python() {
        let g = graph("[g]\nh a=\"1\" b='x y' c=[1,2] d={'k':True} e=01 f=0x1f g=1e3 h=yes i=None m=b'z' n=\"{{ x }}\"\n");
        let v = |name| var(&g, "h", name);
        assert_eq!(v("a"), Known::Value(json!(1)));
        assert_eq!(v("b"), Known::Value(json!("x y")));
        assert_eq!(v("c"), Known::Value(json!([1, 2])));
        assert_eq!(v("d"), Known::Value(json!("{k:True}")));
        assert_eq!(v("e"), Known::Value(json!("01")));
        assert_eq!(v("f"), Known::Value(json!(31)));
        assert_eq!(v("g"), Known::Value(json!(1000.0)));
        assert_eq!(v("h"), Known::Value(json!("yes")));
        assert_eq!(v("i"), Known::Value(json!(null)));
        assert_eq!(v("m"), Known::Value(json!("bz")));
        assert!(matches!(v("n"), Known::Unknown(Unknown::Templated(_))));
    }

    #[test]
    fn children_may_name_groups_declared_later() {
        let g = graph("[k8s_cluster:children]\nkube_node\n[kube_node]\nn1\n");
        let k8s = g.group("k8s_cluster").unwrap();
        assert_eq!(g.groups[k8s].children, [g.group("kube_node").unwrap()]);
        assert_eq!(g.groups[g.group("kube_node").unwrap()].depth, 2);
    }

    #[test]
    fn group_priority_in_vars_sets_the_priority() {
        let g = graph("[a]\nh\n[a:vars]\nansible_group_priority=5\n");
        let a = &g.groups[g.group("a").unwrap()];
        assert_eq!(a.priority, 5);
        assert!(a.vars.is_empty());
    }

    #[test]
    fn mistakes_are_reported_with_line_column_and_a_remedy() {
        let errors = |text| read(text).1;
        assert_eq!(
            errors("[a]\nh\n[kube_node:vars]\nx=1\n"),
            ["inventory.ini:3:1: section [kube_node:vars] is for group \"kube_node\", which no section declares: \
              add a [kube_node] section listing its hosts, or a [kube_node:children] section"]
        );
        assert_eq!(
            errors("[p:children]\nmissing\n"),
            ["inventory.ini:2:1: section [p:children] names group \"missing\", which no section declares: add a \
              [missing] section (it may be empty) or remove the line"]
        );
        assert!(errors("[a b]\n")[0].starts_with("inventory.ini:1:1: invalid section header [a b]"));
        assert!(errors("[a:hostz]\n")[0].contains("unknown type \"hostz\""));
        assert!(errors("[a]\n  h x=1 oops\n")[0].starts_with("inventory.ini:2:9: expected key=value"));
        assert!(errors("[a]\nh x='open\n")[0].contains("no closing quotation"));
        assert!(errors("[a:vars]\njust text\n[a]\n")[0].starts_with("inventory.ini:2:1: expected key=value"));
        assert!(errors("[a:children]\nb\n[b:children]\na\n")[0].contains("recursive dependency loop"));
        assert!(errors("[a]\nnode[1:3:0]\n")[0].contains("step"));
        assert!(errors("[a]\nhost:\n")[0].contains("port"));
    }
}
