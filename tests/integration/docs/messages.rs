//! The messages of docs/troubleshooting.md (convention 6): a `###` heading made of one code span, split at
//! its `<placeholders>` into the literal pieces that kok's code must hold as written.

use std::path::Path;

use super::markdown::{segments, Segment};

/// Pieces shorter than this (trimmed) are not looked for: `: `, `, ` and the like are everywhere.
pub const MIN_PIECE: usize = 3;

/// The message of a heading that is exactly one code span.
pub fn message(heading: &str) -> Option<String> {
    match segments(heading.trim()).as_slice() {
        [Segment::Code(code)] => Some(code.clone()),
        _ => None,
    }
}

/// The literal pieces of `message` between its `<placeholder>`s, trimmed, of [`MIN_PIECE`] or more
/// characters.
pub fn pieces(message: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = message;
    loop {
        let placeholder = rest.find('<').and_then(|open| {
            let close = open + rest[open..].find('>')?;
            let inner = &rest[open + 1..close];
            (!inner.is_empty() && !inner.contains('<')).then_some((open, close))
        });
        let (literal, next) = match placeholder {
            Some((open, close)) => (&rest[..open], Some(&rest[close + 1..])),
            None => (rest, None),
        };
        let literal = literal.trim();
        if literal.chars().count() >= MIN_PIECE {
            out.push(literal.to_string());
        }
        match next {
            Some(next) => rest = next,
            None => return out,
        }
    }
}

/// Every Rust file under the given directories, comment lines (`//`, `///`, `//!`) left out, with string continuations
/// (`\` at a line's end, then the next line's indentation) joined as the compiler joins them.
pub fn source_text(srcs: &[&Path]) -> String {
    let mut files = Vec::new();
    for src in srcs {
        collect_rust_files(src, &mut files);
    }
    files.sort();
    let mut text = String::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for line in source.lines().filter(|l| !l.trim_start().starts_with("//")) {
            text.push_str(line);
            text.push('\n');
        }
    }
    join_continuations(&text)
}

fn collect_rust_files(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// `text` with each `\` + line end + leading blanks removed.
pub fn join_continuations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\\\n") {
        out.push_str(&rest[..at]);
        rest = rest[at + 2..].trim_start();
    }
    out.push_str(rest);
    out
}

/// Whether `source` holds `piece` as written, or as a Rust string literal or format string writes it
/// (`\"`, `\\`, `{{`).
pub fn found(source: &str, piece: &str) -> bool {
    let literal = piece.replace('\\', "\\\\").replace('"', "\\\"");
    let format = literal.replace('{', "{{").replace('}', "}}");
    [piece, &literal, &format].iter().any(|p| source.contains(*p))
}
