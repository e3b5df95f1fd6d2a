//! Unit tests of the readable records: the fold over synthetic brazen events
//! ([`fold`]), the cache over real files ([`cache`]) and transcripts over a fixture
//! repository ([`transcripts`]).

mod cache;
mod fold;
mod live;
mod transcripts;

use super::response::Fold;

/// brazen's own compact shapes for each event (field order as brazen writes them).
pub(super) mod ev {
    fn s(text: &str) -> String {
        serde_json::to_string(text).unwrap()
    }

    pub(crate) fn start(id: &str) -> String {
        format!(
            r#"{{"type":"message_start","v":1,"id":{},"model":"fake","role":"assistant"}}"#,
            s(id)
        )
    }
    pub(crate) fn text_start(i: u32) -> String {
        format!(r#"{{"type":"content_start","index":{i},"kind":{{"text":{{}}}}}}"#)
    }
    pub(crate) fn thinking_start(i: u32) -> String {
        format!(r#"{{"type":"content_start","index":{i},"kind":{{"thinking":{{}}}}}}"#)
    }
    pub(crate) fn tool_start(i: u32, id: &str, name: &str) -> String {
        format!(
            r#"{{"type":"content_start","index":{i},"kind":{{"tool_use":{{"id":{},"name":{}}}}}}}"#,
            s(id),
            s(name)
        )
    }
    pub(crate) fn text(i: u32, t: &str) -> String {
        format!(
            r#"{{"type":"content_delta","index":{i},"delta":{{"text_delta":{}}}}}"#,
            s(t)
        )
    }
    pub(crate) fn thinking(i: u32, t: &str) -> String {
        format!(
            r#"{{"type":"content_delta","index":{i},"delta":{{"thinking_delta":{}}}}}"#,
            s(t)
        )
    }
    pub(crate) fn json(i: u32, t: &str) -> String {
        format!(
            r#"{{"type":"content_delta","index":{i},"delta":{{"json_delta":{}}}}}"#,
            s(t)
        )
    }
    pub(crate) fn stop(i: u32) -> String {
        format!(r#"{{"type":"content_stop","index":{i}}}"#)
    }
    pub(crate) fn usage(input: u32, output: u32) -> String {
        format!(r#"{{"type":"usage","input_tokens":{input},"output_tokens":{output}}}"#)
    }
    pub(crate) fn finish(reason: &str) -> String {
        format!(r#"{{"type":"finish","reason":{}}}"#, s(reason))
    }
    pub(crate) fn error(kind: &str, message: &str) -> String {
        format!(
            r#"{{"type":"error","kind":{kind},"message":{}}}"#,
            s(message)
        )
    }
    pub(crate) fn end() -> String {
        r#"{"type":"end"}"#.to_string()
    }
}

/// `lines` joined, each ended by a newline.
pub(super) fn ndjson(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    out
}

/// The rendering of the complete lines of `bytes`, folded in one go.
pub(super) fn render_all(bytes: &[u8]) -> Vec<u8> {
    let mut fold = Fold::default();
    let mut out = Vec::new();
    let complete = bytes
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(&[][..], |i| &bytes[..i]);
    if !bytes.contains(&b'\n') {
        return out;
    }
    for line in complete.split(|b| *b == b'\n') {
        fold.feed_line(line, &mut out);
    }
    out
}

/// [`render_all`] plus what a closed file ends with.
pub(super) fn render_closed(bytes: &[u8]) -> Vec<u8> {
    let mut fold = Fold::default();
    let mut out = Vec::new();
    let mut lines = bytes.split(|b| *b == b'\n').peekable();
    let mut partial: &[u8] = &[];
    while let Some(line) = lines.next() {
        if lines.peek().is_some() {
            fold.feed_line(line, &mut out);
        } else {
            partial = line;
        }
    }
    fold.close(partial, &mut out);
    out
}

pub(super) fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("the rendering is UTF-8")
}
