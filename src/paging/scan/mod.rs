//! The one streaming pass over `output.json`. It accepts exactly what
//! litany accepts, and it builds the index a page is served from.
//!
//! litany reads a capture with `serde_json::from_slice::<ToolOutputRecord>`.
//! It was built against serde_json 1.0.149 and serde 1.0.228. The record
//! is five required fields, stdout, stderr, exit_code (`i32`), started_at
//! and ended_at, and unknown fields are allowed and skipped. This module
//! reproduces that parse step by step: the same checks, in the same
//! order, with the same error text and the same `line`/`column`. It
//! works on a stream, so a 50 MB capture is never held in memory.
//! - A record is an object or a five-element array (serde's derive
//!   accepts both). Fields may repeat only by failing: `duplicate field`.
//! - Strings follow `SliceRead::parse_str`. Control bytes are refused.
//!   Escapes are `\" \\ \/ \b \f \n \r \t \uXXXX`. Surrogates must pair,
//!   and a lone one is an error, as with `String`. Raw bytes must be
//!   UTF-8, which is checked when the closing quote is reached.
//! - Values of unknown fields follow `ignore_value`. That check is
//!   looser: no UTF-8 check, no surrogate check, no depth limit.
//! - Numbers follow `parse_integer` and its helpers, including the
//!   non-`float_roundtrip` float arithmetic, because an error message
//!   can quote the float.
//!
//! For stdout and stderr the pass keeps the decoded length, where the
//! string starts in the file, and a [`Checkpoint`] at the first token
//! boundary at or after every `interval` decoded bytes. A boundary is a
//! point between two raw bytes, or just after a whole escape, where a
//! surrogate pair counts as one escape. Decoding can restart there, so
//! [`read_range`] reaches any offset by decoding at most
//! `interval + 3 + len` bytes.

use super::source::{Source, position};
use serde::de::{Error as _, Unexpected};
use std::fs::File;
use std::io;

mod number;
mod sink;
mod string;

pub(crate) use sink::Sink;
use sink::{Bounded, Collect, CopySink, IndexSink, KeySink};
#[cfg(test)]
pub(crate) use string::plain_run;

/// The record's fields, in declaration order. serde reports a missing
/// field in this order, and an array form holds them in this order.
const FIELDS: [&str; 5] = ["stdout", "stderr", "exit_code", "started_at", "ended_at"];

/// What serde's derive calls the record in `invalid type` and
/// `invalid length` messages.
const EXPECTING_STRUCT: &str = "struct ToolOutputRecord";
const EXPECTING_SEQ: &str = "struct ToolOutputRecord with 5 elements";

// serde_json's `ErrorCode` texts.
const EOF_LIST: &str = "EOF while parsing a list";
const EOF_OBJECT: &str = "EOF while parsing an object";
const EOF_STRING: &str = "EOF while parsing a string";
const EOF_VALUE: &str = "EOF while parsing a value";
const EXPECTED_COLON: &str = "expected `:`";
const EXPECTED_LIST_COMMA_OR_END: &str = "expected `,` or `]`";
const EXPECTED_OBJECT_COMMA_OR_END: &str = "expected `,` or `}`";
const EXPECTED_IDENT: &str = "expected ident";
const EXPECTED_VALUE: &str = "expected value";
const INVALID_ESCAPE: &str = "invalid escape";
const INVALID_NUMBER: &str = "invalid number";
const NUMBER_OUT_OF_RANGE: &str = "number out of range";
const INVALID_UNICODE: &str = "invalid unicode code point";
const CONTROL_CHARACTER: &str = "control character (\\u0000-\\u001F) found while parsing a string";
const KEY_MUST_BE_A_STRING: &str = "key must be a string";
const LONE_LEADING_SURROGATE: &str = "lone leading surrogate in hex escape";
const TRAILING_COMMA: &str = "trailing comma";
const TRAILING_CHARACTERS: &str = "trailing characters";
const UNEXPECTED_END_OF_HEX_ESCAPE: &str = "unexpected end of hex escape";

/// Marks an error at the end of the file (serde_json sets its index to
/// the slice length). [`position`] caps it there.
const AT_END: u64 = u64::MAX;

/// A parse failure. `at` is the byte index serde_json would report. It
/// is `None` until the enclosing call sets it, as `fix_position` does.
#[derive(Debug)]
pub(crate) struct Fail {
    msg: String,
    at: Option<u64>,
}

/// Why a pass stopped.
#[derive(Debug)]
pub(crate) enum ScanError {
    /// The file could not be read.
    Io(io::Error),
    /// The bytes are not a record litany accepts.
    Json(Fail),
}

impl From<io::Error> for ScanError {
    fn from(e: io::Error) -> Self {
        ScanError::Io(e)
    }
}

impl ScanError {
    fn unpositioned(msg: String) -> Self {
        ScanError::Json(Fail { msg, at: None })
    }

    /// The message serde_json would print:
    /// `<reason> at line <l> column <c>`. It reads `file` again to count
    /// lines.
    pub(crate) fn render(fail: &Fail, file: &File) -> io::Result<String> {
        let (line, column) = position(file, fail.at.unwrap_or(AT_END))?;
        Ok(format!("{} at line {line} column {column}", fail.msg))
    }
}

/// `serde::de::Error::invalid_type`, in serde_json's wording (which
/// formats floats its own way).
fn invalid_type(unexp: Unexpected<'_>, exp: &str) -> ScanError {
    ScanError::unpositioned(serde_json::Error::invalid_type(unexp, &exp).to_string())
}

fn invalid_value(unexp: Unexpected<'_>, exp: &str) -> ScanError {
    ScanError::unpositioned(serde_json::Error::invalid_value(unexp, &exp).to_string())
}

/// A point where decoding can restart: `decoded` bytes into the stream's
/// string, at file offset `raw`, on a token boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub(crate) decoded: u64,
    pub(crate) raw: u64,
}

/// What the pass keeps about one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamIndex {
    /// Decoded length in bytes: the length of litany's `String`.
    pub(crate) len: u64,
    /// File offset just after the opening quote (decoded offset 0).
    pub(crate) start: u64,
    /// Restart points, ascending, excluding the implicit `(0, start)`.
    pub(crate) checkpoints: Vec<Checkpoint>,
}

impl StreamIndex {
    /// The last restart point at or before decoded offset `offset`.
    pub(crate) fn restart_for(&self, offset: u64) -> Checkpoint {
        let i = self.checkpoints.partition_point(|c| c.decoded <= offset);
        match i.checked_sub(1).and_then(|i| self.checkpoints.get(i)) {
            Some(c) => *c,
            None => Checkpoint {
                decoded: 0,
                raw: self.start,
            },
        }
    }

    /// Heap bytes this index holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.checkpoints.capacity() * std::mem::size_of::<Checkpoint>()
    }
}

/// A record that parsed: both streams indexed, and the small fields as litany read them.
/// This is the one reading of `output.json`: the pages and the views both take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordIndex {
    pub(crate) stdout: StreamIndex,
    pub(crate) stderr: StreamIndex,
    pub(crate) exit_code: i32,
    /// `None` when longer than [`STAMP_KEEP`] bytes (no timestamp is).
    pub(crate) started_at: Option<String>,
    pub(crate) ended_at: Option<String>,
}

/// The most of a `started_at`/`ended_at` string a scan keeps: a timestamp is 20-35
/// bytes; a longer string is validated as litany does, and not kept.
pub(crate) const STAMP_KEEP: usize = 64;

/// serde_json's `Deserializer` state for this one type: a cursor, plus
/// the scratch stack `ignore_value` uses.
pub(crate) struct Parser<'f> {
    src: Source<'f>,
    scratch: Vec<u8>,
}

impl<'f> Parser<'f> {
    pub(crate) fn new(src: Source<'f>) -> Self {
        Parser {
            src,
            scratch: Vec::new(),
        }
    }

    /// An error at the current index (serde_json's `error`).
    fn error(&self, msg: &str) -> ScanError {
        ScanError::Json(Fail {
            msg: msg.to_string(),
            at: Some(self.src.index()),
        })
    }

    /// An error at the byte just peeked (serde_json's `peek_error`): one
    /// past the index, capped at the end of the file.
    fn peek_error(&mut self, msg: &str) -> ScanError {
        let at = match self.src.peek() {
            Ok(Some(_)) => self.src.index() + 1,
            Ok(None) => self.src.index(),
            Err(e) => return ScanError::Io(e),
        };
        ScanError::Json(Fail {
            msg: msg.to_string(),
            at: Some(at),
        })
    }

    /// Give an unpositioned error the current index (`fix_position`).
    fn fix_position(&self, err: ScanError) -> ScanError {
        match err {
            ScanError::Json(Fail { msg, at: None }) => ScanError::Json(Fail {
                msg,
                at: Some(self.src.index()),
            }),
            other => other,
        }
    }

    fn peek_or_null(&mut self) -> Result<u8, ScanError> {
        Ok(self.src.peek()?.unwrap_or(0))
    }

    fn next_or_null(&mut self) -> Result<u8, ScanError> {
        Ok(self.src.next()?.unwrap_or(0))
    }

    fn whitespace(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            match self.src.peek()? {
                Some(b' ' | b'\n' | b'\t' | b'\r') => self.src.discard(),
                other => return Ok(other),
            }
        }
    }

    // ---- values --------------------------------------------------------

    fn parse_ident(&mut self, ident: &[u8]) -> Result<(), ScanError> {
        for expected in ident {
            match self.src.next()? {
                None => return Err(self.error(EOF_VALUE)),
                Some(next) if next != *expected => return Err(self.error(EXPECTED_IDENT)),
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// `peek_invalid_type`: the value that is there, named in an
    /// `invalid type` error, or the syntax error met while reading it.
    fn peek_invalid_type(&mut self, exp: &str) -> ScanError {
        match self.peek_invalid_type_inner(exp) {
            Ok(err) => self.fix_position(err),
            Err(err) => err,
        }
    }

    fn peek_invalid_type_inner(&mut self, exp: &str) -> Result<ScanError, ScanError> {
        Ok(match self.peek_or_null()? {
            b'n' => {
                self.src.discard();
                self.parse_ident(b"ull")?;
                invalid_type(Unexpected::Unit, exp)
            }
            b't' => {
                self.src.discard();
                self.parse_ident(b"rue")?;
                invalid_type(Unexpected::Bool(true), exp)
            }
            b'f' => {
                self.src.discard();
                self.parse_ident(b"alse")?;
                invalid_type(Unexpected::Bool(false), exp)
            }
            b'-' => {
                self.src.discard();
                self.parse_integer(false)?.invalid_type(exp)
            }
            b'0'..=b'9' => self.parse_integer(true)?.invalid_type(exp),
            b'"' => {
                self.src.discard();
                let mut all = Collect(Vec::new());
                self.string(&mut all, true)?;
                let s = String::from_utf8_lossy(&all.0);
                invalid_type(Unexpected::Str(&s), exp)
            }
            b'[' => invalid_type(Unexpected::Seq, exp),
            b'{' => invalid_type(Unexpected::Map, exp),
            _ => self.peek_error(EXPECTED_VALUE),
        })
    }

    /// A `String` value (`deserialize_str`), decoded into `sink`. Returns
    /// the file offset just after its opening quote.
    fn string_value<S: Sink>(&mut self, sink: &mut S) -> Result<u64, ScanError> {
        match self.whitespace()? {
            None => Err(self.peek_error(EOF_VALUE)),
            Some(b'"') => {
                self.src.discard();
                let start = self.src.index();
                self.string(sink, true)?;
                Ok(start)
            }
            Some(_) => Err(self.peek_invalid_type("a string")),
        }
    }

    /// An `i32` value (`deserialize_number` with serde's `i32` visitor).
    fn i32_value(&mut self) -> Result<i32, ScanError> {
        let value = match self.whitespace()? {
            None => return Err(self.peek_error(EOF_VALUE)),
            Some(b'-') => {
                self.src.discard();
                self.parse_integer(false)?.into_i32()
            }
            Some(b'0'..=b'9') => self.parse_integer(true)?.into_i32(),
            Some(_) => Err(self.peek_invalid_type("i32")),
        };
        value.map_err(|e| self.fix_position(e))
    }

    /// `ignore_value`: any JSON value, checked and thrown away. It is
    /// iterative, with brackets kept on a byte stack, so it has no depth
    /// limit, as in serde_json.
    fn ignore_value(&mut self) -> Result<(), ScanError> {
        self.scratch.clear();
        let mut enclosing: Option<u8> = None;
        loop {
            let Some(peek) = self.whitespace()? else {
                return Err(self.peek_error(EOF_VALUE));
            };
            let frame = match peek {
                b'n' => {
                    self.src.discard();
                    self.parse_ident(b"ull")?;
                    None
                }
                b't' => {
                    self.src.discard();
                    self.parse_ident(b"rue")?;
                    None
                }
                b'f' => {
                    self.src.discard();
                    self.parse_ident(b"alse")?;
                    None
                }
                b'-' => {
                    self.src.discard();
                    self.ignore_integer()?;
                    None
                }
                b'0'..=b'9' => {
                    self.ignore_integer()?;
                    None
                }
                b'"' => {
                    self.src.discard();
                    self.ignore_string()?;
                    None
                }
                frame @ (b'[' | b'{') => {
                    self.scratch.extend(enclosing.take());
                    self.src.discard();
                    Some(frame)
                }
                _ => return Err(self.peek_error(EXPECTED_VALUE)),
            };

            let (mut accept_comma, mut frame) = match frame {
                Some(frame) => (false, frame),
                None => match enclosing.take() {
                    Some(frame) => (true, frame),
                    None => match self.scratch.pop() {
                        Some(frame) => (true, frame),
                        None => return Ok(()),
                    },
                },
            };

            loop {
                match self.whitespace()? {
                    Some(b',') if accept_comma => {
                        self.src.discard();
                        break;
                    }
                    Some(b']') if frame == b'[' => {}
                    Some(b'}') if frame == b'{' => {}
                    Some(_) => {
                        if accept_comma {
                            let code = if frame == b'[' {
                                EXPECTED_LIST_COMMA_OR_END
                            } else {
                                EXPECTED_OBJECT_COMMA_OR_END
                            };
                            return Err(self.peek_error(code));
                        }
                        break;
                    }
                    None => {
                        let code = if frame == b'[' { EOF_LIST } else { EOF_OBJECT };
                        return Err(self.peek_error(code));
                    }
                }
                self.src.discard();
                frame = match self.scratch.pop() {
                    Some(frame) => frame,
                    None => return Ok(()),
                };
                accept_comma = true;
            }

            if frame == b'{' {
                match self.whitespace()? {
                    Some(b'"') => self.src.discard(),
                    Some(_) => return Err(self.peek_error(KEY_MUST_BE_A_STRING)),
                    None => return Err(self.peek_error(EOF_OBJECT)),
                }
                self.ignore_string()?;
                match self.whitespace()? {
                    Some(b':') => self.src.discard(),
                    Some(_) => return Err(self.peek_error(EXPECTED_COLON)),
                    None => return Err(self.peek_error(EOF_OBJECT)),
                }
            }
            enclosing = Some(frame);
        }
    }

    // ---- the record ----------------------------------------------------

    /// Field `i`'s value, folded into `fields`.
    fn field(&mut self, i: usize, fields: &mut Fields) -> Result<(), ScanError> {
        match i {
            0 | 1 => {
                let mut sink = IndexSink::new(fields.interval);
                let start = self.string_value(&mut sink)?;
                let mut checkpoints = sink.checkpoints;
                checkpoints.shrink_to_fit();
                let stream = StreamIndex {
                    len: sink.decoded,
                    start,
                    checkpoints,
                };
                if i == 0 {
                    fields.stdout = Some(stream);
                } else {
                    fields.stderr = Some(stream);
                }
            }
            2 => {
                fields.exit_code = Some(self.i32_value()?);
            }
            _ => {
                let mut kept = Bounded::new(STAMP_KEEP);
                self.string_value(&mut kept)?;
                let stamp = kept.take().and_then(|b| String::from_utf8(b).ok());
                if i == 3 {
                    fields.started_at = stamp;
                } else {
                    fields.ended_at = stamp;
                }
            }
        }
        fields.seen[i] = true;
        Ok(())
    }

    /// serde's derived `visit_map`, over serde_json's `MapAccess`.
    fn visit_map(&mut self, fields: &mut Fields) -> Result<(), ScanError> {
        let mut first = true;
        loop {
            let Some(peek) = self.whitespace()? else {
                return Err(self.peek_error(EOF_OBJECT));
            };
            if peek == b'}' {
                break;
            } else if first {
                first = false;
                if peek != b'"' {
                    return Err(self.peek_error(KEY_MUST_BE_A_STRING));
                }
            } else if peek == b',' {
                self.src.discard();
                match self.whitespace()? {
                    Some(b'"') => {}
                    Some(b'}') => return Err(self.peek_error(TRAILING_COMMA)),
                    Some(_) => return Err(self.peek_error(KEY_MUST_BE_A_STRING)),
                    None => return Err(self.peek_error(EOF_VALUE)),
                }
            } else {
                return Err(self.peek_error(EXPECTED_OBJECT_COMMA_OR_END));
            }
            // The key: `MapKey::deserialize_any`, a validated string.
            self.src.discard();
            let mut key = KeySink::default();
            self.string(&mut key, true)?;
            let field = key.field();
            if let Some(i) = field
                && fields.seen[i]
            {
                return Err(ScanError::unpositioned(format!(
                    "duplicate field `{}`",
                    FIELDS[i]
                )));
            }
            // `next_value`: the colon, then the value.
            match self.whitespace()? {
                Some(b':') => self.src.discard(),
                Some(_) => return Err(self.peek_error(EXPECTED_COLON)),
                None => return Err(self.peek_error(EOF_OBJECT)),
            }
            match field {
                Some(i) => self.field(i, fields)?,
                None => self.ignore_value()?,
            }
        }
        match fields.seen.iter().position(|seen| !seen) {
            Some(i) => Err(ScanError::unpositioned(format!(
                "missing field `{}`",
                FIELDS[i]
            ))),
            None => Ok(()),
        }
    }

    /// serde's derived `visit_seq`, over serde_json's `SeqAccess`.
    fn visit_seq(&mut self, fields: &mut Fields) -> Result<(), ScanError> {
        for i in 0..FIELDS.len() {
            let Some(peek) = self.whitespace()? else {
                return Err(self.peek_error(EOF_LIST));
            };
            let more = if peek == b']' {
                false
            } else if i == 0 {
                true
            } else if peek == b',' {
                self.src.discard();
                match self.whitespace()? {
                    Some(b']') => return Err(self.peek_error(TRAILING_COMMA)),
                    Some(_) => true,
                    None => return Err(self.peek_error(EOF_VALUE)),
                }
            } else {
                return Err(self.peek_error(EXPECTED_LIST_COMMA_OR_END));
            };
            if !more {
                return Err(ScanError::unpositioned(format!(
                    "invalid length {i}, expected {EXPECTING_SEQ}"
                )));
            }
            self.field(i, fields)?;
        }
        Ok(())
    }

    fn end_map(&mut self) -> Result<(), ScanError> {
        match self.whitespace()? {
            Some(b'}') => {
                self.src.discard();
                Ok(())
            }
            Some(b',') => Err(self.peek_error(TRAILING_COMMA)),
            Some(_) => Err(self.peek_error(TRAILING_CHARACTERS)),
            None => Err(self.peek_error(EOF_OBJECT)),
        }
    }

    fn end_seq(&mut self) -> Result<(), ScanError> {
        match self.whitespace()? {
            Some(b']') => {
                self.src.discard();
                Ok(())
            }
            Some(b',') => {
                self.src.discard();
                match self.whitespace()? {
                    Some(b']') => Err(self.peek_error(TRAILING_COMMA)),
                    _ => Err(self.peek_error(TRAILING_CHARACTERS)),
                }
            }
            Some(_) => Err(self.peek_error(TRAILING_CHARACTERS)),
            None => Err(self.peek_error(EOF_LIST)),
        }
    }

    /// `deserialize_struct`, then `Deserializer::end`.
    fn record(&mut self, interval: u64) -> Result<RecordIndex, ScanError> {
        let mut fields = Fields {
            interval,
            seen: [false; 5],
            stdout: None,
            stderr: None,
            exit_code: None,
            started_at: None,
            ended_at: None,
        };
        let value = match self.whitespace()? {
            None => return Err(self.peek_error(EOF_VALUE)),
            Some(open @ (b'[' | b'{')) => {
                self.src.discard();
                let (ret, end) = if open == b'[' {
                    let ret = self.visit_seq(&mut fields);
                    (ret, self.end_seq())
                } else {
                    let ret = self.visit_map(&mut fields);
                    (ret, self.end_map())
                };
                // The visitor's error wins. The closing check still ran,
                // and moved the index that `fix_position` will use.
                match (ret, end) {
                    (Err(ScanError::Io(e)), _) | (_, Err(ScanError::Io(e))) => {
                        Err(ScanError::Io(e))
                    }
                    (Err(e), _) | (Ok(()), Err(e)) => Err(e),
                    (Ok(()), Ok(())) => Ok(()),
                }
            }
            Some(_) => Err(self.peek_invalid_type(EXPECTING_STRUCT)),
        };
        value.map_err(|e| self.fix_position(e))?;
        if self.whitespace()?.is_some() {
            return Err(self.peek_error(TRAILING_CHARACTERS));
        }
        match (fields.stdout, fields.stderr, fields.exit_code) {
            (Some(stdout), Some(stderr), Some(exit_code)) => Ok(RecordIndex {
                stdout,
                stderr,
                exit_code,
                started_at: fields.started_at,
                ended_at: fields.ended_at,
            }),
            // Unreachable: every field was seen, or visit_* failed.
            _ => Err(ScanError::unpositioned(format!(
                "missing field `{}`",
                FIELDS[0]
            ))),
        }
    }
}

/// The fields found so far.
struct Fields {
    interval: u64,
    seen: [bool; 5],
    stdout: Option<StreamIndex>,
    stderr: Option<StreamIndex>,
    exit_code: Option<i32>,
    started_at: Option<String>,
    ended_at: Option<String>,
}

/// How many bytes a pass reads at a time.
const SCAN_CHUNK: usize = 64 * 1024;
/// How many bytes a page read reads at a time.
const PAGE_CHUNK: usize = 16 * 1024;

/// Parse `file` as litany does, in one streaming pass, and index both
/// streams with a checkpoint every `interval` decoded bytes.
pub(crate) fn scan(file: &File, interval: u64) -> Result<RecordIndex, ScanError> {
    Parser::new(Source::new(file, 0, SCAN_CHUNK)).record(interval)
}

/// Why a range could not be served from an index.
#[derive(Debug)]
pub(crate) enum RangeError {
    Io(io::Error),
    /// The file no longer holds what was indexed.
    Changed,
}

/// Decoded bytes `[offset, offset + len)` of an indexed stream, clamped
/// to its end. Decoding starts at the nearest checkpoint, so the cost
/// does not depend on `offset`.
pub(crate) fn read_range(
    file: &File,
    stream: &StreamIndex,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, RangeError> {
    let end = offset.saturating_add(len).min(stream.len);
    if offset >= end {
        return Ok(Vec::new());
    }
    let want = usize::try_from(end - offset).map_err(|_| RangeError::Changed)?;
    let from = stream.restart_for(offset);
    let mut sink = CopySink {
        skip: offset - from.decoded,
        want,
        out: Vec::with_capacity(want),
    };
    let mut parser = Parser::new(Source::new(file, from.raw, PAGE_CHUNK));
    match parser.string(&mut sink, false) {
        Ok(_) if sink.out.len() == want => Ok(sink.out),
        Ok(_) | Err(ScanError::Json(_)) => Err(RangeError::Changed),
        Err(ScanError::Io(e)) => Err(RangeError::Io(e)),
    }
}

/// The byte a one-letter JSON escape stands for (`\\n` is a newline), as serde_json
/// decodes it; `None` for `u` (four hex digits follow) and for letters JSON has no escape
/// for.
pub(crate) fn simple_escape(letter: u8) -> Option<u8> {
    Some(match letter {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        _ => return None,
    })
}
