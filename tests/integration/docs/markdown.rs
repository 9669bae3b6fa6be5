//! A small reader of the docs' Markdown: fenced code blocks, ATX headings, links, explicit anchors, code
//! spans and GitHub's heading slugs. It reads what the docs use (CommonMark's fences, headings, inline and
//! reference links), not all of CommonMark: no setext headings, no indented code blocks.

use std::collections::{HashMap, HashSet};

/// What a line of a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Blank,
    Heading,
    /// An opening or closing code fence.
    Fence,
    /// A line inside a fenced code block.
    Code,
    /// Any other line: paragraphs, lists, tables, quotes, HTML.
    Text,
}

/// A fenced code block.
#[derive(Debug)]
pub struct Block {
    /// The first word of the info string (`sh`, `yaml`, ...), empty when there is none.
    pub lang: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The lines inside the fences (with the fence's own indentation removed), each with its line number.
    pub lines: Vec<(usize, String)>,
}

/// An ATX heading (`## Text`).
#[derive(Debug)]
pub struct Heading {
    pub line: usize,
    pub level: usize,
    /// The heading's inline Markdown, without the `#`s and a closing sequence.
    pub text: String,
}

/// A link destination found outside code: inline links, images, reference definitions, `href`/`src`.
#[derive(Debug)]
pub struct Link {
    pub line: usize,
    pub dest: String,
}

/// What the checks need to know of a page.
#[derive(Debug, Default)]
pub struct Doc {
    /// The kind of each line, index 0 for line 1.
    pub kinds: Vec<Kind>,
    pub lines: Vec<String>,
    pub blocks: Vec<Block>,
    pub headings: Vec<Heading>,
    pub links: Vec<Link>,
    /// `id` and `name` values of `<a ...>` tags outside code.
    pub ids: Vec<String>,
}

/// A fence being read: its character, length, indentation and block so far.
struct Open {
    ch: u8,
    len: usize,
    indent: usize,
    block: Block,
}

/// Reads a page.
pub fn parse(text: &str) -> Doc {
    let mut doc = Doc::default();
    let mut open: Option<Open> = None;
    let mut para: Vec<(usize, &str)> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        doc.lines.push(raw.to_string());
        if let Some(fence) = &mut open {
            if closes(raw, fence.ch, fence.len) {
                doc.blocks.push(open.take().expect("a fence is open").block);
                doc.kinds.push(Kind::Fence);
            } else {
                let body = strip_indent(raw, fence.indent);
                fence.block.lines.push((number, body.to_string()));
                doc.kinds.push(Kind::Code);
            }
            continue;
        }
        if let Some((ch, len, indent, lang)) = opening(raw) {
            scan_prose(&mut doc, &std::mem::take(&mut para));
            let block = Block {
                lang,
                line: number,
                lines: Vec::new(),
            };
            open = Some(Open {
                ch,
                len,
                indent,
                block,
            });
            doc.kinds.push(Kind::Fence);
        } else if raw.trim().is_empty() {
            scan_prose(&mut doc, &std::mem::take(&mut para));
            doc.kinds.push(Kind::Blank);
        } else if let Some((level, heading)) = atx(raw) {
            scan_prose(&mut doc, &std::mem::take(&mut para));
            scan_prose(&mut doc, &[(number, heading)]);
            doc.headings.push(Heading {
                line: number,
                level,
                text: heading.to_string(),
            });
            doc.kinds.push(Kind::Heading);
        } else {
            para.push((number, raw));
            doc.kinds.push(Kind::Text);
        }
    }
    scan_prose(&mut doc, &para);
    doc.links.sort_by_key(|link| link.line);
    // An unclosed fence runs to the end of the page.
    if let Some(fence) = open {
        doc.blocks.push(fence.block);
    }
    doc
}

/// `raw` without up to `indent` leading spaces.
fn strip_indent(raw: &str, indent: usize) -> &str {
    let spaces = raw.len() - raw.trim_start_matches(' ').len();
    &raw[spaces.min(indent)..]
}

/// An opening fence: its character, length, indentation and language.
fn opening(raw: &str) -> Option<(u8, usize, usize, String)> {
    let trimmed = raw.trim_start_matches(' ');
    let indent = raw.len() - trimmed.len();
    let ch = *trimmed.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let len = trimmed.bytes().take_while(|b| *b == ch).count();
    let info = trimmed[len..].trim();
    if len < 3 || (ch == b'`' && info.contains('`')) {
        return None;
    }
    let lang = info.split_whitespace().next().unwrap_or_default().to_string();
    Some((ch, len, indent, lang))
}

/// Whether `raw` closes a fence of `len` or more `ch`.
fn closes(raw: &str, ch: u8, len: usize) -> bool {
    let trimmed = raw.trim();
    trimmed.len() >= len && trimmed.bytes().all(|b| b == ch)
}

/// An ATX heading's level and text.
fn atx(raw: &str) -> Option<(usize, &str)> {
    let trimmed = raw.trim_start_matches(' ');
    if raw.len() - trimmed.len() > 3 {
        return None;
    }
    let level = trimmed.bytes().take_while(|b| *b == b'#').count();
    let rest = &trimmed[level..];
    if !(1..=6).contains(&level) || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let text = rest.trim();
    // A closing sequence of `#`s after a space is not part of the text.
    let unclosed = text.trim_end_matches('#');
    let text = if unclosed.is_empty() || unclosed.ends_with([' ', '\t']) {
        unclosed.trim_end()
    } else {
        text
    };
    Some((level, text))
}

/// A piece of inline Markdown: code span content or other text.
#[derive(Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    Code(String),
    Text(&'a str),
}

/// Splits inline Markdown into code spans (their content, as CommonMark reads it) and other text. A run
/// of backticks that no run of the same length closes is text.
pub fn segments(text: &str) -> Vec<Segment<'_>> {
    spans(text)
        .into_iter()
        .map(|(start, end, code)| match code {
            Some((from, to)) => Segment::Code(code_content(&text[from..to])),
            None => Segment::Text(&text[start..end]),
        })
        .collect()
}

/// A byte range of inline text: `(start, end, Some(content range))` for a code span (backticks included in
/// start..end), `(start, end, None)` for other text.
type Span = (usize, usize, Option<(usize, usize)>);

/// The code spans and other text of `text`, in order.
fn spans(text: &str) -> Vec<Span> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut plain) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'`' => {
                let run = i;
                while i < bytes.len() && bytes[i] == b'`' {
                    i += 1;
                }
                let Some(close) = closing_run(bytes, i, i - run) else {
                    continue;
                };
                if run > plain {
                    out.push((plain, run, None));
                }
                let end = close + (i - run);
                out.push((run, end, Some((i, close))));
                i = end;
                plain = end;
            }
            _ => i += 1,
        }
    }
    if plain < bytes.len() {
        out.push((plain, bytes.len(), None));
    }
    out
}

/// Where the next run of exactly `len` backticks at or after `from` starts.
fn closing_run(bytes: &[u8], from: usize, len: usize) -> Option<usize> {
    let mut j = from;
    while j < bytes.len() {
        if bytes[j] == b'`' {
            let start = j;
            while j < bytes.len() && bytes[j] == b'`' {
                j += 1;
            }
            if j - start == len {
                return Some(start);
            }
        } else {
            j += 1;
        }
    }
    None
}

/// A code span's content: line ends become spaces, and one space is stripped from each side when both
/// sides have one (CommonMark).
fn code_content(raw: &str) -> String {
    let content = raw.replace('\n', " ");
    let stripped = content.strip_prefix(' ').and_then(|c| c.strip_suffix(' '));
    match stripped {
        Some(inner) if !content.trim().is_empty() => inner.to_string(),
        _ => content,
    }
}

/// `text` with every code span (backticks included) blanked out by spaces; line ends and byte offsets kept.
pub fn mask_code(text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    for (start, end, code) in spans(text) {
        let piece = &text[start..end];
        if code.is_some() {
            masked.extend(piece.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
            // Keep byte offsets: a multi-byte character becomes as many spaces as it has bytes.
            let extra = piece.len() - piece.chars().count();
            masked.extend(std::iter::repeat_n(' ', extra));
        } else {
            masked.push_str(piece);
        }
    }
    masked
}

/// Adds the links and explicit anchors of a paragraph (or heading) to `doc`.
fn scan_prose(doc: &mut Doc, lines: &[(usize, &str)]) {
    let Some(&(first, _)) = lines.first() else {
        return;
    };
    let text = lines.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("\n");
    let masked = mask_code(&text);
    let line_of = |at: usize| first + masked[..at].matches('\n').count();
    for (at, _) in masked.match_indices("](") {
        if let Some(dest) = destination(&masked[at + 2..]) {
            doc.links.push(Link {
                line: line_of(at),
                dest,
            });
        }
    }
    for (offset, line) in masked.split('\n').enumerate() {
        if let Some(dest) = reference_definition(line) {
            doc.links.push(Link {
                line: first + offset,
                dest,
            });
        }
    }
    for attr in ["href=", "src="] {
        for (at, _) in masked.match_indices(attr) {
            let after_space = masked[..at].ends_with([' ', '\n', '\t']);
            if let Some(value) = after_space.then(|| quoted(&masked[at + attr.len()..])).flatten() {
                doc.links.push(Link {
                    line: line_of(at),
                    dest: value,
                });
            }
        }
    }
    for (at, _) in masked.match_indices("<a ") {
        let tag = &masked[at..masked[at..].find('>').map_or(masked.len(), |end| at + end)];
        for attr in [" id=", " name="] {
            if let Some(value) = tag.find(attr).and_then(|i| quoted(&tag[i + attr.len()..])) {
                doc.ids.push(value);
            }
        }
    }
}

/// The destination at the start of `rest` (what follows `](`): `<...>`, or up to whitespace or the
/// unbalanced `)`.
fn destination(rest: &str) -> Option<String> {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('<') {
        return inner.find('>').map(|end| inner[..end].to_string());
    }
    let mut depth = 0usize;
    let mut end = rest.len();
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                end = i;
                break;
            }
            ')' => depth -= 1,
            c if c.is_whitespace() => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let dest = &rest[..end];
    (!dest.is_empty()).then(|| dest.to_string())
}

/// The destination of a reference definition `[label]: dest` (not of a footnote `[^1]: ...`).
fn reference_definition(line: &str) -> Option<String> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 || trimmed.starts_with("[^") {
        return None;
    }
    let label_end = trimmed.strip_prefix('[')?.find("]:")? + 1;
    let dest = trimmed[label_end + 2..].split_whitespace().next()?;
    Some(dest.trim_start_matches('<').trim_end_matches('>').to_string())
}

/// The value of a quoted (or bare) HTML attribute at the start of `rest`.
fn quoted(rest: &str) -> Option<String> {
    let (quote, inner) = match rest.chars().next()? {
        q @ ('"' | '\'') => (q, &rest[1..]),
        _ => {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '>')
                .unwrap_or(rest.len());
            return Some(rest[..end].to_string()).filter(|v| !v.is_empty());
        }
    };
    inner.find(quote).map(|end| inner[..end].to_string())
}

/// The text a heading shows: code spans' content, link texts, no HTML tags or link destinations.
pub fn plain_text(heading: &str) -> String {
    let mut out = String::new();
    for segment in segments(heading) {
        match segment {
            Segment::Code(code) => out.push_str(&code),
            Segment::Text(text) => out.push_str(&strip_tags(&strip_destinations(text))),
        }
    }
    out
}

/// `text` with the `(dest)` of every `[text](dest)` removed.
pub fn strip_destinations(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..at + 1]);
        let after = &rest[at + 2..];
        let mut depth = 0usize;
        let mut close = None;
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    close = Some(i);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        rest = close.map_or(after, |i| &after[i + 1..]);
    }
    out.push_str(rest);
    out
}

/// `text` without HTML tags (`<a id="x">`, `</a>`, `<br/>`).
fn strip_tags(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let tag = &rest[at + 1..];
        let is_tag = tag.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/');
        match tag.find('>').filter(|_| is_tag) {
            Some(end) => rest = &tag[end + 1..],
            None => {
                out.push('<');
                rest = tag;
            }
        }
    }
    out.push_str(rest);
    out
}

/// GitHub's slug of a heading, before duplicates are numbered: the slug the reference pages' links use
/// (lowercase, every character other than a letter, digit, `-`, `_` or space dropped, spaces turned into
/// `-`), of the heading's plain text.
pub fn slug(heading: &str) -> String {
    kok::cli::reference::slug(plain_text(heading).trim())
}

/// Numbers repeated slugs as GitHub does (`a`, `a-1`, `a-2`).
#[derive(Default)]
pub struct Slugger {
    seen: HashMap<String, usize>,
}

impl Slugger {
    /// The anchor of the next heading with this `slug`.
    pub fn next(&mut self, slug: String) -> String {
        let mut result = slug.clone();
        while self.seen.contains_key(&result) {
            let count = self.seen.entry(slug.clone()).or_insert(0);
            *count += 1;
            result = format!("{slug}-{count}");
        }
        self.seen.insert(result.clone(), 0);
        result
    }
}

/// Every anchor a page has: its headings' slugs and its explicit `<a id>`/`<a name>`.
pub fn anchors(doc: &Doc) -> HashSet<String> {
    let mut slugger = Slugger::default();
    let mut anchors: HashSet<String> = doc.headings.iter().map(|h| slugger.next(slug(&h.text))).collect();
    anchors.extend(doc.ids.iter().cloned());
    anchors
}
