//! `response.md`: the fold over a `response.json`'s brazen events (CONTRACT §8.3).
//!
//! [`Fold`] is the renderer's whole state between two lines. [`Fold::feed_line`] takes
//! one complete line and appends its rendering, so the rendering of a prefix of complete
//! lines is a prefix of the rendering of any longer one. [`Rendering`] drives the fold
//! over a file: it renders each complete line once and holds the output whole while it
//! is short; past that it keeps a [`Checkpoint`] (raw offset, rendered offset, fold)
//! every `interval` rendered bytes and the bytes since the last one, and serves a read by
//! rendering again from the checkpoint at or before it, or from the [`Cursor`] where the
//! previous read stopped.
//!
//! The events are read as litany reads them (`serde_json::from_slice::<brazen::Event>`)
//! and folded as litany's staging writer folds them: one block at a time, whatever its
//! `index`, a delta counting only for the block kind it belongs to, a tool's input the
//! join of its `json_delta`s (empty meaning `{}`). So a text block shows exactly the text
//! litany commits for it. The one shape litany cannot tell apart, and neither can this
//! fold: lines after an attempt's `end` start the next attempt.
//!
//! Text deltas are nearly every line of a long answer, so a line of the exact shape brazen
//! writes for them is matched without building an event ([`fast_delta`]); anything else
//! takes serde's path, which accepts and refuses the same lines. A run of them into the
//! text block being shown only appends their strings, so it is scanned a buffer at a time
//! ([`text_run`]); and since that depends on the bytes alone, a long file's later parts
//! are rendered ahead on threads of their own while the fold reaches them
//! ([`Rendering::render_parts`]).

use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;

use serde::Deserialize;
use serde_json::Value;

use super::format::{self, Prose, Usage};
use crate::paging::CaptureKey;
use crate::paging::scan::simple_escape;

/// Depth of a block header in `response.md`: one below its attempt.
const BLOCK: usize = 2;

/// The event kinds litany reads (brazen's `Event`, v=1). Unknown types are accepted and
/// ignored, as brazen's `#[serde(other)]` does; a known type with a wrong shape fails.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        v: u8,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        model: Option<String>,
        #[serde(rename = "role")]
        _role: Role,
    },
    ContentStart {
        #[serde(rename = "index")]
        _index: u32,
        kind: Value,
    },
    ContentDelta {
        #[serde(rename = "index")]
        _index: u32,
        delta: Value,
    },
    ContentStop {
        #[serde(rename = "index")]
        _index: u32,
    },
    Usage(UsageEvent),
    Finish {
        reason: String,
        #[serde(default)]
        category: Option<String>,
        #[serde(default)]
        explanation: Option<String>,
    },
    Error {
        kind: Value,
        message: String,
        #[serde(default, rename = "provider_detail")]
        _provider_detail: Option<Value>,
        #[serde(default)]
        retry_after_seconds: Option<u32>,
    },
    End,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// brazen's `Usage`: every counter optional, unknown fields ignored.
#[derive(Deserialize)]
struct UsageEvent {
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
    cache_read_tokens: Option<u32>,
    cache_write_tokens: Option<u32>,
    input_total_tokens: Option<u32>,
    #[serde(default)]
    thinking_tokens: Option<u32>,
    #[serde(default)]
    context_window: Option<u32>,
}

impl UsageEvent {
    fn counters(&self) -> [(&'static str, Option<u32>); 7] {
        [
            ("input_tokens", self.input_tokens),
            ("output_tokens", self.output_tokens),
            ("cache_read_tokens", self.cache_read_tokens),
            ("cache_write_tokens", self.cache_write_tokens),
            ("input_total_tokens", self.input_total_tokens),
            ("thinking_tokens", self.thinking_tokens),
            ("context_window", self.context_window),
        ]
    }
}

/// A delta's tag, as brazen dispatches it (the first key of a one-entry object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaTag {
    Text,
    Json,
    Thinking,
    Image,
    /// Signatures, encrypted reasoning and unknown tags: nothing to show.
    Opaque,
}

impl DeltaTag {
    fn of(tag: &str) -> DeltaTag {
        match tag {
            "text_delta" => DeltaTag::Text,
            "json_delta" => DeltaTag::Json,
            "thinking_delta" => DeltaTag::Thinking,
            "image_delta" => DeltaTag::Image,
            _ => DeltaTag::Opaque,
        }
    }

    fn label(self) -> &'static str {
        match self {
            DeltaTag::Text => "text_delta",
            DeltaTag::Json => "json_delta",
            DeltaTag::Thinking => "thinking_delta",
            DeltaTag::Image => "image_delta",
            DeltaTag::Opaque => "delta",
        }
    }
}

/// The first key of a JSON object: how brazen reads an externally tagged value.
fn tag_of(v: &Value) -> Option<&str> {
    v.as_object()?.keys().next().map(String::as_str)
}

/// A string field of `v`, empty when absent (brazen's `str_at`).
fn str_at<'v>(v: &'v Value, key: &str) -> &'v str {
    v[key].as_str().unwrap_or_default()
}

/// What brazen writes for a text, JSON or thinking delta, up to the index digits.
const DELTA_HEAD: &[u8; 32] = br#"{"type":"content_delta","index":"#;
/// Between the index and the delta's tag.
const DELTA_MID: &[u8; 11] = br#","delta":{""#;
/// After the delta's string.
const DELTA_TAIL: &[u8; 3] = br#""}}"#;

/// `line[at..at + N] == *want`, compared as one fixed-size array.
fn has<const N: usize>(line: &[u8], at: usize, want: &[u8; N]) -> bool {
    line.get(at..at + N)
        .and_then(|s| <&[u8; N]>::try_from(s).ok())
        .is_some_and(|s| s == want)
}

/// Where a delta's string starts in a line of the compact shape brazen writes,
/// `{"type":"content_delta","index":N,"delta":{"<tag>_delta":"…`, and its tag; `None` for
/// any other line. The rest of the line is the string, then [`DELTA_TAIL`].
fn delta_head(line: &[u8]) -> Option<(DeltaTag, usize)> {
    if !has(line, 0, DELTA_HEAD) {
        return None;
    }
    // The index: what serde_json reads as a u32 (no leading zero, at most u32::MAX).
    let rest = &line[DELTA_HEAD.len()..];
    let digits = rest
        .iter()
        .take(11)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > 10 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    let index = rest[..digits]
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    if index > u64::from(u32::MAX) || !has(rest, digits, DELTA_MID) {
        return None;
    }
    let at = DELTA_HEAD.len() + digits + DELTA_MID.len();
    let (tag, skip) = if has(line, at, b"text_delta\":\"") {
        (DeltaTag::Text, 13)
    } else if has(line, at, b"json_delta\":\"") {
        (DeltaTag::Json, 13)
    } else if has(line, at, b"thinking_delta\":\"") {
        (DeltaTag::Thinking, 17)
    } else {
        return None;
    };
    Some((tag, at + skip))
}

/// The delta a line carries, when the line has exactly the compact shape brazen writes:
/// `{"type":"content_delta","index":N,"delta":{"<tag>_delta":"…"}}`. `None` sends the
/// line to serde, which then decides (so a line this declines is never lost).
fn fast_delta(line: &[u8]) -> Option<(DeltaTag, Body<'_>)> {
    let (tag, start) = delta_head(line)?;
    let end = line.len().checked_sub(DELTA_TAIL.len())?;
    if end < start || !has(line, end, DELTA_TAIL) {
        return None;
    }
    let body = &line[start..end];
    // One pass: plain ASCII is the string itself.
    let (mut special, mut wide) = (false, false);
    for b in body {
        special |= *b < 0x20 || *b == b'"' || *b == b'\\';
        wide |= *b >= 0x80;
    }
    if wide {
        std::str::from_utf8(body).ok()?;
    }
    Some((
        tag,
        if special {
            Body::Escaped(body)
        } else {
            Body::Plain(body)
        },
    ))
}

/// A delta's string as it stands in the line: UTF-8, with or without escapes.
#[derive(Debug, Clone, Copy)]
enum Body<'l> {
    /// The bytes are the text.
    Plain(&'l [u8]),
    /// To be decoded by [`unescape`], which may still refuse it.
    Escaped(&'l [u8]),
}

/// The contents of a JSON string (without its quotes) decoded as serde_json decodes
/// them into a `String`; `None` for anything serde_json refuses (a control byte, a bare
/// quote, an unknown escape, a lone surrogate), which then goes to serde for its message.
fn unescape(body: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let mark = out.len();
    let decoded = std::str::from_utf8(body).ok().and_then(|_| {
        let mut at = 0;
        while at < body.len() {
            match body[at] {
                b'\\' => at += escape(body, at, out)?,
                b'"' => return None,
                c if c < 0x20 => return None,
                c => {
                    out.push(c);
                    at += 1;
                }
            }
        }
        Some(())
    });
    if decoded.is_none() {
        out.truncate(mark);
    }
    decoded
}

/// Decodes the escape at `bytes[at]` (a backslash) as serde_json does, appending the
/// character to `out`; returns the escape's length, `None` where serde_json refuses it.
fn escape(bytes: &[u8], at: usize, out: &mut Vec<u8>) -> Option<usize> {
    let letter = *bytes.get(at + 1)?;
    let simple = match letter {
        b'u' => {
            let hex = |from: usize| -> Option<u32> {
                let digits = bytes.get(from..from + 4)?;
                digits
                    .iter()
                    .try_fold(0u32, |n, d| Some(n * 16 + char::from(*d).to_digit(16)?))
            };
            let high = hex(at + 2)?;
            let (code, len) = match high {
                0xD800..=0xDBFF => {
                    if bytes.get(at + 6..at + 8)? != b"\\u" {
                        return None;
                    }
                    let low = hex(at + 8)?;
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return None;
                    }
                    (0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00), 12)
                }
                0xDC00..=0xDFFF => return None,
                n => (n, 6),
            };
            let mut buf = [0; 4];
            out.extend_from_slice(char::from_u32(code)?.encode_utf8(&mut buf).as_bytes());
            return Some(len);
        }
        letter => simple_escape(letter)?,
    };
    out.push(simple);
    Some(2)
}

/// A UTF-8 continuation byte: never the first byte of a character.
fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Bytes that end a run of a JSON string's literal bytes: a quote, a backslash, a control.
const STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Decodes the string of a compact delta line starting at `line[start]` up to the line's
/// [`DELTA_TAIL`] and newline, appending it to `out` (UTF-8 unchecked: [`Fold::text_run`]
/// checks the run). Returns the line's length with its newline, `None` for a line of any
/// other shape or an escape serde_json refuses (`out` then holds a part of the string).
fn string_line(line: &[u8], start: usize, out: &mut Vec<u8>) -> Option<usize> {
    let (mut at, mut from) = (start, start);
    loop {
        while !STRING_STOP[usize::from(*line.get(at)?)] {
            at += 1;
        }
        out.extend_from_slice(&line[from..at]);
        match line[at] {
            b'\\' => at += escape(line, at, out)?,
            b'"' => {
                let tail = line.get(at..at + DELTA_TAIL.len() + 1)?;
                return (tail == b"\"}}\n").then_some(at + tail.len());
            }
            _ => return None,
        }
        from = at;
    }
}

/// What [`text_run`] consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// `bytes` of `lines` lines, rendered.
    Text { bytes: usize, lines: u64 },
    /// `bytes` of text delta lines, one of which is not valid UTF-8 (nothing appended).
    BadUtf8 { bytes: usize },
}

/// Renders the run of compact text deltas at the start of `lines` into `out`, as they
/// render into a text block being shown: the string of each, stopping before the first
/// other line or once `out` reaches `stop`. One pass per line finds both its end and its
/// string; UTF-8 is checked once for the whole run, with every string starting on a
/// character boundary, so each string is valid on its own exactly when the run is. It
/// depends on nothing but the bytes, which is what lets [`Rendering`] render a later part
/// of a file ahead of the part before it.
fn text_run(lines: &[u8], out: &mut Vec<u8>, stop: usize) -> Run {
    let mark = out.len();
    let (mut at, mut count, mut starts_ok) = (0, 0u64, true);
    while at < lines.len() && out.len() < stop {
        let line = &lines[at..];
        let Some((DeltaTag::Text, start)) = delta_head(line) else {
            break;
        };
        let line_mark = out.len();
        let Some(len) = string_line(line, start, out) else {
            out.truncate(line_mark);
            break;
        };
        starts_ok &= line.get(start).is_none_or(|b| !is_continuation(*b));
        at += len;
        count += 1;
    }
    if starts_ok && std::str::from_utf8(&out[mark..]).is_ok() {
        Run::Text {
            bytes: at,
            lines: count,
        }
    } else {
        out.truncate(mark);
        Run::BadUtf8 { bytes: at }
    }
}

/// Whether `line` is read by the fast path (for tests that hold the two paths equal).
#[cfg(test)]
pub(super) fn takes_fast_path(line: &[u8]) -> bool {
    match fast_delta(line) {
        Some((_, Body::Escaped(text))) => unescape(text, &mut Vec::new()).is_some(),
        found => found.is_some(),
    }
}

/// The block being streamed (litany keeps exactly one).
#[derive(Debug, Clone)]
enum Block {
    /// Text or thinking, streamed as it comes. `shown` is false once a note has cut into
    /// the block; its next delta opens it again under a `(continued)` header.
    Prose { kind: Prose, shown: bool },
    /// A tool call: shown whole when it stops, from its joined input.
    Call { name: String, json: Vec<u8> },
    /// An image: only its size is shown.
    Image { base64: u64 },
    /// Named at its start; nothing streams into it.
    Opaque,
}

impl Block {
    fn heap_bytes(&self) -> usize {
        match self {
            Block::Call { name, json } => name.capacity() + json.capacity(),
            _ => 0,
        }
    }
}

/// One attempt's state (one `bz` run, one segment of `response.json`).
#[derive(Debug, Clone, Default)]
struct Attempt {
    block: Option<Block>,
    usage: Usage,
    finish: Option<String>,
    failed: bool,
}

/// The renderer's state between two lines.
#[derive(Debug, Clone, Default)]
pub(super) struct Fold {
    /// Lines consumed (the next line is number `line + 1`).
    line: u64,
    /// Attempts opened so far.
    attempts: u32,
    open: Option<Attempt>,
}

impl Fold {
    /// Heap bytes this state holds (for the cache's accounting).
    pub(super) fn heap_bytes(&self) -> usize {
        self.open.as_ref().map_or(0, |a| {
            a.block.as_ref().map_or(0, Block::heap_bytes)
                + a.usage
                    .iter()
                    .map(|(n, _)| n.capacity() + 16)
                    .sum::<usize>()
                + a.finish.as_ref().map_or(0, String::capacity)
        })
    }

    /// Folds one complete line (without its `\n`) and appends its rendering to `out`.
    pub(super) fn feed_line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        self.line += 1;
        if line.is_empty() {
            return;
        }
        if let Some((tag, body)) = fast_delta(line) {
            // The common case first: more text for the text block being shown, written
            // straight to the page.
            if let Some(Attempt {
                block: Some(Block::Prose { kind, shown: true }),
                ..
            }) = &self.open
                && *kind == Prose::Text
                && tag == DeltaTag::Text
            {
                match body {
                    Body::Plain(text) => out.extend_from_slice(text),
                    Body::Escaped(text) => {
                        if unescape(text, out).is_none() {
                            self.slow_line(line, out);
                        }
                    }
                }
                return;
            }
            let mut text = Vec::new();
            let text = match body {
                Body::Plain(text) => text,
                Body::Escaped(escaped) => {
                    if unescape(escaped, &mut text).is_none() {
                        self.slow_line(line, out);
                        return;
                    }
                    &text
                }
            };
            self.delta(tag, text, out);
            return;
        }
        self.slow_line(line, out);
    }

    /// Folds the complete lines at the start of `lines` (each ending in `\n`) until they
    /// run out or `out` reaches `stop` bytes, and returns the bytes consumed (at least one
    /// line when there is one). What it appends is what [`Fold::feed_line`] would, line
    /// by line; runs of text deltas into the text block being shown take [`Fold::text_run`].
    pub(super) fn feed_lines(&mut self, lines: &[u8], out: &mut Vec<u8>, stop: usize) -> usize {
        let mut at = 0;
        while at < lines.len() {
            if self.showing_text() {
                at += self.text_run(&lines[at..], out, stop);
            }
            // Past `stop` only once something was consumed: the caller always gets a line.
            if at == lines.len() || (at > 0 && out.len() >= stop) {
                break;
            }
            let end = memchr::memchr(b'\n', &lines[at..]).map_or(lines.len(), |i| at + i);
            self.feed_line(&lines[at..end], out);
            at = end + 1;
            if out.len() >= stop {
                break;
            }
        }
        at.min(lines.len())
    }

    /// Whether a text delta now only appends its text: a text block is open and shown.
    fn showing_text(&self) -> bool {
        matches!(
            &self.open,
            Some(Attempt {
                block: Some(Block::Prose {
                    kind: Prose::Text,
                    shown: true
                }),
                ..
            })
        )
    }

    /// The run of compact text deltas at the start of `lines` (see [`text_run`]), for the
    /// text block being shown: a run that fails the UTF-8 check is folded again line by
    /// line, which sends the bad line to serde. Returns the bytes consumed.
    fn text_run(&mut self, lines: &[u8], out: &mut Vec<u8>, stop: usize) -> usize {
        match text_run(lines, out, stop) {
            Run::Text { bytes, lines } => {
                self.line += lines;
                bytes
            }
            Run::BadUtf8 { bytes } => {
                let mut from = 0;
                while from < bytes {
                    let end =
                        memchr::memchr(b'\n', &lines[from..bytes]).map_or(bytes, |i| from + i);
                    self.feed_line(&lines[from..end], out);
                    from = end + 1;
                }
                bytes
            }
        }
    }

    /// A line read as litany reads it, by serde.
    fn slow_line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        match serde_json::from_slice::<Event>(line) {
            Ok(event) => self.event(event, out),
            Err(e) => {
                self.interrupt(out);
                format::unparsed(out, BLOCK, self.line, &e.to_string(), line);
            }
        }
    }

    /// What the rendering ends with once nothing more will be appended: `partial` (bytes
    /// after the last newline, if any) as a last line, then a half stream if the last
    /// attempt neither ended nor failed.
    pub(super) fn close(mut self, partial: &[u8], out: &mut Vec<u8>) {
        if !partial.is_empty() {
            self.feed_line(partial, out);
        }
        if self.open.as_ref().is_some_and(|a| !a.failed) {
            self.end_block(out);
            format::half_stream(out, BLOCK, self.attempts);
        }
    }

    /// The open attempt, opened (with a bare header) if there is none.
    fn attempt(&mut self, out: &mut Vec<u8>) -> &mut Attempt {
        if self.open.is_none() {
            self.attempts += 1;
            format::attempt(out, self.attempts, None, None, 1);
        }
        self.open.get_or_insert_with(Attempt::default)
    }

    fn event(&mut self, event: Event, out: &mut Vec<u8>) {
        match event {
            Event::MessageStart { v, id, model, .. } => {
                if let Some(open) = &self.open
                    && !open.failed
                {
                    self.end_block(out);
                    format::half_stream(out, BLOCK, self.attempts);
                }
                self.attempts += 1;
                format::attempt(out, self.attempts, id.as_deref(), model.as_deref(), v);
                self.open = Some(Attempt::default());
            }
            Event::ContentStart { kind, .. } => {
                self.attempt(out);
                self.end_block(out);
                let block = self.start_block(&kind, out);
                self.attempt(out).block = Some(block);
            }
            Event::ContentDelta { delta, .. } => {
                self.attempt(out);
                let Some(tag) = tag_of(&delta) else { return };
                let tagged = DeltaTag::of(tag);
                let text = str_at(&delta, tag).as_bytes().to_vec();
                self.delta(tagged, &text, out);
            }
            Event::ContentStop { .. } => {
                self.attempt(out);
                self.end_block(out);
            }
            Event::Usage(usage) => {
                let attempt = self.attempt(out);
                for (name, value) in usage.counters() {
                    if let Some(value) = value {
                        format::fold_usage(&mut attempt.usage, name, Value::from(value));
                    }
                }
            }
            Event::Finish {
                reason,
                category,
                explanation,
            } => {
                let shown = match (reason.as_str(), category) {
                    ("refusal", Some(category)) => match explanation {
                        Some(why) => format!("refusal ({category}: {why})"),
                        None => format!("refusal ({category})"),
                    },
                    _ => reason,
                };
                self.attempt(out).finish = Some(shown);
            }
            Event::Error {
                kind,
                message,
                retry_after_seconds,
                ..
            } => {
                self.attempt(out);
                self.end_block(out);
                format::error(
                    out,
                    BLOCK,
                    &error_kind(&kind),
                    &message,
                    retry_after_seconds,
                );
                self.attempt(out).failed = true;
            }
            Event::End => {
                self.attempt(out);
                self.end_block(out);
                if let Some(attempt) = self.open.take()
                    && !attempt.failed
                {
                    format::finish(out, BLOCK, attempt.finish.as_deref(), &attempt.usage);
                }
            }
            Event::Other => {}
        }
    }

    /// Opens a block for a `content_start` kind, writing its header.
    fn start_block(&self, kind: &Value, out: &mut Vec<u8>) -> Block {
        let tag = tag_of(kind).unwrap_or_default();
        let body = &kind[tag];
        match tag {
            "text" | "thinking" => {
                let kind = if tag == "text" {
                    Prose::Text
                } else {
                    Prose::Thinking
                };
                format::prose(out, BLOCK, kind, false);
                Block::Prose { kind, shown: true }
            }
            "tool_use" | "server_tool_use" => {
                let name = str_at(body, "name");
                format::call(out, BLOCK, tag, name, str_at(body, "id"));
                Block::Call {
                    name: name.to_string(),
                    json: Vec::new(),
                }
            }
            "image" => {
                format::named(out, BLOCK, &format!("image {}", str_at(body, "media_type")));
                Block::Image { base64: 0 }
            }
            "redacted_thinking" => {
                let bytes = str_at(body, "data").len();
                format::named(out, BLOCK, &format!("redacted_thinking ({bytes} bytes)"));
                Block::Opaque
            }
            t if t.ends_with("_tool_result") && t != "tool_result" => {
                format::named(
                    out,
                    BLOCK,
                    &format!("{t} ({})", format::inline(str_at(body, "tool_use_id"))),
                );
                format::fenced(out, "json", &format::pretty(&body["content"]));
                Block::Opaque
            }
            _ => {
                let label = if tag.is_empty() {
                    kind.to_string()
                } else {
                    tag.to_string()
                };
                format::named(out, BLOCK, &format!("content {label}"));
                Block::Opaque
            }
        }
    }

    /// A delta's text (UTF-8) for the open block.
    fn delta(&mut self, tag: DeltaTag, text: &[u8], out: &mut Vec<u8>) {
        let line = self.line;
        let attempt = self.attempt(out);
        match (&mut attempt.block, tag) {
            (Some(Block::Prose { kind, shown }), DeltaTag::Text | DeltaTag::Thinking)
                if (*kind == Prose::Text) == (tag == DeltaTag::Text) =>
            {
                if !*shown {
                    format::prose(out, BLOCK, *kind, true);
                    *shown = true;
                }
                out.extend_from_slice(text);
            }
            (Some(Block::Call { json, .. }), DeltaTag::Json) => json.extend_from_slice(text),
            (Some(Block::Image { base64 }), DeltaTag::Image) => *base64 += text.len() as u64,
            (Some(Block::Opaque), _) | (_, DeltaTag::Opaque | DeltaTag::Image) => {}
            (_, DeltaTag::Text | DeltaTag::Json | DeltaTag::Thinking) => {
                self.interrupt(out);
                format::ignored(out, BLOCK, line, tag.label());
            }
        }
    }

    /// Before a note: a prose block in the middle of its text is closed on the page (it
    /// stays open in the fold).
    fn interrupt(&mut self, out: &mut Vec<u8>) {
        if let Some(Attempt {
            block: Some(Block::Prose { shown, .. }),
            ..
        }) = &mut self.open
            && *shown
        {
            out.extend_from_slice(format::BODY_END);
            *shown = false;
        }
    }

    /// Ends the open block, if any: a prose block's text is closed, a tool call shown.
    fn end_block(&mut self, out: &mut Vec<u8>) {
        let Some(block) = self.open.as_mut().and_then(|a| a.block.take()) else {
            return;
        };
        match block {
            Block::Prose { shown, .. } => {
                if shown {
                    out.extend_from_slice(format::BODY_END);
                }
            }
            Block::Call { name, json, .. } => {
                let input = if json.is_empty() {
                    Ok(Value::Object(Default::default()))
                } else {
                    serde_json::from_slice::<Value>(&json)
                };
                match input {
                    Ok(input) => format::call_input(out, &name, &input),
                    Err(e) => {
                        format::bad_input(
                            out,
                            BLOCK,
                            &e.to_string(),
                            &String::from_utf8_lossy(&json),
                        );
                    }
                }
            }
            Block::Image { base64 } => {
                out.extend_from_slice(format!("{base64} bytes of base64").as_bytes());
                out.extend_from_slice(format::BODY_END);
            }
            Block::Opaque => {}
        }
    }
}

/// An error kind as a word: `transport`, `provider 503`, or its JSON.
fn error_kind(kind: &Value) -> String {
    match kind {
        Value::String(s) => s.clone(),
        Value::Object(o) if o.len() == 1 && o.contains_key("provider") => {
            match kind["provider"]["status"].as_u64() {
                Some(status) => format!("provider {status}"),
                None => kind.to_string(),
            }
        }
        other => other.to_string(),
    }
}

/// Bytes read at a time.
const CHUNK: usize = 256 * 1024;

/// `read_at`, retried on `EINTR`.
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    loop {
        match file.read_at(buf, offset) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Reads exactly `len` bytes at `offset`, fewer if the file ends first.
fn read_exact_at(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; len];
    let mut got = 0;
    while got < len {
        let n = read_at(file, &mut buf[got..], offset + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}

/// Calls `f` with each complete line in `[from, limit)` (without its `\n`) and the offset
/// just past it, until `f` breaks. Returns the offset past the last line handed over.
fn each_line(
    file: &File,
    from: u64,
    limit: u64,
    mut f: impl FnMut(&[u8], u64) -> ControlFlow<()>,
) -> io::Result<u64> {
    let mut consumed = from;
    each_lines(file, from, limit, |lines, base| {
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', lines) {
            consumed = base + end as u64 + 1;
            f(&lines[start..end], consumed)?;
            start = end + 1;
        }
        ControlFlow::Continue(())
    })?;
    Ok(consumed)
}

/// Calls `f` with the complete lines in `[from, limit)` (each with its `\n`) a buffer at a
/// time, and the file offset of the first, until `f` breaks. Returns the offset past the
/// last line handed over.
fn each_lines(
    file: &File,
    from: u64,
    limit: u64,
    mut f: impl FnMut(&[u8], u64) -> ControlFlow<()>,
) -> io::Result<u64> {
    // No bigger than what there is to read: an append of one line reads one line.
    let span = usize::try_from(limit.saturating_sub(from)).unwrap_or(CHUNK);
    let mut buf = vec![0u8; span.clamp(1, CHUNK)];
    // File offset of buf[0]; bytes of buf that hold data.
    let (mut base, mut filled) = (from, 0usize);
    while base + (filled as u64) < limit {
        if filled == buf.len() {
            // One line longer than the buffer: make room for more of it.
            buf.resize(buf.len() * 2, 0);
        }
        let at = base + filled as u64;
        let room =
            usize::try_from(limit - at).map_or(buf.len() - filled, |w| w.min(buf.len() - filled));
        let n = read_at(file, &mut buf[filled..filled + room], at)?;
        if n == 0 {
            break;
        }
        let searched = filled;
        filled += n;
        let Some(last) = memchr::memrchr(b'\n', &buf[searched..filled]) else {
            continue;
        };
        let end = searched + last + 1;
        if f(&buf[..end], base).is_break() {
            return Ok(base + end as u64);
        }
        buf.copy_within(end..filled, 0);
        base += end as u64;
        filled -= end;
    }
    Ok(base)
}

/// Raw bytes rendered in one go, split between threads: what a window's runs rendered
/// ahead hold at once is about a thirteenth of it (text deltas render to that share).
const AHEAD_WINDOW: u64 = 64 << 20;
/// The least a thread renders ahead: below it, starting the thread costs more than it saves.
pub(super) const AHEAD_PART: u64 = 4 << 20;
/// Threads one rendering uses at most.
const AHEAD_THREADS: u64 = 4;

/// Where `[from, limit)` is split for rendering ahead: `from`, then the start of a line
/// near each equal share (one part per CPU, each at least `least` bytes), then `limit`.
fn split(file: &File, from: u64, limit: u64, least: u64) -> io::Result<Vec<u64>> {
    let span = limit.saturating_sub(from);
    let mut bounds = vec![from];
    if span / least.max(1) < 2 {
        // An append: no thread to start, and no CPUs to count (a look at the cgroup).
        bounds.push(limit);
        return Ok(bounds);
    }
    static CPUS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let cpus =
        *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    let parts = cpus.min(AHEAD_THREADS).min(span / least.max(1)).max(1);
    for i in 1..parts {
        let at = from + span / parts * i;
        match line_after(file, at.max(bounds[bounds.len() - 1]), limit)? {
            Some(start) if start < limit => bounds.push(start),
            _ => break,
        }
    }
    bounds.push(limit);
    Ok(bounds)
}

/// The offset just past the first `\n` at or after `at`, if there is one before `limit`.
fn line_after(file: &File, mut at: u64, limit: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0; 64 * 1024];
    while at < limit {
        let room = usize::try_from(limit - at).map_or(buf.len(), |r| r.min(buf.len()));
        let n = read_at(file, &mut buf[..room], at)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(Some(at + i as u64 + 1));
        }
        at += n as u64;
    }
    Ok(None)
}

/// A run of text deltas rendered ahead of the fold ([`text_run`]): its length in bytes and
/// lines, its rendering, and marks at line ends about every `grain` rendered bytes, where
/// checkpoints can go.
#[derive(Debug, Default)]
struct Ahead {
    bytes: u64,
    lines: u64,
    out: Vec<u8>,
    marks: Vec<Mark>,
}

/// A line end in an [`Ahead`] run: bytes and lines consumed, bytes rendered, up to it.
#[derive(Debug, Clone, Copy)]
struct Mark {
    bytes: u64,
    lines: u64,
    out: usize,
}

/// The leading run of text deltas of `[from, to)`, rendered (see [`Ahead`]).
fn render_ahead(file: &File, from: u64, to: u64, grain: u64) -> io::Result<Ahead> {
    let grain = usize::try_from(grain).unwrap_or(usize::MAX);
    let mut run = Ahead::default();
    each_lines(file, from, to, |lines, _| {
        let mut at = 0;
        while at < lines.len() {
            let stop = (run.out.len() / grain + 1).saturating_mul(grain);
            match text_run(&lines[at..], &mut run.out, stop) {
                Run::Text { bytes, lines: n } if bytes > 0 => {
                    at += bytes;
                    run.bytes += bytes as u64;
                    run.lines += n;
                    run.marks.push(Mark {
                        bytes: run.bytes,
                        lines: run.lines,
                        out: run.out.len(),
                    });
                    if at < lines.len() && run.out.len() < stop {
                        // Stopped before a line of another kind: the run ends there.
                        return ControlFlow::Break(());
                    }
                }
                _ => return ControlFlow::Break(()),
            }
        }
        ControlFlow::Continue(())
    })?;
    Ok(run)
}

/// A point the rendering can restart from: the fold after the line ending at `raw`,
/// whose rendering ends at `rendered`.
#[derive(Debug, Clone)]
struct Checkpoint {
    raw: u64,
    rendered: u64,
    fold: Fold,
}

/// Rendered bytes since the last checkpoint, of a body whose bytes from `held_from` on
/// are `held`.
fn since_checkpoint(checkpoints: &[Checkpoint], held: &[u8], held_from: u64) -> u64 {
    let last = checkpoints.last().map_or(0, |c| c.rendered);
    (held_from + held.len() as u64).saturating_sub(last)
}

/// The checkpoint rule, for a body just rendered up to the line ending at `raw`: once
/// `interval` bytes were rendered since the last checkpoint, one is kept here with the
/// fold `fold` gives; and a body longer than `keep` lets go of what it held before it.
fn checkpoint_if_due(
    checkpoints: &mut Vec<Checkpoint>,
    held: &mut Vec<u8>,
    held_from: &mut u64,
    (interval, keep): (u64, u64),
    raw: u64,
    fold: impl FnOnce() -> Fold,
) {
    if since_checkpoint(checkpoints, held, *held_from) < interval {
        return;
    }
    let rendered = *held_from + held.len() as u64;
    checkpoints.push(Checkpoint {
        raw,
        rendered,
        fold: fold(),
    });
    if rendered > keep {
        held.clear();
        *held_from = rendered;
    }
}

/// Where the last re-rendering stopped: a checkpoint, plus the rendering of the line
/// before it (`pending`, ending at `at.rendered`), so a sequential reader carries on
/// from there instead of from a checkpoint behind it.
#[derive(Debug, Clone)]
struct Cursor {
    at: Checkpoint,
    pending: Vec<u8>,
}

/// How many bytes at each end of the rendered prefix are compared to tell an append from
/// a rewrite.
const PROBE_BYTES: usize = 64;

/// The rendering of one `response.json` (one inode), as far as it has grown.
#[derive(Debug)]
pub(super) struct Rendering {
    interval: u64,
    /// A rendering no longer than this is held whole.
    keep: u64,
    /// The least a thread renders ahead ([`AHEAD_PART`] but in tests).
    ahead_part: u64,
    /// The last key synced to.
    key: Option<CaptureKey>,
    /// End of the last complete line rendered.
    raw_end: u64,
    /// The file's first and last [`PROBE_BYTES`] before `raw_end`, when last read.
    head: Vec<u8>,
    probe: Vec<u8>,
    /// The fold after `raw_end`.
    fold: Fold,
    /// Restart points, the first at the start of the file.
    checkpoints: Vec<Checkpoint>,
    /// Rendered bytes `[held_from, body_len)`: all of them while the rendering is at most
    /// `keep` long, else those since the last checkpoint.
    held: Vec<u8>,
    held_from: u64,
    cursor: Option<Cursor>,
    /// The closing rendering, for the size it was computed at.
    epilogue: Option<(u64, Vec<u8>)>,
}

impl Rendering {
    /// An empty rendering with a checkpoint every `interval` rendered bytes, held whole
    /// while it is at most `keep` bytes long, rendering ahead on other threads parts of at
    /// least `ahead_part` bytes.
    pub(super) fn new(interval: u64, keep: u64, ahead_part: u64) -> Self {
        Rendering {
            interval: interval.max(1),
            keep,
            ahead_part,
            key: None,
            raw_end: 0,
            head: Vec::new(),
            probe: Vec::new(),
            fold: Fold::default(),
            checkpoints: vec![Checkpoint {
                raw: 0,
                rendered: 0,
                fold: Fold::default(),
            }],
            held: Vec::new(),
            held_from: 0,
            cursor: None,
            epilogue: None,
        }
    }

    /// Rendered bytes of the complete lines.
    fn body_len(&self) -> u64 {
        self.held_from + self.held.len() as u64
    }

    /// The exact length of the rendering.
    pub(super) fn len(&self) -> u64 {
        self.body_len() + self.epilogue.as_ref().map_or(0, |(_, e)| e.len() as u64)
    }

    /// Bytes this rendering holds, by its own accounting.
    pub(super) fn cost(&self) -> usize {
        let checkpoint = |c: &Checkpoint| std::mem::size_of::<Checkpoint>() + c.fold.heap_bytes();
        std::mem::size_of::<Self>()
            + self.held.capacity()
            + self.head.capacity()
            + self.probe.capacity()
            + self.fold.heap_bytes()
            + self.epilogue.as_ref().map_or(0, |(_, e)| e.capacity())
            + self.checkpoints.iter().map(checkpoint).sum::<usize>()
            + self
                .cursor
                .as_ref()
                .map_or(0, |c| checkpoint(&c.at) + c.pending.capacity())
    }

    /// Brings the rendering up to the file `key` describes: the lines appended since the
    /// last sync when the file only grew, a fresh rendering otherwise. `closed` adds what
    /// a file nobody appends to any more ends with.
    pub(super) fn sync(&mut self, file: &File, key: CaptureKey, closed: bool) -> io::Result<()> {
        if self.key != Some(key) {
            if !self.continues(file, key)? {
                *self = Rendering::new(self.interval, self.keep, self.ahead_part);
            }
            self.render_to(file, key.size)?;
            self.key = Some(key);
        }
        if !closed {
            self.epilogue = None;
        } else if self.epilogue.as_ref().is_none_or(|(at, _)| *at != key.size) {
            let partial_len = usize::try_from(key.size.saturating_sub(self.raw_end))
                .map_err(|_| io::Error::other("a partial line too long to hold"))?;
            let partial = read_exact_at(file, self.raw_end, partial_len)?;
            let mut out = Vec::new();
            self.fold.clone().close(&partial, &mut out);
            self.epilogue = Some((key.size, out));
        }
        Ok(())
    }

    /// Whether the file behind `key` is the one rendered, grown: no shorter than what was
    /// rendered, with the same bytes at both ends of it.
    fn continues(&self, file: &File, key: CaptureKey) -> io::Result<bool> {
        let Some(prev) = self.key else {
            return Ok(self.raw_end == 0);
        };
        if (prev.dev, prev.ino) != (key.dev, key.ino) || key.size < self.raw_end {
            return Ok(false);
        }
        Ok(read_exact_at(file, 0, self.head.len())? == self.head
            && read_exact_at(
                file,
                self.raw_end - self.probe.len() as u64,
                self.probe.len(),
            )? == self.probe)
    }

    /// Renders the complete lines between `raw_end` and `limit`: a long span a window at
    /// a time, the later parts of each window rendered ahead on threads of their own.
    fn render_to(&mut self, file: &File, limit: u64) -> io::Result<()> {
        loop {
            let from = self.raw_end;
            let window = limit.min(from.saturating_add(AHEAD_WINDOW));
            let parts = split(file, from, window, self.ahead_part)?;
            if parts.len() > 2 {
                self.render_parts(file, &parts)?;
            } else {
                self.render_lines(file, window)?;
            }
            if window == limit {
                break;
            }
            if self.raw_end == from {
                // No line ends in the window: the rest in one go.
                self.render_lines(file, limit)?;
                break;
            }
        }
        let head_len = PROBE_BYTES.min(usize::try_from(self.raw_end).unwrap_or(PROBE_BYTES));
        self.head = read_exact_at(file, 0, head_len)?;
        self.probe = read_exact_at(file, self.raw_end - head_len as u64, head_len)?;
        Ok(())
    }

    /// Renders `[parts[0], parts[last])`: the first part here, while each later part's
    /// leading run of text deltas ([`text_run`]) is rendered ahead on a thread; that
    /// rendering is taken when the fold reaches its part showing a text block (a text
    /// delta only appends its string then), and the rest of the part is folded here.
    fn render_parts(&mut self, file: &File, parts: &[u64]) -> io::Result<()> {
        let grain = (self.interval / 4).max(1);
        std::thread::scope(|scope| {
            let ahead: Vec<_> = parts[1..parts.len() - 1]
                .iter()
                .zip(&parts[2..])
                .map(|(&from, &to)| {
                    std::thread::Builder::new()
                        .name("litanyfs-render".into())
                        .spawn_scoped(scope, move || render_ahead(file, from, to, grain))
                        .ok()
                })
                .collect();
            let mut result = self.render_lines(file, parts[1]);
            for (handle, bounds) in ahead.into_iter().zip(parts[1..].windows(2)) {
                // Joined whatever happens, so that no thread outlives an error.
                let taken = handle.and_then(|h| h.join().ok());
                if result.is_err() {
                    continue;
                }
                if let Some(Ok(run)) = taken
                    && self.raw_end == bounds[0]
                    && self.fold.showing_text()
                {
                    self.adopt(run);
                }
                result = self.render_lines(file, bounds[1]);
            }
            result
        })
    }

    /// Appends a run rendered ahead from `raw_end`, with the checkpoints the run would
    /// have had rendered here (at its marks), and moves past it.
    fn adopt(&mut self, run: Ahead) {
        let (from, line) = (self.raw_end, self.fold.line);
        let mut copied = 0;
        for mark in &run.marks {
            self.held.extend_from_slice(&run.out[copied..mark.out]);
            copied = mark.out;
            let fold = &self.fold;
            checkpoint_if_due(
                &mut self.checkpoints,
                &mut self.held,
                &mut self.held_from,
                (self.interval, self.keep),
                from + mark.bytes,
                || Fold {
                    line: line + mark.lines,
                    ..fold.clone()
                },
            );
        }
        self.held.extend_from_slice(&run.out[copied..]);
        self.fold.line = line + run.lines;
        self.raw_end = from + run.bytes;
    }

    /// Folds the complete lines between `raw_end` and `limit` here, one after another.
    fn render_lines(&mut self, file: &File, limit: u64) -> io::Result<()> {
        let limits = (self.interval, self.keep);
        let Rendering {
            fold,
            checkpoints,
            held,
            held_from,
            raw_end,
            ..
        } = self;
        *raw_end = each_lines(file, *raw_end, limit, |lines, base| {
            let mut at = 0;
            while at < lines.len() {
                // Up to the next checkpoint (at least one byte, so at least one line).
                let room = limits
                    .0
                    .saturating_sub(since_checkpoint(checkpoints, held, *held_from));
                let stop = held
                    .len()
                    .saturating_add(usize::try_from(room.max(1)).unwrap_or(usize::MAX));
                at += fold.feed_lines(&lines[at..], held, stop);
                checkpoint_if_due(
                    checkpoints,
                    held,
                    held_from,
                    limits,
                    base + at as u64,
                    || fold.clone(),
                );
            }
            ControlFlow::Continue(())
        })?;
        Ok(())
    }

    /// Bytes `[offset, offset + len)` of the rendering, cut short at its end, appended to
    /// `got`.
    pub(super) fn read(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
        got: &mut Vec<u8>,
    ) -> io::Result<()> {
        let end = offset.saturating_add(len).min(self.len());
        if offset >= end {
            return Ok(());
        }
        let want = usize::try_from(end - offset).map_err(io::Error::other)?;
        got.reserve(want);
        let body = self.body_len();
        if offset < body {
            if offset >= self.held_from {
                let from = usize::try_from(offset - self.held_from).map_err(io::Error::other)?;
                let to =
                    usize::try_from(end.min(body) - self.held_from).map_err(io::Error::other)?;
                got.extend_from_slice(&self.held[from..to]);
            } else {
                self.rerender(file, offset, end.min(body), got)?;
            }
        }
        if end > body
            && let Some((_, epilogue)) = &self.epilogue
        {
            let from = usize::try_from(offset.max(body) - body).map_err(io::Error::other)?;
            let to = usize::try_from(end - body).map_err(io::Error::other)?;
            got.extend_from_slice(&epilogue[from..to]);
        }
        Ok(())
    }

    /// Renders `[offset, end)` of the body again, from the cursor when a reader left it
    /// at or before `offset`, else from the checkpoint at or before it.
    fn rerender(
        &mut self,
        file: &File,
        offset: u64,
        end: u64,
        got: &mut Vec<u8>,
    ) -> io::Result<()> {
        let k = self.checkpoints.partition_point(|c| c.rendered <= offset);
        let mut start = self.checkpoints[k.saturating_sub(1)].clone();
        let mut scratch = Vec::new();
        if let Some(cursor) = self.cursor.take() {
            let from = cursor.at.rendered - cursor.pending.len() as u64;
            if from <= offset && cursor.at.rendered > start.rendered {
                scratch = cursor.pending;
                start = cursor.at;
            }
        }
        let copy = |chunk: &[u8], lo: u64, got: &mut Vec<u8>| {
            let hi = lo + chunk.len() as u64;
            if hi > offset && lo < end {
                let from = (offset.max(lo) - lo) as usize;
                let to = (end.min(hi) - lo) as usize;
                got.extend_from_slice(&chunk[from..to]);
            }
        };
        copy(&scratch, start.rendered - scratch.len() as u64, got);
        let Checkpoint {
            mut raw,
            rendered: mut at,
            mut fold,
        } = start;
        if at < end {
            raw = each_line(file, raw, self.raw_end, |line, _| {
                scratch.clear();
                fold.feed_line(line, &mut scratch);
                copy(&scratch, at, got);
                at += scratch.len() as u64;
                if at >= end {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
        }
        self.cursor = Some(Cursor {
            at: Checkpoint {
                raw,
                rendered: at,
                fold,
            },
            pending: scratch,
        });
        Ok(())
    }
}
