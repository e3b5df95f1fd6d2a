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
//!    it sees an `IN_CREATE` (`ledger::Phase::Awaiting`): anything before it predates our link.
//! 3. From then on (`ledger::Phase::Present`) the first event on the name decides.
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

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::DepositError;
use super::publish::{InboxDir, Published};
use super::spare::Spares;
use crate::inotify::{EVENT_BUFFER, Inotify};
use crate::workspace::inbox::InboxNames;

mod ledger;

use ledger::{State, Watch};

/// How long a deposit stays protected if it is neither delivered nor deleted.
pub(crate) const DEFAULT_GUARD_WINDOW: Duration = Duration::from_secs(120);
/// The most message bytes the guard keeps for re-deposit. A rename can only replace a
/// deposit in the milliseconds after it was linked (module docs, point 5), so the most
/// recent messages are the ones worth keeping; 16 MiB holds sixteen at the size limit.
pub(crate) const DEFAULT_GUARD_BYTES: usize = 16 << 20;
/// The most deposits the guard tracks at once (each holds one file descriptor).
pub(crate) const DEFAULT_GUARD_RECORDS: usize = 256;

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
    pub(crate) window: Duration,
    /// The most content bytes kept for re-deposit, over all tracked deposits.
    pub(crate) max_bytes: usize,
    /// The most deposits tracked at once.
    pub(crate) max_records: usize,
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
pub(crate) type OnRedeposit = Box<dyn Fn(&str, &Published) + Send + Sync>;

/// Watches the inboxes we deposited into and re-deposits what a rename replaced.
pub(crate) struct Guard {
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

impl Guard {
    /// Starts the guard for the workspace at `root` (its `repo.git` answers whether a
    /// recipient still exists).
    pub(crate) fn new(
        root: &Path,
        opts: GuardOptions,
        on_redeposit: Option<OnRedeposit>,
    ) -> io::Result<Self> {
        Self::start(root, opts, on_redeposit, true)
    }

    /// [`Guard::new`], optionally without the background thread (events are then read
    /// only by [`Guard::publish`] and the tests' `Guard::sync`), so tests can order them by hand.
    fn start(
        root: &Path,
        opts: GuardOptions,
        on_redeposit: Option<OnRedeposit>,
        background: bool,
    ) -> io::Result<Self> {
        let inotify = Inotify::new(true)?;
        let kick = crate::inotify::eventfd()?;
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
    /// [`super::publish::publish_with`]) and protects it from being replaced.
    pub(crate) fn publish(
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
    #[cfg(test)]
    pub(crate) fn sync(&self) {
        self.shared.settle();
    }

    /// How many deposits are protected right now.
    pub(crate) fn tracked(&self) -> usize {
        self.shared.state.lock().records.len()
    }

    /// How many re-deposits the guard has made.
    #[cfg(test)]
    pub(crate) fn redeposits(&self) -> u64 {
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
        crate::inotify::wake(&self.kick);
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
}

#[cfg(test)]
mod tests;
