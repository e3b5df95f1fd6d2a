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

/// What the upkeep goes round: every pool still open (see [`sweep`]).
static OPEN: Mutex<Vec<Weak<Idle>>> = Mutex::new(Vec::new());

/// Closes every idle handle of the process whose packs' state has passed, so that a
/// workspace nobody reads after a repack does not keep the old packs until its next
/// read. The daemon's upkeep calls it (every few seconds).
pub(crate) fn sweep() {
    let live: Vec<Arc<Idle>> = {
        let mut open = OPEN.lock();
        open.retain(|w| w.strong_count() > 0);
        open.iter().filter_map(Weak::upgrade).collect()
    };
    for s in live {
        s.sweep();
    }
}

/// Handles on one `repo.git`, each lent to one reader at a time (the request threads,
/// the follower, the depositor). A handle is opened when none is idle, at most
/// [`MAX_IDLE_HANDLES`] are kept, and none outlives the state of the packs it was opened
/// in (module docs).
pub(crate) struct Pool(Arc<Idle>);

struct Idle {
    dir: PathBuf,
    packs: Packs,
    handles: Mutex<Vec<(Repository, PackState)>>,
}

impl Idle {
    /// Closes the idle handles of an earlier state of the packs; the state now.
    fn sweep(&self) -> PackState {
        let packs = self.packs.now();
        self.handles.lock().retain(|(_, p)| *p == packs);
        packs
    }
}

/// A handle lent by the [`Pool`], given back when dropped.
pub(crate) struct Lease<'a> {
    pool: &'a Idle,
    repo: Option<Repository>,
    packs: PackState,
}

impl Pool {
    /// A pool on `dir`, with one handle opened (so that a bad repository is told now).
    pub(crate) fn open(dir: &Path) -> Result<Self, GitError> {
        let idle = Arc::new(Idle {
            dir: dir.to_path_buf(),
            packs: Packs::new(dir),
            handles: Mutex::new(Vec::new()),
        });
        let first = open(dir)?;
        idle.handles.lock().push((first, idle.packs.known()));
        // The pools gone are dropped from the list at each sweep.
        OPEN.lock().push(Arc::downgrade(&idle));
        Ok(Pool(idle))
    }

    pub(crate) fn get(&self) -> Result<Lease<'_>, GitError> {
        let pool = &*self.0;
        // Handles of an earlier state are closed, here and as they come back.
        let packs = pool.sweep();
        let kept = pool.handles.lock().pop();
        let repo = match kept {
            Some((r, _)) => r,
            None => open(&pool.dir)?,
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
        self.0.handles.lock().len()
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
        if self.packs != self.pool.packs.known() {
            return;
        }
        let mut idle = self.pool.handles.lock();
        if idle.len() < MAX_IDLE_HANDLES
            && let Some(r) = self.repo.take()
        {
            idle.push((r, self.packs));
        }
    }
}

#[cfg(test)]
#[path = "handles/tests.rs"]
mod tests;
