//! Atomic, create-only publication of one deposit into `<ws>/inbox/<id>/`.
//!
//! Guarantees:
//! - **No partial file under an accepted name.** The whole body is written to an
//!   anonymous `O_TMPFILE` (one made ahead in `inbox/`, see [`super::spare`], or one made
//!   in the inbox directory) and only then given its name with `linkat(2)`; where
//!   `O_TMPFILE` is unsupported, to `.litanyfs-<pid>-<n>.tmp` (a dotfile,
//!   which the drain ignores, CONTRACT §3.6) and then `link(2)`ed. A reader sees no file or
//!   the complete file.
//! - **Create-only.** `linkat`/`link` fail with `EEXIST` rather than replace, so a publish
//!   never destroys anybody's deposit. The number is litany's (`next_sequence` over the
//!   current listing, CONTRACT §3.1); on `EEXIST` the listing is re-read and a higher
//!   number tried, a bounded number of times ([`MAX_ATTEMPTS`]).
//! - **No debris.** A named temp file is unlinked on every path out (success or error);
//!   an `O_TMPFILE` that never got a name vanishes with its descriptor.
//! - **No lingering directory fd.** `litany stop` takes any process holding an fd on
//!   `inbox/<id>` for that agent's executor and signals its process group (CONTRACT §3.7),
//!   so the directory is opened (`O_PATH`) for the duration of one publish only. The
//!   window is as short as `litany message`'s own `read_dir`.
//! - **Confined.** The directory is reached from the workspace root with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a swapped-in symlink cannot lead
//!   the write elsewhere; every later operation is relative to that one descriptor.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use super::DepositError;
use super::spare::Spare;
use crate::workspace::INBOX_DIR;
use crate::workspace::backing::{cstring, cvt, fstat, make_dirs_beneath, open_root};
use crate::workspace::ids::is_component;
use crate::workspace::inbox::{message_filename, next_sequence};

/// How many names a publish tries before giving up with [`DepositError::Contended`].
pub(crate) const MAX_ATTEMPTS: u32 = 64;
/// Prefix of the fallback temp file; the leading dot keeps it out of every drain.
pub(crate) const TEMP_PREFIX: &str = ".litanyfs-";
/// Suffix of the fallback temp file.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// A deposit that now exists under its final name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// `<sender>-<NNN>.md`.
    pub(crate) name: String,
    /// `<ws>/inbox/<id>/<name>`.
    pub(crate) path: PathBuf,
    /// Device and inode of the published file: its identity while the name is reused.
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// [`publish_with`] without a spare file.
#[cfg(test)]
pub(crate) fn publish(
    root: &Path,
    recipient: &str,
    sender: &str,
    body: &[u8],
) -> Result<Published, DepositError> {
    publish_with(root, recipient, sender, body, None)
}

/// Publishes `body` from `sender` into `<root>/inbox/<recipient>/` (creating the
/// directories as litany does), writing into `spare` when it can (see [`super::spare`]),
/// and returns what it became. `sender` and `recipient` must already be validated; `body`
/// is the full rendered message.
pub(crate) fn publish_with(
    root: &Path,
    recipient: &str,
    sender: &str,
    body: &[u8],
    spare: Option<Spare>,
) -> Result<Published, DepositError> {
    let dir = InboxDir::open(root, recipient)?;
    Ok(dir.publish(body, sender, None, spare)?.0)
}

/// A new file with no name on `dir`'s filesystem (`O_TMPFILE`), mode `0666` less the
/// umask as for any created file: what a deposit is written into before it is linked.
pub(crate) fn unnamed_file(dir: &impl AsRawFd) -> io::Result<File> {
    // SAFETY: valid dirfd and NUL-terminated path; the result is checked.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            0o666 as libc::c_uint,
        )
    })?;
    // SAFETY: the descriptor was just returned to us and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// An `O_PATH` descriptor on one agent's real inbox directory. Short-lived by design
/// (module docs): it must never outlive the publish that opened it.
pub(crate) struct InboxDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// How [`InboxDir::stage`] makes the unnamed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Staging {
    /// `O_TMPFILE`, falling back to a named temp where the filesystem has none.
    Auto,
    /// Always the named temp (the fallback, forced for tests).
    #[cfg_attr(not(test), allow(dead_code))]
    NamedTemp,
}

impl InboxDir {
    /// Opens `<root>/inbox/<id>`, creating `inbox/` and `inbox/<id>/` when missing.
    pub(crate) fn open(root: &Path, id: &str) -> Result<Self, DepositError> {
        if !is_component(id) {
            return Err(DepositError::BadRecipient(id.to_string()));
        }
        let path = root.join(INBOX_DIR).join(id);
        let err = |op, e| DepositError::io(op, &path, e);
        let root_fd = open_root(root).map_err(|e| err("open workspace for", e))?;
        let fd = make_dirs_beneath(&root_fd, &[INBOX_DIR, id]).map_err(|e| err("open", e))?;
        Ok(Self { fd, path })
    }

    /// `<ws>/inbox/<id>`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `/proc/self/fd/<n>`: names exactly the opened directory (for `inotify_add_watch`).
    pub(crate) fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// The names in the directory that are UTF-8 (litany skips the others too).
    pub(crate) fn names(&self) -> io::Result<Vec<String>> {
        let dot = c".";
        // SAFETY: valid dirfd and NUL-terminated path; the result is checked.
        let fd = cvt(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                dot.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: fdopendir takes ownership of the valid descriptor on success.
        let dirp = unsafe { libc::fdopendir(fd) };
        if dirp.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `fd` is still ours to close.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let stream = DirStream(dirp);
        let mut out = Vec::new();
        loop {
            // SAFETY: `stream.0` is a live stream; the entry is valid until the next call.
            let ent = unsafe { libc::readdir64(stream.0) };
            if ent.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated within the dirent.
            let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
            if let Ok(name) = name.to_str()
                && name != "."
                && name != ".."
            {
                out.push(name.to_string());
            }
        }
        Ok(out)
    }

    /// Publishes `body` under the next free name (see [`Staged::link`]; `first` is
    /// tried first), written into `spare` when it is on this directory's filesystem
    /// and into a file made here otherwise. Returns what it became and a descriptor on
    /// the published file.
    pub(crate) fn publish(
        &self,
        body: &[u8],
        sender: &str,
        first: Option<u32>,
        spare: Option<Spare>,
    ) -> Result<(Published, io::Result<File>), DepositError> {
        let dev = fstat(&self.fd).map(|st| st.dev).ok();
        let spare = spare.filter(|s| Some(s.dev) == dev).map(|s| s.file);
        let spared = spare.is_some();
        let staged = self.stage(body, Staging::Auto, spare)?;
        let published = match staged.link(sender, first) {
            // Same device, other mount (a bind mount): make the file here instead.
            Err(DepositError::Io { source, .. })
                if spared && source.raw_os_error() == Some(libc::EXDEV) =>
            {
                drop(staged);
                let staged = self.stage(body, Staging::Auto, None)?;
                let published = staged.link(sender, first)?;
                return Ok((published, staged.file().try_clone()));
            }
            other => other?,
        };
        Ok((published, staged.file().try_clone()))
    }

    /// Writes `body` into a file that has no accepted name yet: `spare` when given (an
    /// unnamed file on this filesystem), else one made here.
    pub(crate) fn stage(
        &self,
        body: &[u8],
        how: Staging,
        spare: Option<File>,
    ) -> Result<Staged<'_>, DepositError> {
        let err = |op, e| DepositError::io(op, &self.path, e);
        let unnamed = spare
            .map(Ok)
            .or_else(|| (how == Staging::Auto).then(|| unnamed_file(&self.fd)));
        if let Some(r) = unnamed {
            match r {
                Ok(mut file) => {
                    file.write_all(body)
                        .map_err(|e| err("write temporary file in", e))?;
                    return Ok(Staged {
                        dir: self,
                        file,
                        temp: None,
                    });
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
                    log::debug!(
                        "{}: no O_TMPFILE ({e}); using a named temp",
                        self.path.display()
                    );
                }
                Err(e) => return Err(err("create temporary file in", e)),
            }
        }
        self.stage_named(body)
    }

    fn stage_named(&self, body: &[u8]) -> Result<Staged<'_>, DepositError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let err = |op, e| DepositError::io(op, &self.path, e);
        let pid = std::process::id();
        let mut last = io::Error::from_raw_os_error(libc::EEXIST);
        for _ in 0..MAX_ATTEMPTS {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("{TEMP_PREFIX}{pid}-{n}{TEMP_SUFFIX}");
            let c = cstring(name.as_bytes()).map_err(|e| err("create temporary file in", e))?;
            // SAFETY: valid dirfd and NUL-terminated name; the result is checked.
            let r = cvt(unsafe {
                libc::openat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_WRONLY
                        | libc::O_CLOEXEC
                        | libc::O_NOFOLLOW,
                    0o666 as libc::c_uint,
                )
            });
            match r {
                Ok(fd) => {
                    // SAFETY: the descriptor was just returned to us.
                    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                    // From here on, dropping `staged` unlinks the temp name.
                    let mut staged = Staged {
                        dir: self,
                        file,
                        temp: Some(c),
                    };
                    staged
                        .file
                        .write_all(body)
                        .map_err(|e| err("write temporary file in", e))?;
                    return Ok(staged);
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => last = e,
                Err(e) => return Err(err("create temporary file in", e)),
            }
        }
        Err(err("create temporary file in", last))
    }
}

struct DirStream(*mut libc::DIR);

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the stream is live and closed exactly once, here.
        unsafe { libc::closedir(self.0) };
    }
}

/// A fully written file in the inbox directory that has no accepted name yet.
pub(crate) struct Staged<'a> {
    dir: &'a InboxDir,
    file: File,
    /// The named temp, when `O_TMPFILE` was unavailable; unlinked on drop.
    temp: Option<CString>,
}

/// Which way an `O_TMPFILE` is given a name: not yet known, `AT_EMPTY_PATH` (needs
/// `CAP_DAC_READ_SEARCH`), or the `/proc/self/fd` magic link.
static LINK_WAY: AtomicU8 = AtomicU8::new(LINK_UNKNOWN);
const LINK_UNKNOWN: u8 = 0;
const LINK_EMPTY_PATH: u8 = 1;
const LINK_PROCFS: u8 = 2;

impl Staged<'_> {
    /// The staged file itself (it stays the published file after [`Staged::link`]).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Gives the file the next free `<sender>-<NNN>.md`, create-only. `first`, a number
    /// the caller already knows to be next (the guard's view of the inbox), is tried
    /// without listing; otherwise, and after each lost race, the listing is re-read.
    pub(crate) fn link(&self, sender: &str, first: Option<u32>) -> Result<Published, DepositError> {
        let path = self.dir.path();
        let mut floor = 0u32;
        let mut guess = first;
        for _ in 0..MAX_ATTEMPTS {
            let seq = match guess.take() {
                Some(seq) => seq,
                None => {
                    let names = self
                        .dir
                        .names()
                        .map_err(|e| DepositError::io("list", path, e))?;
                    next_sequence(names.iter().map(String::as_str), sender)
                        .ok_or_else(|| DepositError::SequenceExhausted {
                            sender: sender.to_string(),
                        })?
                        .max(floor)
                }
            };
            let name = message_filename(sender, seq);
            match self.link_as(&name) {
                Ok(()) => {
                    let st = fstat(&self.file)
                        .map_err(|e| DepositError::io("stat", path.join(&name), e))?;
                    return Ok(Published {
                        path: path.join(&name),
                        name,
                        dev: st.dev,
                        ino: st.ino,
                    });
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    // Somebody (another thread, `litany message`) holds `seq` now; never
                    // go below the next one even if the listing lags behind.
                    floor = seq
                        .checked_add(1)
                        .ok_or_else(|| DepositError::SequenceExhausted {
                            sender: sender.to_string(),
                        })?;
                }
                Err(e) => return Err(DepositError::io("link", path.join(&name), e)),
            }
        }
        Err(DepositError::Contended {
            attempts: MAX_ATTEMPTS,
        })
    }

    /// One create-only attempt at `name`.
    fn link_as(&self, name: &str) -> io::Result<()> {
        let c_name = cstring(name.as_bytes())?;
        let dirfd = self.dir.fd.as_raw_fd();
        if let Some(temp) = &self.temp {
            // SAFETY: valid dirfds and NUL-terminated names; the result is checked.
            return cvt(unsafe { libc::linkat(dirfd, temp.as_ptr(), dirfd, c_name.as_ptr(), 0) })
                .map(drop);
        }
        let fd = self.file.as_raw_fd();
        let way = LINK_WAY.load(Ordering::Relaxed);
        if way != LINK_PROCFS {
            // SAFETY: valid fds, an empty NUL-terminated oldpath and a NUL-terminated
            // newpath; the result is checked.
            let r = cvt(unsafe {
                libc::linkat(
                    fd,
                    c"".as_ptr(),
                    dirfd,
                    c_name.as_ptr(),
                    libc::AT_EMPTY_PATH,
                )
            });
            match r {
                Ok(_) => {
                    LINK_WAY.store(LINK_EMPTY_PATH, Ordering::Relaxed);
                    return Ok(());
                }
                // Without CAP_DAC_READ_SEARCH the kernel answers ENOENT: learn to use
                // /proc instead (only while the way is still unknown).
                Err(e) if way == LINK_UNKNOWN && e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        let proc = cstring(format!("/proc/self/fd/{fd}").as_bytes())?;
        // SAFETY: NUL-terminated paths and a valid dirfd; the result is checked.
        cvt(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc.as_ptr(),
                dirfd,
                c_name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        })?;
        LINK_WAY.store(LINK_PROCFS, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        if let Some(temp) = &self.temp {
            // SAFETY: valid dirfd and NUL-terminated name. Failure leaves a dotfile the
            // drain ignores; it is logged.
            let r = unsafe { libc::unlinkat(self.dir.fd.as_raw_fd(), temp.as_ptr(), 0) };
            if r < 0 {
                log::warn!(
                    "{}: could not remove temporary {:?}: {}",
                    self.dir.path.display(),
                    temp,
                    io::Error::last_os_error()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::inbox::pending_sender;
    use std::collections::BTreeSet;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn publishes_with_litanys_numbering() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let p = publish(root, "a1", "user", b"one").unwrap();
        assert_eq!(p.name, "user-001.md");
        assert_eq!(p.path, root.join("inbox/a1/user-001.md"));
        assert_eq!(std::fs::read(&p.path).unwrap(), b"one");
        let meta = std::fs::metadata(&p.path).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.dev(), meta.ino()), (p.dev, p.ino));
        // Other senders and strays do not count; gaps are kept (max + 1).
        std::fs::write(root.join("inbox/a1/user-007.md"), b"x").unwrap();
        std::fs::write(root.join("inbox/a1/p1-abc-009.md"), b"x").unwrap();
        std::fs::write(root.join("inbox/a1/.user-050.md.tmp"), b"x").unwrap();
        assert_eq!(
            publish(root, "a1", "user", b"two").unwrap().name,
            "user-008.md"
        );
        assert_eq!(
            publish(root, "a1", "p1", b"three").unwrap().name,
            "p1-001.md"
        );
    }

    #[test]
    fn never_replaces_and_refuses_bad_places() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        assert!(matches!(
            publish(root, "../x", "user", b"x"),
            Err(DepositError::BadRecipient(_))
        ));
        // A symlinked inbox is refused, not followed.
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::create_dir_all(root.join("inbox")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("inbox/evil")).unwrap();
        let e = publish(root, "evil", "user", b"x").unwrap_err();
        assert!(matches!(e, DepositError::Io { .. }), "{e}");
        assert!(entries(&elsewhere).is_empty());
    }

    #[test]
    fn the_named_fallback_leaves_no_debris() {
        let t = tempfile::tempdir().unwrap();
        let dir = InboxDir::open(t.path(), "a1").unwrap();
        let staged = dir.stage(b"body", Staging::NamedTemp, None).unwrap();
        let temps = entries(dir.path());
        assert_eq!(temps.len(), 1);
        assert!(temps[0].starts_with(TEMP_PREFIX), "{temps:?}");
        assert_eq!(pending_sender(&temps[0]), None, "the drain must ignore it");
        let p = staged.link("user", None).unwrap();
        drop(staged);
        assert_eq!(entries(dir.path()), ["user-001.md"]);
        assert_eq!(std::fs::read(p.path).unwrap(), b"body");
        // A staged file that never gets a name leaves nothing either way.
        drop(dir.stage(b"x", Staging::NamedTemp, None).unwrap());
        drop(dir.stage(b"x", Staging::Auto, None).unwrap());
        assert_eq!(entries(dir.path()), ["user-001.md"]);
    }

    /// N threads × M publishes for one sender into one inbox: every message exactly once,
    /// under unique names, complete, and nothing else left behind.
    fn contend(how: Staging) {
        const THREADS: usize = 8;
        const EACH: usize = 40;
        let t = tempfile::tempdir().unwrap();
        let root = t.path().to_path_buf();
        let names: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|i| {
                    let root = &root;
                    s.spawn(move || {
                        (0..EACH)
                            .map(|j| {
                                let body = format!("message {i}/{j} {}", "x".repeat(j * 97));
                                let dir = InboxDir::open(root, "a1").unwrap();
                                let staged = dir.stage(body.as_bytes(), how, None).unwrap();
                                staged.link("user", None).unwrap().name
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let unique: BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), THREADS * EACH, "a name was handed out twice");
        let inbox = root.join("inbox/a1");
        let listed = entries(&inbox);
        assert_eq!(listed.len(), THREADS * EACH, "debris or loss: {listed:?}");
        let mut bodies = BTreeSet::new();
        for name in &listed {
            assert_eq!(pending_sender(name), Some("user"), "{name}");
            bodies.insert(std::fs::read_to_string(inbox.join(name)).unwrap());
        }
        for i in 0..THREADS {
            for j in 0..EACH {
                let body = format!("message {i}/{j} {}", "x".repeat(j * 97));
                assert!(bodies.contains(&body), "lost or torn: {i}/{j}");
            }
        }
        let seqs: BTreeSet<u32> = listed
            .iter()
            .filter_map(|n| crate::workspace::inbox::sequence_of(n, "user"))
            .collect();
        assert_eq!(seqs.len(), THREADS * EACH);
    }

    #[test]
    fn create_only_under_contention_tmpfile() {
        contend(Staging::Auto);
    }

    #[test]
    fn create_only_under_contention_named_temp() {
        contend(Staging::NamedTemp);
    }
}
