//! Handles on `repo.git`, and what libgit2 may keep through them.
//!
//! **Bounded.** libgit2's process-wide caches are set once, before the first handle is
//! opened ([`bound_object_cache`]): parsed objects, and the windows packs are mapped in.
//!
//! **A handle lets go of the packs `git gc` replaced.** libgit2 adds a pack to a handle's
//! list when it first finds it and never takes one off, even once its file is deleted: a
//! handle kept for the mount's life keeps every pack it ever read open (a deleted pack's
//! disk space is not freed while the daemon runs), its index mapped, and its cache of
//! delta bases (up to 16 MiB a pack, on the heap). The harness repacks as it works, so
//! such a handle ends up holding every pack of the day. Each handle here is tied to the
//! state of `objects/pack` it was opened in ([`PackState`]); once that state has passed,
//! the handle is closed and a new one opened when next needed. The state is looked at no
//! more than once a [`PACKS_LOOKED_AT_EVERY`] by a reader, and by the daemon's upkeep
//! ([`sweep`]) for handles nobody reads, so a replaced pack is closed within a second of
//! the next read, or at the next upkeep.
//!
//! **What libgit2 caches through a repository's handles is freed twice a minute.** Each
//! pack keeps the delta bases it unpacked, up to 16 MiB a pack, and each handle the
//! objects it parsed; neither is bounded by [`bound_object_cache`], and packs are shared
//! by every handle of the process on that repository, so a pack's cache goes only with
//! the last handle. A home's repositories hold several packs each, and over a long run
//! the caches filled to most of a daemon's memory (a walk of the soak's home left 60 MiB
//! of a 147 MiB daemon behind them). Once a repository's handles are
//! [`HANDLES_LIVE_FOR`] old, the upkeep closes the idle ones and those lent are closed as
//! they come back, none being kept until none is lent: then the caches are freed, and
//! the next reader opens a fresh handle.
//!
//! **One reader a handle.** `git2`'s handle is not to be shared between threads, and one
//! handle behind one lock made every git read wait for the slowest (a large blob, a long
//! walk): the request threads borrow handles from a [`Pool`], one each.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use git2::Repository;
use parking_lot::Mutex;

use super::refs::{GitError, git};

/// What libgit2 keeps of the commits and trees it parsed, over every handle of the
/// process, counted as it counts (the objects' raw sizes; parsed, they weigh about twice
/// that). Its own default, 256 MiB, is a daemon's memory slowly taken over by a live
/// workspace's history: every look at an agent's newest commit adds what no one reads
/// again. What is read again within a look stays: each agent's newest commit and its
/// small trees (libgit2 keeps no tree over 4 KiB), a few KiB an agent. At 16 MiB the
/// cache was still filling 20 minutes into a soak (doc/TESTING.md), which no one could
/// tell from a leak.
pub(crate) const GIT_OBJECT_CACHE_BYTES: usize = 4 << 20;

/// The windows libgit2 maps pack files in, and the most it keeps mapped at once. Its
/// defaults (1 GiB windows, 8 GiB in all) never unmap anything a daemon reads: every page
/// of a pack a walk once touched stayed in the RSS (30 MiB of a soak's 110 MiB daemon were
/// pack pages, and growing). Past the bound the least recently used window is unmapped,
/// and a page read again comes from the kernel's page cache.
pub(crate) const GIT_PACK_WINDOW_BYTES: usize = 1 << 20;
pub(crate) const GIT_PACK_MAPPED_BYTES: usize = 16 << 20;

/// Sets libgit2's object cache bound to [`GIT_OBJECT_CACHE_BYTES`] and its pack windows to
/// [`GIT_PACK_WINDOW_BYTES`] and [`GIT_PACK_MAPPED_BYTES`], once per process, before the
/// first repository is opened.
pub(crate) fn bound_object_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        libgit2_sys::init();
        // SAFETY: a documented option taking one ssize_t, set once before any
        // repository is opened through this module.
        let r = unsafe {
            libgit2_sys::git_libgit2_opts(
                libgit2_sys::GIT_OPT_SET_CACHE_MAX_SIZE as libc::c_int,
                GIT_OBJECT_CACHE_BYTES as libc::ssize_t,
            )
        };
        if r != 0 {
            log::warn!("git: could not bound the object cache (libgit2 said {r})");
        }
        // SAFETY: documented options taking one size_t each, set before any repository
        // is opened through this module.
        let windows = unsafe {
            git2::opts::set_mwindow_size(GIT_PACK_WINDOW_BYTES)
                .and_then(|()| git2::opts::set_mwindow_mapped_limit(GIT_PACK_MAPPED_BYTES))
        };
        if let Err(e) = windows {
            log::warn!("git: could not bound the pack windows ({e})");
        }
    });
}

/// libgit2's object cache now: bytes held and the bound, as it counts them.
#[cfg(test)]
pub(crate) fn object_cache() -> (usize, usize) {
    let (mut now, mut max): (libc::ssize_t, libc::ssize_t) = (0, 0);
    // SAFETY: the documented option, given two pointers to ssize_t that outlive the call.
    unsafe {
        libgit2_sys::git_libgit2_opts(
            libgit2_sys::GIT_OPT_GET_CACHED_MEMORY as libc::c_int,
            &mut now as *mut libc::ssize_t,
            &mut max as *mut libc::ssize_t,
        );
    }
    (now.max(0) as usize, max.max(0) as usize)
}

/// How often a handle's packs are looked at, at most: a `stat` of `objects/pack`.
pub(crate) const PACKS_LOOKED_AT_EVERY: Duration = Duration::from_secs(1);
/// How long a repository's handles are kept, at most, before all of them are closed
/// together (module docs): what libgit2 caches through them is freed that often.
pub(crate) const HANDLES_LIVE_FOR: Duration = Duration::from_secs(30);
/// The most idle handles on one `repo.git` kept for reuse ([`Pool`]).
const MAX_IDLE_HANDLES: usize = 16;
/// Where a repository keeps its packs.
const PACK_DIR: [&str; 2] = ["objects", "pack"];

/// The state of a repository's pack directory: its modification time and inode number,
/// which every pack added or removed changes (`None`: no such directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackState(Option<(i64, i64, u64)>);

/// The pack directory of one `repo.git`, and its state when last looked at.
struct Packs {
    dir: PathBuf,
    last: Mutex<(PackState, Instant)>,
}

impl Packs {
    fn new(repo_dir: &Path) -> Self {
        let dir = PACK_DIR
            .iter()
            .fold(repo_dir.to_path_buf(), |d, c| d.join(c));
        let state = Self::read(&dir);
        Self {
            dir,
            last: Mutex::new((state, Instant::now())),
        }
    }

    fn read(dir: &Path) -> PackState {
        PackState(
            std::fs::metadata(dir)
                .ok()
                .map(|m| (m.mtime(), m.mtime_nsec(), m.ino())),
        )
    }

    /// The state now, looked at again if the last look is older than
    /// [`PACKS_LOOKED_AT_EVERY`].
    fn now(&self) -> PackState {
        let mut last = self.last.lock();
        if last.1.elapsed() >= PACKS_LOOKED_AT_EVERY {
            *last = (Self::read(&self.dir), Instant::now());
        }
        last.0
    }

    /// The state when last looked at.
    fn known(&self) -> PackState {
        self.last.lock().0
    }
}

fn open(dir: &Path) -> Result<Repository, GitError> {
    bound_object_cache();
    git(
        || format!("open {}", dir.display()),
        Repository::open_bare(dir),
    )
}

/// What the upkeep goes round, and where a second pool on a `repo.git` finds the first:
/// every pool still open (see [`sweep`]).
static OPEN: Mutex<Vec<Weak<Idle>>> = Mutex::new(Vec::new());

/// Closes every idle handle of the process whose packs' state has passed, so that a
/// workspace nobody reads after a repack does not keep the old packs until its next
/// read, and retires the handles of every repository opened [`HANDLES_LIVE_FOR`] ago
/// (module docs). The daemon's upkeep calls it (every few seconds).
pub(crate) fn sweep() {
    let live: Vec<Arc<Idle>> = {
        let mut open = OPEN.lock();
        open.retain(|w| w.strong_count() > 0);
        open.iter().filter_map(Weak::upgrade).collect()
    };
    for s in live {
        s.sweep();
        s.retire_older_than(HANDLES_LIVE_FOR);
    }
}

/// Handles on one `repo.git`, each lent to one reader at a time (the request threads,
/// the follower, the depositor). A handle is opened when none is idle, at most
/// [`MAX_IDLE_HANDLES`] are kept, none outlives the state of the packs it was opened in,
/// and all of them are closed together once they are [`HANDLES_LIVE_FOR`] old (module
/// docs). Every pool opened on one directory is the same pool.
pub(crate) struct Pool(Arc<Idle>);

struct Idle {
    dir: PathBuf,
    packs: Packs,
    lent: Mutex<Lent>,
}

/// A pool's handles: the idle ones, how many are lent, and since when the pool has had
/// any open.
#[derive(Default)]
struct Lent {
    idle: Vec<(Repository, PackState)>,
    out: usize,
    /// When the first of the handles open now was opened (`None`: none is open).
    since: Option<Instant>,
    /// Being retired: nothing given back is kept, until none is lent.
    retiring: bool,
}

impl Lent {
    /// Forgets `since` once no handle is open.
    fn settle(&mut self) {
        if self.out == 0 && self.idle.is_empty() {
            self.since = None;
            self.retiring = false;
        }
    }
}

impl Idle {
    /// Closes the idle handles of an earlier state of the packs; the state now.
    fn sweep(&self) -> PackState {
        let packs = self.packs.now();
        let closed = {
            let mut lent = self.lent.lock();
            let (keep, closed) = std::mem::take(&mut lent.idle)
                .into_iter()
                .partition(|(_, p)| *p == packs);
            lent.idle = keep;
            lent.settle();
            closed
        };
        drop::<Vec<_>>(closed);
        packs
    }

    /// Closes every handle once the first of them is `life` old: the idle ones now, the
    /// lent ones as they come back. Until none is lent, no handle given back is kept, so
    /// that the moment comes when this process holds none on the repository and libgit2
    /// frees its packs (which a new handle would otherwise share).
    fn retire_older_than(&self, life: Duration) {
        let closed = {
            let mut lent = self.lent.lock();
            if lent.since.is_none_or(|t| t.elapsed() < life) {
                return;
            }
            lent.retiring = true;
            let closed = std::mem::take(&mut lent.idle);
            lent.settle();
            closed
        };
        drop(closed);
    }
}

/// A handle lent by the [`Pool`], given back when dropped.
pub(crate) struct Lease<'a> {
    pool: &'a Idle,
    repo: Option<Repository>,
    packs: PackState,
}

impl Pool {
    /// The pool on `dir` (the one already open, if any), with a handle opened first when
    /// it is new (so that a bad repository is told now).
    pub(crate) fn open(dir: &Path) -> Result<Self, GitError> {
        let mut open_pools = OPEN.lock();
        if let Some(idle) = open_pools
            .iter()
            .filter_map(Weak::upgrade)
            .find(|i| i.dir == dir)
        {
            return Ok(Pool(idle));
        }
        let idle = Arc::new(Idle {
            dir: dir.to_path_buf(),
            packs: Packs::new(dir),
            lent: Mutex::new(Lent::default()),
        });
        let first = open(dir)?;
        {
            let mut lent = idle.lent.lock();
            lent.idle.push((first, idle.packs.known()));
            lent.since = Some(Instant::now());
        }
        // The pools gone are dropped from the list at each sweep.
        open_pools.push(Arc::downgrade(&idle));
        Ok(Pool(idle))
    }

    pub(crate) fn get(&self) -> Result<Lease<'_>, GitError> {
        let pool = &*self.0;
        // Handles of an earlier state are closed, here and as they come back.
        let packs = pool.sweep();
        let kept = {
            let mut lent = pool.lent.lock();
            lent.out += 1;
            lent.since.get_or_insert_with(Instant::now);
            lent.idle.pop()
        };
        let repo = match kept {
            Some((r, _)) => r,
            None => match open(&pool.dir) {
                Ok(r) => r,
                Err(e) => {
                    let mut lent = pool.lent.lock();
                    lent.out -= 1;
                    lent.settle();
                    return Err(e);
                }
            },
        };
        Ok(Lease {
            pool,
            repo: Some(repo),
            packs,
        })
    }

    /// How many handles are idle (for tests).
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.0.lent.lock().idle.len()
    }
}

impl std::ops::Deref for Lease<'_> {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        // Taken only by `drop`.
        self.repo.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let current = self.packs == self.pool.packs.known();
        let closed = {
            let mut lent = self.pool.lent.lock();
            lent.out -= 1;
            let repo = self.repo.take();
            let closed = match repo {
                Some(r) if current && !lent.retiring && lent.idle.len() < MAX_IDLE_HANDLES => {
                    lent.idle.push((r, self.packs));
                    None
                }
                other => other,
            };
            // The last lent handle of a retiring pool: none is open once it is closed.
            lent.settle();
            closed
        };
        drop(closed);
    }
}

#[cfg(test)]
#[path = "handles/tests.rs"]
mod tests;
