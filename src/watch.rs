//! Change detection: inotify on the backing directories the kernel knows about and on the
//! refs in `repo.git`, turned into [`Change`]s for the adapter to invalidate.
//!
//! This is what lets the kernel keep names and attributes for a long time and still show
//! every change at once: a directory is watched *before* anything in it is first answered,
//! so no change after an answer can go unseen. Watches are added through a descriptor
//! resolved beneath the workspace root, or as an entry (never followed) of a directory
//! open on such a descriptor, never by a path that could follow a symlink out of it. An inotify descriptor is not an fd on any directory, so watching `inbox/<id>`
//! does not make the daemon look like the agent's executor to `litany stop`.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::FastSet;
use crate::inotify::{EVENT_BUFFER, Inotify};
use crate::workspace::backing::Backing;
use crate::workspace::refs::ref_places;
use crate::workspace::shared_path::SharedPath;

/// What a backing directory's watch reports.
const DIR_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

/// What a refs directory's watch reports: any entry coming, going or being replaced (a
/// home's top watches report the same of theirs).
pub(crate) const REFS_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

/// A change the view must reflect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// Entry `name` of backing directory `dir` (workspace-relative) was created, removed
    /// or replaced (`renamed`: the directory's names changed), or written or had its
    /// attributes changed (only the entry itself changed).
    Entry {
        dir: PathBuf,
        name: OsString,
        renamed: bool,
    },
    /// Backing directory `dir` itself went away or moved.
    Gone(PathBuf),
    /// A ref moved, appeared or went.
    Refs,
    /// Events were lost; everything known may be stale.
    Overflow,
}

#[derive(Debug, Clone)]
enum Watched {
    /// The path, shared with the `backing` set and with the tree's node for the
    /// directory: a large workspace has a watch for every directory listed.
    Backing(SharedPath),
    Refs,
}

/// The watches by descriptor. The kernel numbers one inotify instance's watches from 1
/// up and reuses none until it wraps at `i32::MAX`, so the backing directories' watches
/// are a run of slots indexed by descriptor, a word each (a hash map took two words and
/// its spare room, for each of a large workspace's 244,000 directories). Slots before
/// the oldest live watch are dropped; a hole in the middle (a directory gone while older
/// ones stay) keeps its word. The refs' few watches are a set of their own.
#[derive(Default)]
struct ByWd {
    /// The descriptor of `dirs[0]`.
    base: usize,
    dirs: VecDeque<Option<SharedPath>>,
    refs: FastSet<i32>,
}

impl ByWd {
    fn get(&self, wd: i32) -> Option<Watched> {
        if self.refs.contains(&wd) {
            return Some(Watched::Refs);
        }
        let at = usize::try_from(wd).ok()?.checked_sub(self.base)?;
        let dir = self.dirs.get(at)?.as_ref()?;
        Some(Watched::Backing(dir.clone()))
    }

    fn insert_refs(&mut self, wd: i32) {
        self.refs.insert(wd);
    }

    fn insert_dir(&mut self, wd: i32, dir: SharedPath) {
        let Ok(wd) = usize::try_from(wd) else {
            return;
        };
        if self.dirs.is_empty() {
            self.base = wd;
        }
        // Before the run (the kernel wrapped): open room at the front.
        while wd < self.base {
            self.dirs.push_front(None);
            self.base -= 1;
        }
        let at = wd - self.base;
        if at >= self.dirs.len() {
            self.dirs.resize(at + 1, None);
        }
        self.dirs[at] = Some(dir);
    }

    fn remove(&mut self, wd: i32) {
        if self.refs.remove(&wd) {
            return;
        }
        let Some(at) = usize::try_from(wd)
            .ok()
            .and_then(|wd| wd.checked_sub(self.base))
        else {
            return;
        };
        if let Some(slot) = self.dirs.get_mut(at) {
            *slot = None;
        }
        while let Some(None) = self.dirs.front() {
            self.dirs.pop_front();
            self.base += 1;
        }
        while let Some(None) = self.dirs.back() {
            self.dirs.pop_back();
        }
    }
}

pub(crate) struct Watcher {
    inotify: Inotify,
    /// An eventfd that [`Watcher::close`] signals, so that a reader blocked in
    /// [`Watcher::read_changes`] returns (a workspace's tree being closed).
    closer: std::os::fd::OwnedFd,
    closed: AtomicBool,
    repo: PathBuf,
    wds: Mutex<ByWd>,
    /// The backing directories watched, by path.
    backing: Mutex<FastSet<SharedPath>>,
    /// Whether the watch limit has been reported: it is said once, not once per directory
    /// past it (a workspace over the limit has tens of thousands of them).
    limit_told: AtomicBool,
}

/// Where the kernel keeps the per-user bound on inotify watches (one per watched directory).
pub const WATCH_LIMIT_SYSCTL: &str = "/proc/sys/fs/inotify/max_user_watches";

impl Watcher {
    pub(crate) fn new(repo_dir: &Path) -> io::Result<Self> {
        let closer = crate::inotify::eventfd()?;
        let w = Self {
            inotify: Inotify::new(false)?,
            closer,
            closed: AtomicBool::new(false),
            repo: repo_dir.to_path_buf(),
            wds: Mutex::new(ByWd::default()),
            backing: Mutex::new(FastSet::default()),
            limit_told: AtomicBool::new(false),
        };
        w.watch_refs();
        Ok(w)
    }

    /// Watches every directory a ref update touches that exists now. Called again on
    /// every refs change, so directories created later (a first mark of a new kind) are
    /// picked up; inotify folds repeated watches of one directory into one.
    fn watch_refs(&self) {
        let mut wds = self.wds.lock();
        for place in ref_places(&self.repo) {
            // `packed-refs` is no directory: the repository directory's watch covers it.
            if let Ok(wd) = self.inotify.add(&place, REFS_MASK) {
                wds.insert_refs(wd);
            }
        }
    }

    /// Watches backing directory `rel`, if it is not watched yet. True when it is watched
    /// (so answers about its entries may be cached for long); false when it could not be
    /// (the watch limit, or the directory is gone), and the caller must not cache long.
    pub(crate) fn watch_backing(&self, backing: &Backing, rel: &SharedPath) -> bool {
        if self.backing.lock().contains(rel) {
            return true;
        }
        let fd = match backing.open_path(&rel.to_path()) {
            Ok(fd) => fd,
            Err(_) => return false,
        };
        self.added(rel, self.inotify.add_fd(&fd, DIR_MASK))
    }

    /// [`Watcher::watch_backing`] for directory `rel`, an entry of the directory `parent`
    /// is open on (resolved beneath the root: the listing `rel` was found in), reached
    /// from it in one call instead of a walk from the root.
    pub(crate) fn watch_entry(&self, parent: &impl AsRawFd, rel: &SharedPath) -> bool {
        if self.backing.lock().contains(rel) {
            return true;
        }
        match self.inotify.add_in(parent, rel.file_name(), DIR_MASK) {
            // Gone since the listing, or no longer a directory: nothing to watch.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => false,
            r => self.added(rel, r),
        }
    }

    /// Records the watch of `rel` that `added` made, or says why there is none.
    fn added(&self, rel: &SharedPath, added: io::Result<i32>) -> bool {
        match added {
            Ok(wd) => {
                self.wds.lock().insert_dir(wd, rel.clone());
                self.backing.lock().insert(rel.clone());
                true
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                if !self.limit_told.swap(true, Ordering::Relaxed) {
                    let limit = std::fs::read_to_string(WATCH_LIMIT_SYSCTL).unwrap_or_default();
                    log::warn!(
                        "{}: cannot watch: the inotify watch limit ({}={}) is reached; this \
                         and every directory past it are re-read at short intervals (slower \
                         walks) until it is raised, e.g. `sysctl fs.inotify.max_user_watches=\
                         1048576`; further directories past it are logged at debug level",
                        rel,
                        WATCH_LIMIT_SYSCTL,
                        limit.trim()
                    );
                } else {
                    log::debug!("{}: cannot watch: the watch limit", rel);
                }
                false
            }
            Err(e) => {
                log::warn!(
                    "{}: cannot watch ({e}); its entries are re-read at short intervals",
                    rel
                );
                false
            }
        }
    }

    /// Whether backing directory `rel` is watched.
    pub(crate) fn is_watched(&self, rel: &SharedPath) -> bool {
        self.backing.lock().contains(rel)
    }

    /// Ends the watch: a [`Watcher::read_changes`] blocked now or called later returns
    /// [`io::ErrorKind::BrokenPipe`] at once, and [`Watcher::is_closed`] says why.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        crate::inotify::wake(&self.closer);
    }

    /// Whether [`Watcher::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Blocks until events arrive and returns what they mean; `BrokenPipe` once closed.
    pub(crate) fn read_changes(&self) -> io::Result<Vec<Change>> {
        let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "the watch was closed");
        let mut fds = [
            libc::pollfd {
                fd: self.inotify.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.closer.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            if self.is_closed() {
                return Err(closed());
            }
            // SAFETY: two valid pollfds for the duration of the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n > 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if n < 0 && e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
        if self.is_closed() {
            return Err(closed());
        }
        let mut buf = vec![0u8; EVENT_BUFFER];
        let mut out = Vec::new();
        let mut refs = false;
        self.inotify.read(&mut buf, |ev| {
            if ev.overflowed() {
                out.push(Change::Overflow);
                return;
            }
            let watched = self.wds.lock().get(ev.wd);
            match watched {
                Some(Watched::Refs) => refs = true,
                Some(Watched::Backing(dir)) => {
                    if ev.watch_ended() {
                        self.forget(ev.wd, &dir);
                        out.push(Change::Gone(dir.to_path()));
                    } else if !ev.name.is_empty() {
                        out.push(Change::Entry {
                            dir: dir.to_path(),
                            name: OsStr::from_bytes(ev.name).to_os_string(),
                            renamed: ev.renamed(),
                        });
                    }
                }
                None => {}
            }
        })?;
        if refs {
            self.watch_refs();
            out.push(Change::Refs);
        }
        out.dedup();
        Ok(out)
    }

    fn forget(&self, wd: i32, dir: &SharedPath) {
        self.wds.lock().remove(wd);
        self.backing.lock().remove(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::REPO_DIR;

    fn sp(s: &str) -> SharedPath {
        SharedPath::new(Path::new(s))
    }

    fn dir_of(t: &ByWd, wd: i32) -> Option<PathBuf> {
        match t.get(wd)? {
            Watched::Backing(p) => Some(p.to_path()),
            Watched::Refs => None,
        }
    }

    #[test]
    fn watches_by_descriptor_are_a_run_of_slots_trimmed_at_both_ends() {
        let mut t = ByWd::default();
        t.insert_refs(1);
        for wd in 2..=6 {
            t.insert_dir(wd, sp(&format!("steps/{wd}")));
        }
        assert!(matches!(t.get(1), Some(Watched::Refs)));
        assert_eq!(dir_of(&t, 4), Some(PathBuf::from("steps/4")));
        assert!(t.get(7).is_none() && t.get(0).is_none() && t.get(-1).is_none());
        assert_eq!((t.base, t.dirs.len()), (2, 5));
        // A hole in the middle keeps its slot; the oldest going drops the front.
        t.remove(4);
        assert!(t.get(4).is_none());
        assert_eq!(t.dirs.len(), 5);
        t.remove(2);
        t.remove(3);
        assert_eq!(
            (t.base, t.dirs.len()),
            (5, 2),
            "2, 3 and the hole at 4 went"
        );
        assert_eq!(dir_of(&t, 5), Some(PathBuf::from("steps/5")));
        t.remove(6);
        assert_eq!(t.dirs.len(), 1, "the back is trimmed too");
        // After the kernel wraps, a descriptor before the run still has its slot.
        t.insert_dir(3, sp("steps/again"));
        assert_eq!(dir_of(&t, 3), Some(PathBuf::from("steps/again")));
        assert_eq!(dir_of(&t, 5), Some(PathBuf::from("steps/5")));
        t.remove(1);
        assert!(t.get(1).is_none(), "the refs' watch went");
        t.remove(3);
        t.remove(5);
        assert!(t.dirs.is_empty());
    }
    use crate::workspace::refs::Flavour;

    #[test]
    fn backing_and_ref_changes_are_reported() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path();
        std::fs::create_dir_all(ws.join("steps/a")).unwrap();
        let f = crate::fixture::Fixture::create(&ws.join("w"), Flavour::Litany).unwrap();
        let backing = Backing::open(ws).unwrap();
        let w = Watcher::new(&f.root().join(REPO_DIR)).unwrap();
        assert!(w.watch_backing(&backing, &sp("steps/a")));
        assert!(w.is_watched(&sp("steps/a")));
        std::fs::write(ws.join("steps/a/x"), b"1").unwrap();
        let changes = w.read_changes().unwrap();
        assert!(changes.contains(&Change::Entry {
            dir: "steps/a".into(),
            name: "x".into(),
            renamed: true,
        }));
        f.agent("id1", None, &[]).unwrap();
        let mut saw_refs = false;
        for _ in 0..5 {
            if w.read_changes().unwrap().contains(&Change::Refs) {
                saw_refs = true;
                break;
            }
        }
        assert!(saw_refs);
        std::fs::remove_dir_all(ws.join("steps/a")).unwrap();
        let mut gone = false;
        for _ in 0..5 {
            if w.read_changes()
                .unwrap()
                .contains(&Change::Gone("steps/a".into()))
            {
                gone = true;
                break;
            }
        }
        assert!(gone);
        assert!(!w.is_watched(&sp("steps/a")));
        // A symlinked directory is never watched through the link.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.join("steps/link")).unwrap();
        assert!(!w.watch_backing(&backing, &sp("steps/link")));
        // Nor as an entry of the listing it was found in; a real directory is.
        std::fs::create_dir(ws.join("steps/b")).unwrap();
        let (steps, _) = backing.list_open(Path::new("steps")).unwrap();
        assert!(!w.watch_entry(&steps, &sp("steps/link")));
        assert!(!w.is_watched(&sp("steps/link")));
        assert!(w.watch_entry(&steps, &sp("steps/b")));
        assert!(w.is_watched(&sp("steps/b")));
        std::fs::write(ws.join("steps/b/y"), b"1").unwrap();
        let mut seen = false;
        for _ in 0..5 {
            if w.read_changes().unwrap().iter().any(|c| {
                matches!(c, Change::Entry { dir, name, .. } if dir == Path::new("steps/b") && name == "y")
            }) {
                seen = true;
                break;
            }
        }
        assert!(seen);
    }
}
