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

/// Depth of a block header in `response.md`: one below its attempt.
const BLOCK: usize = 2;

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

/// The renderer's state between two lines.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fold {
    /// Lines consumed (the next line is number `line + 1`).
    pub(super) line: u64,
    /// Attempts opened so far.
    attempts: u32,
    open: Option<Attempt>,
}

impl Fold {
    /// Heap bytes this state holds (for the cache's accounting).
    pub(crate) fn heap_bytes(&self) -> usize {
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
                format::unparsed(out, BLOCK, self.line, &e.to_string(), line);
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
