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
//! takes serde's path, which accepts and refuses the same lines.

use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;

use serde::Deserialize;
use serde_json::Value;

use super::format::{self, Prose, Usage};
use crate::paging::CaptureKey;

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

/// The delta a line carries, when the line has exactly the compact shape brazen writes:
/// `{"type":"content_delta","index":N,"delta":{"<tag>_delta":"…"}}`. `None` sends the
/// line to serde, which then decides (so a line this declines is never lost).
fn fast_delta(line: &[u8]) -> Option<(DeltaTag, Body<'_>)> {
    if !has(line, 0, DELTA_HEAD) || !has(line, line.len().checked_sub(3)?, DELTA_TAIL) {
        return None;
    }
    // The index: what serde_json reads as a u32 (no leading zero, at most u32::MAX).
    let rest = line.get(DELTA_HEAD.len()..line.len() - DELTA_TAIL.len())?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 10 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    let index = rest[..digits]
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    if index > u64::from(u32::MAX) || !has(rest, digits, DELTA_MID) {
        return None;
    }
    let rest = rest.get(digits + DELTA_MID.len()..)?;
    let (tag, skip) = if has(rest, 0, b"text_delta\":\"") {
        (DeltaTag::Text, 13)
    } else if has(rest, 0, b"json_delta\":\"") {
        (DeltaTag::Json, 13)
    } else if has(rest, 0, b"thinking_delta\":\"") {
        (DeltaTag::Thinking, 17)
    } else {
        return None;
    };
    let body = rest.get(skip..)?;
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
    let decoded = unescape_chars(std::str::from_utf8(body).ok()?, out);
    if decoded.is_none() {
        out.truncate(mark);
    }
    decoded
}

/// [`unescape`]'s decoding, appending to `out` (left half written on failure).
fn unescape_chars(body: &str, out: &mut Vec<u8>) -> Option<()> {
    let mut chars = body.chars();
    let hex = |chars: &mut std::str::Chars<'_>| -> Option<u32> {
        let mut n = 0;
        for _ in 0..4 {
            n = n * 16 + chars.next()?.to_digit(16)?;
        }
        Some(n)
    };
    while let Some(c) = chars.next() {
        let decoded = match c {
            '"' => return None,
            c if u32::from(c) < 0x20 => return None,
            '\\' => match chars.next()? {
                '"' => '"',
                '\\' => '\\',
                '/' => '/',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'u' => {
                    let n = hex(&mut chars)?;
                    let code = match n {
                        0xD800..=0xDBFF => {
                            if chars.next()? != '\\' || chars.next()? != 'u' {
                                return None;
                            }
                            let low = hex(&mut chars)?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return None;
                            }
                            0x10000 + ((n - 0xD800) << 10) + (low - 0xDC00)
                        }
                        0xDC00..=0xDFFF => return None,
                        n => n,
                    };
                    char::from_u32(code)?
                }
                _ => return None,
            },
            c => c,
        };
        let mut buf = [0; 4];
        out.extend_from_slice(decoded.encode_utf8(&mut buf).as_bytes());
    }
    Some(())
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
    // No bigger than what there is to read: an append of one line reads one line.
    let span = usize::try_from(limit.saturating_sub(from)).unwrap_or(CHUNK);
    let mut buf = vec![0u8; span.clamp(1, CHUNK)];
    // File offset of buf[0]; bytes of buf that hold data; of those, bytes searched.
    let (mut base, mut filled, mut searched) = (from, 0usize, 0usize);
    let mut consumed = from;
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
        filled += n;
        let mut start = 0;
        for i in memchr::memchr_iter(b'\n', &buf[searched..filled]) {
            let end = searched + i;
            consumed = base + end as u64 + 1;
            if f(&buf[start..end], consumed).is_break() {
                return Ok(consumed);
            }
            start = end + 1;
        }
        buf.copy_within(start..filled, 0);
        base += start as u64;
        filled -= start;
        searched = filled;
    }
    Ok(consumed)
}

/// A point the rendering can restart from: the fold after the line ending at `raw`,
/// whose rendering ends at `rendered`.
#[derive(Debug, Clone)]
struct Checkpoint {
    raw: u64,
    rendered: u64,
    fold: Fold,
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
    /// while it is at most `keep` bytes long.
    pub(super) fn new(interval: u64, keep: u64) -> Self {
        Rendering {
            interval: interval.max(1),
            keep,
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
                *self = Rendering::new(self.interval, self.keep);
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

    /// Renders the complete lines between `raw_end` and `limit`.
    fn render_to(&mut self, file: &File, limit: u64) -> io::Result<()> {
        let (interval, keep) = (self.interval, self.keep);
        let Rendering {
            fold,
            checkpoints,
            held,
            held_from,
            raw_end,
            ..
        } = self;
        let mut since =
            held.len() as u64 + *held_from - checkpoints[checkpoints.len() - 1].rendered;
        *raw_end = each_line(file, *raw_end, limit, |line, end| {
            let before = held.len();
            fold.feed_line(line, held);
            since += (held.len() - before) as u64;
            if since >= interval {
                let rendered = *held_from + held.len() as u64;
                checkpoints.push(Checkpoint {
                    raw: end,
                    rendered,
                    fold: fold.clone(),
                });
                since = 0;
                if rendered > keep {
                    held.clear();
                    *held_from = rendered;
                }
            }
            ControlFlow::Continue(())
        })?;
        let head_len = PROBE_BYTES.min(usize::try_from(self.raw_end).unwrap_or(PROBE_BYTES));
        self.head = read_exact_at(file, 0, head_len)?;
        self.probe = read_exact_at(file, self.raw_end - head_len as u64, head_len)?;
        Ok(())
    }

    /// Bytes `[offset, offset + len)` of the rendering, cut short at its end.
    pub(super) fn read(&mut self, file: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let end = offset.saturating_add(len).min(self.len());
        if offset >= end {
            return Ok(Vec::new());
        }
        let want = usize::try_from(end - offset).map_err(io::Error::other)?;
        let mut got = Vec::with_capacity(want);
        let body = self.body_len();
        if offset < body {
            if offset >= self.held_from {
                let from = usize::try_from(offset - self.held_from).map_err(io::Error::other)?;
                let to =
                    usize::try_from(end.min(body) - self.held_from).map_err(io::Error::other)?;
                got.extend_from_slice(&self.held[from..to]);
            } else {
                self.rerender(file, offset, end.min(body), &mut got)?;
            }
        }
        if end > body
            && let Some((_, epilogue)) = &self.epilogue
        {
            let from = usize::try_from(offset.max(body) - body).map_err(io::Error::other)?;
            let to = usize::try_from(end - body).map_err(io::Error::other)?;
            got.extend_from_slice(&epilogue[from..to]);
        }
        Ok(got)
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
