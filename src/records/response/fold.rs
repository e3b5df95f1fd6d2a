//! The fold over a `response.json`'s brazen events: [`Fold`] is the renderer's whole
//! state between two lines, and [`Fold::feed_line`] appends one complete line's rendering.
//!
//! The events are read as litany reads them (`serde_json::from_slice::<brazen::Event>`)
//! and folded as litany's staging writer folds them (see the parent module); lines of the
//! compact text-delta shape take the fast path ([`super::fast`]) first.

use serde::Deserialize;
use serde_json::Value;

use super::fast::{Body, DeltaTag, Run, fast_delta, text_run, unescape};
use crate::records::format::{self, Prose, Usage};

use crate::records::format::{ENTRY_BLOCK, RESPONSE_BLOCK as BLOCK};

/// The finish reasons after which litany seals the entry with the attempt's usage: the
/// shape a committed model entry ends with. `pause` continues into the next segment; any
/// other reason (`length` fails the step) is shown as a note.
const SEALING_FINISHES: [&str; 3] = ["stop", "tool_use", "stop_sequence"];
/// The finish that continues the entry in the next segment (litany keeps its blocks).
const PAUSE: &str = "pause";

/// The event kinds litany reads (brazen's `Event`, v=1). Unknown types are accepted and
/// ignored, as brazen's `#[serde(other)]` does; a known type with a wrong shape fails.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Event {
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
pub(super) enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// brazen's `Usage`: every counter optional, unknown fields ignored.
#[derive(Deserialize)]
pub(super) struct UsageEvent {
    pub(super) input_tokens: Option<u32>,
    pub(super) output_tokens: Option<u32>,
    pub(super) cache_read_tokens: Option<u32>,
    pub(super) cache_write_tokens: Option<u32>,
    pub(super) input_total_tokens: Option<u32>,
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

/// The first key of a JSON object: how brazen reads an externally tagged value.
fn tag_of(v: &Value) -> Option<&str> {
    v.as_object()?.keys().next().map(String::as_str)
}

/// A string field of `v`, empty when absent (brazen's `str_at`).
fn str_at<'v>(v: &'v Value, key: &str) -> &'v str {
    v[key].as_str().unwrap_or_default()
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

/// How the last attempt that ended, ended: what a wound names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// An `end` after a finish (the reason as shown, `None` when there was none).
    Finished(Option<String>),
    /// An `error` event: its kind and message.
    Failed(String),
}

/// The renderer's state between two lines.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fold {
    /// Lines consumed (the next line is number `line + 1`).
    pub(super) line: u64,
    /// Attempts opened so far.
    attempts: u32,
    open: Option<Attempt>,
    /// Rendering a transcript entry rather than `response.md` (see [`Fold::entry`]).
    entry: bool,
    /// How the last attempt that ended, ended.
    last: Option<Outcome>,
}

impl Fold {
    /// The fold of a model entry being streamed, as `transcript.md` shows it: blocks one
    /// level down (as a committed entry's), no header for the first attempt, and at its
    /// end the `usage` line a committed entry ends with, so that a single attempt's
    /// rendering is exactly the entry litany then commits (module docs of
    /// [`crate::records`]). A retry is shown with its notes, as in `response.md`.
    pub(crate) fn entry() -> Self {
        Fold {
            entry: true,
            ..Fold::default()
        }
    }

    /// Depth of a block header.
    fn depth(&self) -> usize {
        if self.entry { ENTRY_BLOCK } else { BLOCK }
    }

    /// How the last attempt that ended, ended; `None` while the first is open.
    pub(crate) fn outcome(&self) -> Option<&Outcome> {
        self.last.as_ref()
    }

    /// Whether an attempt is open (it has neither ended nor failed).
    pub(crate) fn in_attempt(&self) -> bool {
        self.open.as_ref().is_some_and(|a| !a.failed)
    }

    /// Heap bytes this state holds (for the cache's accounting).
    pub(crate) fn heap_bytes(&self) -> usize {
        let last = match &self.last {
            Some(Outcome::Finished(Some(s)) | Outcome::Failed(s)) => s.capacity(),
            _ => 0,
        };
        last + self.open.as_ref().map_or(0, |a| {
            a.block.as_ref().map_or(0, Block::heap_bytes)
                + a.usage
                    .iter()
                    .map(|(n, _)| n.capacity() + 16)
                    .sum::<usize>()
                + a.finish.as_ref().map_or(0, String::capacity)
        })
    }

    /// Folds one complete line (without its `\n`) and appends its rendering to `out`.
    pub(crate) fn feed_line(&mut self, line: &[u8], out: &mut Vec<u8>) {
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

    /// Folds a line of `len` bytes (without its `\n`) too long to read
    /// ([`super::MAX_LINE_BYTES`]): a line naming its length, in place of its rendering.
    pub(crate) fn feed_long_line(&mut self, len: u64, out: &mut Vec<u8>) {
        self.line += 1;
        self.interrupt(out);
        format::too_long(out, BLOCK, self.line, len, super::MAX_LINE_BYTES);
    }

    /// Folds the complete lines at the start of `lines` (each ending in `\n`) until they
    /// run out or `out` reaches `stop` bytes, and returns the bytes consumed (at least one
    /// line when there is one). What it appends is what [`Fold::feed_line`] would, line
    /// by line; runs of text deltas into the text block being shown take [`Fold::text_run`].
    pub(crate) fn feed_lines(&mut self, lines: &[u8], out: &mut Vec<u8>, stop: usize) -> usize {
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
    pub(super) fn showing_text(&self) -> bool {
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
                format::unparsed(out, self.depth(), self.line, &e.to_string(), line);
            }
        }
    }

    /// What the rendering ends with once nothing more will be appended: `partial` (bytes
    /// after the last newline, if any) as a last line, then a half stream if the last
    /// attempt neither ended nor failed.
    pub(crate) fn close(mut self, partial: &[u8], out: &mut Vec<u8>) {
        if !partial.is_empty() {
            self.feed_line(partial, out);
        }
        if self.open.as_ref().is_some_and(|a| !a.failed) {
            self.end_block(out);
            format::half_stream(out, self.depth(), self.attempts);
        }
    }

    /// The open attempt, opened (with a bare header) if there is none.
    fn attempt(&mut self, out: &mut Vec<u8>) -> &mut Attempt {
        if self.open.is_none() {
            self.attempts += 1;
            self.attempt_header(out, None, None, 1);
        }
        self.open.get_or_insert_with(Attempt::default)
    }

    /// The header of attempt `self.attempts`: in `response.md` every attempt's; in an
    /// entry only a retry's, as a note (the first attempt is the entry itself).
    fn attempt_header(&self, out: &mut Vec<u8>, id: Option<&str>, model: Option<&str>, v: u8) {
        if !self.entry {
            format::attempt(out, 1, self.attempts, id, model, v);
        } else if self.attempts > 1 {
            format::attempt(out, ENTRY_BLOCK, self.attempts, id, model, v);
        }
    }

    /// How an attempt that ended without failing closes: `response.md` names its finish
    /// and usage; an entry ends as a committed one does, with its usage (or, after a
    /// finish litany does not seal, the finish as a note).
    fn attempt_end(&self, out: &mut Vec<u8>, attempt: &Attempt) {
        let reason = attempt.finish.as_deref();
        if !self.entry {
            format::finish(out, BLOCK, reason, &attempt.usage);
        } else if reason.is_some_and(|r| SEALING_FINISHES.contains(&r)) {
            format::usage(out, ENTRY_BLOCK, &attempt.usage);
        } else if reason != Some(PAUSE) {
            format::finish(out, ENTRY_BLOCK, reason, &attempt.usage);
        }
    }

    fn event(&mut self, event: Event, out: &mut Vec<u8>) {
        match event {
            Event::MessageStart { v, id, model, .. } => {
                if let Some(open) = &self.open
                    && !open.failed
                {
                    self.end_block(out);
                    format::half_stream(out, self.depth(), self.attempts);
                }
                self.attempts += 1;
                self.attempt_header(out, id.as_deref(), model.as_deref(), v);
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
                let kind = error_kind(&kind);
                format::error(out, self.depth(), &kind, &message, retry_after_seconds);
                self.attempt(out).failed = true;
                self.last = Some(Outcome::Failed(format!("{kind}: {message}")));
            }
            Event::End => {
                self.attempt(out);
                self.end_block(out);
                if let Some(attempt) = self.open.take()
                    && !attempt.failed
                {
                    self.attempt_end(out, &attempt);
                    self.last = Some(Outcome::Finished(attempt.finish));
                }
            }
            Event::Other => {}
        }
    }

    /// Opens a block for a `content_start` kind, writing its header.
    fn start_block(&self, kind: &Value, out: &mut Vec<u8>) -> Block {
        let depth = self.depth();
        let tag = tag_of(kind).unwrap_or_default();
        let body = &kind[tag];
        match tag {
            "text" | "thinking" => {
                let kind = if tag == "text" {
                    Prose::Text
                } else {
                    Prose::Thinking
                };
                format::prose(out, depth, kind, false);
                Block::Prose { kind, shown: true }
            }
            "tool_use" | "server_tool_use" => {
                let name = str_at(body, "name");
                format::call(out, depth, tag, name, str_at(body, "id"));
                Block::Call {
                    name: name.to_string(),
                    json: Vec::new(),
                }
            }
            "image" => {
                format::named(out, depth, &format!("image {}", str_at(body, "media_type")));
                Block::Image { base64: 0 }
            }
            "redacted_thinking" => {
                let bytes = str_at(body, "data").len();
                format::named(out, depth, &format!("redacted_thinking ({bytes} bytes)"));
                Block::Opaque
            }
            t if t.ends_with("_tool_result") && t != "tool_result" => {
                format::named(
                    out,
                    depth,
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
                format::named(out, depth, &format!("content {label}"));
                Block::Opaque
            }
        }
    }

    /// A delta's text (UTF-8) for the open block.
    fn delta(&mut self, tag: DeltaTag, text: &[u8], out: &mut Vec<u8>) {
        let line = self.line;
        let depth = self.depth();
        let attempt = self.attempt(out);
        match (&mut attempt.block, tag) {
            (Some(Block::Prose { kind, shown }), DeltaTag::Text | DeltaTag::Thinking)
                if (*kind == Prose::Text) == (tag == DeltaTag::Text) =>
            {
                if !*shown {
                    format::prose(out, depth, *kind, true);
                    *shown = true;
                }
                out.extend_from_slice(text);
            }
            (Some(Block::Call { json, .. }), DeltaTag::Json) => json.extend_from_slice(text),
            (Some(Block::Image { base64 }), DeltaTag::Image) => *base64 += text.len() as u64,
            (Some(Block::Opaque), _) | (_, DeltaTag::Opaque | DeltaTag::Image) => {}
            (_, DeltaTag::Text | DeltaTag::Json | DeltaTag::Thinking) => {
                self.interrupt(out);
                format::ignored(out, depth, line, tag.label());
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
        let depth = self.depth();
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
                            depth,
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
pub(super) fn error_kind(kind: &Value) -> String {
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
