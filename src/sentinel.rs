//! The auto-unmount sentinel: `--auto-unmount` that holds however the daemon dies.
//!
//! `fusermount3 -o auto_unmount` mounts, then stays behind and waits for its socket to
//! the daemon to close. When it closes, fusermount3 opens the mount's root, and unmounts
//! only if that fails with ENOTCONN (the connection is gone, and nobody unmounted and
//! mounted again in between). But a dying process releases its descriptors one at a
//! time, and that socket can go before the last `/dev/fuse` descriptor does: the open
//! then waits in a connection that is still up, is answered ECONNABORTED when the last
//! descriptor goes, and the dead mount stays. On a loaded machine that was about one
//! SIGKILL in twenty.
//!
//! The sentinel stands between the two. The daemon names this binary as the fusermount
//! fuser runs ([`arm`]); started so, the binary becomes the sentinel
//! ([`run_if_called`]). It runs the real fusermount3 on a socket of its own, passes the
//! `/dev/fuse` descriptor it gets on to the daemon, and keeps its socket open until the
//! daemon's pidfd reports the whole process gone, which the kernel does only once every
//! descriptor of it is released. fusermount3 then finds the connection aborted, and
//! unmounts. Any other call (fuser's `-u` when unmounting) goes to the real binary as is.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// What fuser runs as fusermount.
const FUSER_ENV: &str = "FUSERMOUNT_PATH";
/// The real fusermount, set by [`arm`]; its presence is what makes this binary, started
/// as fusermount, the sentinel.
pub const REAL_ENV: &str = "LITANYFS_FUSERMOUNT";
/// The descriptor of the socket a fusermount sends `/dev/fuse` over (libfuse's name).
const COMM_ENV: &str = "_FUSE_COMMFD";
/// The fusermount run when none is named.
const DEFAULT_FUSERMOUNT: &str = "fusermount3";
/// The option that makes fusermount3 stay behind the mount.
const AUTO_UNMOUNT: &str = "auto_unmount";

/// Makes fuser start this binary, as the sentinel, wherever it would run fusermount.
///
/// # Safety
/// Changes the environment: call before any other thread starts.
pub unsafe fn arm() {
    let real = std::env::var_os(FUSER_ENV).unwrap_or_else(|| DEFAULT_FUSERMOUNT.into());
    // SAFETY: the caller guarantees no other thread runs. `/proc/self/exe` is resolved by
    // the child fuser forks, whose executable is still this one, even if the file it was
    // started from has been replaced since.
    unsafe {
        std::env::set_var(REAL_ENV, real);
        std::env::set_var(FUSER_ENV, "/proc/self/exe");
    }
}

/// Runs the sentinel if this process was started as one, and returns its exit code;
/// `None` for any other start.
pub fn run_if_called() -> Option<ExitCode> {
    let real = std::env::var_os(REAL_ENV)?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // fuser's calls: `-o OPTIONS -- MOUNTPOINT` to mount, `-u -q -z -- MOUNTPOINT`.
    if !matches!(args.first().and_then(|a| a.to_str()), Some("-o" | "-u")) {
        return None;
    }
    let comm = std::env::var(COMM_ENV).ok().and_then(|v| v.parse().ok());
    let code = match comm {
        Some(fd) if auto_unmounts(&args) => match stand(&real, &args, fd) {
            Ok(code) => code,
            Err(e) => {
                let _ = writeln!(io::stderr(), "litanyfs (auto-unmount sentinel): {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            let e = Command::new(&real).args(&args).env_remove(REAL_ENV).exec();
            let _ = writeln!(io::stderr(), "litanyfs: running {}: {e}", real.display());
            ExitCode::FAILURE
        }
    };
    Some(code)
}

/// Whether fusermount is asked to stay behind the mount.
fn auto_unmounts(args: &[OsString]) -> bool {
    args.windows(2).any(|w| {
        w[0] == "-o"
            && w[1]
                .to_str()
                .is_some_and(|o| o.split(',').any(|o| o == AUTO_UNMOUNT))
    })
}

/// Mounts through the real fusermount, hands `/dev/fuse` to the daemon over `comm`, and
/// holds fusermount's socket until the daemon is gone.
fn stand(real: &OsStr, args: &[OsString], comm: RawFd) -> io::Result<ExitCode> {
    // SAFETY: the descriptor fuser passed for this purpose, not otherwise owned here.
    let daemon_socket = unsafe { OwnedFd::from_raw_fd(comm) };
    set_cloexec(daemon_socket.as_fd())?;
    // The daemon waits for the descriptor, so it is alive and still our parent here.
    // SAFETY: getppid has no preconditions.
    let daemon = pidfd_open(unsafe { libc::getppid() });
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(real);
    cmd.args(args)
        .env(COMM_ENV, theirs_fd.to_string())
        .env_remove(REAL_ENV);
    // SAFETY: only fcntl, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(theirs_fd, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut fusermount = cmd.spawn()?;
    drop(theirs);
    let Some(dev) = receive_fd(ours.as_fd())? else {
        // fusermount failed and said why on the stderr we share with it, which fuser
        // reads once we exit (closing the daemon's socket).
        let status = fusermount.wait()?;
        return Ok(ExitCode::from(
            status.code().unwrap_or(1).clamp(1, 255) as u8
        ));
    };
    send_fd(daemon_socket.as_fd(), dev.as_fd())?;
    drop(dev);
    detach();
    match daemon {
        Ok(pidfd) => {
            drop(daemon_socket);
            wait_readable(pidfd.as_fd());
        }
        // A kernel without pidfds (before 5.3): the socket's end, as fusermount3 itself.
        Err(_) => wait_readable(daemon_socket.as_fd()),
    }
    drop(ours);
    // fusermount3 now decides, and unmounts if it must; reaped here rather than left
    // to whoever adopts it.
    let _ = fusermount.wait();
    Ok(ExitCode::SUCCESS)
}

/// Leaves the daemon's session and working directory, and shuts out the signals a
/// terminal or a stopping service sends the daemon's group: the sentinel ends with the
/// daemon, never before it.
fn detach() {
    // SAFETY: plain calls on this process; the set is initialised by sigfillset.
    unsafe {
        libc::setsid();
        let _ = libc::chdir(c"/".as_ptr());
        let mut all = std::mem::zeroed::<libc::sigset_t>();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

fn set_cloexec(fd: BorrowedFd) -> io::Result<()> {
    // SAFETY: fcntl on a valid descriptor.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Waits until `fd` polls readable or hung up (a pidfd: the process is gone; a socket:
/// its other end closed).
fn wait_readable(fd: BorrowedFd) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, -1) };
        if n > 0 || (n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted) {
            return;
        }
    }
}

/// Room for one descriptor's control message, aligned for `cmsghdr`.
fn control_buffer() -> (Vec<u64>, usize) {
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    (vec![0u64; space.div_ceil(8)], space)
}

/// Sends `fd` over `sock` with one byte, as fusermount does.
pub(crate) fn send_fd(sock: BorrowedFd, fd: BorrowedFd) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let (mut buf, space) = control_buffer();
    // SAFETY: msghdr is plain data; zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = buf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer has room for one header and one descriptor, so
    // CMSG_FIRSTHDR is non-null and its data holds a RawFd.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd.as_raw_fd());
    }
    loop {
        // SAFETY: msg points at live buffers for the duration of the call.
        if unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) } >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives the descriptor a fusermount sends over `sock`; `None` if it closed the
/// socket without sending one (it failed).
pub(crate) fn receive_fd(sock: BorrowedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let (mut buf, space) = control_buffer();
    // SAFETY: as in send_fd.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = buf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: msg points at live buffers for the duration of the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG_* walk stays
    // inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                return Ok(Some(OwnedFd::from_raw_fd(fd)));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "fusermount sent no descriptor",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek};

    #[test]
    fn a_descriptor_crosses_the_socket_and_still_names_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"through the socket").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        send_fd(a.as_fd(), file.as_fd()).unwrap();
        let got = receive_fd(b.as_fd()).unwrap().unwrap();
        assert_ne!(got.as_raw_fd(), file.as_raw_fd());
        let mut got = std::fs::File::from(got);
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "through the socket");
        // SAFETY: F_GETFD on a valid descriptor.
        let flags = unsafe { libc::fcntl(got.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(
            flags & libc::FD_CLOEXEC,
            0,
            "received without close-on-exec"
        );
    }

    #[test]
    fn a_closed_socket_is_no_descriptor_and_a_bare_byte_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(receive_fd(b.as_fd()).unwrap().is_none());
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        assert_eq!(
            receive_fd(b.as_fd()).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn only_auto_unmount_in_the_options_makes_a_stand() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(auto_unmounts(&args(&[
            "-o",
            "fsname=/w,auto_unmount,subtype=litanyfs",
            "--",
            "/m"
        ])));
        assert!(!auto_unmounts(&args(&["-o", "fsname=/w", "--", "/m"])));
        assert!(!auto_unmounts(&args(&["-o", "x_auto_unmount", "--", "/m"])));
        assert!(!auto_unmounts(&args(&[
            "-u",
            "-q",
            "-z",
            "--",
            "auto_unmount"
        ])));
    }
}
