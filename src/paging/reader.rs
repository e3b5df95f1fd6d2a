//! Serving pages of a capture's streams, out of a bounded cache of
//! indexes.
//!
//! A page is the bytes `read_tool_output` prints: a byte range of the
//! stream's `String` as litany's serde parse produces it (escapes
//! decoded, UTF-8), not a range of the file. This module gives the same
//! bytes without holding that string:
//! - **One parse per capture.** The first request for a [`CaptureKey`]
//!   runs one streaming pass ([`super::scan`]). It refuses exactly what
//!   litany refuses, with litany's message, and otherwise records each
//!   stream's length and a checkpoint every `interval` decoded bytes.
//!   Concurrent first requests wait for that one pass. A refusal is
//!   cached like a success, because the bytes behind a key do not
//!   change. An I/O failure is not cached.
//! - **Cost independent of offset.** A range is decoded from the nearest
//!   checkpoint at or before it, so it costs at most one interval plus
//!   the range, whether it is at byte 0 or byte 50 000 000.
//! - **Bounded memory.** An entry costs its checkpoints (16 bytes per
//!   interval per stream) plus a fixed overhead, or the length of its
//!   message. The cache evicts least-recently-used entries to stay
//!   within its byte budget.
//! - **Shared files.** The caller opens the file and keeps it. Reads use
//!   `pread`, so concurrent requests can share one `&File`.
//!
//! The caller chooses the key. `(dev, ino, size, mtime)` works because
//! litany never rewrites a capture in place; it renames a new file over
//! it, which gives a new inode.

use super::address::{Address, AddressError, PAGE_BYTES, RecordPath, Stream};
use super::banner::{banner, next_address};
use super::scan::{RangeError, RecordIndex, ScanError, StreamIndex, read_range, scan};
use crate::lru::ByteLru;
use parking_lot::Mutex;
use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Decoded bytes between checkpoints. At 16 bytes a checkpoint, an index
/// is 0.2% of its stream (100 KiB for 50 MB), and a page costs at most
/// 8 KiB + 4 KiB of decoding, about 12 µs: less than one FUSE round trip,
/// where 64 KiB cost 45 µs (`cargo run --release --example pagebench`).
pub const CHECKPOINT_BYTES: u64 = 8 * 1024;

/// What identifies one version of one capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CaptureKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    /// Nanoseconds since the epoch, saturated outside 1678-2262: a key
    /// of 32 bytes with no 16-byte alignment keeps both caches' slots small.
    pub(crate) mtime_ns: i64,
}

/// `sec` seconds and `nsec` nanoseconds as one count, saturated at `i64`'s ends.
fn nanos(sec: i64, nsec: i64) -> i64 {
    let n = i128::from(sec) * 1_000_000_000 + i128::from(nsec);
    i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX })
}

impl CaptureKey {
    /// The key of the file `meta` describes.
    pub(crate) fn from_metadata(meta: &Metadata) -> Self {
        CaptureKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
        }
    }

    /// The key of a file the caller has already `stat`ed.
    pub(crate) fn from_stat(st: &crate::workspace::backing::Stat) -> Self {
        CaptureKey {
            dev: st.dev,
            ino: st.ino,
            size: st.size,
            mtime_ns: nanos(st.mtime.0, st.mtime.1),
        }
    }

    /// The key of an open file (`fstat`).
    pub fn of(file: &File) -> io::Result<Self> {
        Ok(Self::from_metadata(&file.metadata()?))
    }
}

/// One page, as `read_tool_output` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The page's bytes (stdout of the tool). It may split a character.
    pub bytes: Vec<u8>,
    /// The stream's whole length in bytes.
    pub len: u64,
    /// The stderr line, with its trailing newline.
    pub(crate) banner: String,
    /// Where the next page starts, or `None` at the end of the stream.
    pub(crate) next: Option<Address>,
}

/// Every way a page request is refused or fails. `Display` prints the
/// tool's message for the refusals (without the CLI's
/// `litany tool read_tool_output: ` prefix).
#[derive(Debug)]
pub enum PageError {
    /// Not the grammar.
    Malformed(AddressError),
    /// The address names another agent than the caller.
    ForeignAgent { theirs: String, ours: String },
    /// The capture file could not be opened.
    NoRecord { record: PathBuf, source: io::Error },
    /// The capture is not a record litany would parse. `reason` is
    /// serde_json's message. `record` is the path the message names; the
    /// tool names `<workspace>/<record>` (see [`PageError::with_record`]).
    Unreadable {
        record: Option<PathBuf>,
        reason: String,
    },
    /// The offset is past the end of the stream.
    PastEnd {
        offset: u64,
        stream: Stream,
        total: u64,
    },
    /// Reading the capture failed.
    Io(io::Error),
    /// The capture no longer holds what was indexed under its key.
    Changed,
}

impl PageError {
    /// The errno a filesystem should answer with. Every refusal is
    /// `ENOENT`, because the page does not exist. A failed read is `EIO`.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            PageError::Io(_) | PageError::Changed => libc::EIO,
            _ => libc::ENOENT,
        }
    }

    /// Whether the tool would refuse this request (as opposed to failing
    /// to read).
    #[cfg(test)]
    pub(crate) fn is_refusal(&self) -> bool {
        !matches!(self, PageError::Io(_) | PageError::Changed)
    }

    /// Name `record` (typically `<workspace>/<record path>`, as the tool
    /// prints it) in an [`PageError::Unreadable`] message.
    pub(crate) fn with_record(self, record: &Path) -> Self {
        match self {
            PageError::Unreadable { reason, .. } => PageError::Unreadable {
                record: Some(record.to_path_buf()),
                reason,
            },
            other => other,
        }
    }

    /// The tool's confinement check, the one home of that boundary: a record (so every
    /// page and stream of it) may be read only by the agent it belongs to.
    pub(crate) fn confine(record: &RecordPath, caller: &str) -> Result<(), PageError> {
        if record.agent() == caller {
            Ok(())
        } else {
            Err(PageError::ForeignAgent {
                theirs: record.agent().to_string(),
                ours: caller.to_string(),
            })
        }
    }
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::Malformed(e) => write!(f, "{e}"),
            PageError::ForeignAgent { theirs, ours } => write!(
                f,
                "address names agent {theirs:?}, and you are {ours:?}: \
                 an agent may page only its own tool captures"
            ),
            PageError::NoRecord { record, source } => {
                write!(f, "no capture at {}: {source}", record.display())
            }
            PageError::Unreadable {
                record: Some(record),
                reason,
            } => write!(f, "capture at {} did not parse: {reason}", record.display()),
            PageError::Unreadable {
                record: None,
                reason,
            } => write!(f, "capture did not parse: {reason}"),
            PageError::PastEnd {
                offset,
                stream,
                total,
            } => write!(
                f,
                "offset {offset} is past the end of {stream} ({total} bytes)"
            ),
            PageError::Io(e) => write!(f, "read the capture: {e}"),
            PageError::Changed => f.write_str("the capture changed while it was read"),
        }
    }
}

impl std::error::Error for PageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PageError::Malformed(e) => Some(e),
            PageError::NoRecord { source, .. } | PageError::Io(source) => Some(source),
            _ => None,
        }
    }
}

impl From<AddressError> for PageError {
    fn from(e: AddressError) -> Self {
        PageError::Malformed(e)
    }
}

impl From<RangeError> for PageError {
    fn from(e: RangeError) -> Self {
        match e {
            RangeError::Io(e) => PageError::Io(e),
            RangeError::Changed => PageError::Changed,
        }
    }
}

/// What one pass concluded about a key.
#[derive(Clone)]
enum Outcome {
    Indexed(Arc<RecordIndex>),
    /// A record whose streams need no checkpoint (each shorter than an interval): the
    /// length and start of stdout and stderr, without an index's allocation, which a walk
    /// would pay for every small capture it lists.
    Bare([(u64, u64); 2]),
    /// litany would refuse it, with this serde_json message.
    Unreadable(Arc<str>),
    /// The pass could not read the file. Not kept.
    Io {
        kind: io::ErrorKind,
        os: Option<i32>,
        text: Arc<str>,
    },
}

impl Outcome {
    fn of(file: &File, interval: u64) -> Outcome {
        let io_failure = |e: io::Error| Outcome::Io {
            kind: e.kind(),
            os: e.raw_os_error(),
            text: e.to_string().into(),
        };
        match scan(file, interval) {
            Ok(index)
                if index.stdout.checkpoints.is_empty() && index.stderr.checkpoints.is_empty() =>
            {
                Outcome::Bare([
                    (index.stdout.len, index.stdout.start),
                    (index.stderr.len, index.stderr.start),
                ])
            }
            Ok(index) => Outcome::Indexed(Arc::new(index)),
            Err(ScanError::Json(fail)) => match ScanError::render(&fail, file) {
                Ok(reason) => Outcome::Unreadable(reason.into()),
                Err(e) => io_failure(e),
            },
            Err(ScanError::Io(e)) => io_failure(e),
        }
    }

    /// Bytes this outcome holds, beyond the fixed slot overhead.
    fn cost(&self) -> usize {
        match self {
            Outcome::Indexed(index) => {
                std::mem::size_of::<RecordIndex>()
                    + index.stdout.heap_bytes()
                    + index.stderr.heap_bytes()
            }
            Outcome::Unreadable(reason) => reason.len(),
            Outcome::Bare(_) | Outcome::Io { .. } => 0,
        }
    }

    /// `stream`'s index: a kept index's own, or, for a bare outcome, one made of its two
    /// numbers (no checkpoint, so nothing is allocated).
    fn stream(&self, stream: Stream) -> Result<StreamOf, PageError> {
        let at = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        match self {
            Outcome::Indexed(index) => Ok(StreamOf::Kept(Arc::clone(index), stream)),
            Outcome::Bare(spans) => {
                let (len, start) = spans[at];
                Ok(StreamOf::Bare(StreamIndex {
                    len,
                    start,
                    checkpoints: Vec::new(),
                }))
            }
            Outcome::Unreadable(reason) => Err(PageError::Unreadable {
                record: None,
                reason: reason.to_string(),
            }),
            Outcome::Io { kind, os, text } => Err(PageError::Io(match os {
                Some(code) => io::Error::from_raw_os_error(*code),
                None => io::Error::new(*kind, text.to_string()),
            })),
        }
    }
}

/// One stream's index, as an [`Outcome`] answers it.
enum StreamOf {
    Kept(Arc<RecordIndex>, Stream),
    Bare(StreamIndex),
}

impl std::ops::Deref for StreamOf {
    type Target = StreamIndex;

    fn deref(&self) -> &StreamIndex {
        match self {
            StreamOf::Kept(index, Stream::Stdout) => &index.stdout,
            StreamOf::Kept(index, Stream::Stderr) => &index.stderr,
            StreamOf::Bare(stream) => stream,
        }
    }
}

type Cell = Arc<OnceLock<Outcome>>;

/// What an entry's cell costs beyond its outcome: the cell and its `Arc` counts.
const CELL_BYTES: usize =
    std::mem::size_of::<OnceLock<Outcome>>() + 2 * std::mem::size_of::<usize>();

type Lru = ByteLru<CaptureKey, Cell>;

/// How many computed pages are remembered (each at most [`PAGE_BYTES`]).
pub(crate) const RECENT_PAGES: usize = 64;

/// A computed page, by its address and the version of the record it came from.
type RecentPage = ((Address, CaptureKey), Arc<Page>);

/// Indexes of recently read captures, within a byte budget, and the last few pages
/// computed from them.
pub struct PageCache {
    budget: usize,
    interval: u64,
    lru: Mutex<Lru>,
    recent: Mutex<std::collections::VecDeque<RecentPage>>,
    /// The message of the last refusal, which the next refusal with the same text
    /// shares: a refusal names no file, so a run of captures refused for one reason (a
    /// harness of another shape wrote them all) costs one message, not one each.
    last_refusal: Mutex<Option<Arc<str>>>,
    /// Passes made over captures (see [`PageCache::passes`]).
    passes: AtomicU64,
}

impl PageCache {
    /// A cache that keeps at most `max_bytes` of indexes, with a
    /// checkpoint every [`CHECKPOINT_BYTES`].
    pub fn new(max_bytes: usize) -> Self {
        Self::with_checkpoint_interval(max_bytes, CHECKPOINT_BYTES)
    }

    /// A cache with a checkpoint every `interval` decoded bytes (at least
    /// one). Small intervals are for tests.
    pub fn with_checkpoint_interval(max_bytes: usize, interval: u64) -> Self {
        PageCache {
            budget: max_bytes,
            interval: interval.max(1),
            lru: Mutex::new(Lru::default()),
            recent: Mutex::new(Default::default()),
            last_refusal: Mutex::new(None),
            passes: AtomicU64::new(0),
        }
    }

    /// Bytes the cache holds now, by its own accounting.
    pub fn used_bytes(&self) -> usize {
        self.lru.lock().used()
    }

    /// The budget given at construction.
    #[cfg(test)]
    pub(crate) fn max_bytes(&self) -> usize {
        self.budget
    }

    /// Captures currently held.
    pub fn entries(&self) -> usize {
        self.lru.lock().len()
    }

    /// How many passes over a capture the cache has made since it was made: one per
    /// capture it was asked about and did not hold (the tests hold it to one per key).
    #[cfg(test)]
    pub(crate) fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Whether `key`'s capture is indexed already (parsed, and it parsed).
    pub(crate) fn indexed(&self, key: &CaptureKey) -> bool {
        self.lru
            .lock()
            .peek(key)
            .is_some_and(|cell| matches!(cell.get(), Some(Outcome::Indexed(_) | Outcome::Bare(_))))
    }

    /// Drop whatever is held for `key`.
    pub(crate) fn forget(&self, key: &CaptureKey) {
        self.lru.lock().remove(key);
    }

    /// What the one pass over `file` concluded for `key`, made on first use.
    fn outcome(&self, file: &File, key: CaptureKey) -> Outcome {
        let cell = self
            .lru
            .lock()
            .get_or_insert_with(key, CELL_BYTES, Cell::default);
        let outcome = cell.get_or_init(|| {
            self.passes.fetch_add(1, Ordering::Relaxed);
            self.shared(Outcome::of(file, self.interval))
        });
        {
            let mut lru = self.lru.lock();
            // Unless the entry was evicted or replaced meanwhile; an I/O failure is
            // dropped, not kept.
            let ours = |c: &Cell| Arc::ptr_eq(c, &cell);
            if matches!(outcome, Outcome::Io { .. }) {
                if lru.peek(&key).is_some_and(ours) {
                    lru.remove(&key);
                }
            } else {
                lru.set_cost(&key, ours, CELL_BYTES + outcome.cost());
            }
            lru.evict(self.budget);
        }
        outcome.clone()
    }

    /// Whether the refusals kept for `a` and `b` are one message.
    #[cfg(test)]
    pub(crate) fn one_refusal(&self, a: &CaptureKey, b: &CaptureKey) -> bool {
        let lru = self.lru.lock();
        let reason = |k| match lru.peek(k).and_then(|c| c.get()) {
            Some(Outcome::Unreadable(r)) => Some(Arc::clone(r)),
            _ => None,
        };
        matches!((reason(a), reason(b)), (Some(x), Some(y)) if Arc::ptr_eq(&x, &y))
    }

    /// `outcome`, a refusal sharing the last refusal's message when the text is the same.
    fn shared(&self, outcome: Outcome) -> Outcome {
        let Outcome::Unreadable(reason) = outcome else {
            return outcome;
        };
        let mut last = self.last_refusal.lock();
        match &*last {
            Some(known) if **known == *reason => Outcome::Unreadable(Arc::clone(known)),
            _ => {
                *last = Some(Arc::clone(&reason));
                Outcome::Unreadable(reason)
            }
        }
    }

    /// The length in bytes of `stream`'s string in the capture.
    pub fn stream_len(
        &self,
        file: &File,
        key: CaptureKey,
        stream: Stream,
    ) -> Result<u64, PageError> {
        Ok(self.outcome(file, key).stream(stream)?.len)
    }

    /// Bytes `[offset, offset + len)` of `stream`, cut short at its end.
    /// An offset at or past the end gives no bytes, as a file read does.
    pub fn read(
        &self,
        file: &File,
        key: CaptureKey,
        stream: Stream,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, PageError> {
        let stream = self.outcome(file, key).stream(stream)?;
        self.range(file, key, &stream, offset, len)
    }

    /// A range from a kept index. If the file no longer matches the
    /// index, the index is dropped so that the next request parses again.
    fn range(
        &self,
        file: &File,
        key: CaptureKey,
        stream: &StreamIndex,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, PageError> {
        read_range(file, stream, offset, len).map_err(|e| {
            if matches!(e, RangeError::Changed) {
                self.forget(&key);
            }
            PageError::from(e)
        })
    }

    /// The page `address` names, exactly as `read_tool_output` answers
    /// it: up to [`PAGE_BYTES`] from the offset, an empty page at the end,
    /// and [`PageError::PastEnd`] beyond it. An
    /// [`PageError::Unreadable`] names the address's relative record path.
    pub fn page(&self, file: &File, key: CaptureKey, address: &Address) -> Result<Page, PageError> {
        let stream = self
            .outcome(file, key)
            .stream(address.stream)
            .map_err(|e| e.with_record(Path::new(&address.record.to_string())))?;
        let total = stream.len;
        if address.offset > total {
            return Err(PageError::PastEnd {
                offset: address.offset,
                stream: address.stream,
                total,
            });
        }
        let bytes = self.range(file, key, &stream, address.offset, PAGE_BYTES)?;
        let end = address.offset + bytes.len() as u64;
        Ok(Page {
            banner: banner(address, end, total),
            next: next_address(address, end, total),
            bytes,
            len: total,
        })
    }
}

impl PageCache {
    /// [`PageCache::page`], computed once per (address, record version) and remembered
    /// for the next [`RECENT_PAGES`] requests: a `cat` of a page asks for it at lookup,
    /// open and getxattr.
    pub(crate) fn recent_page(
        &self,
        file: &File,
        key: CaptureKey,
        address: &Address,
    ) -> Result<Arc<Page>, PageError> {
        let memo_key = (address.clone(), key);
        if let Some((_, p)) = self.recent.lock().iter().find(|(k, _)| *k == memo_key) {
            return Ok(p.clone());
        }
        let page = Arc::new(self.page(file, key, address)?);
        let mut recent = self.recent.lock();
        if recent.len() >= RECENT_PAGES {
            recent.pop_front();
        }
        recent.push_back((memo_key, page.clone()));
        Ok(page)
    }
}

impl fmt::Debug for PageCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lru = self.lru.lock();
        f.debug_struct("PageCache")
            .field("budget", &self.budget)
            .field("interval", &self.interval)
            .field("entries", &lru.len())
            .field("used", &lru.used())
            .finish()
    }
}
