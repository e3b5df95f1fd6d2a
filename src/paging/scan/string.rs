//! Strings, as serde_json's `SliceRead` reads them: the checked `parse_str` a stream's
//! bytes go through (escapes decoded, UTF-8 checked at the closing quote) and the looser
//! `ignore_str` for strings inside an ignored value.

use super::sink::Sink;
use super::{
    AT_END, CONTROL_CHARACTER, EOF_STRING, Fail, INVALID_ESCAPE, INVALID_UNICODE,
    LONE_LEADING_SURROGATE, Parser, ScanError, UNEXPECTED_END_OF_HEX_ESCAPE, simple_escape,
};

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

impl Parser<'_> {
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
    pub(super) fn ignore_string(&mut self) -> Result<(), ScanError> {
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
}
