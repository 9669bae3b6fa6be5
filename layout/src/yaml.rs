//! A position-aware YAML tree: every node knows its line and column, duplicate keys are found.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};
use yaml_rust2::Yaml;

/// Most nodes alias expansion may create in one file (guards against "billion laughs" documents).
const MAX_NODES: usize = 200_000;
/// Deepest nesting of collections accepted (the tree is walked recursively).
const MAX_DEPTH: usize = 200;

/// A problem found while reading YAML, with its 1-based position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// What is wrong and what to do.
    pub message: String,
}

/// One YAML node and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// The value.
    pub kind: Kind,
    /// How the node was written, for readers with their own typing rules (ansible's YAML 1.1); `None` for an
    /// untagged quoted or block scalar and an untagged collection.
    pub written: Option<Box<Written>>,
}

/// A node's tag and, for a plain scalar, its text before typing.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Written {
    /// The tag as written, handle and suffix (`!vault`, `!!str`).
    pub tag: Option<String>,
    /// The text of a plain (unquoted, not block) scalar.
    pub plain: Option<String>,
}

/// What [`Node::written`] records for a node with `tag`, and `plain` text when a plain scalar.
fn written(tag: Option<&yaml_rust2::parser::Tag>, plain: Option<&str>) -> Option<Box<Written>> {
    let tag = tag.map(|t| format!("{}{}", t.handle, t.suffix));
    (tag.is_some() || plain.is_some()).then(|| {
        Box::new(Written {
            tag,
            plain: plain.map(str::to_string),
        })
    })
}

/// The value of a [`Node`], with scalars resolved by the YAML 1.2 core schema.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kind {
    /// `null`, `~` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer that fits in i64.
    Int(i64),
    /// A float, as written.
    Float(String),
    /// A string (quoted, or plain and not another type).
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, entries in file order (duplicates kept, and reported by [`parse`]).
    Map(Vec<(Node, Node)>),
}

/// A parsed file: its single document (`None` when the file holds none) and its duplicate keys.
#[derive(Debug)]
pub(crate) struct Doc {
    /// The document's root node.
    pub root: Option<Node>,
    /// One problem per duplicate key, at the second occurrence.
    pub duplicates: Vec<Problem>,
}

impl Node {
    /// The entries when this is a mapping.
    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            Kind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items when this is a sequence.
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.kind {
            Kind::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// The string when this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// True for `null`, `~` and empty values.
    pub fn is_null(&self) -> bool {
        matches!(self.kind, Kind::Null)
    }

    /// The text of a scalar as a key or name: strings as is, other scalars as written; `None` for collections.
    pub fn scalar_text(&self) -> Option<String> {
        match &self.kind {
            Kind::Null => Some(String::new()),
            Kind::Bool(b) => Some(b.to_string()),
            Kind::Int(i) => Some(i.to_string()),
            Kind::Float(f) => Some(f.clone()),
            Kind::Str(s) => Some(s.clone()),
            Kind::Seq(_) | Kind::Map(_) => None,
        }
    }

    /// A short description of the node's type for messages ("a string", "a list", ...).
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            Kind::Null => "empty",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }

    /// The node as JSON, typed as YAML resolved it; mapping keys become strings, the last duplicate wins.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => Value::from(*i),
            Kind::Float(text) => Yaml::Real(text.clone())
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or_else(|| Value::String(text.clone()), Value::Number),
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.scalar_text().unwrap_or_else(|| k.to_json().to_string()),
                            v.to_json(),
                        )
                    })
                    .collect(),
            ),
        }
    }

    fn count(&self) -> usize {
        match &self.kind {
            Kind::Seq(items) => 1 + items.iter().map(Node::count).sum::<usize>(),
            Kind::Map(entries) => 1 + entries.iter().map(|(k, v)| k.count() + v.count()).sum::<usize>(),
            _ => 1,
        }
    }
}

#[cfg(test)]
thread_local! {
    /// How many times [`parse`] ran on this thread: tests pin that a pass parses each file once.
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Parses `text` as one YAML document. Syntax errors (and a second document) are returned as `Err`.
pub(crate) fn parse(text: &str) -> Result<Doc, Problem> {
    #[cfg(test)]
    PARSES.with(|n| n.set(n.get() + 1));
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    let loaded = parser.load(&mut builder, true);
    if let Some(problem) = builder.failure.take() {
        return Err(problem);
    }
    if let Err(err) = loaded {
        let mark = err.marker();
        return Err(Problem {
            line: mark.line(),
            col: mark.col() + 1,
            message: format!("YAML syntax error: {}: {}", err.info(), syntax_hint(err.info())),
        });
    }
    let mut docs = builder.docs.into_iter();
    let root = docs.next();
    if let Some(second) = docs.next() {
        return Err(Problem {
            line: second.line,
            col: second.col,
            message: "a second YAML document starts here: kok reads one document per file; remove the `---` \
                      separator and merge the documents"
                .to_string(),
        });
    }
    Ok(Doc {
        root,
        duplicates: builder.duplicates,
    })
}

/// What to do about a syntax error, from the parser's description of it.
fn syntax_hint(info: &str) -> &'static str {
    if info.contains("tab") {
        "indent with spaces; YAML does not allow tabs there"
    } else if info.contains("mapping values are not allowed") {
        "quote a value that contains \": \", or fix the indentation of this key"
    } else if info.contains("quoted scalar") {
        "close the quote, or escape the character"
    } else if info.contains("flow sequence") {
        "close the list with ] and separate items with commas"
    } else if info.contains("flow mapping") {
        "close the mapping with } and separate entries with commas"
    } else if info.contains("indent")
        || info.contains("did not find expected key")
        || info.contains("'-' indicator")
    {
        "check the indentation: entries of one mapping or list start in the same column"
    } else if info.contains("':' indicator") {
        "quote a value that contains ':', or fix the indentation"
    } else if info.contains("anchor") || info.contains("alias") {
        "define each anchor (&name) once, before its aliases (*name)"
    } else {
        "fix the YAML syntax at this position"
    }
}

/// A collection under construction.
enum Open {
    Seq {
        line: usize,
        col: usize,
        items: Vec<Node>,
        anchor: usize,
        written: Option<Box<Written>>,
    },
    Map {
        line: usize,
        col: usize,
        entries: Vec<(Node, Node)>,
        pending: Option<Node>,
        anchor: usize,
        /// Scalar keys seen so far (type tag and text) → line of their first occurrence.
        seen: std::collections::HashMap<(u8, String), usize>,
        written: Option<Box<Written>>,
    },
}

/// Builds [`Node`]s from the parser's events.
#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    docs: Vec<Node>,
    anchors: std::collections::HashMap<usize, Node>,
    duplicates: Vec<Problem>,
    expanded: usize,
    failure: Option<Problem>,
}

impl Builder {
    fn push(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Open::Seq { items, .. }) => items.push(node),
            Some(Open::Map {
                entries,
                pending,
                line,
                col,
                seen,
                ..
            }) => match pending.take() {
                None => {
                    // The first key tells where a block mapping starts (its start event comes later).
                    if entries.is_empty() && (node.line, node.col) < (*line, *col) {
                        (*line, *col) = (node.line, node.col);
                    }
                    *pending = Some(node);
                }
                Some(key) => {
                    if let Some(id) = key_id(&key) {
                        if let Some(first) = seen.get(&id) {
                            self.duplicates.push(Problem {
                                line: key.line,
                                col: key.col,
                                message: format!(
                                    "duplicate key \"{}\": it is already defined on line {first}; keep only one",
                                    id.1
                                ),
                            });
                        } else {
                            seen.insert(id, key.line);
                        }
                    }
                    entries.push((key, node));
                }
            },
        }
    }

    fn finish(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        self.push(node);
    }

    /// Places a copy of the node anchored as `id`, failing on an unknown anchor or too large an expansion.
    fn alias(&mut self, id: usize, line: usize, col: usize) {
        let Some(target) = self.anchors.get(&id).cloned() else {
            self.failure = Some(Problem {
                line,
                col,
                message: "alias to an unknown anchor: define the anchor (&name) before using it".to_string(),
            });
            return;
        };
        self.expanded += target.count();
        if self.expanded > MAX_NODES {
            self.failure = Some(Problem {
                line,
                col,
                message: format!(
                    "aliases expand to more than {MAX_NODES} nodes: write the values out or use fewer aliases"
                ),
            });
            return;
        }
        self.push(Node {
            line,
            col,
            kind: target.kind,
            written: target.written,
        });
    }
}

/// Identity of a scalar key for duplicate detection: its type and text (`None` for collection keys).
fn key_id(key: &Node) -> Option<(u8, String)> {
    let tag = match key.kind {
        Kind::Null => 0,
        Kind::Bool(_) => 1,
        Kind::Int(_) => 2,
        Kind::Float(_) => 3,
        Kind::Str(_) => 4,
        Kind::Seq(_) | Kind::Map(_) => return None,
    };
    key.scalar_text().map(|text| (tag, text))
}

/// The node of a scalar event at `line`:`col`, typed and with how it was written.
fn scalar_node(
    value: String,
    style: TScalarStyle,
    tag: Option<&yaml_rust2::parser::Tag>,
    line: usize,
    col: usize,
) -> Node {
    let plain = (style == TScalarStyle::Plain).then_some(value.as_str());
    let written = written(tag, plain);
    let kind = scalar(value, style, tag);
    Node {
        line,
        col,
        kind,
        written,
    }
}

fn scalar(value: String, style: TScalarStyle, tag: Option<&yaml_rust2::parser::Tag>) -> Kind {
    let plain = style == TScalarStyle::Plain;
    let forced_str = tag.is_some_and(|t| t.suffix == "str" || t.suffix.ends_with(":str"));
    if !plain || forced_str {
        return Kind::Str(value);
    }
    match Yaml::from_str(&value) {
        Yaml::Null => Kind::Null,
        Yaml::Boolean(b) => Kind::Bool(b),
        Yaml::Integer(i) => Kind::Int(i),
        Yaml::Real(r) => Kind::Float(r),
        _ => Kind::Str(value),
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.failure.is_some() {
            return;
        }
        let (line, col) = (mark.line(), mark.col() + 1);
        match ev {
            Event::Scalar(value, style, anchor, tag) => {
                self.finish(scalar_node(value, style, tag.as_ref(), line, col), anchor);
            }
            Event::SequenceStart(..) | Event::MappingStart(..) if self.stack.len() >= MAX_DEPTH => {
                self.failure = Some(Problem {
                    line,
                    col,
                    message: format!("nesting deeper than {MAX_DEPTH} levels: flatten the structure"),
                });
            }
            Event::SequenceStart(anchor, tag) => {
                self.stack.push(Open::Seq {
                    line,
                    col,
                    items: Vec::new(),
                    anchor,
                    written: written(tag.as_ref(), None),
                });
            }
            Event::MappingStart(anchor, tag) => {
                self.stack.push(Open::Map {
                    line,
                    col,
                    entries: Vec::new(),
                    pending: None,
                    anchor,
                    seen: Default::default(),
                    written: written(tag.as_ref(), None),
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((node, anchor)) = self.stack.pop().map(Open::close) {
                    self.finish(node, anchor);
                }
            }
            Event::Alias(id) => self.alias(id, line, col),
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

impl Open {
    /// The finished collection, and the id of its anchor (0 for none).
    fn close(self) -> (Node, usize) {
        match self {
            Open::Seq {
                line,
                col,
                items,
                anchor,
                written,
            } => (
                Node {
                    line,
                    col,
                    kind: Kind::Seq(items),
                    written,
                },
                anchor,
            ),
            Open::Map {
                line,
                col,
                entries,
                anchor,
                written,
                ..
            } => (
                Node {
                    line,
                    col,
                    kind: Kind::Map(entries),
                    written,
                },
                anchor,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).unwrap().root.unwrap()
    }

    #[test]
    fn nodes_carry_one_based_lines_and_columns() {
        let node = root("a: 1\nb:\n  - x\n");
        let entries = node.as_map().unwrap();
        assert_eq!((node.line, node.col), (1, 1));
        assert_eq!((entries[1].0.line, entries[1].0.col), (2, 1));
        let item = &entries[1].1.as_seq().unwrap()[0];
        assert_eq!((item.line, item.col), (3, 5));
    }

    #[test]
    fn syntax_errors_report_line_and_column() {
        let err = parse("a: b: c\n").unwrap_err();
        assert_eq!((err.line, err.col), (1, 5));
        assert!(
            err.message.contains("mapping values are not allowed"),
            "{}",
            err.message
        );
        assert!(err
            .message
            .ends_with("quote a value that contains \": \", or fix the indentation of this key"));
        let tab = parse("a:\n\t- b\n").unwrap_err();
        assert!(tab.message.contains("indent with spaces"), "{}", tab.message);
    }

    #[test]
    fn duplicate_keys_are_reported_at_the_second_occurrence_naming_the_first() {
        let doc = parse("a: 1\nb: 2\na: 3\n").unwrap();
        assert_eq!(doc.duplicates.len(), 1);
        assert_eq!((doc.duplicates[0].line, doc.duplicates[0].col), (3, 1));
        assert!(doc.duplicates[0].message.contains("already defined on line 1"));
    }

    #[test]
    fn scalars_keep_their_yaml_types_in_json() {
        let json = root("i: 7\nf: 1.5\nb: true\nn: ~\ns: '7'\nt: !!str 8\nl: [x]\n").to_json();
        assert_eq!(
            json,
            serde_json::json!({"i": 7, "f": 1.5, "b": true, "n": null, "s": "7", "t": "8", "l": ["x"]})
        );
    }

    #[test]
    fn empty_and_comment_only_files_have_no_document() {
        assert!(parse("").unwrap().root.is_none());
        assert!(parse("# nothing\n").unwrap().root.is_none());
    }

    #[test]
    fn a_second_document_is_refused() {
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.message.contains("second YAML document"));
    }

    #[test]
    fn aliases_are_expanded_and_bombs_refused() {
        let node = root("a: &x [1, 2]\nb: *x\n");
        assert_eq!(node.to_json(), serde_json::json!({"a": [1, 2], "b": [1, 2]}));
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n",
                p = i - 1
            ));
        }
        assert!(parse(&bomb).unwrap_err().message.contains("aliases expand"));
    }

    #[test]
    fn deep_nesting_is_refused_instead_of_overflowing_the_stack() {
        let deep = "[".repeat(1000) + &"]".repeat(1000);
        let err = parse(&deep).unwrap_err();
        assert_eq!(err.line, 1);
        assert!(
            err.message.contains("nesting") || err.message.contains("recursion"),
            "{}",
            err.message
        );
        let unclosed = "[".repeat(100_000);
        assert!(parse(&unclosed).is_err());
    }

    #[test]
    fn many_keys_are_checked_for_duplicates_quickly() {
        let text: String = (0..50_000).map(|i| format!("k{i}: {i}\n")).collect::<String>() + "k7: again\n";
        let doc = parse(&text).unwrap();
        assert_eq!(doc.duplicates.len(), 1);
        assert_eq!(doc.duplicates[0].line, 50_001);
    }
}
