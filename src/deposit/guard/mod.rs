//! Loss protection for our deposits against `litany message`'s plain `rename(2)`.
//!
//! litany publishes `.<name>.tmp` → `rename` → `<sender>-<NNN>.md`. If it listed the inbox
//! before our file got that name and renames after, its rename silently replaces our file
//! (CONTRACT §3.2: litany assumes one sender is sequential with itself). Our own publish
//! cannot destroy anything (it is create-only), so this is the only way a deposit of ours
//! can be lost, and the [`Guard`] detects it and deposits the same bytes again under the
//! next number.
//!
//! Guarantees: every deposit made through [`Guard::publish`] is watched (one inotify fd,
//! one background thread; an inotify fd is not an fd on the directory, so `litany stop`
//! does not mistake us for an executor) until it is delivered (renamed out of the inbox),
//! deleted, or [`GuardOptions::window`] passes. If within that time something is renamed
//! onto its name while it still holds the name and the recipient's ref still exists, the
//! content is re-deposited (and logged, and reported to the `on_redeposit` hook so the
//! caller can wake the agent). Each tracked deposit keeps its content and one descriptor
//! on its own file (a file fd, not a directory fd); both are bounded by
//! [`GuardOptions::max_bytes`] and [`GuardOptions::max_records`], the oldest records being
//! dropped first, with a warning.
//!
//! # Why the detection is race-free
//!
//! 1. inotify queues a directory's events in the order the operations happened there
//!    (the event is queued by the syscall itself, under the directory's lock), and this
//!    guard reads the queue only while holding its state lock.
//! 2. [`Guard::publish`] takes that lock, consumes every event already queued, makes sure
//!    the directory is watched, links the file, and registers the record before releasing
//!    the lock. So every event the record is later shown happened after that drain point,
//!    and our own `IN_CREATE` of the name is among them. The record ignores its name until
//!    it sees an `IN_CREATE` ([`Phase::Awaiting`]): anything before it predates our link.
//! 3. From then on ([`Phase::Present`]) the first event on the name decides.
//!    `IN_MOVED_TO` means a file was renamed onto the name while ours held it: ours was
//!    replaced. `IN_MOVED_FROM` or `IN_DELETE` means ours left (the drain renamed it into
//!    the worktree, or it was deleted): nothing to do. A later `IN_MOVED_TO` of a reused
//!    name therefore always comes after the departure that freed it and is never
//!    mistaken for a replacement.
//! 4. Each decision is cross-checked against the file now under the name: while ours is
//!    still there, an event about that name was about somebody else and is ignored; and a
//!    file of ours that is still linked somewhere (`st_nlink > 0`) was not lost. This
//!    check is exact only because the record holds a descriptor on our file: an unlinked
//!    inode nobody holds is freed, and ext4 readily gives its number to the very next
//!    file, which can be a second litany rename onto the same name (observed in the race
//!    test). Held open, our inode number cannot be reused.
//! 5. litany's list-to-rename span is milliseconds (one `git show` for the sender's
//!    name), so the window (minutes by default) closes long after any rename that raced
//!    our link; a rename that lists after our link sees our file and picks a higher
//!    number.
//!
//! The one blind spot is a writer that *creates* (rather than renames) the very name and
//! removes it again in the microseconds between the drain point and our link, and whose
//! `IN_CREATE` is then taken for ours; no litany path creates final names that way. A
//! queue overflow (`IN_Q_OVERFLOW`) loses events, so the records are settled from the
//! files alone: ours still under its name stays tracked; ours linked elsewhere was
//! delivered; ours unlinked while another file holds the name is taken as replaced and
//! re-deposited (erring towards a duplicate rather than a loss); ours unlinked and the
//! name empty was deleted.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use git2::Repository;
use parking_lot::Mutex;

use super::DepositError;
use super::publish::{InboxDir, Published};
use super::spare::Spares;
use super::validate::agent_exists;
use crate::inotify::{EVENT_BUFFER, Inotify};
use crate::workspace::REPO_DIR;
use crate::workspace::backing::{cvt, fstat};
use crate::workspace::inbox::InboxNames;

/// How long a deposit stays protected if it is neither delivered nor deleted.
pub const DEFAULT_GUARD_WINDOW: Duration = Duration::from_secs(120);
/// The most message bytes the guard keeps for re-deposit. A rename can only replace a
/// deposit in the milliseconds after it was linked (module docs, point 5), so the most
/// recent messages are the ones worth keeping; 16 MiB holds sixteen at the size limit.
pub const DEFAULT_GUARD_BYTES: usize = 16 << 20;
/// The most deposits the guard tracks at once (each holds one file descriptor).
pub const DEFAULT_GUARD_RECORDS: usize = 256;

/// How long the background thread rests after each round, so that a burst of deposits
/// wakes it once rather than once per event (each wakeup is paid for by the depositing
/// thread's syscall). Events wait in order in the queue meanwhile, and every publish
/// drains them itself, so this only delays a re-deposit by at most this much.
const PAUSE: Duration = Duration::from_millis(20);
/// How often a full guard says so.
const FULL_WARNING_INTERVAL: Duration = Duration::from_secs(60);
/// How often the background thread wakes to expire records when nothing happens.
const TICK: Duration = Duration::from_millis(500);
/// The inotify events the guard needs on an inbox directory.
const WATCH_MASK: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_ONLYDIR;

/// Limits of a [`Guard`].
#[derive(Debug, Clone)]
pub struct GuardOptions {
    /// How long a deposit is protected (see the module docs, point 5).
    pub window: Duration,
    /// The most content bytes kept for re-deposit, over all tracked deposits.
    pub max_bytes: usize,
    /// The most deposits tracked at once.
    pub max_records: usize,
}

impl Default for GuardOptions {
    fn default() -> Self {
        Self {
            window: DEFAULT_GUARD_WINDOW,
            max_bytes: DEFAULT_GUARD_BYTES,
            max_records: DEFAULT_GUARD_RECORDS,
        }
    }
}

/// Called (outside the guard's lock) after each re-deposit with the recipient and the
/// new file; the deposit engine uses it to wake the agent.
pub type OnRedeposit = Box<dyn Fn(&str, &Published) + Send + Sync>;

/// Watches the inboxes we deposited into and re-deposits what a rename replaced.
pub struct Guard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    root: PathBuf,
    inotify: Inotify,
    /// An eventfd that wakes the thread: to stop, or to run re-deposits found by a
    /// publisher's drain.
    kick: OwnedFd,
    stop: AtomicBool,
    opts: GuardOptions,
    on_redeposit: Option<OnRedeposit>,
    redeposits: AtomicU64,
    state: Mutex<State>,
    /// Unnamed files made ahead, when the depositor keeps them ([`Guard::use_spares`]).
    spares: OnceLock<Arc<Spares>>,
}

#[derive(Default)]
struct State {
    /// Watch descriptor → the inbox it watches.
    watches: HashMap<i32, Watch>,
    /// (watch, name) → the deposit of ours that holds (or is about to hold) the name.
    records: HashMap<(i32, String), Record>,
    /// Replaced deposits waiting to be deposited again.
    jobs: VecDeque<Job>,
    bytes: usize,
    next_serial: u64,
    /// Opened on first need, for "does the recipient still exist".
    repo: Option<Repository>,
    /// The buffer events are read into, kept between drains.
    events: Vec<u8>,
    /// Deposits dropped from protection since the last warning about it, and when that
    /// warning was.
    unprotected: u64,
    warned_full: Option<Instant>,
}

struct Watch {
    recipient: String,
    path: PathBuf,
    /// The inbox's names as of the last drain: listed once after the watch was added,
    /// then kept by the events (`None` until first needed, and after an overflow). It
    /// spares each deposit a listing of the inbox to find its number; it is exactly as
    /// current as a listing taken at the drain point (module docs, point 2).
    names: Option<InboxNames>,
}

/// Where a record is in its name's event stream (module docs, points 2–3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Linked, but our own `IN_CREATE` has not been read yet.
    Awaiting,
    /// Our file holds the name as far as the events read so far tell.
    Present,
}

struct Record {
    recipient: String,
    sender: String,
    body: Vec<u8>,
    /// Our published file, held open so that its inode number stays ours (point 4).
    file: File,
    dev: u64,
    ino: u64,
    phase: Phase,
    since: Instant,
    serial: u64,
}

struct Job {
    recipient: String,
    sender: String,
    body: Vec<u8>,
    replaced: PathBuf,
}

impl Guard {
    /// Starts the guard for the workspace at `root` (its `repo.git` answers whether a
    /// recipient still exists).
    pub fn new(
        root: &Path,
        opts: GuardOptions,
        on_redeposit: Option<OnRedeposit>,
    ) -> io::Result<Self> {
        Self::start(root, opts, on_redeposit, true)
    }

    /// [`Guard::new`], optionally without the background thread (events are then read
    /// only by [`Guard::publish`] and [`Guard::sync`]), so tests can order them by hand.
    fn start(
        root: &Path,
        opts: GuardOptions,
        on_redeposit: Option<OnRedeposit>,
        background: bool,
    ) -> io::Result<Self> {
        let inotify = Inotify::new(true)?;
        // SAFETY: plain syscall with flag arguments; the result is checked.
        let kick = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `kick` was just returned to us.
        let kick = unsafe { OwnedFd::from_raw_fd(kick) };
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            inotify,
            kick,
            stop: AtomicBool::new(false),
            opts,
            on_redeposit,
            redeposits: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            spares: OnceLock::new(),
        });
        let thread = if background {
            let shared = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("litanyfs-guard".into())
                    .spawn(move || shared.run())?,
            )
        } else {
            None
        };
        Ok(Self { shared, thread })
    }

    /// Publishes `body` from `sender` into `recipient`'s inbox (like
    /// [`super::publish()`]) and protects it from being replaced.
    pub fn publish(
        &self,
        recipient: &str,
        sender: &str,
        body: &[u8],
    ) -> Result<Published, DepositError> {
        let published = {
            let mut st = self.shared.state.lock();
            self.shared
                .publish_locked(&mut st, recipient, sender, body.to_vec())?
        };
        if !self.shared.state.lock().jobs.is_empty() {
            self.shared.kick();
        }
        Ok(published)
    }

    /// Publishes into `spares`' files when one is ready (see [`super::spare`]).
    pub(crate) fn use_spares(&self, spares: Arc<Spares>) {
        let _ = self.shared.spares.set(spares);
    }

    /// Processes every event queued so far and performs the re-deposits they call for,
    /// before returning. The background thread does the same on its own; this is for
    /// callers that need the outcome now (tests, shutdown).
    pub fn sync(&self) {
        self.shared.settle();
    }

    /// How many deposits are protected right now.
    pub fn tracked(&self) -> usize {
        self.shared.state.lock().records.len()
    }

    /// How many re-deposits the guard has made.
    pub fn redeposits(&self) -> u64 {
        self.shared.redeposits.load(Ordering::Relaxed)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.kick();
        super::join(self.thread.take(), "deposit guard");
    }
}

impl Shared {
    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. A full counter (EAGAIN)
        // already means "wake up".
        unsafe {
            libc::write(
                self.kick.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    fn run(&self) {
        let tick = i32::try_from(TICK.as_millis()).unwrap_or(i32::MAX);
        while !self.stop.load(Ordering::Relaxed) {
            let mut fds = [
                libc::pollfd {
                    fd: self.inotify.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.kick.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a live array of two pollfds.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tick) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    log::error!("deposit guard: poll: {e}");
                    std::thread::sleep(TICK);
                }
                continue;
            }
            if fds[1].revents != 0 {
                let mut counter: u64 = 0;
                // SAFETY: reads 8 bytes into a live u64 from our eventfd (resets it).
                unsafe {
                    libc::read(
                        self.kick.as_raw_fd(),
                        (&mut counter as *mut u64).cast(),
                        std::mem::size_of::<u64>(),
                    )
                };
            }
            self.settle();
            if !self.stop.load(Ordering::Relaxed) {
                std::thread::sleep(PAUSE);
            }
        }
    }

    /// Reads the queue, expires old records, and runs every re-deposit that follows;
    /// the hook is called after the lock is released.
    fn settle(&self) {
        let mut done = Vec::new();
        {
            let mut st = self.state.lock();
            self.drain(&mut st);
            self.expire(&mut st);
            while let Some(job) = st.jobs.pop_front() {
                match self.publish_locked(&mut st, &job.recipient, &job.sender, job.body) {
                    Ok(p) => {
                        self.redeposits.fetch_add(1, Ordering::Relaxed);
                        log::warn!(
                            "re-deposited {} as {}: a rename replaced it in the inbox \
                             (a concurrent `litany message` picked the same number)",
                            job.replaced.display(),
                            p.path.display()
                        );
                        done.push((job.recipient, p));
                    }
                    Err(e) => log::error!(
                        "could not re-deposit {} after it was replaced: {e}; that message \
                         is lost",
                        job.replaced.display()
                    ),
                }
            }
        }
        if let Some(hook) = &self.on_redeposit {
            for (recipient, p) in &done {
                hook(recipient, p);
            }
        }
    }

    /// The publish protocol of the module docs, point 2; the caller holds the lock. The
    /// whole publish (open, write, link) runs under it, so the directory fd is held only
    /// while we work, never while we wait.
    fn publish_locked(
        &self,
        st: &mut State,
        recipient: &str,
        sender: &str,
        body: Vec<u8>,
    ) -> Result<Published, DepositError> {
        let dir = InboxDir::open(&self.root, recipient)?;
        self.drain(st);
        let wd = self.watch(st, &dir, recipient);
        let view = wd.and_then(|wd| st.watches.get_mut(&wd)).and_then(|w| {
            if w.names.is_none() {
                w.names = dir.names().ok().map(InboxNames::from_iter);
            }
            w.names.as_mut()
        });
        let first = view.as_ref().and_then(|names| names.next_sequence(sender));
        let spare = self.spares.get().and_then(|s| s.take());
        let (published, file) = dir.publish(&body, sender, first, spare)?;
        if let Some(names) = view {
            names.insert(&published.name);
        }
        drop(dir);
        match (wd, file) {
            (Some(wd), Ok(file)) => {
                self.remember(st, wd, recipient, sender, body, file, &published)
            }
            (Some(_), Err(e)) => log::warn!(
                "{}: not protected against a concurrent `litany message` ({e})",
                published.path.display()
            ),
            (None, _) => {}
        }
        Ok(published)
    }

    /// Watches `dir` (through its `/proc/self/fd` path, so exactly the directory we
    /// publish into); `None` when inotify refuses, and the deposit goes unprotected.
    fn watch(&self, st: &mut State, dir: &InboxDir, recipient: &str) -> Option<i32> {
        let wd = match self.inotify.add(&dir.proc_path(), WATCH_MASK) {
            Ok(wd) => wd,
            Err(e) => {
                log::warn!(
                    "{}: cannot watch ({e}); this deposit is not protected against a \
                     concurrent `litany message` replacing it",
                    dir.path().display(),
                );
                return None;
            }
        };
        st.watches.entry(wd).or_insert_with(|| Watch {
            recipient: recipient.to_string(),
            path: dir.path().to_path_buf(),
            names: None,
        });
        Some(wd)
    }

    #[allow(clippy::too_many_arguments)]
    fn remember(
        &self,
        st: &mut State,
        wd: i32,
        recipient: &str,
        sender: &str,
        body: Vec<u8>,
        file: File,
        p: &Published,
    ) {
        st.next_serial += 1;
        st.bytes += body.len();
        let record = Record {
            recipient: recipient.to_string(),
            sender: sender.to_string(),
            body,
            file,
            dev: p.dev,
            ino: p.ino,
            phase: Phase::Awaiting,
            since: Instant::now(),
            serial: st.next_serial,
        };
        if let Some(old) = st.records.insert((wd, p.name.clone()), record) {
            // Cannot happen after a drain (module docs), but keep the books straight.
            st.bytes -= old.body.len();
            log::warn!("{}: a stale guard record was replaced", p.path.display());
        }
        while st.records.len() > self.opts.max_records
            || (st.bytes > self.opts.max_bytes && st.records.len() > 1)
        {
            let Some(oldest) = st
                .records
                .iter()
                .min_by_key(|(_, r)| r.serial)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            log::debug!("deposit guard is full; {} is no longer protected", oldest.1);
            forget(st, &oldest);
            st.unprotected += 1;
        }
        // A fast sender fills the guard with every deposit: say so once in a while, not
        // once per message.
        if st.unprotected > 0
            && st
                .warned_full
                .is_none_or(|at| at.elapsed() >= FULL_WARNING_INTERVAL)
        {
            log::warn!(
                "deposit guard is full ({} deposits tracked): the {} oldest are no longer \
                 protected against a concurrent `litany message` (deposited long enough \
                 ago that such a race is unlikely)",
                self.opts.max_records,
                st.unprotected
            );
            st.unprotected = 0;
            st.warned_full = Some(Instant::now());
        }
    }

    /// Reads and applies every queued event; the caller holds the lock.
    fn drain(&self, st: &mut State) {
        let mut buf = std::mem::take(&mut st.events);
        buf.resize(EVENT_BUFFER, 0);
        self.drain_into(st, &mut buf);
        st.events = buf;
    }

    fn drain_into(&self, st: &mut State, buf: &mut [u8]) {
        loop {
            match self
                .inotify
                .read(buf, |ev| self.apply(st, ev.wd, ev.mask, ev.name))
            {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => {
                    log::error!("deposit guard: reading inotify: {e}");
                    return;
                }
            }
        }
    }

    /// One event (module docs, points 2–4).
    fn apply(&self, st: &mut State, wd: i32, mask: u32, name: &[u8]) {
        if mask & libc::IN_Q_OVERFLOW != 0 {
            self.overflowed(st);
            return;
        }
        if let Some(w) = st.watches.get_mut(&wd) {
            note_name(w, mask, name);
        }
        if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_UNMOUNT) != 0 {
            // The inbox itself is gone (`litany delete`) or unwatched: nothing to protect.
            let keys: Vec<_> = st.records.keys().filter(|k| k.0 == wd).cloned().collect();
            for k in keys {
                forget(st, &k);
            }
            if mask & libc::IN_IGNORED != 0 {
                st.watches.remove(&wd);
            }
            return;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        let key = (wd, name.to_string());
        let Some(rec) = st.records.get_mut(&key) else {
            return;
        };
        if rec.phase == Phase::Awaiting {
            if mask & libc::IN_CREATE != 0 {
                rec.phase = Phase::Present;
            }
            return;
        }
        if mask & (libc::IN_MOVED_TO | libc::IN_MOVED_FROM | libc::IN_DELETE) == 0 {
            return;
        }
        let Some(path) = st.watches.get(&wd).map(|w| w.path.join(name)) else {
            return;
        };
        if holds(&path, rec) {
            return; // point 4: ours is still there; the event was about another file
        }
        if mask & libc::IN_MOVED_TO == 0 {
            log::debug!("{}: delivered or deleted", path.display());
            forget(st, &key);
            return;
        }
        if still_linked(rec) {
            log::debug!(
                "{}: moved elsewhere before the rename onto it",
                path.display()
            );
            forget(st, &key);
            return;
        }
        self.replaced(st, &key, path);
    }

    /// Our file was replaced under `key`: queue its re-deposit, unless the recipient is
    /// gone.
    fn replaced(&self, st: &mut State, key: &(i32, String), path: PathBuf) {
        let Some(rec) = forget(st, key) else {
            return;
        };
        if !self.recipient_exists(st, &rec.recipient) {
            log::info!(
                "{}: replaced, but agent {} is gone; not re-depositing",
                path.display(),
                rec.recipient
            );
            return;
        }
        st.jobs.push_back(Job {
            recipient: rec.recipient,
            sender: rec.sender,
            body: rec.body,
            replaced: path,
        });
    }

    fn recipient_exists(&self, st: &mut State, recipient: &str) -> bool {
        if st.repo.is_none() {
            st.repo = Repository::open_bare(self.root.join(REPO_DIR)).ok();
        }
        let Some(repo) = &st.repo else {
            log::warn!("cannot open {REPO_DIR}; assuming {recipient} exists");
            return true;
        };
        agent_exists(repo, recipient).unwrap_or_else(|e| {
            log::warn!("{e}; assuming {recipient} exists");
            true
        })
    }

    /// Events were lost: settle every record from the files alone (module docs).
    fn overflowed(&self, st: &mut State) {
        log::warn!("deposit guard: inotify queue overflowed; re-checking every deposit");
        for w in st.watches.values_mut() {
            w.names = None;
        }
        let keys: Vec<_> = st.records.keys().cloned().collect();
        for key in keys {
            let Some(path) = st.watches.get(&key.0).map(|w| w.path.join(&key.1)) else {
                forget(st, &key);
                continue;
            };
            let Some(rec) = st.records.get_mut(&key) else {
                continue;
            };
            if holds(&path, rec) {
                rec.phase = Phase::Present;
            } else if still_linked(rec) || std::fs::symlink_metadata(&path).is_err() {
                forget(st, &key);
            } else {
                self.replaced(st, &key, path);
            }
        }
    }

    /// Drops records older than the window, and watches that protect nothing.
    fn expire(&self, st: &mut State) {
        let window = self.opts.window;
        let old: Vec<_> = st
            .records
            .iter()
            .filter(|(_, r)| r.since.elapsed() >= window)
            .map(|(k, _)| k.clone())
            .collect();
        for k in old {
            forget(st, &k);
        }
        let idle: Vec<i32> = st
            .watches
            .keys()
            .filter(|wd| !st.records.keys().any(|k| k.0 == **wd))
            .copied()
            .collect();
        for wd in idle {
            self.inotify.remove(wd);
            if let Some(w) = st.watches.remove(&wd) {
                log::trace!("stopped watching {} ({})", w.path.display(), w.recipient);
            }
        }
    }
}

/// Keeps `w`'s view of its inbox's names up to date with one event.
fn note_name(w: &mut Watch, mask: u32, name: &[u8]) {
    let Some(names) = &mut w.names else {
        return;
    };
    if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_UNMOUNT) != 0 {
        w.names = None;
        return;
    }
    // Names that are not UTF-8 are not in the listing either (litany skips them).
    let Ok(name) = std::str::from_utf8(name) else {
        return;
    };
    if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
        names.insert(name);
    } else if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
        names.remove(name);
    }
}

/// Removes a record and its bytes from the books.
fn forget(st: &mut State, key: &(i32, String)) -> Option<Record> {
    let rec = st.records.remove(key)?;
    st.bytes -= rec.body.len();
    Some(rec)
}

/// Whether the file at `path` is the record's (exact: the record holds the inode).
fn holds(path: &Path, rec: &Record) -> bool {
    std::fs::symlink_metadata(path)
        .map(|m| (m.dev(), m.ino()) == (rec.dev, rec.ino))
        .unwrap_or(false)
}

/// Whether the record's file still has a name anywhere (it was moved, not destroyed).
fn still_linked(rec: &Record) -> bool {
    fstat(&rec.file).map(|st| st.nlink > 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::workspace::refs::Flavour;

    const A: &str = "20260101-a1";

    fn setup() -> (tempfile::TempDir, Fixture) {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
        f.agent(A, Some("Ann"), &[]).unwrap();
        (t, f)
    }

    fn inbox_files(f: &Fixture) -> Vec<(String, String)> {
        let mut v: Vec<_> = std::fs::read_dir(f.inbox(A))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().into_string().unwrap();
                (name, std::fs::read_to_string(e.path()).unwrap())
            })
            .collect();
        v.sort();
        v
    }

    /// What litany's `atomic_create` does: write `.<name>.tmp`, rename onto `<name>`.
    fn litany_style(f: &Fixture, name: &str, body: &str) {
        let tmp = f.inbox(A).join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, f.inbox(A).join(name)).unwrap();
    }

    fn pair(name: &str, body: &str) -> (String, String) {
        (name.to_string(), body.to_string())
    }

    #[test]
    fn a_rename_over_our_file_is_redeposited() {
        let (_t, f) = setup();
        let hits = Arc::new(Mutex::new(Vec::new()));
        let hook: OnRedeposit = {
            let hits = hits.clone();
            Box::new(move |who, p| hits.lock().push((who.to_string(), p.name.clone())))
        };
        let g = Guard::new(f.root(), GuardOptions::default(), Some(hook)).unwrap();
        let p = g.publish(A, "user", b"ours").unwrap();
        assert_eq!(p.name, "user-001.md");
        litany_style(&f, "user-001.md", "theirs");
        g.sync();
        assert_eq!(
            inbox_files(&f),
            [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
        );
        assert_eq!(g.redeposits(), 1);
        assert_eq!(*hits.lock(), [(A.to_string(), "user-002.md".to_string())]);
        // The re-deposit is protected in turn.
        assert_eq!(g.tracked(), 1);
        litany_style(&f, "user-002.md", "theirs again");
        g.sync();
        assert_eq!(
            inbox_files(&f),
            [
                pair("user-001.md", "theirs"),
                pair("user-002.md", "theirs again"),
                pair("user-003.md", "ours")
            ]
        );
        // And nothing more happens without a cause.
        g.sync();
        assert_eq!(g.redeposits(), 2);
    }

    #[test]
    fn the_background_thread_redeposits_unasked() {
        let (_t, f) = setup();
        let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
        g.publish(A, "user", b"ours").unwrap();
        litany_style(&f, "user-001.md", "theirs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while inbox_files(&f).len() < 2 {
            assert!(Instant::now() < deadline, "never re-deposited");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            inbox_files(&f),
            [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
        );
    }

    #[test]
    fn delivery_is_not_replacement() {
        let (t, f) = setup();
        let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
        let worktree = t.path().join("messages");
        std::fs::create_dir_all(&worktree).unwrap();
        // Delivered (renamed out), then the name reused by litany: no re-deposit.
        g.publish(A, "user", b"ours").unwrap();
        std::fs::rename(f.inbox(A).join("user-001.md"), worktree.join("001-user.md")).unwrap();
        litany_style(&f, "user-001.md", "theirs");
        g.sync();
        assert_eq!(inbox_files(&f), [pair("user-001.md", "theirs")]);
        assert_eq!(g.tracked(), 0);
        // Deleted by hand: no re-deposit either.
        let p = g.publish(A, "user", b"second").unwrap();
        assert_eq!(p.name, "user-002.md");
        std::fs::remove_file(&p.path).unwrap();
        litany_style(&f, "user-002.md", "theirs 2");
        g.sync();
        assert_eq!(
            inbox_files(&f),
            [
                pair("user-001.md", "theirs"),
                pair("user-002.md", "theirs 2")
            ]
        );
        assert_eq!(g.redeposits(), 0);
        assert_eq!(
            std::fs::read_to_string(worktree.join("001-user.md")).unwrap(),
            "ours"
        );
    }

    #[test]
    fn a_deleted_agent_gets_no_redeposit() {
        let (_t, f) = setup();
        let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
        g.publish(A, "user", b"ours").unwrap();
        f.delete_agent(A).unwrap();
        litany_style(&f, "user-001.md", "theirs");
        g.sync();
        assert_eq!(inbox_files(&f), [pair("user-001.md", "theirs")]);
        assert_eq!(g.redeposits(), 0);
        assert_eq!(g.tracked(), 0);
    }

    #[test]
    fn protection_is_bounded() {
        let (_t, f) = setup();
        // In time...
        let opts = GuardOptions {
            window: Duration::ZERO,
            ..GuardOptions::default()
        };
        let g = Guard::new(f.root(), opts, None).unwrap();
        g.publish(A, "user", b"ours").unwrap();
        g.sync();
        assert_eq!(g.tracked(), 0, "the window has passed");
        litany_style(&f, "user-001.md", "theirs");
        g.sync();
        assert_eq!(g.redeposits(), 0);
        // ...and in space.
        let opts = GuardOptions {
            max_records: 2,
            max_bytes: 10,
            ..GuardOptions::default()
        };
        let g = Guard::new(f.root(), opts, None).unwrap();
        for body in ["aaaa", "bbbb", "cccc"] {
            g.publish(A, "user", body.as_bytes()).unwrap();
        }
        assert_eq!(g.tracked(), 2);
        g.publish(A, "user", b"0123456789").unwrap();
        assert_eq!(g.tracked(), 1);
    }

    /// Feeds the guard a synthetic event on the (only) watched inbox, as if the kernel had
    /// queued it at this point.
    fn inject(g: &Guard, mask: u32, name: &str) {
        let mut st = g.shared.state.lock();
        let wd = *st.watches.keys().next().unwrap();
        g.shared.apply(&mut st, wd, mask, name.as_bytes());
    }

    #[test]
    fn events_queued_before_our_create_are_not_ours() {
        // Point 2: an event on the name that was queued between the drain point and our
        // link (here: a previous occupant leaving) must not be read as ours leaving, even
        // when by the time it is read our file has been replaced.
        let (_t, f) = setup();
        let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
        g.publish(A, "user", b"ours").unwrap();
        litany_style(&f, "user-001.md", "theirs");
        inject(&g, libc::IN_MOVED_FROM, "user-001.md");
        g.sync();
        assert_eq!(
            inbox_files(&f),
            [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
        );
    }

    #[test]
    fn an_event_about_another_file_keeps_ours_protected() {
        // Point 4: while our inode still holds the name, a departure event on that name
        // was about some other file.
        let (_t, f) = setup();
        let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
        g.publish(A, "user", b"ours").unwrap();
        g.sync();
        inject(&g, libc::IN_MOVED_FROM, "user-001.md");
        inject(&g, libc::IN_DELETE, "user-001.md");
        assert_eq!(g.tracked(), 1);
        litany_style(&f, "user-001.md", "theirs");
        g.sync();
        assert_eq!(g.redeposits(), 1);
        assert_eq!(
            inbox_files(&f),
            [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
        );
    }

    #[test]
    fn the_names_view_numbers_as_a_listing_would() {
        // Each deposit takes litany's next number over the inbox as it is at that moment,
        // whatever others did to the inbox since the previous deposit: the guard's view of
        // the names must follow creations, renames in and out, and deletions.
        use crate::workspace::inbox::next_sequence;
        let (_t, f) = setup();
        let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
        let inbox = f.inbox(A);
        let listed_next = |sender: &str| {
            // No inbox yet before the first deposit.
            let names: Vec<String> = std::fs::read_dir(&inbox)
                .into_iter()
                .flatten()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            next_sequence(names.iter().map(String::as_str), sender).unwrap()
        };
        let mut seen = Vec::new();
        let mut step = |what: &dyn Fn()| {
            what();
            let want = listed_next("user");
            let p = g.publish(A, "user", b"m").unwrap();
            seen.push(p.name.clone());
            assert_eq!(p.name, format!("user-{want:03}.md"), "after {seen:?}");
        };
        step(&|| {});
        step(&|| litany_style(&f, "user-007.md", "a higher one, renamed in"));
        step(&|| std::fs::write(inbox.join("user-011.md"), "created in place").unwrap());
        step(&|| {
            // The drain takes everything out.
            for e in std::fs::read_dir(&inbox).unwrap() {
                let e = e.unwrap();
                std::fs::rename(e.path(), f.root().join(e.file_name())).unwrap();
            }
        });
        step(&|| std::fs::remove_file(inbox.join("user-001.md")).unwrap());
        step(&|| litany_style(&f, "user-040.md", "then removed again"));
        step(&|| std::fs::remove_file(inbox.join("user-040.md")).unwrap());
        step(&|| {
            // An overflow forgets the view; the next deposit lists afresh.
            let mut st = g.shared.state.lock();
            g.shared.apply(&mut st, -1, libc::IN_Q_OVERFLOW, b"");
        });
        assert_eq!(
            seen,
            [
                "user-001.md",
                "user-008.md",
                "user-012.md",
                "user-001.md",
                "user-001.md",
                "user-041.md",
                "user-042.md",
                "user-043.md",
            ]
        );
    }

    #[test]
    fn an_overflow_is_settled_from_the_files() {
        let (_t, f) = setup();
        let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
        g.publish(A, "user", b"kept").unwrap();
        g.publish(A, "user", b"lost track").unwrap();
        litany_style(&f, "user-002.md", "theirs");
        let p3 = g.publish(A, "user", b"delivered").unwrap();
        std::fs::rename(&p3.path, f.root().join("003-user.md")).unwrap();
        let p4 = g.publish(A, "user", b"deleted").unwrap();
        std::fs::remove_file(&p4.path).unwrap();
        {
            let mut st = g.shared.state.lock();
            g.shared.apply(&mut st, -1, libc::IN_Q_OVERFLOW, b"");
        }
        // user-001.md still holds its name; user-002.md was replaced and is queued again;
        // the delivered and the deleted ones are forgotten.
        assert_eq!(g.tracked(), 1);
        g.sync();
        assert_eq!(g.redeposits(), 1);
        assert_eq!(
            inbox_files(&f),
            [
                pair("user-001.md", "kept"),
                pair("user-002.md", "theirs"),
                pair("user-003.md", "lost track"),
            ]
        );
        litany_style(&f, "user-001.md", "theirs 1");
        g.sync();
        assert_eq!(g.redeposits(), 2);
    }

    #[test]
    fn two_renames_onto_our_name_cannot_hide_behind_a_reused_inode() {
        // Two litany processes that both picked our number: the first rename frees our
        // inode; without a descriptor on it, the second file could get the same inode
        // number and both events would look like "ours is still there".
        let (_t, f) = setup();
        let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
        let p = g.publish(A, "user", b"ours").unwrap();
        litany_style(&f, "user-001.md", "first");
        litany_style(&f, "user-001.md", "second");
        let now = std::fs::metadata(&p.path).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_ne!(
            now.ino(),
            p.ino,
            "our inode number was reused while tracked"
        );
        g.sync();
        assert_eq!(g.redeposits(), 1);
        assert_eq!(
            inbox_files(&f),
            [pair("user-001.md", "second"), pair("user-002.md", "ours")]
        );
    }

    #[test]
    fn the_inbox_being_removed_drops_its_records() {
        let (_t, f) = setup();
        let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
        g.publish(A, "user", b"ours").unwrap();
        std::fs::remove_dir_all(f.inbox(A)).unwrap();
        g.sync();
        assert_eq!(g.tracked(), 0);
        assert!(!f.inbox(A).exists(), "nothing recreated the inbox");
    }
}
