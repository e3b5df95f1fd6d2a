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

/// Both streams of a record that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordIndex {
    pub(crate) stdout: StreamIndex,
    pub(crate) stderr: StreamIndex,
}

/// Receives a string's decoded bytes as they are decoded. Each call
/// returns `false` to stop early.
pub(crate) trait Sink {
    /// Bytes copied unchanged from the file, starting at file offset `at`.
    /// Every byte boundary inside them is a token boundary.
    fn raw(&mut self, bytes: &[u8], at: u64) -> bool;
    /// The bytes of one escape (a surrogate pair counts as one). `end` is
    /// the file offset just past the escape.
    fn escaped(&mut self, bytes: &[u8], end: u64) -> bool;
}

/// How many leading bytes of `bytes` a string copies unchanged: the run before
/// the first quote, backslash or control byte. This is the scanner's inner loop
/// (every byte of every capture passes through it), so it looks at eight bytes
/// at a time: a word holds a stop byte exactly when one of the three masks below
/// has a high bit set, and the lowest such bit is the first stop byte, since a
/// borrow only runs toward higher bytes.
pub(crate) fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
    const CONTROLS: u64 = u64::from_ne_bytes([0x20; 8]);
    let zero_in = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in words.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let stops = zero_in(w ^ QUOTES)
            | zero_in(w ^ BACKSLASHES)
            | (w.wrapping_sub(CONTROLS) & !w & HIGHS);
        if stops != 0 {
            return at + (stops.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + words
        .remainder()
        .iter()
        .position(|&b| ends_a_run(b))
        .unwrap_or(words.remainder().len())
}

/// Whether a string's plain run stops at byte `b`: a quote, a backslash or a control byte.
fn ends_a_run(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Throws the bytes away (strings that are only validated).
struct Discard;

impl Sink for Discard {
    fn raw(&mut self, _: &[u8], _: u64) -> bool {
        true
    }
    fn escaped(&mut self, _: &[u8], _: u64) -> bool {
        true
    }
}

/// Keeps everything. Only for an `invalid type: string "…"` message,
/// which quotes the whole string, as serde's does.
struct Collect(Vec<u8>);

impl Sink for Collect {
    fn raw(&mut self, bytes: &[u8], _: u64) -> bool {
        self.0.extend_from_slice(bytes);
        true
    }
    fn escaped(&mut self, bytes: &[u8], _: u64) -> bool {
        self.0.extend_from_slice(bytes);
        true
    }
}

/// Keeps just enough of a key to tell whether it is a field name.
#[derive(Default)]
struct KeySink {
    bytes: Vec<u8>,
    long: bool,
}

impl KeySink {
    const LONGEST: usize = 10;

    fn push(&mut self, bytes: &[u8]) -> bool {
        if self.bytes.len() + bytes.len() > Self::LONGEST {
            self.long = true;
        } else {
            self.bytes.extend_from_slice(bytes);
        }
        true
    }

    fn field(&self) -> Option<usize> {
        if self.long {
            return None;
        }
        FIELDS
            .iter()
            .position(|f| f.as_bytes() == self.bytes.as_slice())
    }
}

impl Sink for KeySink {
    fn raw(&mut self, bytes: &[u8], _: u64) -> bool {
        self.push(bytes)
    }
    fn escaped(&mut self, bytes: &[u8], _: u64) -> bool {
        self.push(bytes)
    }
}

/// Counts a stream's decoded bytes and drops a checkpoint at the first
/// token boundary at or after every multiple of `interval`.
struct IndexSink {
    interval: u64,
    decoded: u64,
    next: u64,
    checkpoints: Vec<Checkpoint>,
}

impl IndexSink {
    fn new(interval: u64) -> Self {
        let interval = interval.max(1);
        IndexSink {
            interval,
            decoded: 0,
            next: interval,
            checkpoints: Vec::new(),
        }
    }
}

impl Sink for IndexSink {
    fn raw(&mut self, bytes: &[u8], at: u64) -> bool {
        let start = self.decoded;
        let end = start + bytes.len() as u64;
        // Every byte boundary of a raw run is a token boundary, so each
        // multiple that falls inside the run gets its exact checkpoint.
        while self.next <= end {
            self.checkpoints.push(Checkpoint {
                decoded: self.next,
                raw: at + (self.next - start),
            });
            self.next = self.next.saturating_add(self.interval);
        }
        self.decoded = end;
        true
    }

    fn escaped(&mut self, bytes: &[u8], end: u64) -> bool {
        self.decoded += bytes.len() as u64;
        if self.decoded >= self.next {
            self.checkpoints.push(Checkpoint {
                decoded: self.decoded,
                raw: end,
            });
            self.next = (self.decoded / self.interval + 1).saturating_mul(self.interval);
        }
        true
    }
}

/// Copies decoded bytes `[skip, skip + want)` (counted from where
/// decoding started) and stops once it has them.
struct CopySink {
    skip: u64,
    want: usize,
    out: Vec<u8>,
}

impl CopySink {
    fn take(&mut self, bytes: &[u8]) -> bool {
        let skipped = usize::try_from(self.skip)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        self.skip -= skipped as u64;
        let rest = &bytes[skipped..];
        let room = self.want - self.out.len();
        self.out.extend_from_slice(&rest[..rest.len().min(room)]);
        self.out.len() < self.want
    }
}

impl Sink for CopySink {
    fn raw(&mut self, bytes: &[u8], _: u64) -> bool {
        self.take(bytes)
    }
    fn escaped(&mut self, bytes: &[u8], _: u64) -> bool {
        self.take(bytes)
    }
}

/// An incremental UTF-8 check with `str::from_utf8`'s rules: no overlong
/// forms, no surrogates, nothing past U+10FFFF.
#[derive(Default)]
struct Utf8 {
    need: u8,
    lo: u8,
    hi: u8,
    bad: bool,
}

impl Utf8 {
    fn feed(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() && !self.bad {
            if self.need == 0 {
                // ASCII runs, eight bytes at a time.
                while let Some(word) = bytes.get(i..i + 8) {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(word);
                    if u64::from_le_bytes(w) & 0x8080_8080_8080_8080 != 0 {
                        break;
                    }
                    i += 8;
                }
                let Some(&b) = bytes.get(i) else { break };
                i += 1;
                let (need, lo, hi) = match b {
                    0x00..=0x7F => continue,
                    0xC2..=0xDF => (1, 0x80, 0xBF),
                    0xE0 => (2, 0xA0, 0xBF),
                    0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
                    0xED => (2, 0x80, 0x9F),
                    0xF0 => (3, 0x90, 0xBF),
                    0xF1..=0xF3 => (3, 0x80, 0xBF),
                    0xF4 => (3, 0x80, 0x8F),
                    _ => {
                        self.bad = true;
                        break;
                    }
                };
                (self.need, self.lo, self.hi) = (need, lo, hi);
            } else {
                let b = bytes[i];
                i += 1;
                if b < self.lo || b > self.hi {
                    self.bad = true;
                    break;
                }
                self.need -= 1;
                (self.lo, self.hi) = (0x80, 0xBF);
            }
        }
    }

    fn complete(&self) -> bool {
        !self.bad && self.need == 0
    }
}

/// `serde_json::de::ParserNumber`.
enum Number {
    F64(f64),
    U64(u64),
    I64(i64),
}

impl Number {
    fn invalid_type(self, exp: &str) -> ScanError {
        match self {
            Number::F64(x) => invalid_type(Unexpected::Float(x), exp),
            Number::U64(x) => invalid_type(Unexpected::Unsigned(x), exp),
            Number::I64(x) => invalid_type(Unexpected::Signed(x), exp),
        }
    }

    /// serde's `i32` visitor.
    fn into_i32(self) -> Result<i32, ScanError> {
        match self {
            Number::U64(v) => {
                i32::try_from(v).map_err(|_| invalid_value(Unexpected::Unsigned(v), "i32"))
            }
            Number::I64(v) => {
                i32::try_from(v).map_err(|_| invalid_value(Unexpected::Signed(v), "i32"))
            }
            Number::F64(v) => Err(invalid_type(Unexpected::Float(v), "i32")),
        }
    }
}

/// `10^i` as the literal `1e<i>` evaluates (serde_json's `POW10` table),
/// for `i` in `0..=308`.
fn pow10(i: usize) -> Option<f64> {
    (i <= 308).then(|| format!("1e{i}").parse::<f64>().unwrap_or(f64::NAN))
}

/// `significand * 10 + digit` would overflow `limit`.
fn overflows(significand: u64, digit: u64, limit: u64) -> bool {
    significand >= limit / 10 && (significand > limit / 10 || digit > limit % 10)
}

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

    // ---- strings -------------------------------------------------------

    /// `SliceRead::decode_hex_escape`: needs four more bytes in the file,
    /// whatever they are, and consumes them before it checks them.
    fn hex_escape(&mut self) -> Result<u16, ScanError> {
        if self.src.fill(4)? < 4 {
            return Err(ScanError::Json(Fail {
                msg: EOF_STRING.to_string(),
                at: Some(AT_END),
            }));
        }
        let mut n: u16 = 0;
        let mut ok = true;
        for &b in &self.src.buffered()[..4] {
            let v = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => {
                    ok = false;
                    0
                }
            };
            n = (n << 4) | u16::from(v);
        }
        self.src.advance(4);
        if ok {
            Ok(n)
        } else {
            Err(self.error(INVALID_ESCAPE))
        }
    }

    /// One escape after its backslash, decoded into `out`
    /// (`parse_escape` with `validate`).
    fn escape(&mut self, out: &mut [u8; 4]) -> Result<usize, ScanError> {
        let Some(ch) = self.src.next()? else {
            return Err(self.error(EOF_STRING));
        };
        if ch == b'u' {
            return self.unicode_escape(out);
        }
        out[0] = simple_escape(ch).ok_or_else(|| self.error(INVALID_ESCAPE))?;
        Ok(1)
    }

    /// `parse_unicode_escape` with `validate`: surrogates must come as a
    /// leading-trailing pair, or it is an error.
    fn unicode_escape(&mut self, out: &mut [u8; 4]) -> Result<usize, ScanError> {
        let n = self.hex_escape()?;
        if (0xDC00..=0xDFFF).contains(&n) {
            return Err(self.error(LONE_LEADING_SURROGATE));
        }
        let code = if (0xD800..=0xDBFF).contains(&n) {
            for expected in [b'\\', b'u'] {
                match self.src.peek()? {
                    None => return Err(self.error(EOF_STRING)),
                    Some(b) => {
                        self.src.discard();
                        if b != expected {
                            return Err(self.error(UNEXPECTED_END_OF_HEX_ESCAPE));
                        }
                    }
                }
            }
            let n2 = self.hex_escape()?;
            if !(0xDC00..=0xDFFF).contains(&n2) {
                return Err(self.error(LONE_LEADING_SURROGATE));
            }
            ((u32::from(n - 0xD800) << 10) | u32::from(n2 - 0xDC00)) + 0x1_0000
        } else {
            u32::from(n)
        };
        let c = char::from_u32(code).ok_or_else(|| self.error(INVALID_UNICODE))?;
        Ok(c.encode_utf8(out).len())
    }

    /// The body of a string after its opening quote, into `sink`
    /// (`SliceRead::parse_str`). With `check_utf8`, raw bytes must be
    /// UTF-8, checked at the closing quote as serde_json does. Returns
    /// `false` if the sink stopped it first.
    pub(crate) fn string<S: Sink>(
        &mut self,
        sink: &mut S,
        check_utf8: bool,
    ) -> Result<bool, ScanError> {
        let mut utf8 = Utf8::default();
        loop {
            if self.src.fill(1)? == 0 {
                return Err(self.error(EOF_STRING));
            }
            let at = self.src.index();
            let run = self.src.buffered();
            let n = plain_run(run);
            if n > 0 {
                let bytes = &run[..n];
                if check_utf8 {
                    utf8.feed(bytes);
                }
                let go = sink.raw(bytes, at);
                self.src.advance(n);
                if !go {
                    return Ok(false);
                }
                continue;
            }
            let b = run[0];
            self.src.advance(1);
            match b {
                b'"' => {
                    if check_utf8 && !utf8.complete() {
                        return Err(self.error(INVALID_UNICODE));
                    }
                    return Ok(true);
                }
                b'\\' => {
                    let mut out = [0u8; 4];
                    let len = self.escape(&mut out)?;
                    let bytes = &out[..len];
                    if check_utf8 {
                        utf8.feed(bytes);
                    }
                    if !sink.escaped(bytes, self.src.index()) {
                        return Ok(false);
                    }
                }
                _ => return Err(self.error(CONTROL_CHARACTER)),
            }
        }
    }

    /// `SliceRead::ignore_str`: the looser check for strings inside an
    /// ignored value. No UTF-8 check, surrogates unchecked, and a control
    /// byte is reported at its own index rather than after it.
    fn ignore_string(&mut self) -> Result<(), ScanError> {
        loop {
            if self.src.fill(1)? == 0 {
                return Err(self.error(EOF_STRING));
            }
            let run = self.src.buffered();
            let n = plain_run(run);
            if n > 0 {
                self.src.advance(n);
                continue;
            }
            match run[0] {
                b'"' => {
                    self.src.advance(1);
                    return Ok(());
                }
                b'\\' => {
                    self.src.advance(1);
                    let Some(ch) = self.src.next()? else {
                        return Err(self.error(EOF_STRING));
                    };
                    match ch {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            self.hex_escape()?;
                        }
                        _ => return Err(self.error(INVALID_ESCAPE)),
                    }
                }
                _ => return Err(self.error(CONTROL_CHARACTER)),
            }
        }
    }

    // ---- numbers -------------------------------------------------------

    fn parse_integer(&mut self, positive: bool) -> Result<Number, ScanError> {
        let Some(next) = self.src.next()? else {
            return Err(self.error(EOF_VALUE));
        };
        match next {
            b'0' => match self.peek_or_null()? {
                b'0'..=b'9' => Err(self.peek_error(INVALID_NUMBER)),
                _ => self.parse_number(positive, 0),
            },
            c @ b'1'..=b'9' => {
                let mut significand = u64::from(c - b'0');
                loop {
                    match self.peek_or_null()? {
                        c @ b'0'..=b'9' => {
                            let digit = u64::from(c - b'0');
                            if overflows(significand, digit, u64::MAX) {
                                return Ok(Number::F64(
                                    self.parse_long_integer(positive, significand)?,
                                ));
                            }
                            self.src.discard();
                            significand = significand * 10 + digit;
                        }
                        _ => return self.parse_number(positive, significand),
                    }
                }
            }
            _ => Err(self.error(INVALID_NUMBER)),
        }
    }

    fn parse_number(&mut self, positive: bool, significand: u64) -> Result<Number, ScanError> {
        Ok(match self.peek_or_null()? {
            b'.' => Number::F64(self.parse_decimal(positive, significand, 0)?),
            b'e' | b'E' => Number::F64(self.parse_exponent(positive, significand, 0)?),
            _ => {
                if positive {
                    Number::U64(significand)
                } else {
                    let neg = (significand as i64).wrapping_neg();
                    // A float on underflow, and on `-0`.
                    if neg >= 0 {
                        Number::F64(-(significand as f64))
                    } else {
                        Number::I64(neg)
                    }
                }
            }
        })
    }

    fn parse_decimal(
        &mut self,
        positive: bool,
        mut significand: u64,
        exponent_before: i32,
    ) -> Result<f64, ScanError> {
        self.src.discard();
        let mut exponent_after: i32 = 0;
        while let c @ b'0'..=b'9' = self.peek_or_null()? {
            let digit = u64::from(c - b'0');
            if overflows(significand, digit, u64::MAX) {
                let exponent = exponent_before.wrapping_add(exponent_after);
                return self.parse_decimal_overflow(positive, significand, exponent);
            }
            self.src.discard();
            significand = significand * 10 + digit;
            exponent_after = exponent_after.wrapping_sub(1);
        }
        if exponent_after == 0 {
            return Err(match self.src.peek()? {
                Some(_) => self.peek_error(INVALID_NUMBER),
                None => self.peek_error(EOF_VALUE),
            });
        }
        let exponent = exponent_before.wrapping_add(exponent_after);
        match self.peek_or_null()? {
            b'e' | b'E' => self.parse_exponent(positive, significand, exponent),
            _ => self.f64_from_parts(positive, significand, exponent),
        }
    }

    fn parse_exponent(
        &mut self,
        positive: bool,
        significand: u64,
        starting_exp: i32,
    ) -> Result<f64, ScanError> {
        self.src.discard();
        let positive_exp = match self.peek_or_null()? {
            b'+' => {
                self.src.discard();
                true
            }
            b'-' => {
                self.src.discard();
                false
            }
            _ => true,
        };
        let Some(next) = self.src.next()? else {
            return Err(self.error(EOF_VALUE));
        };
        let mut exp = match next {
            c @ b'0'..=b'9' => i32::from(c - b'0'),
            _ => return Err(self.error(INVALID_NUMBER)),
        };
        while let c @ b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
            let digit = i32::from(c - b'0');
            if exp >= i32::MAX / 10 && (exp > i32::MAX / 10 || digit > i32::MAX % 10) {
                return self.parse_exponent_overflow(positive, significand == 0, positive_exp);
            }
            exp = exp * 10 + digit;
        }
        let final_exp = if positive_exp {
            starting_exp.saturating_add(exp)
        } else {
            starting_exp.saturating_sub(exp)
        };
        self.f64_from_parts(positive, significand, final_exp)
    }

    /// serde_json without `float_roundtrip`.
    fn f64_from_parts(
        &mut self,
        positive: bool,
        significand: u64,
        mut exponent: i32,
    ) -> Result<f64, ScanError> {
        let mut f = significand as f64;
        loop {
            match pow10(exponent.wrapping_abs() as usize) {
                Some(pow) => {
                    if exponent >= 0 {
                        f *= pow;
                        if f.is_infinite() {
                            return Err(self.error(NUMBER_OUT_OF_RANGE));
                        }
                    } else {
                        f /= pow;
                    }
                    break;
                }
                None => {
                    if f == 0.0 {
                        break;
                    }
                    if exponent >= 0 {
                        return Err(self.error(NUMBER_OUT_OF_RANGE));
                    }
                    f /= 1e308;
                    exponent += 308;
                }
            }
        }
        Ok(if positive { f } else { -f })
    }

    fn parse_long_integer(&mut self, positive: bool, significand: u64) -> Result<f64, ScanError> {
        let mut exponent: i32 = 0;
        loop {
            match self.peek_or_null()? {
                b'0'..=b'9' => {
                    self.src.discard();
                    exponent = exponent.wrapping_add(1);
                }
                b'.' => return self.parse_decimal(positive, significand, exponent),
                b'e' | b'E' => return self.parse_exponent(positive, significand, exponent),
                _ => return self.f64_from_parts(positive, significand, exponent),
            }
        }
    }

    fn parse_decimal_overflow(
        &mut self,
        positive: bool,
        significand: u64,
        exponent: i32,
    ) -> Result<f64, ScanError> {
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
        }
        match self.peek_or_null()? {
            b'e' | b'E' => self.parse_exponent(positive, significand, exponent),
            _ => self.f64_from_parts(positive, significand, exponent),
        }
    }

    fn parse_exponent_overflow(
        &mut self,
        positive: bool,
        zero_significand: bool,
        positive_exp: bool,
    ) -> Result<f64, ScanError> {
        if !zero_significand && positive_exp {
            return Err(self.error(NUMBER_OUT_OF_RANGE));
        }
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
        }
        Ok(if positive { 0.0 } else { -0.0 })
    }

    fn ignore_integer(&mut self) -> Result<(), ScanError> {
        match self.next_or_null()? {
            b'0' => {
                if let b'0'..=b'9' = self.peek_or_null()? {
                    return Err(self.peek_error(INVALID_NUMBER));
                }
            }
            b'1'..=b'9' => {
                while let b'0'..=b'9' = self.peek_or_null()? {
                    self.src.discard();
                }
            }
            _ => return Err(self.error(INVALID_NUMBER)),
        }
        match self.peek_or_null()? {
            b'.' => self.ignore_decimal(),
            b'e' | b'E' => self.ignore_exponent(),
            _ => Ok(()),
        }
    }

    fn ignore_decimal(&mut self) -> Result<(), ScanError> {
        self.src.discard();
        let mut at_least_one_digit = false;
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
            at_least_one_digit = true;
        }
        if !at_least_one_digit {
            return Err(self.peek_error(INVALID_NUMBER));
        }
        match self.peek_or_null()? {
            b'e' | b'E' => self.ignore_exponent(),
            _ => Ok(()),
        }
    }

    fn ignore_exponent(&mut self) -> Result<(), ScanError> {
        self.src.discard();
        if let b'+' | b'-' = self.peek_or_null()? {
            self.src.discard();
        }
        match self.next_or_null()? {
            b'0'..=b'9' => {}
            _ => return Err(self.error(INVALID_NUMBER)),
        }
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
        }
        Ok(())
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
                self.i32_value()?;
            }
            _ => {
                self.string_value(&mut Discard)?;
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
        match (fields.stdout, fields.stderr) {
            (Some(stdout), Some(stderr)) => Ok(RecordIndex { stdout, stderr }),
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
