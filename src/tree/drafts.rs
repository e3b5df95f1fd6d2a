//! Drafts: files being written in `inbox/<id>/` through the mount.
//!
//! A file created in an inbox is not a backing file: it is a message being written, held
//! in memory until the last descriptor on it closes, then deposited as
//! `<sender>-<NNN>.md` by the [`Depositor`](crate::deposit::Depositor). Nothing touches
//! the real inbox before that, so no drain, reader or `litany scan` can see half a
//! message, and a daemon killed mid-write loses only what was never closed.
//!
//! Which close is the last, and whether a writer was killed, is the [`verdict`] on what
//! the [`crate::witness`] saw at that close: dups, forked children and exec'ed
//! programs holding the descriptor all count, so a shell writing line by line through one
//! descriptor sends one message, and a writer killed mid-message (`kill -9`, Ctrl-C,
//! `timeout`) sends nothing.
//!
//! A draft is in one [`Phase`], and only [`DraftState`]'s methods move it, each keeping
//! the byte totals right (what is held while written counts against [`DRAFT_BYTES`], a
//! sent message's alias against [`ALIAS_BYTES`]):
//!
//! ```text
//!            write / truncate / refused write
//!              +---------+
//!              v         |
//!  create -> Writing ----+--- last close ---> Sent (alias) --+
//!              |  ^          killed writer,                  |  expires after
//!              |  |          cut at last close               |  ALIAS_GRACE
//!              |  +---- open O_TRUNC ---- Gone (alias) <-----+  (or gives way)
//!              |  +---- open O_TRUNC ---- Sent
//! ```
//!
//! - *writing*: writes, truncates and time changes apply to the buffer;
//! - *sent*: the content is in the real inbox and immutable. The writer's name stays
//!   resolvable as an alias for [`ALIAS_GRACE`] after its last use (so `cp -p` can set
//!   times after closing), but is no longer listed: the real `<sender>-<NNN>.md` is;
//! - *gone*: never to be sent (a writer was killed, a write to it was refused, it was
//!   closed empty, or its deposit was refused at its last close); unlisted at once, its
//!   content freed, its name an alias like a sent one's.
//!
//! A message is text: each write to a public draft is checked as UTF-8 as it arrives
//! ([`DraftState::write_text`]), so a write holding an invalid sequence is refused at
//! that write, where a shell reports it; only a sequence cut by the end of what has been
//! written so far waits, for the next write or the last close.
//!
//! Opening an alias with `O_TRUNC` starts a new message under the name (as does any
//! writable open of one closed empty, so `touch f; echo hi >> f` sends `hi`). A name starting
//! with `.` (editor swap, backup and temp files) is private scratch space that lives only
//! in the mount and is never deposited; renaming it to a public name deposits it, which is
//! how editors that save atomically publish. An empty draft is never deposited (vim's
//! `4913` probe is one).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::deposit::Published;
use crate::witness::{self, Exit, Exiting, Task};

/// How long a deposited draft's name stays resolvable after its last use.
pub(crate) const ALIAS_GRACE: Duration = Duration::from_secs(5);
/// The most drafts held at once, deposited ones still resolvable as aliases included.
/// Past it, the aliases used longest ago give way (early); only when every draft is a
/// message still being written does creating another fail with `ENOSPC`.
pub const MAX_DRAFTS: usize = 1024;
/// The most bytes messages still being written hold together; a write past it fails with
/// `ENOSPC` (each message is also bounded by `--max-message-bytes`).
pub const DRAFT_BYTES: usize = 64 << 20;
/// The most bytes the aliases of sent messages keep in memory together; past it the
/// aliases used longest ago give way early, as they do for [`MAX_DRAFTS`]. Without it a
/// fast sender of large messages would hold up to [`MAX_DRAFTS`] of them for the grace.
pub(crate) const ALIAS_BYTES: usize = 16 << 20;

/// Where a draft is in its life (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Being written. `dirty`: bytes changed since the last attempt to send it.
    /// `refused`: a write to it was refused, so it holds only part of what its writer
    /// meant; it is never sent so, until it is emptied (truncated) and written again.
    Writing {
        dirty: bool,
        refused: Option<Refused>,
    },
    /// In the real inbox, as this file.
    Sent(Published),
    /// Never to be sent.
    Gone(Gone),
}

/// What a draft holds now. Its content and phase change only through its methods.
#[derive(Debug)]
pub(crate) struct DraftState {
    buf: Vec<u8>,
    phase: Phase,
    pub(crate) mtime: SystemTime,
    pub(crate) atime: SystemTime,
    pub(crate) ctime: SystemTime,
    pub(crate) perm: u16,
    /// Who created it, shown as its owner (`None`: the daemon's user).
    pub(crate) owner: super::Owner,
    /// When the last handle on it was released, for the alias grace.
    pub(crate) last_used: Instant,
    /// Who has had a hand in it, for the close that decides it.
    pub(crate) hands: Hands,
    /// The errno of the last attempt to send it that failed, for a close that waited
    /// while another made that attempt.
    pub(crate) failed: Option<i32>,
    /// Writable open file descriptions on it not yet released. Only these decide its
    /// fate: a reader's open, close and release never send, cut or drop it.
    writables: usize,
    /// Bytes of `buf` counted in `bytes`: live ones while being written, an alias's
    /// once sent.
    counted: usize,
    bytes: Arc<Bytes>,
    /// `buf[..text]` is known to be whole UTF-8 (it ends at a character boundary), so
    /// a write checks only what it changes ([`text_after_write`]).
    text: usize,
}

impl DraftState {
    fn new(perm: u16, bytes: Arc<Bytes>) -> Self {
        let now = SystemTime::now();
        DraftState {
            buf: Vec::new(),
            phase: Phase::Writing {
                dirty: false,
                refused: None,
            },
            mtime: now,
            atime: now,
            ctime: now,
            perm,
            owner: None,
            last_used: Instant::now(),
            hands: Hands::default(),
            failed: None,
            writables: 0,
            counted: 0,
            bytes,
            text: 0,
        }
    }

    /// A writable description of it was opened.
    pub(crate) fn opened_writable(&mut self) {
        self.writables += 1;
    }

    /// A writable description of it was released; whether it was the last one, so that
    /// whatever no close decided is decided now.
    pub(crate) fn released_writable(&mut self) -> bool {
        self.writables = self.writables.saturating_sub(1);
        self.writables == 0
    }

    pub(crate) fn buf(&self) -> &[u8] {
        &self.buf
    }

    #[cfg(test)]
    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The total this draft's bytes count in, by phase.
    fn total(&self) -> &AtomicUsize {
        match self.phase {
            Phase::Sent(_) => &self.bytes.alias,
            Phase::Writing { .. } | Phase::Gone(_) => &self.bytes.live,
        }
    }

    /// Whether it is no longer being written: sent, or never to be.
    pub(crate) fn closed(&self) -> bool {
        !matches!(self.phase, Phase::Writing { .. })
    }

    /// Whether a close has something to decide: bytes not yet sent, a refused write to
    /// report, or nothing at all written (an empty message is refused at its last close).
    pub(crate) fn pending(&self) -> bool {
        match self.phase {
            Phase::Writing { dirty, refused } => dirty || refused.is_some() || self.buf.is_empty(),
            _ => false,
        }
    }

    /// Whether it was closed with nothing in it ([`Gone::Empty`]): a writable open of it
    /// starts a new message, whatever its flags, since there is nothing to append to.
    pub(crate) fn closed_empty(&self) -> bool {
        self.phase == Phase::Gone(Gone::Empty)
    }

    pub(crate) fn dirty(&self) -> bool {
        matches!(self.phase, Phase::Writing { dirty: true, .. })
    }

    /// Why a write to it was refused, while it is being written.
    pub(crate) fn refused(&self) -> Option<Refused> {
        match self.phase {
            Phase::Writing { refused, .. } => refused,
            _ => None,
        }
    }

    /// Sets the length to `len`, zero-filled when it grows; `NoSpace` (and nothing
    /// changed) when that would take the messages being written past [`DRAFT_BYTES`].
    /// Only while being written.
    fn resize(&mut self, len: usize) -> Result<(), Refused> {
        let live = &self.bytes.live;
        if len > self.counted {
            let grow = len - self.counted;
            live.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(grow).filter(|&t| t <= DRAFT_BYTES)
            })
            .map_err(|_| Refused::NoSpace)?;
        } else {
            live.fetch_sub(self.counted - len, Ordering::Relaxed);
        }
        self.buf.resize(len, 0);
        self.counted = len;
        Ok(())
    }

    fn changed(&mut self) {
        if let Phase::Writing { dirty, .. } = &mut self.phase {
            *dirty = true;
        }
        self.mtime = SystemTime::now();
        self.ctime = self.mtime;
    }

    /// Writes `data` at `offset`, as bytes (private scratch: a swap file is binary). A
    /// write past [`DRAFT_BYTES`] is refused, and the refusal recorded: the message is
    /// cut.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), Refused> {
        debug_assert!(!self.closed());
        let end = offset + data.len();
        if self.buf.len() < end
            && let Err(why) = self.resize(end)
        {
            self.refuse(why);
            return Err(why);
        }
        // What was known to be text is known only up to the first character changed.
        if offset < self.text {
            self.text = char_start(&self.buf, offset);
        }
        self.buf[offset..end].copy_from_slice(data);
        self.changed();
        Ok(())
    }

    /// Writes `data` at `offset` into a message, which is text: refused, changing
    /// nothing, when the message would then hold a sequence that is not UTF-8 (an
    /// incomplete one at the very end may be completed by the next write, so it waits);
    /// the refusal is recorded (the message is cut, as by any refused write). Otherwise
    /// as [`DraftState::write`].
    pub(crate) fn write_text(&mut self, offset: usize, data: &[u8]) -> Result<(), Refused> {
        debug_assert!(!self.closed());
        let text = match text_after_write(&self.buf, self.text, offset, data) {
            Ok(text) => text,
            Err(at) => {
                let why = Refused::NotUtf8 { at: at as u64 };
                self.refuse(why);
                return Err(why);
            }
        };
        self.write(offset, data)?;
        self.text = text;
        Ok(())
    }

    /// Records that a write was refused (by the size limit, checked by the depositor,
    /// or by [`DRAFT_BYTES`]).
    pub(crate) fn refuse(&mut self, why: Refused) {
        if let Phase::Writing { refused, .. } = &mut self.phase {
            *refused = Some(why);
        }
    }

    /// `truncate` to `len`; emptied, it is no longer cut.
    pub(crate) fn truncate(&mut self, len: usize) -> Result<(), Refused> {
        debug_assert!(!self.closed());
        if len == 0
            && let Phase::Writing { refused, .. } = &mut self.phase
        {
            *refused = None;
        }
        if self.buf.len() != len {
            if len < self.text {
                self.text = char_start(&self.buf, len);
            }
            self.resize(len)?;
            self.changed();
        }
        Ok(())
    }

    /// Marks the content as not yet sent (a private draft renamed to a public name).
    pub(crate) fn touch_content(&mut self) {
        if let Phase::Writing { dirty, .. } = &mut self.phase {
            *dirty = true;
        }
    }

    /// An attempt to send it starts: its bytes are no longer dirty, whatever comes.
    pub(crate) fn attempting(&mut self) {
        if let Phase::Writing { dirty, .. } = &mut self.phase {
            *dirty = false;
        }
    }

    /// It is in the real inbox as `published`: its bytes now count as an alias's.
    pub(crate) fn sent(&mut self, published: Published) {
        self.bytes.live.fetch_sub(self.counted, Ordering::Relaxed);
        self.phase = Phase::Sent(published);
        self.counted = self.buf.len();
        self.bytes.alias.fetch_add(self.counted, Ordering::Relaxed);
        self.last_used = Instant::now();
    }

    /// It will never be sent: its content goes.
    pub(crate) fn give_up(&mut self, why: Gone) {
        let _ = self.resize(0); // shrinking always succeeds
        self.buf = Vec::new();
        self.text = 0;
        self.phase = Phase::Gone(why);
        self.last_used = Instant::now();
    }

    /// A sent or gone draft's name opened with `O_TRUNC`: a new, empty message.
    pub(crate) fn reuse(&mut self) {
        self.total().fetch_sub(self.counted, Ordering::Relaxed);
        self.counted = 0;
        self.buf = Vec::new();
        self.text = 0;
        self.phase = Phase::Writing {
            dirty: false,
            refused: None,
        };
        self.hands = Hands::default();
        self.failed = None;
        self.mtime = SystemTime::now();
    }
}

impl Drop for DraftState {
    /// The content leaves its total with the draft.
    fn drop(&mut self) {
        self.total().fetch_sub(self.counted, Ordering::Relaxed);
    }
}

/// The tasks that had a hand in a message being written, by thread id (`/proc` answers
/// a thread's id as well as its process's, so no id needs to be mapped while writing).
/// Each is bounded by [`witness::MAX_PROCESSES`]: a close looks at no more than that.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hands {
    /// Threads that wrote to it, each with its start time.
    pub(crate) writers: Vec<Writer>,
    /// Tasks known to hold it, or to have held it: its opener, its closers, and the
    /// holders a close found. A close looks at these and their descendants.
    pub(crate) holders: Vec<u32>,
}

/// A thread that wrote to a message: its id, and when it started if that could be read.
/// The pair names one task for good; the id alone is reused once the task is gone, and
/// would let a later task (a killed reader) pass for the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Writer {
    pub(crate) tid: u32,
    pub(crate) start: Option<u64>,
}

impl Writer {
    /// Whether the task that answers to this id now, started at `now`, is this writer.
    /// When either start time is unknown, the id decides, as it did before they were
    /// read.
    pub(crate) fn is(&self, now: Option<u64>) -> bool {
        match (self.start, now) {
            (Some(then), Some(now)) => then == now,
            _ => true,
        }
    }
}

impl Hands {
    /// Thread `tid`, started at `start`, wrote to it.
    pub(crate) fn wrote(&mut self, tid: u32, start: Option<u64>) {
        push_bounded(&mut self.writers, Writer { tid, start });
    }

    pub(crate) fn held(&mut self, tid: u32) {
        push_bounded(&mut self.holders, tid);
    }
}

fn push_bounded<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) && v.len() < witness::MAX_PROCESSES {
        v.push(x);
    }
}

/// What a close decides for a message being written, from what was seen at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nobody else holds it: this close is the last, and sends it.
    Send,
    /// Another process still holds it: the last close will decide.
    Wait,
    /// A process that wrote to it is being killed by `signal` as it closes: it is
    /// never sent.
    Drop { pid: u32, signal: i32 },
}

/// The rule: a message goes at the close of the last descriptor on it, and never when a
/// process that wrote to it dies from a signal holding it. `closer` is the closing task
/// (`None` when gone), `writer_groups` the processes that wrote to it, `holders` the
/// tasks found still holding it.
pub(crate) fn verdict(closer: Option<&Task>, writer_groups: &[u32], holders: &[u32]) -> Verdict {
    if let Some((pid, signal)) = killed(closer, writer_groups) {
        Verdict::Drop { pid, signal }
    } else if holders.is_empty() {
        Verdict::Send
    } else {
        Verdict::Wait
    }
}

/// The first half of [`verdict`], which needs no holders: whether `closer` is a writer
/// (one of `writer_groups`) being killed, as (pid, signal).
pub(crate) fn killed(closer: Option<&Task>, writer_groups: &[u32]) -> Option<(u32, i32)> {
    match closer?.exit? {
        Exiting {
            tgid,
            how: Exit::Signal(signal),
            ..
        } if writer_groups.contains(&tgid) => Some((tgid, signal)),
        _ => None,
    }
}

/// Why a message will never be sent ([`Phase::Gone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Process `pid`, which wrote to it, was killed by `signal` holding it.
    Killed { pid: u32, signal: i32 },
    /// A write to it was refused, and it was closed so, holding only part of it.
    Cut(Refused),
    /// It was closed with nothing in it (`touch f`, `: > f`, an editor's probe).
    Empty,
    /// Its deposit was refused or failed at its last close, with this errno (the
    /// closer was told; the log and the event say why).
    Refused { errno: i32 },
}

/// Why a write to a draft was refused ([`DraftState::refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// It would have passed `--max-message-bytes` (`len` bytes against `max`).
    TooLarge { len: u64, max: u64 },
    /// The messages being written hold [`DRAFT_BYTES`] together.
    NoSpace,
    /// It would have held a sequence that is not UTF-8, starting at byte `at`.
    NotUtf8 { at: u64 },
}

/// The start of the character `buf[at]` is part of, for `at` inside a run of whole
/// UTF-8 (so at most three continuation bytes back).
fn char_start(buf: &[u8], at: usize) -> usize {
    let mut i = at;
    let floor = i.saturating_sub(3);
    while i > floor && i < buf.len() && is_continuation(buf[i]) {
        i -= 1;
    }
    i
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Whether `buf` stays text once `data` is written at `offset` (bytes past the end
/// become zeros, then `data`), given that `buf[..text]` is whole UTF-8: `Ok` with the
/// new length known to be whole UTF-8 (short of the end only by an incomplete sequence
/// there, which the next write may complete), or `Err` with the offset of the first
/// byte of an invalid sequence. Looks only at what the write changes: from the start of
/// the first character it touches to the first character boundary after it (or, past
/// what was known, to the end).
pub(crate) fn text_after_write(
    buf: &[u8],
    text: usize,
    offset: usize,
    data: &[u8],
) -> Result<usize, usize> {
    let text = text.min(buf.len());
    let end = offset + data.len();
    let new_len = buf.len().max(end);
    let start = if offset < text {
        char_start(buf, offset)
    } else {
        text
    };
    // Within what was known: up to the next boundary of the old text, which is whole
    // UTF-8 from there on. Otherwise to the end.
    let stop = if end <= text {
        let mut b = end;
        while b < text && is_continuation(buf[b]) {
            b += 1;
        }
        b
    } else {
        new_len
    };
    let mut changed = Vec::with_capacity(stop - start);
    changed.extend_from_slice(&buf[start..offset.min(buf.len()).max(start)]);
    changed.resize(
        changed.len() + offset.saturating_sub(buf.len().max(start)),
        0,
    );
    changed.extend_from_slice(data);
    if stop > end {
        changed.extend_from_slice(&buf[end..stop]);
    }
    match std::str::from_utf8(&changed) {
        Ok(_) if end <= text => Ok(text),
        Ok(_) => Ok(new_len),
        Err(e) if e.error_len().is_none() && stop == new_len => Ok(start + e.valid_up_to()),
        Err(e) => Err(start + e.valid_up_to()),
    }
}

/// One open file description of a draft, as the tree serves it.
#[derive(Debug)]
pub struct DraftOpen {
    pub(crate) draft: Arc<Draft>,
    /// Opened for writing (or truncating): only such a description has a say in whether
    /// and when the message goes.
    pub(crate) writable: bool,
}

#[derive(Debug)]
pub(crate) struct Draft {
    pub(crate) id: u64,
    pub(crate) agent: String,
    name: Mutex<OsString>,
    pub(crate) state: Mutex<DraftState>,
}

/// Bytes of content held in memory, by kind: counted while held, so the bounds are on
/// memory actually in use.
#[derive(Debug, Default)]
struct Bytes {
    /// By messages still being written ([`DRAFT_BYTES`]).
    live: AtomicUsize,
    /// By sent drafts, i.e. the aliases of sent messages ([`ALIAS_BYTES`]).
    alias: AtomicUsize,
}

impl Draft {
    pub(crate) fn name(&self) -> OsString {
        self.name.lock().clone()
    }

    /// Private scratch: a dot-prefixed name is never deposited.
    pub(crate) fn is_private(&self) -> bool {
        is_private(&self.name.lock())
    }

    /// Whether the name is still resolvable: not deposited, or deposited within the grace.
    fn resolvable(&self, now: Instant) -> bool {
        let st = self.state.lock();
        !st.closed() || now.duration_since(st.last_used) < ALIAS_GRACE
    }

    /// Whether listings show it: only while it is being written.
    pub(crate) fn listed(&self) -> bool {
        !self.state.lock().closed()
    }
}

/// Whether `name` is private scratch space.
pub(crate) fn is_private(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

type Key = (String, OsString);

/// The last number given to a draft: one count for the whole process, so that a draft's
/// number (its identity, [`crate::tree::Identity::Draft`]) is unique across every
/// workspace a home mount serves.
static LAST_DRAFT: AtomicU64 = AtomicU64::new(0);

/// The drafts of every inbox, by agent and name.
#[derive(Default)]
pub(crate) struct Drafts {
    index: Mutex<Index>,
    /// When each inbox's set of listed drafts last changed: part of the directory's
    /// mtime, which is how the kernel learns its cached listing is stale.
    changed: Mutex<HashMap<String, SystemTime>>,
    /// Bytes of content held by drafts still in memory.
    bytes: Arc<Bytes>,
}

/// The one index of drafts, by name and by number, kept in step by its own methods
/// under one lock.
#[derive(Default)]
struct Index {
    by_name: HashMap<Key, Arc<Draft>>,
    by_id: HashMap<u64, Arc<Draft>>,
}

impl Index {
    fn insert(&mut self, key: Key, d: Arc<Draft>) {
        if let Some(old) = self.by_name.insert(key, d.clone()) {
            self.by_id.remove(&old.id);
        }
        self.by_id.insert(d.id, d);
    }

    fn remove(&mut self, key: &Key) -> Option<Arc<Draft>> {
        let d = self.by_name.remove(key)?;
        self.by_id.remove(&d.id);
        Some(d)
    }

    /// Keeps only the drafts `keep` says to.
    fn retain(&mut self, mut keep: impl FnMut(&Draft) -> bool) {
        let by_id = &mut self.by_id;
        self.by_name.retain(|_, d| {
            let k = keep(d);
            if !k {
                by_id.remove(&d.id);
            }
            k
        });
    }

    /// The closed drafts (aliases), used longest ago first, with their held bytes.
    fn aliases(&self) -> Vec<(Instant, usize, Key)> {
        let mut v: Vec<_> = self
            .by_name
            .iter()
            .filter_map(|(key, d)| {
                let st = d.state.lock();
                st.closed().then(|| (st.last_used, st.counted, key.clone()))
            })
            .collect();
        v.sort_by_key(|(used, _, _)| *used);
        v
    }
}

/// Why a draft could not be made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DraftError {
    Exists,
    Full,
}

impl Drafts {
    /// A new, empty draft `name` in `agent`'s inbox.
    pub(crate) fn create(
        &self,
        agent: &str,
        name: &OsStr,
        perm: u16,
    ) -> Result<Arc<Draft>, DraftError> {
        let now = Instant::now();
        let mut index = self.index.lock();
        let key = (agent.to_string(), name.to_os_string());
        if let Some(old) = index.by_name.get(&key) {
            if old.resolvable(now) {
                return Err(DraftError::Exists);
            }
            index.remove(&key);
        }
        if index.by_name.len() >= MAX_DRAFTS {
            Self::make_room(&mut index, now);
            if index.by_name.len() >= MAX_DRAFTS {
                return Err(DraftError::Full);
            }
        }
        let draft = Arc::new(Draft {
            id: LAST_DRAFT.fetch_add(1, Ordering::Relaxed) + 1,
            agent: agent.to_string(),
            name: Mutex::new(name.to_os_string()),
            state: Mutex::new(DraftState::new(perm, self.bytes.clone())),
        });
        index.insert(key, draft.clone());
        drop(index);
        self.touch(agent);
        Ok(draft)
    }

    /// The draft `name` in `agent`'s inbox, if it is still resolvable.
    pub(crate) fn get(&self, agent: &str, name: &OsStr) -> Option<Arc<Draft>> {
        let d = self
            .index
            .lock()
            .by_name
            .get(&(agent.to_string(), name.to_os_string()))
            .cloned()?;
        d.resolvable(Instant::now()).then_some(d)
    }

    pub(crate) fn by_id(&self, id: u64) -> Option<Arc<Draft>> {
        let d = self.index.lock().by_id.get(&id).cloned()?;
        d.resolvable(Instant::now()).then_some(d)
    }

    /// The drafts a listing of `agent`'s inbox shows.
    pub(crate) fn listed(&self, agent: &str) -> Vec<Arc<Draft>> {
        self.expire();
        self.index
            .lock()
            .by_name
            .iter()
            .filter(|((a, _), d)| a == agent && d.listed())
            .map(|(_, d)| d.clone())
            .collect()
    }

    /// Removes draft `name`; its content goes with it (a deposit already made stays).
    pub(crate) fn remove(&self, agent: &str, name: &OsStr) -> Option<Arc<Draft>> {
        let d = self
            .index
            .lock()
            .remove(&(agent.to_string(), name.to_os_string()))?;
        self.touch(agent);
        Some(d)
    }

    /// Renames a draft within one inbox, replacing a draft of the target name.
    pub(crate) fn rename(&self, agent: &str, from: &OsStr, to: &OsStr) -> Option<Arc<Draft>> {
        let mut index = self.index.lock();
        let d = index.remove(&(agent.to_string(), from.to_os_string()))?;
        index.insert((agent.to_string(), to.to_os_string()), d.clone());
        *d.name.lock() = to.to_os_string();
        drop(index);
        self.touch(agent);
        Some(d)
    }

    /// Records that `agent`'s listed drafts changed now.
    pub(crate) fn touch(&self, agent: &str) {
        self.changed
            .lock()
            .insert(agent.to_string(), SystemTime::now());
    }

    /// When `agent`'s listed drafts last changed.
    pub(crate) fn changed_at(&self, agent: &str) -> Option<SystemTime> {
        self.changed.lock().get(agent).copied()
    }

    /// Drops expired aliases and, if that is not enough, the aliases used longest ago,
    /// down to three quarters of [`MAX_DRAFTS`] so that the next creates find room.
    fn make_room(index: &mut Index, now: Instant) {
        let target = MAX_DRAFTS * 3 / 4;
        for (used, _, key) in index.aliases() {
            let expired = now.duration_since(used) >= ALIAS_GRACE;
            if !expired && index.by_name.len() <= target {
                break;
            }
            index.remove(&key);
        }
    }

    /// Bytes the aliases keep now.
    pub(crate) fn alias_bytes(&self) -> usize {
        self.bytes.alias.load(Ordering::Relaxed)
    }

    /// Bytes the messages being written hold now.
    #[cfg(test)]
    pub(crate) fn live_bytes(&self) -> usize {
        self.bytes.live.load(Ordering::Relaxed)
    }

    /// Past [`ALIAS_BYTES`], drops the aliases used longest ago until what is left fits
    /// in three quarters of it (their content is freed as their last handles close).
    /// Call with no draft locked.
    pub(crate) fn shed_aliases(&self) {
        if self.alias_bytes() <= ALIAS_BYTES {
            return;
        }
        let mut index = self.index.lock();
        let aliases = index.aliases();
        let mut left: usize = aliases.iter().map(|(_, counted, _)| counted).sum();
        for (_, counted, key) in aliases {
            if left <= ALIAS_BYTES * 3 / 4 {
                break;
            }
            if index.remove(&key).is_some() {
                left -= counted;
            }
        }
    }

    /// Forgets aliases whose grace has passed.
    fn expire(&self) {
        let now = Instant::now();
        self.index.lock().retain(|d| d.resolvable(now));
    }

    /// Whether no draft is resolvable now (none open, none closed recently enough to be
    /// stat'ed or reopened).
    pub(crate) fn is_empty(&self) -> bool {
        self.expire();
        self.index.lock().by_name.is_empty()
    }
}

#[cfg(test)]
mod tests;
