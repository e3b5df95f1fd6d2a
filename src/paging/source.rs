//! Bytes of a capture file, read forward with `pread`.
//!
//! [`Source`] is a small cursor over a shared `&File`. It never moves the
//! file's own offset (it reads with [`FileExt::read_at`]), so any number
//! of readers can share one open file. It buffers a chunk at a time, so
//! memory does not grow with the file. It can start at any byte offset,
//! which is how a page read resumes from a checkpoint.
//!
//! [`position`] turns a byte index into serde_json's `line`/`column` pair
//! by counting newlines from the start of the file. It runs only on the
//! error path.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A forward cursor over `file`, starting at a chosen offset.
pub(crate) struct Source<'f> {
    file: &'f File,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    base: u64,
    /// Next unread byte in `buf`.
    pos: usize,
    /// Bytes of `buf` that hold file data.
    filled: usize,
    /// A read returned 0: nothing lies past `base + filled`.
    eof: bool,
}

/// `read_at`, retried on `EINTR`.
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    loop {
        match file.read_at(buf, offset) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

impl<'f> Source<'f> {
    /// A cursor at byte `offset` of `file` that reads `chunk` bytes at a time.
    pub(crate) fn new(file: &'f File, offset: u64, chunk: usize) -> Self {
        Source {
            file,
            buf: vec![0; chunk.max(16)],
            base: offset,
            pos: 0,
            filled: 0,
            eof: false,
        }
    }

    /// File offset of the next unread byte.
    pub(crate) fn index(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Make at least `want` bytes (at most 16) readable without another
    /// read, unless the file ends first. Returns how many are buffered.
    pub(crate) fn fill(&mut self, want: usize) -> io::Result<usize> {
        while self.filled - self.pos < want && !self.eof {
            if self.pos > 0 {
                self.buf.copy_within(self.pos..self.filled, 0);
                self.base += self.pos as u64;
                self.filled -= self.pos;
                self.pos = 0;
            }
            let at = self.base + self.filled as u64;
            let n = read_at(self.file, &mut self.buf[self.filled..], at)?;
            if n == 0 {
                self.eof = true;
            } else {
                self.filled += n;
            }
        }
        Ok(self.filled - self.pos)
    }

    /// The next byte, not consumed.
    pub(crate) fn peek(&mut self) -> io::Result<Option<u8>> {
        if self.pos < self.filled {
            return Ok(Some(self.buf[self.pos]));
        }
        Ok(if self.fill(1)? == 0 {
            None
        } else {
            Some(self.buf[self.pos])
        })
    }

    /// The next byte, consumed.
    pub(crate) fn next(&mut self) -> io::Result<Option<u8>> {
        let b = self.peek()?;
        if b.is_some() {
            self.pos += 1;
        }
        Ok(b)
    }

    /// Consume the byte [`Source::peek`] just returned.
    pub(crate) fn discard(&mut self) {
        self.advance(1);
    }

    /// The buffered, unread bytes. Empty only when the buffer is drained,
    /// so call [`Source::fill`] first.
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..self.filled]
    }

    /// Consume `n` buffered bytes.
    pub(crate) fn advance(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.filled);
    }
}

/// serde_json's position for byte index `at`, capped at the end of the
/// file: `line` is one plus the newlines before `at`, and `column` is the
/// number of bytes between the last of them and `at`. This is
/// `SliceRead::position_of_index`.
pub(crate) fn position(file: &File, at: u64) -> io::Result<(u64, u64)> {
    let mut buf = vec![0; 64 * 1024];
    let mut offset = 0u64;
    let mut newlines = 0u64;
    let mut line_start = 0u64;
    while offset < at {
        let want = usize::try_from(at - offset).map_or(buf.len(), |w| w.min(buf.len()));
        let n = read_at(file, &mut buf[..want], offset)?;
        if n == 0 {
            break;
        }
        for (i, b) in buf[..n].iter().enumerate() {
            if *b == b'\n' {
                newlines += 1;
                line_start = offset + i as u64 + 1;
            }
        }
        offset += n as u64;
    }
    Ok((1 + newlines, offset - line_start))
}
