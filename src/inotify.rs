//! One safe home for inotify: creating the descriptor, adding a watch (by path, exactly
//! the directory an `O_PATH` descriptor names, or an entry of an open directory, never
//! followed), and reading and parsing events.
//!
//! Every watcher in the daemon (the view's change detection, the deposit guard, the
//! events log) goes through here, so the unsafe reads and the event layout are parsed in
//! one place. An inotify descriptor is not an fd on any watched directory, so watching
//! `inbox/<id>` never makes the daemon look like the agent's executor to `litany stop`
//! (CONTRACT §3.7).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The size of a buffer that holds many events at once (each is 16 bytes plus its name).
pub(crate) const EVENT_BUFFER: usize = 64 * 1024;

/// One event as the kernel reported it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event<'a> {
    pub(crate) wd: i32,
    pub(crate) mask: u32,
    /// The entry's name in the watched directory; empty for events on the directory
    /// itself.
    pub(crate) name: &'a [u8],
}

impl Event<'_> {
    /// Events were dropped: whatever the watcher knows may be stale.
    pub(crate) fn overflowed(&self) -> bool {
        self.mask & libc::IN_Q_OVERFLOW != 0
    }

    /// The watched directory itself went away, moved, or its watch was removed.
    pub(crate) fn watch_ended(&self) -> bool {
        self.mask
            & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED | libc::IN_UNMOUNT)
            != 0
    }

    /// The directory's names changed (an entry came, went or was replaced).
    pub(crate) fn renamed(&self) -> bool {
        self.mask & (libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO)
            != 0
    }
}

/// An inotify descriptor.
pub(crate) struct Inotify {
    fd: OwnedFd,
}

impl Inotify {
    /// A new descriptor; `nonblocking` reads answer at once when nothing is queued.
    pub(crate) fn new(nonblocking: bool) -> io::Result<Self> {
        let flags = libc::IN_CLOEXEC | if nonblocking { libc::IN_NONBLOCK } else { 0 };
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::inotify_init1(flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watches `path` with `mask`; the watch descriptor is returned (inotify folds
    /// repeated watches of one inode into one descriptor).
    pub(crate) fn add(&self, path: &Path, mask: u32) -> io::Result<i32> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: valid inotify fd and NUL-terminated path; the result is checked.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(wd)
        }
    }

    /// Watches exactly the directory `dir` names (an `O_PATH` descriptor resolved beneath
    /// the workspace root), so no symlink swapped in since can redirect the watch.
    pub(crate) fn add_fd(&self, dir: &impl AsRawFd, mask: u32) -> io::Result<i32> {
        self.add(&proc_fd_path(dir.as_raw_fd()), mask & !libc::IN_DONT_FOLLOW)
    }

    /// Watches entry `name` of the directory `dir` is open on (resolved beneath the
    /// workspace root), never following it: `name` must be one component (else
    /// `EINVAL`), and a symlink there is not followed. One call, no walk from the root.
    pub(crate) fn add_in(&self, dir: &impl AsRawFd, name: &OsStr, mask: u32) -> io::Result<i32> {
        let b = name.as_bytes();
        if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut path = proc_fd_path(dir.as_raw_fd());
        path.push(name);
        self.add(&path, mask | libc::IN_DONT_FOLLOW)
    }

    /// Stops watch `wd`; a stale one is ignored.
    pub(crate) fn remove(&self, wd: i32) {
        // SAFETY: valid inotify fd; a stale wd only yields EINVAL, which we ignore.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
    }

    /// Reads what is queued into `buf` and calls `each` for every event, in order.
    /// Returns how many events there were: 0 when a nonblocking descriptor had none
    /// (blocking ones wait). Interrupted reads are retried.
    pub(crate) fn read(
        &self,
        buf: &mut [u8],
        mut each: impl FnMut(Event<'_>),
    ) -> io::Result<usize> {
        let n = loop {
            // SAFETY: valid fd and a writable buffer of the given length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(0),
                _ => return Err(e),
            }
        };
        Ok(parse(&buf[..n], &mut each))
    }
}

impl AsRawFd for Inotify {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An eventfd that wakes a thread polling it beside an inotify descriptor (the deposit
/// guard's stop and re-deposit kicks, a watch being closed): nonblocking, close-on-exec.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with flag arguments; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Wakes whoever polls `fd` (an [`eventfd`]). A full counter (EAGAIN) already means
/// "wake up", so the result is not looked at.
pub(crate) fn wake(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd we hold.
    unsafe {
        libc::write(
            fd.as_raw_fd(),
            (&one as *const u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

/// `/proc/self/fd/<n>`: names exactly the file descriptor `fd` refers to.
pub(crate) fn proc_fd_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// Parses the events the kernel wrote into `bytes` (whole events only), calling `each`.
fn parse(bytes: &[u8], each: &mut impl FnMut(Event<'_>)) -> usize {
    let header = std::mem::size_of::<libc::inotify_event>();
    let mut at = 0;
    let mut count = 0;
    while at + header <= bytes.len() {
        // SAFETY: at least `header` bytes remain at `at`; read_unaligned copes with any
        // alignment, and every bit pattern is a valid inotify_event.
        let ev: libc::inotify_event =
            unsafe { std::ptr::read_unaligned(bytes[at..].as_ptr().cast()) };
        let end = (at + header + ev.len as usize).min(bytes.len());
        let raw = &bytes[at + header..end];
        let name = raw.split(|b| *b == 0).next().unwrap_or(&[]);
        each(Event {
            wd: ev.wd,
            mask: ev.mask,
            name,
        });
        count += 1;
        at = end;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_the_entry_and_nonblocking_reads_return_none() {
        let t = tempfile::tempdir().unwrap();
        let ino = Inotify::new(true).unwrap();
        let dir = std::fs::File::open(t.path()).unwrap();
        let wd = ino
            .add_fd(&dir, libc::IN_CREATE | libc::IN_ONLYDIR)
            .unwrap();
        let mut buf = vec![0u8; EVENT_BUFFER];
        assert_eq!(ino.read(&mut buf, |_| panic!("nothing queued")).unwrap(), 0);
        std::fs::write(t.path().join("a-name"), b"x").unwrap();
        let mut seen = Vec::new();
        ino.read(&mut buf, |ev| {
            seen.push((ev.wd, ev.name.to_vec(), ev.renamed()))
        })
        .unwrap();
        assert_eq!(seen, vec![(wd, b"a-name".to_vec(), true)]);
    }

    #[test]
    fn parse_stops_at_a_truncated_event() {
        let header = std::mem::size_of::<libc::inotify_event>();
        let mut bytes = vec![0u8; header + 8];
        bytes[0] = 7; // wd
        bytes[header - 4] = 8; // len
        bytes[header..header + 3].copy_from_slice(b"abc");
        bytes.extend_from_slice(&[0u8; 5]); // a partial header after it
        let mut names = Vec::new();
        let n = parse(&bytes, &mut |ev| names.push((ev.wd, ev.name.to_vec())));
        assert_eq!(n, 1);
        assert_eq!(names, vec![(7, b"abc".to_vec())]);
    }
}
