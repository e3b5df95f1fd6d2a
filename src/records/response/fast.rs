//! The fast path of `response.md`'s fold: lines of the exact compact shape brazen writes
//! for a text, JSON or thinking delta are read without building an event.
//!
//! [`fast_delta`] takes one such line and yields its tag and string; anything else is
//! `None` and goes to serde in [`super::fold`], which accepts and refuses the same
//! lines, so a line declined here is never lost. [`text_run`] renders a run of text
//! deltas a buffer at a time; it depends on the bytes alone, which is what lets a long
//! file's later parts be rendered ahead on threads of their own.

use crate::paging::scan::simple_escape;

/// A delta's tag, as brazen dispatches it (the first key of a one-entry object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeltaTag {
    Text,
    Json,
    Thinking,
    Image,
    /// Signatures, encrypted reasoning and unknown tags: nothing to show.
    Opaque,
}

impl DeltaTag {
    pub(super) fn of(tag: &str) -> DeltaTag {
        match tag {
            "text_delta" => DeltaTag::Text,
            "json_delta" => DeltaTag::Json,
            "thinking_delta" => DeltaTag::Thinking,
            "image_delta" => DeltaTag::Image,
            _ => DeltaTag::Opaque,
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            DeltaTag::Text => "text_delta",
            DeltaTag::Json => "json_delta",
            DeltaTag::Thinking => "thinking_delta",
            DeltaTag::Image => "image_delta",
            DeltaTag::Opaque => "delta",
        }
    }
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
pub(super) fn fast_delta(line: &[u8]) -> Option<(DeltaTag, Body<'_>)> {
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
pub(super) enum Body<'l> {
    /// The bytes are the text.
    Plain(&'l [u8]),
    /// To be decoded by [`unescape`], which may still refuse it.
    Escaped(&'l [u8]),
}

/// The contents of a JSON string (without its quotes) decoded as serde_json decodes
/// them into a `String`; `None` for anything serde_json refuses (a control byte, a bare
/// quote, an unknown escape, a lone surrogate), which then goes to serde for its message.
pub(super) fn unescape(body: &[u8], out: &mut Vec<u8>) -> Option<()> {
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
/// [`DELTA_TAIL`] and newline, appending it to `out` (UTF-8 unchecked: [`text_run`]
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
pub(super) enum Run {
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
/// depends on nothing but the bytes, which is what lets [`super::Rendering`] render a later part
/// of a file ahead of the part before it.
pub(super) fn text_run(lines: &[u8], out: &mut Vec<u8>, stop: usize) -> Run {
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
pub(crate) fn takes_fast_path(line: &[u8]) -> bool {
    match fast_delta(line) {
        Some((_, Body::Escaped(text))) => unescape(text, &mut Vec::new()).is_some(),
        found => found.is_some(),
    }
}
