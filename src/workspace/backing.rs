//! Confined access to the backing tree: every open, stat, listing and readlink is
//! resolved beneath the workspace root and never follows a symlink.
//!
//! The workspace is written by other programs (some driven by models), so a directory
//! swapped for a symlink must not lead the daemon outside it. Paths are resolved with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from a descriptor on the root; a
//! symlink anywhere in the walk is an error (`ELOOP`/`EXDEV`), and the last component is
//! examined with `AT_SYMLINK_NOFOLLOW`, so a symlink is reported as one, never as its
//! target.
//!
//! The daemon's reads leave the workspace's access times alone ([`open_read`]):
//! the mount observes the workspace, it does not change it.
//!
//! What the daemon writes into the workspace (a deposit and the directories it lands in,
//! a woken driver's `steps/<id>/driver.log`) is made through the same walk:
//! [`make_dirs_beneath`] creates each directory with `mkdirat` and opens it beneath the
//! one before, and [`open_append_beneath`] creates or appends to a regular file with
//! one name only, never through a symlink. A symlink planted where the daemon writes
//! (`steps/<id>/driver.log -> ~/.bashrc`) is refused, not followed.

use std::cell::RefCell;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// A descriptor on the workspace root, from which every backing path is resolved.
#[derive(Debug)]
pub(crate) struct Backing {
    root: OwnedFd,
}

/// The subset of `stat` the view uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) nlink: u64,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
    pub(crate) atime: (i64, i64),
    /// When the file was made, where the file system keeps it (`statx`'s btime): what
    /// tells a file from a later one given the same inode number.
    pub(crate) born: Option<(i64, u32)>,
}

impl Stat {
    pub(crate) fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub(crate) fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    pub(crate) fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    fn from_statx(st: &libc::statx) -> Self {
        let time = |t: libc::statx_timestamp| (t.tv_sec, i64::from(t.tv_nsec));
        Self {
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mode: u32::from(st.stx_mode),
            uid: st.stx_uid,
            gid: st.stx_gid,
            nlink: u64::from(st.stx_nlink),
            size: st.stx_size,
            mtime: time(st.stx_mtime),
            ctime: time(st.stx_ctime),
            atime: time(st.stx_atime),
            born: (st.stx_mask & libc::STATX_BTIME != 0)
                .then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec)),
        }
    }

    /// A number that differs between a file and a later one that reuses its inode
    /// number (both made where the file system keeps birth times); 0 where it does not.
    /// The kernel keeps 32 bits of it.
    pub(crate) fn generation(&self) -> u32 {
        self.born.map_or(0, |(sec, nsec)| {
            let mixed = (sec as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(nsec);
            (mixed ^ (mixed >> 32)) as u32
        })
    }
}

/// `p` as a C string; an interior NUL is `EINVAL`.
pub(crate) fn cstring(p: &[u8]) -> io::Result<CString> {
    CString::new(p).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A libc return value as a `Result`, with `errno` on failure.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An `O_PATH` descriptor on directory `path`, the workspace root as configured: the
/// one descriptor every confined walk starts from.
pub(crate) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c = cstring(path.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated path; the result is checked.
    let fd = cvt(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Backing {
    pub(crate) fn open(root: &Path) -> io::Result<Self> {
        Ok(Self {
            root: open_root(root)?,
        })
    }

    /// Opens `rel` (relative to the root; `""` is the root) beneath the root, refusing
    /// every symlink on the way and at the end ([`open_beneath`]).
    fn openat2(&self, rel: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
        open_beneath(&self.root, &beneath_root(rel)?, flags)
    }

    /// [`open_read`] of `rel`, beneath the root.
    fn open_read(&self, rel: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
        open_read(&self.root, &beneath_root(rel)?, flags)
    }

    /// An `O_PATH` descriptor on directory `rel`, resolved beneath the root.
    pub(crate) fn open_path(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.openat2(rel, libc::O_PATH | libc::O_DIRECTORY)
    }

    /// `lstat` of `rel`: the parent is resolved without symlinks, the last component is
    /// not followed.
    pub(crate) fn lstat(&self, rel: &Path) -> io::Result<Stat> {
        let (parent, name) = split(rel);
        let dir = self.openat2(parent, libc::O_PATH | libc::O_DIRECTORY)?;
        fstatat(&dir, name)
    }

    /// Opens a regular file for reading, with its `fstat`. A symlink, a directory or
    /// anything else that is not a regular file is refused.
    pub(crate) fn open_file(&self, rel: &Path) -> io::Result<(File, Stat)> {
        regular(self.open_read(rel, FILE_READ)?)
    }

    /// [`Backing::open_file`] of entry `name` of directory `dir` (a descriptor from
    /// [`Backing::list_open`]): one component resolved, not the whole path from the
    /// root again, for the records a listing sizes its derived names from.
    pub(crate) fn open_file_in(
        &self,
        dir: &impl AsRawFd,
        name: &OsStr,
    ) -> io::Result<(File, Stat)> {
        regular(open_read(dir, &cstring(name.as_bytes())?, FILE_READ)?)
    }

    /// The entries of directory `rel` with their `lstat`, without `.` and `..`. Entries
    /// that vanish between the listing and their stat are skipped.
    ///
    /// Read with [`for_each_name`]: a walk lists every directory.
    pub(crate) fn list(&self, rel: &Path) -> io::Result<Vec<(OsString, Stat)>> {
        self.list_open(rel).map(|(_, entries)| entries)
    }

    /// [`Backing::list`], with the descriptor the directory was listed through, still
    /// open: its entries can be reached from it (one component, not followed) rather
    /// than by a walk from the root.
    pub(crate) fn list_open(&self, rel: &Path) -> io::Result<(OwnedFd, Vec<(OsString, Stat)>)> {
        let fd = self.open_read(rel, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let mut out = Vec::new();
        for_each_name(&fd, |name| {
            if let Ok(st) = statx(fd.as_raw_fd(), name, libc::AT_SYMLINK_NOFOLLOW) {
                out.push((OsString::from_vec(name.to_bytes().to_vec()), st));
            }
        })?;
        Ok((fd, out))
    }

    /// The target of symlink `rel`, as raw bytes.
    pub(crate) fn readlink(&self, rel: &Path) -> io::Result<Vec<u8>> {
        let (parent, name) = split(rel);
        let dir = self.openat2(parent, libc::O_PATH | libc::O_DIRECTORY)?;
        let c = cstring(name.as_bytes())?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid dirfd, NUL-terminated name, writable buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }
}

/// `rel` as the path to open from the root: `""` is the root itself.
fn beneath_root(rel: &Path) -> io::Result<CString> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    cstring(rel.as_os_str().as_bytes())
}

/// How a backing file is opened for reading.
const FILE_READ: libc::c_int = libc::O_RDONLY | libc::O_NONBLOCK;

/// `fd` as a [`File`] with its `fstat`, if it is a regular file: a directory is
/// `EISDIR`, anything else `EINVAL`.
fn regular(fd: OwnedFd) -> io::Result<(File, Stat)> {
    let file = File::from(fd);
    let st = fstat(&file)?;
    if !st.is_file() {
        return Err(io::Error::from_raw_os_error(if st.is_dir() {
            libc::EISDIR
        } else {
            libc::EINVAL
        }));
    }
    Ok((file, st))
}

/// [`open_beneath`] for reading (a file or a directory, per `flags`), with `O_NOATIME`.
/// Without it, the first read of a file since it was written (a record the walk sizes a
/// derived name from, a directory it lists) updates its atime, an inode write and on
/// ext4 a journal transaction: on a workspace just written, a cold walk of 200 agents x
/// 40 steps took 4-5% longer and the daemon 6-10% more CPU. Where the kernel refuses the
/// flag (`EPERM`: the file is another user's and the daemon has no `CAP_FOWNER`), the
/// open is made without it.
fn open_read(dir: &impl AsRawFd, path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    match open_beneath(dir, path, flags | libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open_beneath(dir, path, flags),
        other => other,
    }
}

/// Opens `path` (relative, one or more components) beneath `dir` with no symlink
/// anywhere on the way or at the end: the one home of confined opens. It is
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; on a kernel without `openat2`
/// (`ENOSYS`) the same walk is done a component at a time with `O_NOFOLLOW`, refusing
/// `..` (`EXDEV`, as `RESOLVE_BENEATH` would).
pub(crate) fn open_beneath(
    dir: &impl AsRawFd,
    path: &CStr,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    create_beneath(dir, path, flags, 0)
}

/// [`open_beneath`] with the `mode` an `O_CREAT` gives a new file (the umask applies).
fn create_beneath(
    dir: &impl AsRawFd,
    path: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    match openat2_beneath(dir, path, flags, mode) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => walk_beneath(dir, path, flags, mode),
        other => other,
    }
}

fn openat2_beneath(
    dir: &impl AsRawFd,
    path: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    // SAFETY: open_how is plain old data; all-zero is its valid default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    // openat2 refuses a mode without O_CREAT (EINVAL).
    if flags & libc::O_CREAT != 0 {
        how.mode = u64::from(mode);
    }
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: valid dirfd, NUL-terminated path and a correctly sized open_how.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) })
}

/// [`open_beneath`] without `openat2`: each directory on the way is opened `O_PATH |
/// O_NOFOLLOW | O_DIRECTORY` from the one before, so no symlink is ever followed.
fn walk_beneath(
    dir: &impl AsRawFd,
    path: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let openat = |at: libc::c_int, name: &[u8], flags: libc::c_int| -> io::Result<OwnedFd> {
        let c = cstring(name)?;
        // SAFETY: valid dirfd and NUL-terminated name; the result is checked.
        let fd = cvt(unsafe {
            libc::openat(
                at,
                c.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: the descriptor was just returned to us and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let parts: Vec<&[u8]> = path
        .to_bytes()
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .collect();
    if parts.iter().any(|p| *p == b"..") {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    let Some((last, dirs)) = parts.split_last() else {
        return openat(dir.as_raw_fd(), b".", flags);
    };
    let mut at: Option<OwnedFd> = None;
    for d in dirs {
        let from = at.as_ref().map_or(dir.as_raw_fd(), |f| f.as_raw_fd());
        at = Some(openat(from, d, libc::O_PATH | libc::O_DIRECTORY)?);
    }
    let from = at.as_ref().map_or(dir.as_raw_fd(), |f| f.as_raw_fd());
    openat(from, last, flags)
}

/// `mkdirat(dir, name, 0777)` for one component (the umask applies, as with
/// `create_dir_all`). An existing entry is fine: whether it is a directory, and not a
/// symlink, is for the confined open that follows to say.
pub(crate) fn make_dir_at(dir: &impl AsRawFd, name: &CStr) -> io::Result<()> {
    // SAFETY: valid dirfd and NUL-terminated name; the result is checked.
    match cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o777) }) {
        Err(e) if e.raw_os_error() != Some(libc::EEXIST) => Err(e),
        _ => Ok(()),
    }
}

/// Directory `components` beneath `dir`, each created when missing ([`make_dir_at`])
/// and opened (`O_PATH`) from the one before without following a symlink: the confined
/// `create_dir_all`. A component that is a symlink or not a directory is refused
/// (`ENOTDIR`, or `ELOOP`).
pub(crate) fn make_dirs_beneath(dir: &impl AsRawFd, components: &[&str]) -> io::Result<OwnedFd> {
    let mut at: Option<OwnedFd> = None;
    for part in components {
        let c = cstring(part.as_bytes())?;
        let from = Raw(at.as_ref().map_or(dir.as_raw_fd(), |f| f.as_raw_fd()));
        make_dir_at(&from, &c)?;
        at = Some(open_beneath(&from, &c, libc::O_PATH | libc::O_DIRECTORY)?);
    }
    match at {
        Some(fd) => Ok(fd),
        None => open_beneath(dir, c".", libc::O_PATH | libc::O_DIRECTORY),
    }
}

/// A borrowed raw descriptor, for the walks that switch from a caller's to their own.
struct Raw(libc::c_int);

impl AsRawFd for Raw {
    fn as_raw_fd(&self) -> libc::c_int {
        self.0
    }
}

/// Regular file `name` in directory `dir`, opened for appending and created (mode
/// `0666` less the umask) when missing, as a log is: never through a symlink
/// (`ELOOP`), and refused when it is anything but a regular file with this one name
/// (`EINVAL`: a FIFO would block the opener, a device is nobody's log, and a second
/// hard link could be a file outside the workspace). Opened without blocking; the
/// returned file is blocking again.
pub(crate) fn open_append_beneath(dir: &impl AsRawFd, name: &CStr) -> io::Result<File> {
    let fd = create_beneath(
        dir,
        name,
        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NONBLOCK | libc::O_NOCTTY,
        0o666,
    )?;
    let st = fstat(&fd)?;
    if !st.is_file() || st.nlink != 1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: fcntl on a descriptor we own; the result is checked.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_APPEND) })?;
    Ok(File::from(fd))
}

/// The buffer one `getdents64` call fills: a step directory's entries in one call.
const LIST_BUFFER: usize = 32 * 1024;
/// Where a `linux_dirent64`'s fields are: `d_ino` (8), `d_off` (8), `d_reclen` (2),
/// `d_type` (1), then the NUL-terminated name.
const DIRENT_RECLEN_AT: usize = 16;
const DIRENT_NAME_AT: usize = 19;

thread_local! {
    /// Each thread's `getdents64` buffer, kept from one listing to the next: a fresh one
    /// is 32 KiB to allocate and zero (a CPU's whole L1 data cache) for every directory.
    static LIST_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Calls `f` with each name in directory `fd` but `.` and `..`, read with `getdents64`
/// on the descriptor itself (`fdopendir` would add an `fstat` and two `fcntl`s).
pub(crate) fn for_each_name(fd: &impl AsRawFd, mut f: impl FnMut(&CStr)) -> io::Result<()> {
    let kept = LIST_BUF.try_with(|cell| {
        let mut buf = cell.try_borrow_mut().ok()?;
        if buf.len() < LIST_BUFFER {
            buf.resize(LIST_BUFFER, 0);
        }
        Some(each_name(fd, &mut buf, &mut f))
    });
    match kept {
        Ok(Some(r)) => r,
        // A listing from within a listing's `f`, or a thread being torn down: a buffer
        // of its own.
        _ => each_name(fd, &mut vec![0u8; LIST_BUFFER], &mut f),
    }
}

fn each_name(fd: &impl AsRawFd, buf: &mut [u8], f: &mut impl FnMut(&CStr)) -> io::Result<()> {
    loop {
        // SAFETY: a valid directory descriptor and a writable buffer of that length.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(());
        }
        let filled = &buf[..n as usize];
        let mut at = 0;
        while let Some(name) = dirent_name(filled, &mut at) {
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                f(name);
            }
        }
    }
}

/// The name of the `linux_dirent64` at `*at` in `buf`, advancing `*at` past it; `None`
/// at the end of the buffer (or at a record the kernel could not have written).
fn dirent_name<'a>(buf: &'a [u8], at: &mut usize) -> Option<&'a CStr> {
    let rec = buf.get(*at..)?;
    let reclen = u16::from_ne_bytes([*rec.get(DIRENT_RECLEN_AT)?, *rec.get(DIRENT_RECLEN_AT + 1)?]);
    let rec = rec.get(..usize::from(reclen))?;
    let name = CStr::from_bytes_until_nul(rec.get(DIRENT_NAME_AT..)?).ok()?;
    *at += usize::from(reclen);
    Some(name)
}

fn split(rel: &Path) -> (&Path, &OsStr) {
    match (rel.parent(), rel.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => (Path::new(""), OsStr::new(".")),
    }
}

fn fstatat(dir: &OwnedFd, name: &OsStr) -> io::Result<Stat> {
    statx(
        dir.as_raw_fd(),
        &cstring(name.as_bytes())?,
        libc::AT_SYMLINK_NOFOLLOW,
    )
}

/// `fstat` of an open file.
pub(crate) fn fstat(file: &impl AsRawFd) -> io::Result<Stat> {
    statx(file.as_raw_fd(), c"", libc::AT_EMPTY_PATH)
}

/// `statx` of `name` in `dir` (or of `dir` itself, with `AT_EMPTY_PATH`): the basic
/// stats and the birth time, which `stat` does not give.
fn statx(dir: libc::c_int, name: &CStr, flags: libc::c_int) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::statx>::uninit();
    // SAFETY: valid dirfd, NUL-terminated name, writable statx buffer.
    cvt(unsafe {
        libc::statx(
            dir,
            name.as_ptr(),
            flags,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            st.as_mut_ptr(),
        )
    })?;
    // SAFETY: statx succeeded and filled `st`.
    Ok(Stat::from_statx(&unsafe { st.assume_init() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A directory removed and another made in its place, reusing its inode number,
    /// has another generation where the file system keeps birth times; the same file,
    /// renamed or looked at again, keeps its own.
    #[test]
    fn a_reused_inode_number_comes_with_another_generation() {
        let t = tempfile::tempdir().unwrap();
        let b = Backing::open(t.path()).unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        let first = b.lstat(Path::new("d")).unwrap();
        std::fs::rename(t.path().join("d"), t.path().join("e")).unwrap();
        assert_eq!(
            b.lstat(Path::new("e")).unwrap().generation(),
            first.generation()
        );
        if first.born.is_none() {
            return; // nothing to tell files apart by here (no birth times)
        }
        // ext4 gives the freed number to the next directory made; elsewhere the loop may
        // never meet it again, and only the rename above is checked.
        for i in 0..50 {
            std::fs::remove_dir(t.path().join("e")).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
            std::fs::create_dir(t.path().join("e")).unwrap();
            let now = b.lstat(Path::new("e")).unwrap();
            if now.ino == first.ino {
                assert_ne!(now.generation(), first.generation(), "round {i}");
                break;
            }
        }
    }

    /// The fallback for kernels without `openat2` confines as `openat2` does.
    #[test]
    fn the_walk_without_openat2_refuses_symlinks_and_dot_dot() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/f"), b"x").unwrap();
        symlink(outside.path(), t.path().join("a/out")).unwrap();
        symlink("b/f", t.path().join("a/lf")).unwrap();
        let root = File::open(t.path()).unwrap();
        let open =
            |p: &str| walk_beneath(&root, &cstring(p.as_bytes()).unwrap(), libc::O_RDONLY, 0);
        let mut got = String::new();
        std::io::Read::read_to_string(&mut File::from(open("a/b/f").unwrap()), &mut got).unwrap();
        assert_eq!(got, "x");
        assert!(open("./a//b/f").is_ok());
        // A symlinked directory on the way is no directory to O_NOFOLLOW (ENOTDIR).
        let e = open("a/out/x").unwrap_err().raw_os_error();
        assert!(matches!(e, Some(libc::ENOTDIR | libc::ELOOP)), "{e:?}");
        assert_eq!(open("a/lf").unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(
            open("a/../a/b/f").unwrap_err().raw_os_error(),
            Some(libc::EXDEV)
        );
        assert!(open("").is_ok(), "the directory itself");
    }

    /// What the daemon writes goes through no symlink and into nothing but a regular
    /// file of one name: a planted link, FIFO or hard link is refused, nothing outside
    /// is created or written, and a real log is created and then appended to.
    #[test]
    fn writes_follow_no_symlink_and_append_only_to_a_plain_file() {
        use std::io::Write;
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("bashrc");
        std::fs::write(&target, b"mine\n").unwrap();
        let root = open_root(t.path()).unwrap();
        // Created, then appended to.
        let dir = make_dirs_beneath(&root, &["steps", "a1"]).unwrap();
        for line in ["one\n", "two\n"] {
            let mut f = open_append_beneath(&dir, c"driver.log").unwrap();
            f.write_all(line.as_bytes()).unwrap();
        }
        let log = t.path().join("steps/a1/driver.log");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\n");
        // A symlink as the file, or as a directory on the way, is refused.
        std::fs::remove_file(&log).unwrap();
        symlink(&target, &log).unwrap();
        let e = open_append_beneath(&dir, c"driver.log").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        symlink(outside.path(), t.path().join("steps/a2")).unwrap();
        let e = make_dirs_beneath(&root, &["steps", "a2"]).unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)),
            "{e}"
        );
        std::fs::remove_file(t.path().join("steps/a2")).unwrap();
        symlink(outside.path(), t.path().join("steps2")).unwrap();
        assert!(make_dirs_beneath(&root, &["steps2", "a1"]).is_err());
        // A FIFO (which would block the opener) and a second hard link are refused.
        std::fs::remove_file(&log).unwrap();
        let c = cstring(log.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = open_append_beneath(&dir, c"driver.log").unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENXIO | libc::EINVAL)),
            "{e}"
        );
        std::fs::remove_file(&log).unwrap();
        std::fs::write(t.path().join("other"), b"").unwrap();
        std::fs::hard_link(t.path().join("other"), &log).unwrap();
        let e = open_append_beneath(&dir, c"driver.log").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        // Nothing outside was created or written.
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine\n");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    /// The daemon's reads of a file and its listing of a directory leave their access
    /// times as they were, where a plain read on the same filesystem moves them.
    #[test]
    fn reads_and_listings_leave_access_times_alone() {
        use std::fs::FileTimes;
        use std::io::Read;
        use std::time::{Duration, SystemTime};
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::write(t.path().join("d/x"), b"x").unwrap();
        std::fs::write(t.path().join("f"), b"record").unwrap();
        std::fs::write(t.path().join("control"), b"record").unwrap();
        // Older than a day: relatime updates it at the next read.
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
        for p in ["d", "f", "control"] {
            let f = File::open(t.path().join(p)).unwrap();
            f.set_times(FileTimes::new().set_accessed(old)).unwrap();
        }
        let atime = |p: &str| {
            std::fs::metadata(t.path().join(p))
                .unwrap()
                .accessed()
                .unwrap()
        };
        std::fs::read(t.path().join("control")).unwrap();
        if atime("control") == old {
            eprintln!("this filesystem keeps no access times: nothing to compare");
            return;
        }
        let b = Backing::open(t.path()).unwrap();
        let (mut f, _) = b.open_file(Path::new("f")).unwrap();
        let mut got = String::new();
        f.read_to_string(&mut got).unwrap();
        assert_eq!(got, "record");
        assert_eq!(b.list(Path::new("d")).unwrap().len(), 1);
        assert_eq!(atime("f"), old, "a record read through the backing");
        assert_eq!(atime("d"), old, "a directory listed through the backing");
    }

    /// A listing started from within another's callback gets a buffer of its own: the
    /// thread's kept one is in use, and neither listing loses a name.
    #[test]
    fn a_listing_inside_a_listing_sees_both_whole() {
        let t = tempfile::tempdir().unwrap();
        for d in ["a", "b"] {
            for i in 0..50 {
                std::fs::create_dir_all(t.path().join(d).join(format!("{d}{i}"))).unwrap();
            }
        }
        let open = |d: &str| File::open(t.path().join(d)).unwrap();
        let (a, b) = (open("a"), open("b"));
        let (mut outer, mut inner) = (Vec::new(), Vec::new());
        for_each_name(&a, |n| {
            outer.push(n.to_owned());
            if outer.len() == 1 {
                for_each_name(&b, |m| inner.push(m.to_owned())).unwrap();
            }
        })
        .unwrap();
        assert_eq!((outer.len(), inner.len()), (50, 50));
        assert!(outer.iter().all(|n| n.to_bytes().starts_with(b"a")));
        assert!(inner.iter().all(|n| n.to_bytes().starts_with(b"b")));
    }

    /// A listing larger than one `getdents64` buffer comes whole, with each entry's own
    /// stat, and without `.` and `..`.
    #[test]
    fn a_listing_spans_several_reads() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        let long = "n".repeat(200);
        let count = LIST_BUFFER / 200 * 3;
        for i in 0..count {
            std::fs::write(t.path().join(format!("d/{long}{i}")), vec![0; i % 7]).unwrap();
        }
        std::fs::create_dir(t.path().join("d/sub")).unwrap();
        let b = Backing::open(t.path()).unwrap();
        let mut got = b.list(Path::new("d")).unwrap();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got.len(), count + 1);
        assert!(got.iter().all(|(n, _)| n != "." && n != ".."));
        for (name, st) in &got {
            let name = name.to_str().unwrap();
            match name.strip_prefix(long.as_str()) {
                Some(i) => {
                    assert!(st.is_file());
                    assert_eq!(st.size, (i.parse::<usize>().unwrap() % 7) as u64, "{name}");
                }
                None => assert!(name == "sub" && st.is_dir()),
            }
        }
        assert!(b.list(Path::new("")).unwrap().iter().any(|(n, _)| n == "d"));
    }

    #[test]
    fn never_follows_symlinks() {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("root");
        std::fs::create_dir(&root).unwrap();
        // A file beside the root, which `../x` from it names.
        std::fs::write(top.path().join("x"), b"beside the root").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/f"), b"hello").unwrap();
        symlink(outside.path(), root.join("escape")).unwrap();
        symlink(outside.path().join("secret"), root.join("d/link")).unwrap();
        let b = Backing::open(&root).unwrap();

        assert!(b.lstat(Path::new("d/f")).unwrap().is_file());
        assert_eq!(b.lstat(Path::new("d/f")).unwrap().size, 5);
        assert!(b.lstat(Path::new("d/link")).unwrap().is_symlink());
        assert!(b.lstat(Path::new("escape")).unwrap().is_symlink());
        assert!(b.lstat(Path::new("escape/secret")).is_err());
        assert!(b.open_file(Path::new("d/link")).is_err());
        assert!(b.open_file(Path::new("escape/secret")).is_err());
        // `..` is refused before anything is opened (EXDEV, as RESOLVE_BENEATH says it),
        // though what it names exists.
        assert!(root.join("../x").is_file());
        for e in [
            b.open_file(Path::new("../x")).unwrap_err(),
            b.lstat(Path::new("../x")).unwrap_err(),
        ] {
            assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}");
        }
        assert!(b.list(Path::new("escape")).is_err());
        assert_eq!(
            b.readlink(Path::new("d/link")).unwrap(),
            outside.path().join("secret").as_os_str().as_bytes()
        );
        let mut names: Vec<_> = b
            .list(Path::new("d"))
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect();
        names.sort();
        assert_eq!(names, ["f", "link"]);
        assert!(b.lstat(Path::new("")).unwrap().is_dir());
        assert!(b.open_file(Path::new("d")).is_err());
    }
}
