//! The auto-unmount sentinel: `--auto-unmount` that holds however the daemon dies.
//!
//! `fusermount3 -o auto_unmount` (what fuser offers) stays behind a mount, and when its
//! socket to the daemon closes it opens the mount's root and unmounts only if that fails
//! with ENOTCONN. That misses a dead mount two ways:
//! - once the daemon has answered `opendir` with ENOSYS (see the adapter), the kernel
//!   opens directories by itself, so after any listing the open succeeds on a dead
//!   connection;
//! - a dying process releases its descriptors one at a time, and the socket can go
//!   before the last `/dev/fuse` descriptor: the open then waits in a connection still
//!   up and is answered ECONNABORTED (about one SIGKILL in twenty on a loaded machine).
//!
//! So the daemon starts its own sentinel instead ([`start`]): a process of its own
//! session, deaf to signals, holding the read end of a pipe whose write end only the
//! daemon holds. The pipe reads end-of-file once the daemon is exiting, however it
//! exits. The sentinel then asks the mount point `statfs`, which always reaches the
//! daemon: answered, the mount is alive (the daemon unmounted and someone mounted again)
//! or gone; failed with ENOTCONN or ECONNABORTED (a request sent while the last
//! descriptor was still open is answered so when it closes), the mount is dead, and the
//! sentinel detaches it as the next `litanyfs mount` there would ([`process::detach`]).
//! It needs no privilege a user's own mount lacks, and no `allow_other`.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::OnceLock;

use crate::process;

/// The internal subcommand the sentinel runs as: `litanyfs sentinel FD -- MOUNTPOINT`.
const SUBCOMMAND: &str = "sentinel";

/// The daemon's end of the pipe: never closed but by the daemon's exit, which is what
/// the sentinel waits for.
static DAEMON_END: OnceLock<io::PipeWriter> = OnceLock::new();

/// Starts the sentinel of the mount at `mnt`, which this process serves. It is left to
/// run alone (its parent exits at once), so nothing here has to reap it.
pub(crate) fn start(mnt: &Path) -> io::Result<()> {
    // Both ends close-on-exec: only the sentinel is given the read end.
    let (read, write) = io::pipe()?;
    let mut cmd = process::detached_self(Some(read.as_raw_fd()));
    cmd.arg(SUBCOMMAND)
        .arg(read.as_raw_fd().to_string())
        .arg("--")
        .arg(mnt)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd.spawn()?.wait()?;
    if DAEMON_END.set(write).is_err() {
        return Err(io::Error::other("a sentinel was already started"));
    }
    Ok(())
}

/// Runs the sentinel if this process was started as one (see [`start`]), and returns
/// its exit code; `None` for any other command line.
pub fn run_if_called() -> Option<ExitCode> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.as_slice() {
        [sub, fd, dashes, mnt] if sub == SUBCOMMAND && dashes == "--" => {
            let fd = fd.to_str().and_then(|f| f.parse().ok()).unwrap_or(-1);
            Some(watch(fd, Path::new(mnt)))
        }
        _ => None,
    }
}

/// The sentinel itself: waits for the daemon's end of the pipe `fd` to close, then
/// detaches the mount at `mnt` if its connection is dead.
pub(crate) fn watch(fd: RawFd, mnt: &Path) -> ExitCode {
    // SAFETY: F_GETFD only checks that the descriptor exists.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        log::error!("sentinel of {}: no pipe at descriptor {fd}", mnt.display());
        return ExitCode::FAILURE;
    }
    // Whatever else the daemon's process let cross the exec: a `/dev/fuse` among them
    // would keep the dead connection up, and the sentinel waiting on its own mount.
    process::close_inherited(Some(fd));
    deafen();
    // SAFETY: the read end the daemon passed for this, not otherwise owned here.
    let pipe = io::PipeReader::from(unsafe { OwnedFd::from_raw_fd(fd) });
    outlive(pipe, mnt);
    ExitCode::SUCCESS
}

/// Waits for the end of `pipe`, then detaches the mount at `mnt` if it is dead.
fn outlive(pipe: impl Read, mnt: &Path) {
    wait_for_end(pipe);
    if process::is_stale(mnt) {
        match process::detach(mnt, true) {
            Ok(()) => log::warn!("{}: the daemon died; unmounted", mnt.display()),
            Err(e) => log::error!(
                "{}: the daemon died, and unmounting failed: {e}",
                mnt.display()
            ),
        }
    }
}

/// Blocks every signal a terminal, a stopping service or a process-group kill sends the
/// daemon's group: the sentinel ends after the daemon, never before it (SIGKILL aside).
fn deafen() {
    // SAFETY: the set is initialised by sigfillset before use.
    unsafe {
        let mut all = std::mem::zeroed::<libc::sigset_t>();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// Reads the pipe until end-of-file (or an error that is not an interruption).
fn wait_for_end(mut pipe: impl Read) {
    let mut buf = [0u8; 64];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return,
            Err(e) if e.kind() != io::ErrorKind::Interrupted => return,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipe_ends_when_its_writer_goes_and_not_before() {
        let (read, write) = io::pipe().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            wait_for_end(read);
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "ended while the writer was open"
        );
        drop(write);
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        t.join().unwrap();
    }

    // `watch` itself closes every other descriptor of its process and blocks signals,
    // so only its refusal of a bad descriptor (before either) runs in the test process;
    // the rest runs in a real sentinel (tests/hardening.rs).
    #[test]
    fn a_directory_that_is_no_dead_mount_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (read, write) = io::pipe().unwrap();
        drop(write);
        outlive(read, dir.path());
        assert!(dir.path().is_dir());
        assert_eq!(watch(-1, dir.path()), ExitCode::FAILURE);
    }
}
