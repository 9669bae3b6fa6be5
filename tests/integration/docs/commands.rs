//! The runnable lines of the docs' ```sh blocks (convention 4): which lines a test runs, where, and which
//! exit codes it expects; which it skips, and why.

use super::markdown::Block;

/// The commands a test runs: the offline ones.
const RUNNABLE: [&str; 4] = ["kok validate", "kok render", "kok plan", "kubectl kustomize"];
/// How the docs also spell `kok`.
const CARGO_RUN: [&str; 3] = ["cargo run -q -- ", "cargo run --quiet -- ", "cargo run -- "];
/// All-capitals words that are git's names, not placeholders.
const GIT_REFS: [&str; 4] = ["HEAD", "FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD"];

/// Where a line runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The project's root: the line mentions `examples/` or `deploy`.
    Project,
    /// "Your repository": the example repository with an `origin` one commit behind.
    Repository,
}

/// A line of a ```sh block that the test runs, or skips.
#[derive(Debug, PartialEq, Eq)]
pub struct Line {
    /// 1-based line where the command starts.
    pub line: usize,
    /// The command, `cargo run -q --` written as `kok`, without its comment.
    pub text: String,
    /// What happens to it.
    pub fate: Fate,
}

/// What the test does with a runnable line.
#[derive(Debug, PartialEq, Eq)]
pub enum Fate {
    /// Run it there and expect one of these exit codes.
    Run(Place, Vec<i32>),
    /// Show it as skipped, for this reason.
    Skip(String),
}

/// The lines of `block` that start with a runnable command; every other line is left alone.
pub fn runnable(block: &Block) -> Vec<Line> {
    logical_lines(&block.lines)
        .into_iter()
        .filter_map(|(line, raw)| {
            let (code, comment) = split_comment(&raw);
            let text = normalize(code.trim());
            let words: Vec<&str> = text.split_whitespace().collect();
            let is_runnable = RUNNABLE
                .iter()
                .any(|r| words.len() >= 2 && *r == format!("{} {}", words[0], words[1]));
            is_runnable.then(|| {
                let fate = fate(&text, comment.unwrap_or_default());
                Line { line, text, fate }
            })
        })
        .collect()
}

/// What to do with the runnable `text` whose comment is `comment`.
fn fate(text: &str, comment: &str) -> Fate {
    if let Some(why) = placeholder(text) {
        return Fate::Skip(format!("it holds a placeholder ({why})"));
    }
    if let Some(url) = remote_url(text) {
        return Fate::Skip(format!(
            "it names {url}, and the test contacts nothing but loopback"
        ));
    }
    let place = if text.contains("examples/") || text.contains("deploy") {
        Place::Project
    } else {
        Place::Repository
    };
    let declared = comment
        .trim()
        .strip_prefix("exits ")
        .and_then(|code| code.split_whitespace().next()?.parse().ok());
    let codes = match declared {
        Some(code) => vec![code],
        None if text.contains("--detailed-exitcode") => vec![0, 2],
        None => vec![0],
    };
    Fate::Run(place, codes)
}

/// The lines of a block with `\` continuations joined, each with the number of its first line.
pub fn logical_lines(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut continued = false;
    for (number, raw) in lines {
        let (body, continues) = match raw.trim_end().strip_suffix('\\') {
            Some(body) => (body.trim_end(), true),
            None => (raw.as_str(), false),
        };
        match out.last_mut() {
            Some((_, joined)) if continued => {
                joined.push(' ');
                joined.push_str(body.trim());
            }
            _ => out.push((*number, body.to_string())),
        }
        continued = continues;
    }
    out
}

/// A shell line's code and its trailing `# comment` (a `#` at the start or after a blank, outside quotes).
pub fn split_comment(line: &str) -> (&str, Option<&str>) {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            _ if escaped => escaped = false,
            (Some('\''), '\'') => quote = None,
            (Some('\''), _) => {}
            (_, '\\') => escaped = true,
            (Some('"'), '"') => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if previous.is_whitespace() => return (&line[..i], Some(&line[i + 1..])),
            (None, _) => {}
        }
        previous = c;
    }
    (line, None)
}

/// `cargo run -q -- X` written as `kok X`.
pub fn normalize(text: &str) -> String {
    CARGO_RUN
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix))
        .map_or_else(|| text.to_string(), |rest| format!("kok {rest}"))
}

/// Why `text` holds a placeholder: `<...>`, `...`, or an all-capitals word used as a value of the command
/// (`DIR`, `clusters/CLUSTER`, `--from=REV`); shell variables (`$TOKEN`) and git's `HEAD` are no placeholders.
pub fn placeholder(text: &str) -> Option<String> {
    if let Some(open) = text.find('<') {
        if let Some(close) = text[open..].find('>').filter(|close| *close > 1) {
            return Some(text[open..open + close + 1].to_string());
        }
    }
    if text.contains("...") {
        return Some("...".to_string());
    }
    // Only the command's own arguments: what a pipe or a redirection feeds is no placeholder.
    let command = text.split(['|', ';', '&', '>']).next().unwrap_or_default();
    let values = command
        .split_whitespace()
        .skip(1)
        .filter_map(|word| match word.strip_prefix('-') {
            Some(flag) => flag.split_once('=').map(|(_, value)| value),
            None => Some(word),
        });
    values.flat_map(words_of).find(|word| {
        word.starts_with(|c: char| c.is_ascii_uppercase())
            && word
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && !GIT_REFS.contains(&word.as_str())
    })
}

/// The words of a shell value, with `$NAME` and `${NAME}` left out.
fn words_of(value: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut variable = false;
    for c in value.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !variable && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        word.clear();
        variable = c == '$' || (variable && c == '{');
    }
    if !variable && !word.is_empty() {
        words.push(word);
    }
    words
}

/// A URL in `text` that is not on this machine (`file://` and loopback are).
fn remote_url(text: &str) -> Option<&str> {
    text.split_whitespace()
        .flat_map(|word| word.split('='))
        .map(|word| word.trim_matches(|c| c == '"' || c == '\''))
        .find(|word| {
            let remote = ["http://", "https://", "ssh://", "git://", "git@"]
                .iter()
                .any(|scheme| word.starts_with(scheme));
            let local = ["localhost", "127.0.0.1", "[::1]"]
                .iter()
                .any(|host| word.contains(&format!("://{host}")));
            remote && !local
        })
}
