//! What the daemon and its sentinel both do to processes and mount points, in one home
//! that [`crate::mount`] and [`crate::sentinel`] both use (neither reaches into the other):
//! starting this binary detached, closing the descriptors a process was started with,
//! and telling a dead mount and detaching it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The environment variable that tells a daemon its stdout is the readiness pipe: the
/// daemon's alone, never passed on to what it launches.
pub(crate) const READY_ENV: &str = "LITANYFS_READY_PIPE";
/// The running executable, whatever became of its path.
const SELF_EXE: &str = "/proc/self/exe";

/// A command that runs this binary detached: in a session of its own, and the child of an
/// intermediate that exits at once (waiting for the spawned child reaps it), so nothing
/// has to reap the process itself. `inherit` is a descriptor that crosses the exec. The
/// binary is the running one even if its file was replaced since it started (an upgrade,
/// a rebuild): its path would then name another file, or none.
pub(crate) fn detached_self(inherit: Option<std::os::fd::RawFd>) -> Command {
    let mut cmd = Command::new(SELF_EXE);
    if let Ok(exe) = std::env::current_exe() {
        cmd.arg0(exe);
    }
    // SAFETY: only async-signal-safe calls (fcntl, setsid, fork, _exit) run between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = inherit
                && libc::fcntl(fd, libc::F_SETFD, 0) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            match libc::fork() {
                -1 => Err(std::io::Error::last_os_error()),
                0 => Ok(()),
                _ => libc::_exit(0),
            }
        });
    }
    cmd
}

/// Closes every descriptor but the standard three and `keep`: what a process was started
/// with beyond those and does not know of. Called before any thread opens anything.
pub(crate) fn close_inherited(keep: Option<std::os::fd::RawFd>) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<std::os::fd::RawFd> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds.into_iter().filter(|&fd| fd > 2 && Some(fd) != keep) {
        // SAFETY: closing a descriptor nothing in this process owns (the listing's own
        // is already closed, and answers EBADF).
        unsafe { libc::close(fd) };
    }
}

/// Whether the mount at `mnt` has lost its daemon. `statfs` always reaches the daemon
/// (no attribute cache answers it), so a dead connection shows at once.
pub(crate) fn is_stale(mnt: &Path) -> bool {
    let Ok(c) = CString::new(mnt.as_os_str().as_bytes()) else {
        return false;
    };
    let mut s = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: valid NUL-terminated path and a writable statfs buffer.
    if unsafe { libc::statfs(c.as_ptr(), s.as_mut_ptr()) } == 0 {
        return false;
    }
    matches!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOTCONN | libc::ECONNABORTED)
    )
}

/// Detaches whatever is mounted at `mnt`: directly when privileged, else through
/// `fusermount3 -u` (lazily with `lazy`).
pub(crate) fn detach(mnt: &Path, lazy: bool) -> std::io::Result<()> {
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    match umount2(mnt, flags) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            let mut cmd = Command::new("fusermount3");
            cmd.arg(if lazy { "-uz" } else { "-u" }).arg(mnt);
            let out = cmd.stderr(Stdio::piped()).output()?;
            if out.status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other(
                    String::from_utf8_lossy(&out.stderr).trim().to_string(),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

fn umount2(mnt: &Path, flags: libc::c_int) -> std::io::Result<()> {
    let c = CString::new(mnt.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Where this daemon's mount answers and its device, once it does: one mount a process.
static MOUNTED: std::sync::OnceLock<(std::path::PathBuf, u64)> = std::sync::OnceLock::new();

/// Notes that the mount answers at `mnt` (for [`exit_if_replaced`]).
pub(crate) fn mounted_at(mnt: &Path) {
    if let Ok(m) = std::fs::metadata(mnt) {
        let _ = MOUNTED.set((mnt.to_path_buf(), std::os::unix::fs::MetadataExt::dev(&m)));
    }
}

/// At the end of the session: ends the process when the mount point now shows a
/// filesystem other than this daemon's (its top mount in `/proc/self/mountinfo` is
/// another's: read from there, never by a `stat`, which a session that has ended would
/// never answer), before fuser unmounts the mount point by path and so that one.
pub(crate) fn exit_if_replaced() {
    if let Some((mnt, dev)) = MOUNTED.get()
        && replaced(mnt, *dev)
    {
        log::info!(
            "{}: unmounted; exiting (what is mounted there now stays)",
            mnt.display()
        );
        std::process::exit(0);
    }
}

fn replaced(mnt: &Path, dev: u64) -> bool {
    let mut point = String::new();
    for c in mnt.to_string_lossy().chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => point.push_str(&format!("\\{:03o}", c as u32)),
            c => point.push(c),
        }
    }
    let ours = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let top = info
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .rfind(|f| f.get(4) == Some(&point.as_str()));
    top.is_some_and(|f| f.get(2) != Some(&ours.as_str()))
}

/// This process's resident set, in KiB (`/proc/self/statm`'s second field, in pages).
pub(crate) fn rss_kib() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()? / 1024)
}

/// Where the kernel says whether it groups each session for the scheduler.
const AUTOGROUP_ENABLED: &str = "/proc/sys/kernel/sched_autogroup_enabled";
/// The calling process's session group's niceness.
const SELF_AUTOGROUP: &str = "/proc/self/autogroup";

/// Sets the calling thread's niceness to `n` (threads it starts later inherit it) and,
/// where the kernel groups sessions, its session group's: there, a group is weighed
/// against every other session's as a whole, whatever its threads' niceness.
pub(crate) fn set_nice(n: i32) -> std::io::Result<()> {
    // SAFETY: setpriority with who 0 changes the calling thread alone.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let grouped = std::fs::read_to_string(AUTOGROUP_ENABLED).is_ok_and(|v| v.trim() == "1");
    if grouped {
        std::fs::write(SELF_AUTOGROUP, n.to_string())?;
    }
    Ok(())
}

/// Gives every whole free page of the heap back to the kernel (glibc's `malloc_trim`;
/// with another C library, nothing).
pub(crate) fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists, under its locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The calling thread's scheduling so far (`/proc/thread-self/schedstat`): nanoseconds
/// on a CPU, and nanoseconds runnable but waiting for one. Whatever else a span of wall
/// time holds, the thread was blocked (on a lock, or on I/O).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sched {
    pub(crate) on_cpu_ns: u64,
    pub(crate) waiting_ns: u64,
    /// How many times it was given a CPU: once per wake-up or preemption.
    pub(crate) runs: u64,
}

impl Sched {
    pub(crate) fn now() -> Option<Sched> {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let mut f = text.split_whitespace().map(str::parse::<u64>);
        Some(Sched {
            on_cpu_ns: f.next()?.ok()?,
            waiting_ns: f.next()?.ok()?,
            runs: f.next()?.ok()?,
        })
    }

    /// What passed from `earlier` to this one.
    pub(crate) fn since(self, earlier: Sched) -> Sched {
        Sched {
            on_cpu_ns: self.on_cpu_ns.saturating_sub(earlier.on_cpu_ns),
            waiting_ns: self.waiting_ns.saturating_sub(earlier.waiting_ns),
            runs: self.runs.saturating_sub(earlier.runs),
        }
    }
}
