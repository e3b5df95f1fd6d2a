//! Change detection: inotify on the backing directories the kernel knows about and on the
//! refs in `repo.git`, turned into [`Change`]s for the adapter to invalidate.
//!
//! This is what lets the kernel keep names and attributes for a long time and still show
//! every change at once: a directory is watched *before* anything in it is first answered,
//! so no change after an answer can go unseen. Watches are added through a descriptor
//! resolved beneath the workspace root, or as an entry (never followed) of a directory
//! open on such a descriptor, never by a path that could follow a symlink out of it. An inotify descriptor is not an fd on any directory, so watching `inbox/<id>`
//! does not make the daemon look like the agent's executor to `litany stop`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::FastMap;
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

/// What a refs directory's watch reports: any entry coming, going or being replaced.
const REFS_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

/// A change the view must reflect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
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
    /// The path, shared with the `backing` map's key and with the tree's node for the
    /// directory: a large workspace has a watch for every directory listed.
    Backing(SharedPath),
    Refs,
}

pub struct Watcher {
    inotify: Inotify,
    repo: PathBuf,
    wds: Mutex<FastMap<i32, Watched>>,
    backing: Mutex<FastMap<SharedPath, i32>>,
    /// Whether the watch limit has been reported: it is said once, not once per directory
    /// past it (a workspace over the limit has tens of thousands of them).
    limit_told: AtomicBool,
}

/// Where the kernel keeps the per-user bound on inotify watches (one per watched directory).
pub const WATCH_LIMIT_SYSCTL: &str = "/proc/sys/fs/inotify/max_user_watches";

impl Watcher {
    pub fn new(repo_dir: &Path) -> io::Result<Self> {
        let w = Self {
            inotify: Inotify::new(false)?,
            repo: repo_dir.to_path_buf(),
            wds: Mutex::new(FastMap::default()),
            backing: Mutex::new(FastMap::default()),
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
                wds.insert(wd, Watched::Refs);
            }
        }
    }

    /// Watches backing directory `rel`, if it is not watched yet. True when it is watched
    /// (so answers about its entries may be cached for long); false when it could not be
    /// (the watch limit, or the directory is gone), and the caller must not cache long.
    pub fn watch_backing(&self, backing: &Backing, rel: &SharedPath) -> bool {
        if self.backing.lock().contains_key(rel) {
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
    pub fn watch_entry(&self, parent: &impl AsRawFd, rel: &SharedPath) -> bool {
        if self.backing.lock().contains_key(rel) {
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
                self.wds.lock().insert(wd, Watched::Backing(rel.clone()));
                self.backing.lock().insert(rel.clone(), wd);
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
    pub fn is_watched(&self, rel: &SharedPath) -> bool {
        self.backing.lock().contains_key(rel)
    }

    /// Blocks until events arrive and returns what they mean.
    pub fn read_changes(&self) -> io::Result<Vec<Change>> {
        let mut buf = vec![0u8; EVENT_BUFFER];
        let mut out = Vec::new();
        let mut refs = false;
        self.inotify.read(&mut buf, |ev| {
            if ev.overflowed() {
                out.push(Change::Overflow);
                return;
            }
            let watched = self.wds.lock().get(&ev.wd).cloned();
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
        self.wds.lock().remove(&wd);
        let mut backing = self.backing.lock();
        if backing.get(dir) == Some(&wd) {
            backing.remove(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::REPO_DIR;

    fn sp(s: &str) -> SharedPath {
        SharedPath::new(Path::new(s))
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
