//! The witness: at a close of a message being written, who else still holds its open
//! file, and how the closing process is ending. FUSE tells the daemon of every `close(2)`
//! (a FLUSH, from the closing thread) but not whether it was the last reference to the
//! open file, nor why a process closes its files at exit; `/proc` tells both.
//!
//! **Never blocks on the process being served.** A FLUSH keeps its caller waiting until
//! the daemon answers, and the caller may be in the middle of an `execve` closing its
//! close-on-exec descriptors: it then holds its `exec_update_lock` for writing. Since
//! the stable kernels that protect `ptrace_may_access` with that lock (6.18.40 and
//! backports: "proc: protect ptrace_may_access() with exec_update_lock"), reading
//! `/proc/<pid>/fd/<n>` as a link and reading `/proc/<pid>/stat` wait for it. Done from
//! the FLUSH handler, either deadlocks the exec and the daemon thread together (the hang
//! that an earlier attempt at this met, with `ps` stuck behind it). So the witness reads
//! only what takes no lock an exec holds:
//! - `/proc/<tid>/status`: the thread group, and whether the task still has an address
//!   space (task lock and RCU only);
//! - `/proc/<pid>/fd/` as a directory, and `/proc/<pid>/fdinfo/<n>`: which descriptors
//!   exist and the mount and inode each refers to (the file table under RCU; the access
//!   check of fdinfo takes no exec lock);
//! - `/proc/<pid>/task/<tid>/children`: the children (the tasklist's spinning read lock);
//! - `/proc/<tid>/stat`, for its exit code, **only** for a task without an address space.
//!   Such a task is past `exit_mm`, so exiting; and a FLUSH comes from an exiting task
//!   only when it drops the last reference to its file table, so no other thread of its
//!   group shares that table, and none is in an exec (an exec first kills every other
//!   thread and waits for them to finish exiting, before it takes the lock).
//!
//! `lstat` of a `/proc/<pid>/fd/<n>` link (its own mode, never its target) is safe too.
//! So is `/proc/<tid>/stat` of the thread a write comes from, for its start time
//! ([`Witness::start_time`]): no thread of its group can hold the lock while it waits
//! for the answer, since an exec first waits for every other thread to exit; and of a
//! thread of an exiting closer's group, by the argument above.
//!
//! A descriptor is recognised by the mount id and inode number its fdinfo shows, so
//! holders on another filesystem never count; any writable descriptor on the draft's
//! inode counts, whether or not it is the very same open file. What `/proc` cannot show
//! (a descriptor in flight over a socket, a mapping) is not seen: the last close seen
//! then decides, and the release is the backstop.

use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::workspace::backing::for_each_name;

/// How many processes one close may look at (the candidates and their descendants):
/// a bound on what a close costs in a machine full of processes.
pub(crate) const MAX_PROCESSES: usize = 256;

/// A task, as the witness saw it at a close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Task {
    pub(crate) tid: u32,
    /// Set when the task is exiting.
    pub(crate) exit: Option<Exiting>,
}

/// An exiting task: its thread group, how it ends, and when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exiting {
    pub(crate) tgid: u32,
    pub(crate) how: Exit,
    /// Its start time ([`Witness::start_time`]), read with its exit code.
    pub(crate) start: Option<u64>,
}

/// A process found holding a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) pid: u32,
    /// Every descriptor it has on the file is close-on-exec: a child between its `fork`
    /// and its `exec` (another thread's `posix_spawn`) holds the file so for a moment.
    pub(crate) close_on_exec: bool,
}

/// How an exiting task ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// `exit(2)` with this status.
    Status(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Exit {
    /// The kernel's `exit_code`: a signal in the low seven bits, else a status above.
    pub(crate) fn from_code(code: i32) -> Self {
        match code & 0x7f {
            0 => Exit::Status((code >> 8) & 0xff),
            sig => Exit::Signal(sig),
        }
    }
}

/// Reads `/proc` (or a stand-in, in tests) for the facts a close decides on.
#[derive(Debug)]
pub(crate) struct Witness {
    proc: PathBuf,
    mountpoint: PathBuf,
    /// The mount id of the mount, found in `mountinfo` at first use (it exists only
    /// once mounted); `None` when it cannot be found, and then no holder is ever seen.
    mount_id: OnceLock<Option<u64>>,
}

impl Witness {
    /// The witness for the mount at `mountpoint` (absolute), reading the real `/proc`.
    pub(crate) fn new(mountpoint: &Path) -> Self {
        Witness {
            proc: PathBuf::from("/proc"),
            mountpoint: mountpoint.to_path_buf(),
            mount_id: OnceLock::new(),
        }
    }

    /// A witness reading a stand-in for `/proc`, for a mount of id `mount_id`.
    #[cfg(test)]
    pub(crate) fn with_proc(proc: &Path, mount_id: u64) -> Self {
        let id = OnceLock::new();
        let _ = id.set(Some(mount_id));
        Witness {
            proc: proc.to_path_buf(),
            mountpoint: PathBuf::new(),
            mount_id: id,
        }
    }

    fn mount_id(&self) -> Option<u64> {
        *self.mount_id.get_or_init(|| {
            let found = fs::read(self.proc.join("self/mountinfo"))
                .ok()
                .and_then(|info| mount_id_of(&info, &self.mountpoint));
            if found.is_none() {
                log::warn!(
                    "{}: not found in /proc/self/mountinfo; a message is sent at the first \
                     close of its writer, not at the last close of every holder",
                    self.mountpoint.display()
                );
            }
            found
        })
    }

    /// The thread group (process) of thread `tid`; itself when it is gone.
    pub(crate) fn tgid(&self, tid: u32) -> u32 {
        read_small(&self.proc.join(tid.to_string()).join("status"))
            .and_then(|status| {
                status
                    .split(|&b| b == b'\n')
                    .find_map(|line| line.strip_prefix(b"Tgid:").and_then(parse_u32))
            })
            .unwrap_or(tid)
    }

    /// Thread `tid` as it is now, or `None` when it is gone. Whether it is exiting is
    /// read from `statm` (all zeros once the address space is gone), the cheapest file
    /// that says; only an exiting task's group and exit code are read.
    pub(crate) fn task(&self, tid: u32) -> Option<Task> {
        let dir = self.proc.join(tid.to_string());
        let statm = read_small(&dir.join("statm"))?;
        if statm.split(|b| b.is_ascii_whitespace()).next() != Some(b"0") {
            return Some(Task { tid, exit: None });
        }
        // Exiting (see the module doc for why reading stat cannot block here).
        let stat = read_small(&dir.join("stat"));
        let code = stat.as_deref().and_then(exit_code).unwrap_or(0);
        Some(Task {
            tid,
            exit: Some(Exiting {
                tgid: self.tgid(tid),
                how: Exit::from_code(code),
                start: stat.as_deref().and_then(start_time),
            }),
        })
    }

    /// When task `tid` started (`/proc/<tid>/stat` field 22, clock ticks after boot):
    /// with its id, what names one task for good, where an id alone is reused once its
    /// task is gone. `None` when it is gone or unreadable.
    ///
    /// Reading `stat` can wait for an exec of the task's group (module doc), so this is
    /// only for a task none of whose group can be in one: the thread a request being
    /// served comes from (an exec first waits for every other thread of its group to
    /// exit, and that thread cannot before it is answered), or a thread of the group of
    /// an exiting closer being served (the same argument as for its exit code).
    pub(crate) fn start_time(&self, tid: u32) -> Option<u64> {
        start_time(&read_small(&self.proc.join(tid.to_string()).join("stat"))?)
    }

    /// The processes among `candidates` (process or thread ids: `/proc` shows a thread's
    /// file table and threads as its group's) and their descendants that hold a
    /// writable descriptor on inode `ino` of this mount, without `skip` (a task whose
    /// file table is going away: an exiting closer). The candidates are looked at
    /// first, then their descendants, breadth first; the walk stops at the first holder
    /// for which `enough` says so (one holder is all a close needs to wait).
    pub(crate) fn holders(
        &self,
        ino: u64,
        candidates: &[u32],
        skip: Option<u32>,
        enough: impl Fn(&Holder) -> bool,
    ) -> Vec<Holder> {
        let Some(mount) = self.mount_id() else {
            return Vec::new();
        };
        let mut seen: Vec<u32> = Vec::new();
        let mut queue: std::collections::VecDeque<u32> = candidates.iter().copied().collect();
        let mut found = Vec::new();
        while let Some(pid) = queue.pop_front() {
            if seen.contains(&pid) {
                continue;
            }
            if seen.len() >= MAX_PROCESSES {
                log::warn!(
                    "inode {ino}: looked at {MAX_PROCESSES} processes for holders and \
                     stopped; a holder past them is not seen"
                );
                break;
            }
            seen.push(pid);
            let dir = self.proc.join(pid.to_string());
            if Some(pid) != skip
                && let Some(close_on_exec) = self.holds(&dir, mount, ino)
            {
                let h = Holder { pid, close_on_exec };
                found.push(h);
                if enough(&h) {
                    break;
                }
            }
            queue.extend(children(&dir));
        }
        found
    }

    /// Whether process `dir` has a writable descriptor on `ino` of mount `mount`, and if
    /// so whether every such descriptor is close-on-exec. Each `fdinfo` is opened
    /// relative to its directory, one path component each.
    fn holds(&self, dir: &Path, mount: u64, ino: u64) -> Option<bool> {
        let (Ok(fds), Ok(info)) = (open_dir(&dir.join("fd")), open_dir(&dir.join("fdinfo"))) else {
            return None;
        };
        let mut held: Option<bool> = None;
        let _ = for_each_name(&fds, |fd| {
            if writable_link(&fds, fd)
                && let Some(text) = read_small_at(&info, fd)
                && let Some(f) = FdInfo::parse(&text)
                && f.mount == mount
                && f.ino == ino
                && f.writable()
            {
                held = Some(held.unwrap_or(true) && f.close_on_exec());
            }
        });
        held
    }
}

/// Whether descriptor link `fd` in `/proc/<pid>/fd` is open for writing, by the link's
/// own mode (`lstat`, which follows nothing: procfs sets the owner's write bit from the
/// file's mode). One call, where an `fdinfo` read is three; an error counts as
/// writable, so that `fdinfo` decides.
fn writable_link(fds: &fs::File, fd: &CStr) -> bool {
    use std::os::fd::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid directory descriptor, a NUL-terminated name, a writable buffer.
    let r = unsafe {
        libc::fstatat(
            fds.as_raw_fd(),
            fd.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: filled when fstatat succeeded.
    r != 0 || unsafe { st.assume_init() }.st_mode & libc::S_IWUSR != 0
}

fn open_dir(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
}

/// What `/proc/<pid>/fdinfo/<n>` says of a descriptor.
#[derive(Debug, PartialEq, Eq)]
struct FdInfo {
    flags: u32,
    mount: u64,
    ino: u64,
}

impl FdInfo {
    fn parse(text: &[u8]) -> Option<Self> {
        let (mut flags, mut mount, mut ino) = (None, None, None);
        for line in text.split(|&b| b == b'\n') {
            let field = |p: &[u8]| line.strip_prefix(p).map(trim);
            if let Some(v) = field(b"flags:") {
                flags = u32::from_str_radix(std::str::from_utf8(v).ok()?, 8).ok();
            } else if let Some(v) = field(b"mnt_id:") {
                mount = std::str::from_utf8(v).ok()?.parse().ok();
            } else if let Some(v) = field(b"ino:") {
                ino = std::str::from_utf8(v).ok()?.parse().ok();
            }
        }
        Some(FdInfo {
            flags: flags?,
            mount: mount?,
            ino: ino?,
        })
    }

    fn close_on_exec(&self) -> bool {
        self.flags & libc::O_CLOEXEC as u32 != 0
    }

    fn writable(&self) -> bool {
        self.flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
    }
}

/// The children of every thread of process `dir`.
fn children(dir: &Path) -> Vec<u32> {
    let Ok(tasks) = open_dir(&dir.join("task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let _ = for_each_name(&tasks, |tid| {
        let path = Path::new(OsStr::from_bytes(tid.to_bytes())).join("children");
        if let Some(path) = cstring(&path)
            && let Some(text) = read_small_at(&tasks, &path)
        {
            out.extend(
                text.split(|b| b.is_ascii_whitespace())
                    .filter_map(parse_u32),
            );
        }
    });
    out
}

fn cstring(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// Field `n` (counted from 1, as proc(5) does) of a `/proc/<tid>/stat` line, from the
/// 3rd on: counted after the command name, which may hold spaces and parentheses, so
/// the count starts at the last `)`.
fn stat_field(stat: &[u8], n: usize) -> Option<&[u8]> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat[close + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(n.checked_sub(3)?)
}

/// The exit code of a `/proc/<tid>/stat` line: its 52nd field.
fn exit_code(stat: &[u8]) -> Option<i32> {
    std::str::from_utf8(stat_field(stat, 52)?)
        .ok()?
        .parse()
        .ok()
}

/// The start time of a `/proc/<tid>/stat` line: its 22nd field.
fn start_time(stat: &[u8]) -> Option<u64> {
    std::str::from_utf8(stat_field(stat, 22)?)
        .ok()?
        .parse()
        .ok()
}

/// The mount id of the mount at `mountpoint` in a `mountinfo` text: the last mount
/// there, as that is the one a path resolves to.
fn mount_id_of(info: &[u8], mountpoint: &Path) -> Option<u64> {
    let want = mountpoint.as_os_str().as_bytes();
    info.split(|&b| b == b'\n').rev().find_map(|line| {
        let mut f = line.split(|&b| b == b' ');
        let id = f.next()?;
        let point = f.nth(3)?;
        (unescape(point) == want)
            .then(|| std::str::from_utf8(id).ok()?.parse().ok())
            .flatten()
    })
}

/// `mountinfo` escapes space, tab, newline and backslash as three octal digits.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && let Some(oct) = field.get(i + 1..i + 4)
            && let Ok(v) = u8::from_str_radix(&String::from_utf8_lossy(oct), 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

/// The bytes of a `/proc` file, in one read when it fits in [`SMALL_FILE`] bytes, as all
/// but a long `children` list do (`fs::read` would add a `statx` for a size that `/proc`
/// reports as 0 anyway, and a second read to see the end).
fn read_small(path: &Path) -> Option<Vec<u8>> {
    read_all(fs::File::open(path).ok()?)
}

fn read_all(mut f: fs::File) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0; SMALL_FILE];
    let n = f.read(&mut buf).ok()?;
    buf.truncate(n);
    if n == SMALL_FILE {
        f.read_to_end(&mut buf).ok()?;
    }
    Some(buf)
}

/// [`read_small`] of `name` in directory `dir`.
fn read_small_at(dir: &fs::File, name: &CStr) -> Option<Vec<u8>> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a valid directory descriptor and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just opened and is owned here alone.
    read_all(unsafe { fs::File::from_raw_fd(fd) })
}

/// Room for what one read of a `/proc` file here returns (`status` is about 1.5 KB).
const SMALL_FILE: usize = 4096;

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

fn parse_u32(v: &[u8]) -> Option<u32> {
    std::str::from_utf8(trim(v)).ok()?.parse().ok()
}

/// For tests: writes a stand-in `/proc` entry for a process.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;

    /// A process `pid` (one thread), with an address space unless `exit_code` is given,
    /// descriptors `(fd, flags, mount, ino)` and children.
    pub(crate) fn process(
        proc: &Path,
        pid: u32,
        exit_code: Option<i32>,
        fds: &[(u32, u32, u64, u64)],
        kids: &[u32],
    ) -> io::Result<()> {
        let dir = proc.join(pid.to_string());
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("fd"))?;
        fs::create_dir_all(dir.join("fdinfo"))?;
        fs::create_dir_all(dir.join("task").join(pid.to_string()))?;
        let mut status = format!("Name:\tx\nTgid:\t{pid}\nPid:\t{pid}\n");
        if exit_code.is_none() {
            status.push_str("VmSize:\t  1000 kB\n");
        }
        fs::write(dir.join("status"), status)?;
        let statm = if exit_code.is_none() {
            "250 100 50 10 0 80 0\n"
        } else {
            "0 0 0 0 0 0 0\n"
        };
        fs::write(dir.join("statm"), statm)?;
        let mut stat = format!("{pid} (a (b) c) S");
        for i in 4..=52 {
            stat.push_str(&format!(
                " {}",
                if i == 52 { exit_code.unwrap_or(0) } else { i }
            ));
        }
        fs::write(dir.join("stat"), stat + "\n")?;
        for &(fd, flags, mount, ino) in fds {
            fs::write(dir.join("fd").join(fd.to_string()), "")?;
            fs::write(
                dir.join("fdinfo").join(fd.to_string()),
                format!("pos:\t0\nflags:\t0{flags:o}\nmnt_id:\t{mount}\nino:\t{ino}\n"),
            )?;
        }
        let kids: Vec<String> = kids.iter().map(u32::to_string).collect();
        fs::write(
            dir.join("task").join(pid.to_string()).join("children"),
            kids.join(" ") + " ",
        )?;
        Ok(())
    }

    /// Sets when task `tid` started (its `stat` field 22; [`process`] writes 22).
    pub(crate) fn started(proc: &Path, tid: u32, start: u64) -> io::Result<()> {
        let path = proc.join(tid.to_string()).join("stat");
        let stat = fs::read_to_string(&path)?;
        let close = stat.rfind(')').unwrap_or(0);
        let (head, tail) = stat.split_at(close + 1);
        let mut fields: Vec<String> = tail.split_whitespace().map(String::from).collect();
        if let Some(f) = fields.get_mut(22 - 3) {
            *f = start.to_string();
        }
        fs::write(path, format!("{head} {}\n", fields.join(" ")))
    }

    /// Makes `tid` a thread of process `tgid` (its `status` says so), started at `start`,
    /// with an address space: an id reused by another process's thread.
    pub(crate) fn thread(proc: &Path, tid: u32, tgid: u32, start: u64) -> io::Result<()> {
        process(proc, tid, None, &[], &[])?;
        let dir = proc.join(tid.to_string());
        fs::write(
            dir.join("status"),
            format!("Name:\tx\nTgid:\t{tgid}\nPid:\t{tid}\nVmSize:\t  1000 kB\n"),
        )?;
        started(proc, tid, start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNT: u64 = 77;
    const W: u32 = libc::O_WRONLY as u32;

    fn proc() -> (tempdir::Dir, Witness) {
        let dir = tempdir::Dir::new();
        let w = Witness::with_proc(dir.path(), MOUNT);
        (dir, w)
    }

    mod tempdir {
        /// A directory removed when dropped.
        pub(crate) struct Dir(std::path::PathBuf);
        impl Dir {
            pub(crate) fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "litanyfs-witness-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
            pub(crate) fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn exit_codes_say_signal_or_status() {
        assert_eq!(Exit::from_code(9), Exit::Signal(9));
        assert_eq!(Exit::from_code(0x80 | 11), Exit::Signal(11), "core dumped");
        assert_eq!(Exit::from_code(3 << 8), Exit::Status(3));
        assert_eq!(Exit::from_code(0), Exit::Status(0));
    }

    #[test]
    fn a_task_is_running_or_exiting_with_its_code() {
        let (dir, w) = proc();
        fake::process(dir.path(), 10, None, &[], &[]).unwrap();
        fake::process(dir.path(), 11, Some(15), &[], &[]).unwrap();
        fake::process(dir.path(), 12, Some(1 << 8), &[], &[]).unwrap();
        assert_eq!(w.task(10).unwrap().exit, None);
        assert_eq!(w.tgid(10), 10);
        assert_eq!(w.tgid(99), 99, "a gone thread is its own group");
        let how = |t: u32| w.task(t).unwrap().exit.map(|e| (e.tgid, e.how));
        assert_eq!(how(11), Some((11, Exit::Signal(15))));
        assert_eq!(w.task(11).unwrap().exit.unwrap().start, Some(22));
        fake::started(dir.path(), 10, 12_345).unwrap();
        assert_eq!(w.start_time(10), Some(12_345));
        assert_eq!(w.task(10).unwrap().exit, None, "still running");
        assert_eq!(w.start_time(99), None, "a gone task");
        assert_eq!(how(12), Some((12, Exit::Status(1))));
        assert_eq!(w.task(13), None, "a gone task");
    }

    #[test]
    fn holders_are_writable_descriptors_on_the_inode_of_this_mount() {
        let (dir, w) = proc();
        let p = dir.path();
        // 20: the closer, still holding a dup; 21: its child, holding it read-only;
        // 22: the child's child, holding it writable; 23: the same inode on another
        // mount; 24: unrelated to the candidates.
        fake::process(p, 20, None, &[(3, W, MOUNT, 5), (4, W, MOUNT, 6)], &[21]).unwrap();
        fake::process(
            p,
            21,
            None,
            &[(1, libc::O_RDONLY as u32, MOUNT, 5)],
            &[22, 23],
        )
        .unwrap();
        fake::process(p, 22, None, &[(1, libc::O_RDWR as u32, MOUNT, 5)], &[]).unwrap();
        fake::process(p, 23, None, &[(1, W, MOUNT + 1, 5)], &[]).unwrap();
        fake::process(p, 24, None, &[(1, W, MOUNT, 5)], &[]).unwrap();
        let pids = |h: Vec<Holder>| {
            let mut v: Vec<u32> = h.iter().map(|h| h.pid).collect();
            v.sort();
            v
        };
        assert_eq!(pids(w.holders(5, &[20], None, |_| false)), vec![20, 22]);
        assert_eq!(
            pids(w.holders(5, &[20], Some(20), |_| false)),
            vec![22],
            "skipped closer"
        );
        assert_eq!(
            pids(w.holders(6, &[21], None, |_| false)),
            Vec::<u32>::new()
        );
        assert_eq!(
            pids(w.holders(5, &[99], None, |_| false)),
            Vec::<u32>::new(),
            "gone one"
        );
        // Close-on-exec only when every descriptor on it is.
        let (cloexec, plain) = (W | libc::O_CLOEXEC as u32, W);
        fake::process(p, 25, None, &[(3, cloexec, MOUNT, 7)], &[26]).unwrap();
        fake::process(
            p,
            26,
            None,
            &[(3, cloexec, MOUNT, 7), (4, plain, MOUNT, 7)],
            &[],
        )
        .unwrap();
        let found = w.holders(7, &[25], None, |_| false);
        let how = |pid| found.iter().find(|h| h.pid == pid).map(|h| h.close_on_exec);
        assert_eq!((how(25), how(26)), (Some(true), Some(false)));
        // Stopped at the first holder that is enough: the candidate itself.
        assert_eq!(pids(w.holders(5, &[20], None, |_| true)), vec![20]);
    }

    #[test]
    fn the_walk_is_bounded_and_survives_cycles() {
        let (dir, w) = proc();
        fake::process(dir.path(), 30, None, &[], &[31]).unwrap();
        fake::process(dir.path(), 31, None, &[(0, W, MOUNT, 9)], &[30]).unwrap();
        let found: Vec<u32> = w
            .holders(9, &[30], None, |_| false)
            .iter()
            .map(|h| h.pid)
            .collect();
        assert_eq!(found, vec![31]);
    }

    #[test]
    fn stat_lines_give_the_exit_code_whatever_the_command_name() {
        let mut line = b"7 (we) ird) Z".to_vec();
        for i in 4..=52 {
            line.extend(format!(" {}", if i == 52 { 137 } else { i }).bytes());
        }
        assert_eq!(exit_code(&line), Some(137));
        assert_eq!(start_time(&line), Some(22));
        assert_eq!(exit_code(b"7 (x) S 1 2"), None);
        assert_eq!(start_time(b"7 (x) S 1 2"), None);
    }

    #[test]
    fn the_mount_is_found_by_its_mountpoint() {
        let info = b"22 1 0:21 / /proc rw - proc proc rw\n\
            90 30 0:50 / /tmp/a\\040b rw,nosuid - fuse.litanyfs /w rw\n\
            91 90 0:51 / /tmp/a\\040b rw - fuse.litanyfs /w rw\n";
        assert_eq!(mount_id_of(info, Path::new("/tmp/a b")), Some(91));
        assert_eq!(mount_id_of(info, Path::new("/tmp/a")), None);
    }

    #[test]
    fn fdinfo_parses_the_kernels_format() {
        let f = FdInfo::parse(b"pos:\t12\nflags:\t0100001\nmnt_id:\t91\nino:\t4\n").unwrap();
        assert_eq!((f.mount, f.ino, f.writable()), (91, 4, true));
        let r = FdInfo::parse(b"pos:\t0\nflags:\t02100000\nmnt_id:\t91\nino:\t4\n").unwrap();
        assert!(!r.writable());
        assert_eq!(FdInfo::parse(b"pos:\t0\n"), None);
    }
}
