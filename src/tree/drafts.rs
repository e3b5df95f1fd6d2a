//! Drafts: files being written in `inbox/<id>/` through the mount.
//!
//! A file created in an inbox is not a backing file: it is a message being written, held
//! in memory until the last descriptor on it closes, then deposited as
//! `<sender>-<NNN>.md` by the [`Depositor`](crate::deposit::Depositor). Nothing touches
//! the real inbox before that, so no drain, reader or `litany scan` can see half a
//! message, and a daemon killed mid-write loses only what was never closed.
//!
//! Which close is the last, and whether a writer was killed, is the [`verdict`] on what
//! the [witness](crate::witness) saw at that close: dups, forked children and exec'ed
//! programs holding the descriptor all count, so a shell writing line by line through one
//! descriptor sends one message, and a writer killed mid-message (`kill -9`, Ctrl-C,
//! `timeout`) sends nothing.
//!
//! A draft moves through these states:
//! - *writing*: writes, truncates and time changes apply to the buffer;
//! - *killed*: a process that wrote to it died from a signal holding it; it is out of the
//!   listing at once and never sent;
//! - *deposited*: the content is in the real inbox and immutable. The writer's name stays
//!   resolvable as an alias for [`ALIAS_GRACE`] after its last use (so `cp -p` can set
//!   times after closing), but is no longer listed: the real `<sender>-<NNN>.md` is;
//! - *private*: a name starting with `.` (editor swap, backup and temp files) is scratch
//!   space that lives only in the mount and is never deposited. Renaming a private draft
//!   to a public name deposits it, which is how editors that save atomically publish.
//!
//! An empty draft is never deposited (vim's `4913` probe is one).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::deposit::Published;
use crate::witness::{self, Exit, Task};

/// How long a deposited draft's name stays resolvable after its last use.
pub const ALIAS_GRACE: Duration = Duration::from_secs(5);
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
pub const ALIAS_BYTES: usize = 16 << 20;

/// What a draft holds now.
#[derive(Debug, Clone)]
pub struct DraftState {
    pub buf: Vec<u8>,
    /// Bytes written since the last deposit attempt.
    pub dirty: bool,
    pub deposited: Option<Published>,
    pub mtime: SystemTime,
    pub atime: SystemTime,
    pub ctime: SystemTime,
    pub perm: u16,
    /// When the last handle on it was released, for the alias grace.
    pub last_used: Instant,
    /// Who has had a hand in it, for the close that decides it.
    pub hands: Hands,
    /// Why it will never be sent, once decided; its name then stays resolvable (not
    /// listed) for the alias grace, like a sent message's, so rewriting it with `>`
    /// starts a new message.
    pub gone: Option<Gone>,
    /// A write to it was refused, so it holds only part of what its writer meant to
    /// send: it is never deposited as it is, until it is emptied (truncated) and written
    /// again.
    pub refused: Option<Refused>,
    /// Bytes of `buf` counted in the totals: live ones while being written, an alias's
    /// once deposited.
    counted: usize,
}

impl DraftState {
    /// Whether a close has something to decide: bytes not yet sent, or a refused write
    /// to report, and neither sent nor dropped.
    pub fn pending(&self) -> bool {
        !self.closed() && (self.dirty || self.refused.is_some())
    }

    /// Whether it is no longer being written: sent, or never to be.
    pub fn closed(&self) -> bool {
        self.deposited.is_some() || self.gone.is_some()
    }
}

/// The processes (thread groups) that had a hand in a message being written. Each is
/// bounded by [`witness::MAX_PROCESSES`]: a close looks at no more than that anyway.
#[derive(Debug, Clone, Default)]
pub struct Hands {
    /// Threads seen, with their groups: a thread's group is read from `/proc` once.
    tids: Vec<(u32, u32)>,
    /// Thread groups that wrote to it.
    pub writers: Vec<u32>,
    /// Thread groups known to hold it, or to have held it: its opener, its closers, and
    /// the holders a close found. A close looks at these and their descendants.
    pub holders: Vec<u32>,
}

impl Hands {
    /// The group of thread `tid`, asking `group_of` only for a thread not seen before.
    pub fn group(&mut self, tid: u32, group_of: impl FnOnce(u32) -> u32) -> u32 {
        if let Some(&(_, g)) = self.tids.iter().find(|(t, _)| *t == tid) {
            return g;
        }
        let g = group_of(tid);
        push_bounded(&mut self.tids, (tid, g));
        g
    }

    pub fn wrote(&mut self, group: u32) {
        push_bounded(&mut self.writers, group);
    }

    pub fn held(&mut self, group: u32) {
        push_bounded(&mut self.holders, group);
    }
}

fn push_bounded<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) && v.len() < witness::MAX_PROCESSES {
        v.push(x);
    }
}

/// What a close decides for a message being written, from what was seen at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
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
/// (`None` when gone), `writers` the groups that wrote to it, `holders` the groups found
/// still holding it.
pub fn verdict(closer: Option<&Task>, writers: &[u32], holders: &[u32]) -> Verdict {
    if let Some(t) = closer
        && let Some(Exit::Signal(signal)) = t.exit
        && writers.contains(&t.tgid)
    {
        return Verdict::Drop {
            pid: t.tgid,
            signal,
        };
    }
    if holders.is_empty() {
        Verdict::Send
    } else {
        Verdict::Wait
    }
}

/// Why a message will never be sent (see [`DraftState::gone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// Process `pid`, which wrote to it, was killed by `signal` holding it.
    Killed { pid: u32, signal: i32 },
    /// A write to it was refused, and it was closed so, holding only part of it.
    Cut(Refused),
}

/// Why a write to a draft was refused (see [`DraftState::refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It would have passed `--max-message-bytes` (`len` bytes against `max`).
    TooLarge { len: u64, max: u64 },
    /// The messages being written hold [`DRAFT_BYTES`] together.
    NoSpace,
}

#[derive(Debug)]
pub struct Draft {
    pub id: u64,
    pub agent: String,
    name: Mutex<OsString>,
    pub state: Mutex<DraftState>,
    /// The totals this draft's content is counted in.
    bytes: Arc<Bytes>,
}

/// Bytes of content held in memory, by kind: counted while held, so the bounds are on
/// memory actually in use.
#[derive(Debug, Default)]
struct Bytes {
    /// By messages still being written ([`DRAFT_BYTES`]).
    live: AtomicUsize,
    /// By deposited drafts, i.e. the aliases of sent messages ([`ALIAS_BYTES`]).
    alias: AtomicUsize,
}

impl Bytes {
    fn total(&self, deposited: bool) -> &AtomicUsize {
        if deposited { &self.alias } else { &self.live }
    }
}

impl Drop for Draft {
    /// The content is freed with the last reference (listings and open handles hold
    /// some), and leaves its total then.
    fn drop(&mut self) {
        let st = self.state.get_mut();
        self.bytes
            .total(st.deposited.is_some())
            .fetch_sub(st.counted, Ordering::Relaxed);
    }
}

impl Draft {
    pub fn name(&self) -> OsString {
        self.name.lock().clone()
    }

    /// Private scratch: a dot-prefixed name is never deposited.
    pub fn is_private(&self) -> bool {
        is_private(&self.name.lock())
    }

    /// Whether the name is still resolvable: not deposited, or deposited within the grace.
    fn resolvable(&self, now: Instant) -> bool {
        let st = self.state.lock();
        !st.closed() || now.duration_since(st.last_used) < ALIAS_GRACE
    }

    /// Whether listings show it: only while it is being written.
    pub fn listed(&self) -> bool {
        !self.state.lock().closed()
    }
}

/// Whether `name` is private scratch space.
pub fn is_private(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// The drafts of every inbox, by agent and name.
#[derive(Default)]
pub struct Drafts {
    next: AtomicU64,
    by_name: Mutex<HashMap<(String, OsString), Arc<Draft>>>,
    by_id: Mutex<HashMap<u64, Arc<Draft>>>,
    /// When each inbox's set of listed drafts last changed: part of the directory's
    /// mtime, which is how the kernel learns its cached listing is stale.
    changed: Mutex<HashMap<String, SystemTime>>,
    /// Bytes of content held by drafts still in memory.
    bytes: Arc<Bytes>,
}

/// Why a draft could not be made.
#[derive(Debug, PartialEq, Eq)]
pub enum DraftError {
    Exists,
    Full,
}

impl Drafts {
    /// A new, empty draft `name` in `agent`'s inbox.
    pub fn create(&self, agent: &str, name: &OsStr, perm: u16) -> Result<Arc<Draft>, DraftError> {
        let now = Instant::now();
        let mut by_name = self.by_name.lock();
        let key = (agent.to_string(), name.to_os_string());
        if let Some(old) = by_name.get(&key) {
            if old.resolvable(now) {
                return Err(DraftError::Exists);
            }
            let id = old.id;
            by_name.remove(&key);
            self.by_id.lock().remove(&id);
        }
        if by_name.len() >= MAX_DRAFTS {
            self.make_room(&mut by_name, now);
            if by_name.len() >= MAX_DRAFTS {
                return Err(DraftError::Full);
            }
        }
        let now = SystemTime::now();
        let draft = Arc::new(Draft {
            id: self.next.fetch_add(1, Ordering::Relaxed) + 1,
            agent: agent.to_string(),
            name: Mutex::new(name.to_os_string()),
            state: Mutex::new(DraftState {
                buf: Vec::new(),
                dirty: false,
                deposited: None,
                mtime: now,
                atime: now,
                ctime: now,
                perm,
                last_used: Instant::now(),
                hands: Hands::default(),
                gone: None,
                refused: None,
                counted: 0,
            }),
            bytes: self.bytes.clone(),
        });
        by_name.insert(key, draft.clone());
        self.by_id.lock().insert(draft.id, draft.clone());
        drop(by_name);
        self.touch(agent);
        Ok(draft)
    }

    /// The draft `name` in `agent`'s inbox, if it is still resolvable.
    pub fn get(&self, agent: &str, name: &OsStr) -> Option<Arc<Draft>> {
        let d = self
            .by_name
            .lock()
            .get(&(agent.to_string(), name.to_os_string()))
            .cloned()?;
        d.resolvable(Instant::now()).then_some(d)
    }

    pub fn by_id(&self, id: u64) -> Option<Arc<Draft>> {
        let d = self.by_id.lock().get(&id).cloned()?;
        d.resolvable(Instant::now()).then_some(d)
    }

    /// The drafts a listing of `agent`'s inbox shows.
    pub fn listed(&self, agent: &str) -> Vec<Arc<Draft>> {
        self.expire();
        self.by_name
            .lock()
            .iter()
            .filter(|((a, _), d)| a == agent && d.listed())
            .map(|(_, d)| d.clone())
            .collect()
    }

    /// Removes draft `name`; its content goes with it (a deposit already made stays).
    pub fn remove(&self, agent: &str, name: &OsStr) -> Option<Arc<Draft>> {
        let d = self
            .by_name
            .lock()
            .remove(&(agent.to_string(), name.to_os_string()))?;
        self.by_id.lock().remove(&d.id);
        self.touch(agent);
        Some(d)
    }

    /// Renames a draft within one inbox, replacing a draft of the target name.
    pub fn rename(&self, agent: &str, from: &OsStr, to: &OsStr) -> Option<Arc<Draft>> {
        let mut by_name = self.by_name.lock();
        let d = by_name.remove(&(agent.to_string(), from.to_os_string()))?;
        if let Some(old) = by_name.insert((agent.to_string(), to.to_os_string()), d.clone()) {
            self.by_id.lock().remove(&old.id);
        }
        *d.name.lock() = to.to_os_string();
        drop(by_name);
        self.touch(agent);
        Some(d)
    }

    /// Records that `agent`'s listed drafts changed now.
    pub fn touch(&self, agent: &str) {
        self.changed
            .lock()
            .insert(agent.to_string(), SystemTime::now());
    }

    /// When `agent`'s listed drafts last changed.
    pub fn changed_at(&self, agent: &str) -> Option<SystemTime> {
        self.changed.lock().get(agent).copied()
    }

    /// Drops expired aliases and, if that is not enough, the aliases used longest ago,
    /// down to three quarters of [`MAX_DRAFTS`] so that the next creates find room.
    fn make_room(&self, by_name: &mut HashMap<(String, OsString), Arc<Draft>>, now: Instant) {
        let mut aliases: Vec<(Instant, (String, OsString))> = Vec::new();
        for (key, d) in by_name.iter() {
            let st = d.state.lock();
            if st.closed() {
                aliases.push((st.last_used, key.clone()));
            }
        }
        // Expired first (oldest use first in any case).
        aliases.sort_by_key(|(used, _)| *used);
        let target = MAX_DRAFTS * 3 / 4;
        let mut by_id = self.by_id.lock();
        for (used, key) in aliases {
            let expired = now.duration_since(used) >= ALIAS_GRACE;
            if !expired && by_name.len() <= target {
                break;
            }
            if let Some(d) = by_name.remove(&key) {
                by_id.remove(&d.id);
            }
        }
    }

    /// Sets a message being written (its state `st`, locked) to `len` bytes, zero-filled
    /// when it grows; `Full` when that would take the messages being written past
    /// [`DRAFT_BYTES`].
    pub fn resize(&self, st: &mut DraftState, len: usize) -> Result<(), DraftError> {
        let live = &self.bytes.live;
        if len > st.counted {
            let grow = len - st.counted;
            live.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(grow).filter(|&t| t <= DRAFT_BYTES)
            })
            .map_err(|_| DraftError::Full)?;
        } else {
            live.fetch_sub(st.counted - len, Ordering::Relaxed);
        }
        st.buf.resize(len, 0);
        st.counted = len;
        Ok(())
    }

    /// `st` (a draft's state, locked) was just deposited: its content now counts as an
    /// alias's ([`ALIAS_BYTES`]). Call [`Drafts::shed_aliases`] once the lock is released.
    pub fn deposited(&self, st: &mut DraftState) {
        self.bytes.live.fetch_sub(st.counted, Ordering::Relaxed);
        st.counted = st.buf.len();
        self.bytes.alias.fetch_add(st.counted, Ordering::Relaxed);
    }

    /// `st` (deposited, locked) starts a new message under the same name: the old
    /// content goes, and with it its count.
    pub fn reused(&self, st: &mut DraftState) {
        self.bytes.alias.fetch_sub(st.counted, Ordering::Relaxed);
        st.counted = 0;
        st.buf = Vec::new();
        st.deposited = None;
        st.hands = Hands::default();
        st.gone = None;
        st.refused = None;
    }

    /// Bytes the aliases keep now.
    pub fn alias_bytes(&self) -> usize {
        self.bytes.alias.load(Ordering::Relaxed)
    }

    /// Bytes the messages being written hold now.
    pub fn live_bytes(&self) -> usize {
        self.bytes.live.load(Ordering::Relaxed)
    }

    /// Past [`ALIAS_BYTES`], drops the aliases used longest ago until what is left fits
    /// in three quarters of it (their content is freed as their last handles close).
    pub fn shed_aliases(&self) {
        if self.alias_bytes() <= ALIAS_BYTES {
            return;
        }
        let mut by_name = self.by_name.lock();
        let mut aliases: Vec<(Instant, usize, (String, OsString))> = by_name
            .iter()
            .filter_map(|(key, d)| {
                let st = d.state.lock();
                (st.deposited.is_some()).then(|| (st.last_used, st.counted, key.clone()))
            })
            .collect();
        aliases.sort_by_key(|(used, _, _)| *used);
        let mut left: usize = aliases.iter().map(|(_, counted, _)| counted).sum();
        let mut by_id = self.by_id.lock();
        for (_, counted, key) in aliases {
            if left <= ALIAS_BYTES * 3 / 4 {
                break;
            }
            if let Some(d) = by_name.remove(&key) {
                by_id.remove(&d.id);
                left -= counted;
            }
        }
    }

    /// Forgets aliases whose grace has passed.
    fn expire(&self) {
        let now = Instant::now();
        let mut gone = Vec::new();
        self.by_name.lock().retain(|_, d| {
            let keep = d.resolvable(now);
            if !keep {
                gone.push(d.id);
            }
            keep
        });
        let mut by_id = self.by_id.lock();
        for id in gone {
            by_id.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_get_rename_remove() {
        let d = Drafts::default();
        let a = d.create("x", OsStr::new("note"), 0o644).unwrap();
        assert_eq!(
            d.create("x", OsStr::new("note"), 0o644).unwrap_err(),
            DraftError::Exists
        );
        assert!(d.create("y", OsStr::new("note"), 0o644).is_ok());
        assert_eq!(d.get("x", OsStr::new("note")).unwrap().id, a.id);
        assert_eq!(d.listed("x").len(), 1);
        let p = d.create("x", OsStr::new(".note.swp"), 0o644).unwrap();
        assert!(p.is_private() && !a.is_private());
        d.rename("x", OsStr::new(".note.swp"), OsStr::new("note"));
        assert_eq!(d.get("x", OsStr::new("note")).unwrap().id, p.id);
        assert!(d.by_id(a.id).is_none(), "the replaced draft is gone");
        assert!(!d.get("x", OsStr::new("note")).unwrap().is_private());
        d.remove("x", OsStr::new("note"));
        assert!(d.get("x", OsStr::new("note")).is_none());
    }

    /// Marks `st` as sent as deposit `i`, just now (what the tree does at a deposit).
    fn sent(st: &mut DraftState, i: usize) {
        st.deposited = Some(Published {
            name: format!("user-{i:03}.md"),
            path: format!("/w/inbox/x/user-{i:03}.md").into(),
            dev: 1,
            ino: i as u64,
        });
        st.last_used = Instant::now();
    }

    #[test]
    fn deposited_drafts_are_unlisted_aliases_until_the_grace_passes() {
        let d = Drafts::default();
        let a = d.create("x", OsStr::new("note"), 0o644).unwrap();
        sent(&mut a.state.lock(), 1);
        assert!(d.listed("x").is_empty());
        assert!(d.get("x", OsStr::new("note")).is_some());
        a.state.lock().last_used = Instant::now() - ALIAS_GRACE - Duration::from_millis(1);
        assert!(d.get("x", OsStr::new("note")).is_none());
        assert!(d.listed("x").is_empty());
        assert!(d.by_id(a.id).is_none());
    }

    #[test]
    fn aliases_give_way_to_new_messages() {
        // A fast sender: more messages within the alias grace than drafts may be held.
        // None is refused; the aliases used longest ago go first.
        let d = Drafts::default();
        let deposit = |a: &Arc<Draft>, i: usize| sent(&mut a.state.lock(), i);
        let mut made = Vec::new();
        for i in 0..MAX_DRAFTS * 3 {
            let a = d.create("x", OsStr::new(&format!("m{i}")), 0o644).unwrap();
            deposit(&a, i);
            made.push(a);
        }
        let last = made.last().unwrap();
        assert!(
            d.get("x", OsStr::new(&format!("m{}", MAX_DRAFTS * 3 - 1)))
                .is_some()
        );
        assert!(d.by_id(last.id).is_some());
        assert!(
            d.get("x", OsStr::new("m0")).is_none(),
            "the oldest alias stayed"
        );
        assert!(d.by_id(made[0].id).is_none());
        assert!(d.by_name.lock().len() <= MAX_DRAFTS);
        assert_eq!(d.by_name.lock().len(), d.by_id.lock().len());
        // Messages still being written never give way.
        let live: Vec<_> = (0..MAX_DRAFTS)
            .map_while(|i| d.create("y", OsStr::new(&format!("w{i}")), 0o644).ok())
            .collect();
        assert_eq!(
            live.len(),
            MAX_DRAFTS,
            "aliases must make room for live drafts"
        );
        assert_eq!(
            d.create("y", OsStr::new("one-more"), 0o644).unwrap_err(),
            DraftError::Full
        );
        assert!(live.iter().all(|a| d.by_id(a.id).is_some()));
    }

    #[test]
    fn aliases_keep_a_bounded_number_of_bytes() {
        let d = Drafts::default();
        let size = 1 << 20;
        let n = ALIAS_BYTES / size * 2;
        for i in 0..n {
            let a = d.create("x", OsStr::new(&format!("m{i}")), 0o644).unwrap();
            let mut st = a.state.lock();
            st.buf = vec![b'x'; size];
            sent(&mut st, i);
            d.deposited(&mut st);
            drop(st);
            drop(a); // the writer's handle closed
            d.shed_aliases();
            assert!(
                d.alias_bytes() <= ALIAS_BYTES,
                "{} after {i}",
                d.alias_bytes()
            );
        }
        // The newest is still readable under its name; the oldest gave way.
        let newest = d.get("x", OsStr::new(&format!("m{}", n - 1))).unwrap();
        assert_eq!(newest.state.lock().buf.len(), size);
        assert!(d.get("x", OsStr::new("m0")).is_none());
        // Reusing a name for a new message takes its old content out of the total.
        let before = d.alias_bytes();
        d.reused(&mut newest.state.lock());
        assert_eq!(d.alias_bytes(), before - size);
        drop(newest);
        // Everything forgotten: nothing counted.
        d.by_name.lock().clear();
        d.by_id.lock().clear();
        assert_eq!(d.alias_bytes(), 0);
    }

    #[test]
    fn messages_being_written_hold_a_bounded_number_of_bytes() {
        let d = Drafts::default();
        let mib = 1 << 20;
        let mut held = Vec::new();
        for i in 0..DRAFT_BYTES / mib {
            let a = d.create("x", OsStr::new(&format!("w{i}")), 0o644).unwrap();
            d.resize(&mut a.state.lock(), mib).unwrap();
            held.push(a);
        }
        assert_eq!(d.live_bytes(), DRAFT_BYTES);
        let one_more = d.create("x", OsStr::new("one-more"), 0o644).unwrap();
        assert_eq!(
            d.resize(&mut one_more.state.lock(), 1).unwrap_err(),
            DraftError::Full
        );
        assert!(
            one_more.state.lock().buf.is_empty(),
            "a refused write grew the draft"
        );
        // Shrinking, depositing and forgetting give the bytes back.
        d.resize(&mut held[0].state.lock(), 0).unwrap();
        d.resize(&mut one_more.state.lock(), mib).unwrap();
        {
            let mut st = held[1].state.lock();
            sent(&mut st, 1);
            d.deposited(&mut st);
        }
        assert_eq!(d.live_bytes(), DRAFT_BYTES - mib);
        assert_eq!(d.alias_bytes(), mib);
        drop(held);
        drop(one_more);
        d.by_name.lock().clear();
        d.by_id.lock().clear();
        assert_eq!((d.live_bytes(), d.alias_bytes()), (0, 0));
    }

    fn task(tgid: u32, exit: Option<Exit>) -> Task {
        Task {
            tid: tgid + 1000,
            tgid,
            exit,
        }
    }

    #[test]
    fn the_last_close_sends_unless_a_writer_was_killed() {
        let running = task(1, None);
        let exiting = task(1, Some(Exit::Status(0)));
        let killed = task(1, Some(Exit::Signal(9)));
        let bystander_killed = task(2, Some(Exit::Signal(15)));
        // The writer closes and nobody else holds it: sent.
        assert_eq!(verdict(Some(&running), &[1], &[]), Verdict::Send);
        assert_eq!(verdict(Some(&exiting), &[1], &[]), Verdict::Send);
        // A dup, a forked child or an exec'ed program still holds it: wait.
        assert_eq!(verdict(Some(&running), &[1], &[1]), Verdict::Wait);
        assert_eq!(verdict(Some(&exiting), &[1], &[3]), Verdict::Wait);
        // The writer killed: dropped, even if others hold it.
        let drop = Verdict::Drop { pid: 1, signal: 9 };
        assert_eq!(verdict(Some(&killed), &[1], &[]), drop);
        assert_eq!(verdict(Some(&killed), &[2, 1], &[3]), drop);
        // A holder that never wrote (a `sleep`) killed: its close may still be the last.
        assert_eq!(verdict(Some(&bystander_killed), &[1], &[]), Verdict::Send);
        assert_eq!(verdict(Some(&bystander_killed), &[1], &[1]), Verdict::Wait);
        // A closer already gone (the release, or a task reaped before it was seen).
        assert_eq!(verdict(None, &[1], &[]), Verdict::Send);
    }

    #[test]
    fn hands_read_a_threads_group_once_and_stay_bounded() {
        let mut h = Hands::default();
        let mut asked = 0;
        for _ in 0..3 {
            assert_eq!(
                h.group(7, |t| {
                    asked += 1;
                    t - 1
                }),
                6
            );
        }
        assert_eq!(asked, 1);
        for i in 0..(witness::MAX_PROCESSES as u32 + 10) {
            h.held(i);
            h.held(i);
        }
        assert_eq!(h.holders.len(), witness::MAX_PROCESSES);
    }

    #[test]
    fn the_number_of_drafts_is_bounded() {
        let d = Drafts::default();
        for i in 0..MAX_DRAFTS {
            d.create("x", OsStr::new(&format!("n{i}")), 0o644).unwrap();
        }
        assert_eq!(
            d.create("x", OsStr::new("one-more"), 0o644).unwrap_err(),
            DraftError::Full
        );
    }
}
