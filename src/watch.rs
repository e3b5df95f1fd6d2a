//! Change detection: inotify on the backing directories the kernel knows about and on the
//! refs in `repo.git`, turned into [`Change`]s for the adapter to invalidate.
//!
//! This is what lets the kernel keep names and attributes for a long time and still show
//! every change at once: a directory is watched *before* anything in it is first answered,
//! so no change after an answer can go unseen. Watches are added through a descriptor
//! resolved beneath the workspace root (never by a path that could follow a symlink out
//! of it). An inotify descriptor is not an fd on any directory, so watching `inbox/<id>`
//! does not make the daemon look like the agent's executor to `litany stop`.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::workspace::backing::Backing;
use crate::workspace::refs::{AGENT_REF_PREFIX, Flavour};

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
    Backing(PathBuf),
    Refs,
}

pub struct Watcher {
    fd: OwnedFd,
    repo: PathBuf,
    wds: Mutex<HashMap<i32, Watched>>,
    backing: Mutex<HashMap<PathBuf, i32>>,
}

impl Watcher {
    pub fn new(repo_dir: &Path) -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let w = Self {
            // SAFETY: a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            repo: repo_dir.to_path_buf(),
            wds: Mutex::new(HashMap::new()),
            backing: Mutex::new(HashMap::new()),
        };
        w.watch_refs();
        Ok(w)
    }

    fn add(&self, path: &Path, mask: u32) -> io::Result<i32> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: valid inotify fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(wd)
        }
    }

    /// Watches every directory a ref update touches that exists now. Called again on
    /// every refs change, so directories created later (a first mark of a new kind) are
    /// picked up; inotify folds repeated watches of one directory into one.
    fn watch_refs(&self) {
        let mut dirs = vec![
            self.repo.clone(),
            self.repo.join("refs"),
            self.repo.join("refs/heads"),
            self.repo.join(AGENT_REF_PREFIX),
        ];
        for flavour in [Flavour::Litany, Flavour::Lernie] {
            let root = self.repo.join(flavour.mark_root());
            if let Ok(rd) = std::fs::read_dir(&root) {
                dirs.extend(
                    rd.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
            dirs.push(root);
        }
        let mut wds = self.wds.lock();
        for d in dirs {
            if let Ok(wd) = self.add(&d, REFS_MASK) {
                wds.insert(wd, Watched::Refs);
            }
        }
    }

    /// Watches backing directory `rel`, if it is not watched yet. True when it is watched
    /// (so answers about its entries may be cached for long); false when it could not be
    /// (the watch limit, or the directory is gone), and the caller must not cache long.
    pub fn watch_backing(&self, backing: &Backing, rel: &Path) -> bool {
        if self.backing.lock().contains_key(rel) {
            return true;
        }
        let fd = match backing.open_path(rel) {
            Ok(fd) => fd,
            Err(_) => return false,
        };
        let proc_path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        match self.add(&proc_path, DIR_MASK & !libc::IN_DONT_FOLLOW) {
            Ok(wd) => {
                self.wds
                    .lock()
                    .insert(wd, Watched::Backing(rel.to_path_buf()));
                self.backing.lock().insert(rel.to_path_buf(), wd);
                true
            }
            Err(e) => {
                log::warn!(
                    "{}: cannot watch ({e}); its entries are re-read at short intervals",
                    rel.display()
                );
                false
            }
        }
    }

    /// Whether backing directory `rel` is watched.
    pub fn is_watched(&self, rel: &Path) -> bool {
        self.backing.lock().contains_key(rel)
    }

    /// Blocks until events arrive and returns what they mean.
    pub fn read_changes(&self) -> io::Result<Vec<Change>> {
        let mut buf = vec![0u8; 64 * 1024];
        let n = loop {
            // SAFETY: valid fd and writable buffer of the given length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        let mut out = Vec::new();
        let mut refs = false;
        let mut at = 0;
        let header = std::mem::size_of::<libc::inotify_event>();
        while at + header <= n {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with alignment.
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            let name_bytes = &buf[at + header..(at + header + ev.len as usize).min(n)];
            let name = OsStr::from_bytes(name_bytes.split(|b| *b == 0).next().unwrap_or_default());
            at += header + ev.len as usize;
            if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                out.push(Change::Overflow);
                continue;
            }
            let watched = self.wds.lock().get(&ev.wd).cloned();
            match watched {
                Some(Watched::Refs) => refs = true,
                Some(Watched::Backing(dir)) => {
                    if ev.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0
                    {
                        self.forget(ev.wd, &dir);
                        out.push(Change::Gone(dir));
                    } else if !name.is_empty() {
                        let renamed = ev.mask
                            & (libc::IN_CREATE
                                | libc::IN_DELETE
                                | libc::IN_MOVED_FROM
                                | libc::IN_MOVED_TO)
                            != 0;
                        out.push(Change::Entry {
                            dir,
                            name: name.to_os_string(),
                            renamed,
                        });
                    }
                }
                None => {}
            }
        }
        if refs {
            self.watch_refs();
            out.push(Change::Refs);
        }
        out.dedup();
        Ok(out)
    }

    fn forget(&self, wd: i32, dir: &Path) {
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

    #[test]
    fn backing_and_ref_changes_are_reported() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path();
        std::fs::create_dir_all(ws.join("steps/a")).unwrap();
        let f = crate::fixture::Fixture::create(&ws.join("w"), Flavour::Litany).unwrap();
        let backing = Backing::open(ws).unwrap();
        let w = Watcher::new(&f.root().join(REPO_DIR)).unwrap();
        assert!(w.watch_backing(&backing, Path::new("steps/a")));
        assert!(w.is_watched(Path::new("steps/a")));
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
        assert!(!w.is_watched(Path::new("steps/a")));
        // A symlinked directory is never watched through the link.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.join("steps/link")).unwrap();
        assert!(!w.watch_backing(&backing, Path::new("steps/link")));
    }
}
