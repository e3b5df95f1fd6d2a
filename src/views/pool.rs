//! Following many workspaces with two threads: a home mount's events.
//!
//! A single mount follows its workspace with a thread of its own ([`Views::start`]). A
//! home of fifty workspaces must not run fifty: a [`Pool`] follows every workspace it is
//! given with one thread, `litanyfs-follow`, which looks at each when it is poked or due,
//! on the same schedule a single follower keeps ([`look_rest`], [`idle_wait`]); and
//! reconstructs their histories, one after another, on one more, `litanyfs-history`, at
//! the lowest CPU priority, started when a workspace needs it and gone when none does.
//!
//! A workspace nobody has opened holds only the watches of its top directories
//! ([`TOP_WATCHED`], and every directory under `repo.git/refs`), on one inotify
//! descriptor read by one more thread, `litanyfs-top`: a new agent, a message, a branch or
//! a mark that moves pokes its follower at once, so its looks read the refs only when
//! poked ([`TOPPED_REFS_TRUST`] as a safety net). What happens deeper (a step starting, a
//! tool running) is seen at its next look: once quiet, every [`UNWATCHED_TICK`] rather
//! than every [`IDLE_TICK`], so an idle home costs little whatever its size. One found at
//! rest when first read (no executor holding a lock) is quiet from the start: the looks
//! of fifty resting workspaces must not compete with the first walk of the one being
//! opened, and whatever wakes one (a new agent, a moved branch or mark) pokes. Such a
//! quiet look also waits while the mount serves requests ([`crate::busy`]), at most one
//! more tick. Once its tree watches it ([`Views::refs_watched`]) it is followed as a
//! single mount's.

use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::model::{Model, Scanner};
use super::{IDLE_TICK, Views, background, idle_wait, look_rest};

/// How often a quiet workspace that nothing watches is looked at.
pub(crate) const UNWATCHED_TICK: Duration = Duration::from_secs(10);

/// How long a workspace whose top directories are all watched trusts its last reading of
/// the refs when no watch told of a change: a move of a branch or a mark pokes it, so
/// this is only a safety net, and longer than [`UNWATCHED_TICK`], so that the quiet looks
/// of fifty resting workspaces read no refs (each a file per agent, from the disk once
/// its pages were dropped) while a walk reads the one being opened.
pub(crate) const TOPPED_REFS_TRUST: Duration = Duration::from_secs(60);

/// The directories of a workspace the pool watches, relative to it: where a new agent,
/// a deposit or a packed ref shows. Each must be there for the pool to trust its
/// watches, as must [`REFS_DIR`].
pub(crate) const TOP_WATCHED: [&str; 3] = [
    crate::workspace::STEPS_DIR,
    crate::workspace::INBOX_DIR,
    "repo.git",
];

/// Where a branch or a mark moves: watched with every directory below it, and each one
/// made later as it comes (`refs/heads/agents` with the first agent, `refs/litany` and
/// `refs/litany/<kind>` with the first mark of a kind).
const REFS_DIR: &str = "repo.git/refs";

/// One inotify descriptor for the top directories of every workspace in the pool, and
/// whose each watch is.
struct TopWatch {
    inotify: crate::inotify::Inotify,
    views: Mutex<crate::FastMap<i32, Watched>>,
}

/// Whose a watch is; with the directory's path when it is under [`REFS_DIR`], whose new
/// directories are watched as they come.
type Watched = (std::sync::Weak<Views>, Option<std::path::PathBuf>);

impl TopWatch {
    fn start() -> Option<Arc<Self>> {
        let inotify = crate::inotify::Inotify::new(false)
            .map_err(|e| ::log::warn!("events: no inotify for the home's workspaces ({e})"))
            .ok()?;
        let me = Arc::new(Self {
            inotify,
            views: Mutex::new(Default::default()),
        });
        let weak = Arc::downgrade(&me);
        let started = std::thread::Builder::new()
            .name("litanyfs-top".into())
            .spawn(move || top_loop(weak));
        if let Err(e) = started {
            ::log::warn!("events: no thread for the home's watches ({e})");
            return None;
        }
        Some(me)
    }

    /// Watches `views`' workspace's top directories and its refs' (module docs); whether
    /// every one of them is watched.
    fn add(&self, views: &Arc<Views>) -> bool {
        let mut map = self.views.lock();
        let mut all = true;
        for d in TOP_WATCHED {
            match self
                .inotify
                .add(&views.root.join(d), crate::watch::REFS_MASK)
            {
                Ok(wd) => {
                    map.insert(wd, (Arc::downgrade(views), None));
                }
                Err(_) => all = false,
            }
        }
        self.add_tree(&mut map, views, views.root.join(REFS_DIR)) && all
    }

    /// Watches `dir` and every directory below it, each one's new directories to be
    /// watched as they come; whether all were.
    fn add_tree(
        &self,
        map: &mut crate::FastMap<i32, Watched>,
        views: &Arc<Views>,
        dir: std::path::PathBuf,
    ) -> bool {
        let mut all = true;
        let mut todo = vec![dir];
        while let Some(d) = todo.pop() {
            match self.inotify.add(&d, crate::watch::REFS_MASK) {
                Ok(wd) => {
                    map.insert(wd, (Arc::downgrade(views), Some(d.clone())));
                }
                Err(_) => {
                    all = false;
                    continue;
                }
            }
            if let Ok(entries) = std::fs::read_dir(&d) {
                todo.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        all
    }
}

/// `litanyfs-top`: pokes the follower of each workspace whose top directory changed,
/// until the pool is gone.
fn top_loop(top: std::sync::Weak<TopWatch>) {
    let mut buf = vec![0u8; crate::inotify::EVENT_BUFFER];
    loop {
        let Some(t) = top.upgrade() else {
            return;
        };
        let fd = {
            use std::os::fd::AsRawFd;
            t.inotify.as_raw_fd()
        };
        drop(t);
        // Wait without holding the watch, so that the pool can be dropped meanwhile.
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call; the descriptor lives as
        // long as the TopWatch, and a closed one only makes poll answer POLLNVAL.
        let ready = unsafe { libc::poll(&mut pfd, 1, IDLE_TICK.as_millis() as libc::c_int) };
        let Some(t) = top.upgrade() else {
            return;
        };
        if ready <= 0 || pfd.revents & libc::POLLIN == 0 {
            continue;
        }
        let mut poke = Vec::new();
        let mut ended = Vec::new();
        let mut new_dirs = Vec::new();
        let mut overflowed = false;
        if let Err(e) = t.inotify.read(&mut buf, |e| {
            poke.push(e.wd);
            overflowed |= e.overflowed();
            if e.watch_ended() {
                ended.push(e.wd);
            }
            if e.mask & libc::IN_ISDIR != 0 && e.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                new_dirs.push((e.wd, std::ffi::OsStr::from_bytes(e.name).to_os_string()));
            }
        }) {
            ::log::warn!("events: the home's watches stop ({e})");
            return;
        }
        let mut map = t.views.lock();
        // A new directory under the refs (the first agent's, a new kind of mark):
        // watched from now on, and the poke below comes after, so that the look it
        // brings sees whatever was made in it before its watch.
        for (wd, name) in new_dirs {
            if let Some((v, Some(parent))) = map.get(&wd).cloned()
                && let Some(v) = v.upgrade()
            {
                t.add_tree(&mut map, &v, parent.join(name));
            }
        }
        if overflowed {
            // Some change was not told: every workspace reads its refs again.
            poke = map.keys().copied().collect();
        }
        poke.sort_unstable();
        poke.dedup();
        for wd in poke {
            if let Some(v) = map.get(&wd).and_then(|(v, _)| v.upgrade()) {
                v.refs_moved();
            }
        }
        for wd in ended {
            map.remove(&wd);
        }
        // A workspace the home forgot while its directories stay: its watches go too.
        map.retain(|wd, (v, _)| {
            let live = v.strong_count() > 0;
            if !live {
                t.inotify.remove(*wd);
            }
            live
        });
    }
}
/// How many quiet looks in a row (at [`idle_wait`]'s pace, about five seconds) before
/// an unwatched workspace is looked at only every [`UNWATCHED_TICK`].
const QUIET_BEFORE_UNWATCHED_TICK: u32 = 8;

/// What wakes the pool's thread: a poke of any of its views.
#[derive(Default)]
pub(crate) struct Wake {
    poked: Mutex<bool>,
    cv: Condvar,
}

impl Wake {
    pub(super) fn poke(&self) {
        *self.poked.lock() = true;
        self.cv.notify_one();
    }
}

/// One workspace's following state.
struct Follower {
    views: Arc<Views>,
    /// `None` until the workspace can be read (`litany new` fills `repo.git` after
    /// making it).
    following: Option<(Scanner, Model)>,
    said: bool,
    quiet: u32,
    /// No look before this (the rest after the last one).
    rested: Instant,
    /// A look at this at the latest, poked or not.
    due: Instant,
    /// When a look put off while the mount was busy was first due (see [`crate::busy`]).
    put_off: Option<Instant>,
}

impl Follower {
    fn new(views: Arc<Views>) -> Self {
        let now = Instant::now();
        Self {
            views,
            following: None,
            said: false,
            quiet: 0,
            rested: now,
            due: now,
            put_off: None,
        }
    }

    /// The longest a quiet follower waits for a poke: as a single mount's while its
    /// tree watches it; [`UNWATCHED_TICK`] once it has been quiet for a while otherwise.
    fn idle(&self) -> Duration {
        let watched = self.views.refs_are_watched();
        if !watched && self.quiet >= QUIET_BEFORE_UNWATCHED_TICK {
            UNWATCHED_TICK
        } else {
            idle_wait(self.quiet)
        }
    }

    /// When its next turn is, as things stand.
    fn next(&self) -> Instant {
        if *self.views.poked.lock() {
            self.rested
        } else {
            self.due
        }
    }

    /// One turn, if it is time for one; `false` once nobody else holds the views.
    fn turn(&mut self, now: Instant, histories: &Arc<Histories>) -> bool {
        // The pool's list holds one reference, the follower another.
        if Arc::strong_count(&self.views) <= 1 {
            return false;
        }
        let poked = *self.views.poked.lock();
        if now < self.rested || (!poked && now < self.due) {
            return true;
        }
        let resting = !poked && self.idle() == UNWATCHED_TICK;
        if put_off(
            &mut self.put_off,
            &mut self.due,
            resting,
            crate::busy::busy(now),
            now,
        ) {
            return true;
        }
        *self.views.poked.lock() = false;
        let started = Instant::now();
        match &mut self.following {
            None => match self.views.new_scanner() {
                Ok(mut scanner) => {
                    let model = self.views.first_scan(&mut scanner);
                    if self.views.refs_are_topped() && !model.agents.values().any(|a| a.running) {
                        // Found at rest: nothing to follow closely until something moves.
                        self.quiet = QUIET_BEFORE_UNWATCHED_TICK;
                    }
                    self.views.remember_names(&model);
                    histories.push(self.views.clone(), model.clone());
                    self.following = Some((scanner, model));
                }
                Err(e) => {
                    if !self.said {
                        ::log::info!("events: cannot read the workspace yet ({e}); trying again");
                        self.said = true;
                    }
                    self.due = now + IDLE_TICK;
                    return true;
                }
            },
            Some((scanner, model)) => {
                let (next, found) = self.views.look_guarded(scanner, model);
                *model = next;
                self.quiet = if poked || found > 0 {
                    0
                } else {
                    self.quiet.saturating_add(1)
                };
            }
        }
        let rest = look_rest(started.elapsed());
        self.rested = Instant::now() + rest;
        self.due = self.rested.max(Instant::now() + self.idle());
        true
    }
}

/// Whether a due look is put off, moving `due` on: a `resting` workspace (quiet, nobody
/// opened it) is looked at when the mount is not `busy`, at most [`UNWATCHED_TICK`] after
/// it was first due (`first`), so that its reads do not queue beside those of whoever
/// walks the mount.
fn put_off(
    first: &mut Option<Instant>,
    due: &mut Instant,
    resting: bool,
    busy: bool,
    now: Instant,
) -> bool {
    if resting && busy {
        let since = *first.get_or_insert(*due);
        if now < since + UNWATCHED_TICK {
            *due = now + crate::busy::BUSY_FOR;
            return true;
        }
    }
    *first = None;
    false
}

/// A workspace's views, and the first model its history is reconstructed back from.
type Waiting = (Arc<Views>, Model);

/// The histories waiting to be reconstructed, and whether a thread is at them.
#[derive(Default)]
struct Histories {
    /// The queue; `true` while a thread drains it (both under one lock, so that no
    /// history is queued just as the thread leaves).
    queue: Mutex<(VecDeque<Waiting>, bool)>,
}

impl Histories {
    /// Queues `views`' history, reconstructed back from `first`, and starts the thread
    /// when none is at the queue.
    fn push(self: &Arc<Self>, views: Arc<Views>, first: Model) {
        let mut q = self.queue.lock();
        q.0.push_back((views, first));
        if q.1 {
            return;
        }
        q.1 = true;
        drop(q);
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("litanyfs-history".into())
            .spawn(move || {
                background();
                me.drain();
            });
        if let Err(e) = started {
            ::log::warn!("events: no history thread ({e}); only live events are shown");
            let mut q = self.queue.lock();
            q.1 = false;
            for (v, _) in q.0.drain(..) {
                v.history_done(Vec::new());
            }
        }
    }

    fn drain(&self) {
        loop {
            let (views, first) = {
                let mut q = self.queue.lock();
                match q.0.pop_front() {
                    Some(next) => next,
                    None => {
                        q.1 = false;
                        return;
                    }
                }
            };
            views.history(&first);
        }
    }
}

/// Follows many workspaces' views with one thread (module docs).
pub(crate) struct Pool {
    followers: Mutex<Vec<Follower>>,
    wake: Arc<Wake>,
    histories: Arc<Histories>,
    /// The top directories' watches (`None` without inotify: the ticks alone).
    top: Option<Arc<TopWatch>>,
}

impl Pool {
    /// A pool, its thread started.
    pub(crate) fn start() -> Arc<Self> {
        let pool = Arc::new(Self {
            followers: Mutex::new(Vec::new()),
            wake: Arc::new(Wake::default()),
            histories: Arc::default(),
            top: TopWatch::start(),
        });
        let weak = Arc::downgrade(&pool);
        let started = std::thread::Builder::new()
            .name("litanyfs-follow".into())
            .spawn(move || run(weak));
        if let Err(e) = started {
            ::log::error!("events: no thread to follow the workspaces ({e})");
        }
        pool
    }

    /// Follows `views` from now on, for as long as anyone else holds them.
    pub(crate) fn add(&self, views: Arc<Views>) {
        let _ = views.pool.set(self.wake.clone());
        let topped = self.top.as_ref().is_some_and(|top| top.add(&views));
        if topped {
            views.refs_topped();
        }
        self.followers.lock().push(Follower::new(views));
        self.wake.poke();
    }
}

/// The pool's thread: each follower's turn when poked or due, then a wait for the
/// earliest next one or a poke, until the pool is dropped.
fn run(pool: std::sync::Weak<Pool>) {
    loop {
        let Some(p) = pool.upgrade() else {
            return;
        };
        let now = Instant::now();
        let next = {
            let mut followers = p.followers.lock();
            followers.retain_mut(|f| f.turn(now, &p.histories));
            followers.iter().map(Follower::next).min()
        };
        let wake = p.wake.clone();
        drop(p);
        let mut poked = wake.poked.lock();
        if !*poked {
            let until = next.unwrap_or_else(|| Instant::now() + IDLE_TICK);
            wake.cv.wait_until(&mut poked, until);
        }
        *poked = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::views::Rendering;
    use crate::workspace::refs::Flavour;

    /// Whether `views`' events come to show `what` within `limit`.
    fn shows(views: &Views, what: &str, limit: Duration) -> bool {
        crate::testing::wait::within(limit, || {
            views
                .log()
                .read(Rendering::Text, 0, u32::MAX)
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains(what))
        })
    }

    #[test]
    fn a_resting_look_waits_while_the_mount_is_busy_at_most_a_tick() {
        let t0 = Instant::now();
        let (mut first, mut due) = (None, t0);
        // Busy: put off, again and again, each time by the busy window.
        assert!(put_off(&mut first, &mut due, true, true, t0));
        assert_eq!(due, t0 + crate::busy::BUSY_FOR);
        let later = t0 + UNWATCHED_TICK / 2;
        assert!(put_off(&mut first, &mut due, true, true, later));
        // A tick after it was first due, it runs however busy the mount is.
        assert!(!put_off(
            &mut first,
            &mut due,
            true,
            true,
            t0 + UNWATCHED_TICK
        ));
        assert_eq!(first, None);
        // Not busy, or not resting (poked, watched, or not yet quiet): never put off.
        assert!(!put_off(&mut first, &mut due, true, false, t0));
        assert!(!put_off(&mut first, &mut due, false, true, t0));
    }

    #[test]
    fn a_mark_of_a_kind_made_after_the_pool_began_is_seen_at_once() {
        const A: &str = "20261202T094226Z-0122ccc2";
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent(A, Some("Alpha"), &[]).unwrap();
        // Every top directory there, so that the pool trusts its watches.
        for d in TOP_WATCHED.iter().chain([&REFS_DIR]) {
            std::fs::create_dir_all(f.root().join(d)).unwrap();
        }
        let views = Views::new(f.root(), None);
        let pool = Pool::start();
        pool.add(views.clone());
        assert!(views.wait_history(Duration::from_secs(10)));
        assert!(shows(&views, "agent-created", Duration::from_secs(5)));
        // The kind's directory first, empty, and read by a look or two; then a mark in it,
        // which only a watch on the new directory tells of before the refs' trust ends.
        let oid = f.repo().blob(b"x").unwrap();
        let kind = f.root().join(REFS_DIR).join("litany/newkind");
        std::fs::create_dir_all(&kind).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        // As git writes a loose ref: a lock file beside it, renamed into place.
        std::fs::write(kind.join(format!("{A}.lock")), format!("{oid}\n")).unwrap();
        std::fs::rename(kind.join(format!("{A}.lock")), kind.join(A)).unwrap();
        assert!(
            shows(&views, "mark-set", Duration::from_secs(3)),
            "{}",
            String::from_utf8_lossy(&views.log().read(Rendering::Text, 0, u32::MAX).unwrap())
        );
    }
}
