//! Where a string's decoded bytes go as the scan decodes them: thrown away, kept, matched
//! against the field names, indexed with checkpoints, or copied for a page.

use super::{Checkpoint, FIELDS};

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

/// Keeps everything. Only for an `invalid type: string "…"` message,
/// which quotes the whole string, as serde's does.
pub(super) struct Collect(pub(super) Vec<u8>);

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

/// Keeps a short string whole: [`Bounded::take`] is `None` once it grew past its bound
/// (the rest is still decoded and checked, only not kept).
pub(super) struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

impl Bounded {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            over: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) -> bool {
        if self.over || self.bytes.len() + bytes.len() > self.limit {
            self.over = true;
            self.bytes = Vec::new();
        } else {
            self.bytes.extend_from_slice(bytes);
        }
        true
    }

    pub(super) fn take(self) -> Option<Vec<u8>> {
        (!self.over).then_some(self.bytes)
    }
}

impl Sink for Bounded {
    fn raw(&mut self, bytes: &[u8], _: u64) -> bool {
        self.push(bytes)
    }
    fn escaped(&mut self, bytes: &[u8], _: u64) -> bool {
        self.push(bytes)
    }
}

/// Keeps just enough of a key to tell whether it is a field name.
#[derive(Default)]
pub(super) struct KeySink {
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

    pub(super) fn field(&self) -> Option<usize> {
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
pub(super) struct IndexSink {
    interval: u64,
    pub(super) decoded: u64,
    next: u64,
    pub(super) checkpoints: Vec<Checkpoint>,
}

impl IndexSink {
    pub(super) fn new(interval: u64) -> Self {
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
pub(super) struct CopySink {
    pub(super) skip: u64,
    pub(super) want: usize,
    pub(super) out: Vec<u8>,
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
