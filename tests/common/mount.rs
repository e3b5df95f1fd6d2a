//! Real mounts for tests. A [`Mounted`] always unmounts when dropped, including when the
//! test that owns it panics, so no test leaves `Transport endpoint is not connected`
//! behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// This build's binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_litanyfs");

/// Where the Debian package installs the binary.
pub const INSTALLED_BIN: &str = "/usr/bin/litanyfs";

/// Whether the tests drive the installed package (`LITANYFS_INSTALLED=1`, which CI sets
/// after installing the .deb) instead of this build's binary.
pub fn installed() -> bool {
    std::env::var_os("LITANYFS_INSTALLED").is_some_and(|v| v == "1")
}

/// The binary under test: [`BIN`], or the installed one (see [`installed`]).
pub fn bin() -> &'static str {
    if installed() { INSTALLED_BIN } else { BIN }
}

pub fn litanyfs(args: &[&std::ffi::OsStr]) -> Output {
    litanyfs_env(args, &[])
}

/// `litanyfs mount WS <a fresh directory> EXTRA...`, which must fail and leave nothing
/// mounted: its stderr, for the caller to check that it names the reason.
#[allow(dead_code)]
pub fn refused_mount(ws: &Path, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args: Vec<&std::ffi::OsStr> = vec!["mount".as_ref(), ws.as_os_str()];
    args.push(dir.path().as_os_str());
    args.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
    let out = litanyfs(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "mounted: {stderr}");
    assert!(!is_mounted(dir.path()), "{stderr}");
    stderr
}

/// [`litanyfs`] with `env` added to the daemon's environment.
pub fn litanyfs_env(args: &[&std::ffi::OsStr], env: &[(&str, &std::ffi::OsStr)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("RUST_LOG", "litanyfs=debug");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run litanyfs")
}

pub struct Mounted {
    pub mnt: PathBuf,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mounted {
    /// Mounts `ws` at a fresh mountpoint with the background daemon, as a user would.
    pub fn new(ws: &Path) -> Self {
        Self::with_args(ws, &[])
    }

    pub fn with_args(ws: &Path, extra: &[&str]) -> Self {
        Self::with_env(ws, extra, &[])
    }

    /// [`Mounted::with_args`] with `env` added to the daemon's environment (such as the
    /// `LITANY_HOME` the drivers it launches need).
    pub fn with_env(ws: &Path, extra: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        let log = dir.path().join("daemon.log");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["mount".as_ref(), ws.as_os_str(), mnt.as_os_str()];
        args.push("--log-file".as_ref());
        args.push(log.as_os_str());
        args.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
        let out = litanyfs_env(&args, env);
        let m = Self {
            mnt,
            log,
            _dir: dir,
        };
        assert!(
            out.status.success(),
            "mount failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            m.log_text()
        );
        m
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The daemon serving this mount.
    pub fn daemon_pid(&self) -> Option<i32> {
        daemon_pid(&self.mnt)
    }

    pub fn is_mounted(&self) -> bool {
        is_mounted(&self.mnt)
    }
}

pub fn is_mounted(mnt: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let needle = mnt.to_string_lossy().replace(' ', "\\040");
    mounts
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(needle.as_str()))
}

pub use litanyfs::testing::daemon_pid;

/// Waits for `cond` to hold, polling; false when `limit` passed first (see
/// [`litanyfs::testing::wait`], whose `wait_for` also names what timed out).
pub fn eventually(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    litanyfs::testing::wait::within(limit, cond)
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.is_mounted() {
            return;
        }
        let pid = self.daemon_pid();
        let _ = litanyfs(&["unmount".as_ref(), self.mnt.as_os_str()]);
        if self.is_mounted() {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(pid) = pid {
            // Give the daemon a moment to exit on its own; then make sure.
            if !eventually(Duration::from_secs(5), || !alive(pid)) {
                // SAFETY: signalling a pid we found serving our own mount.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Field `n` (numbered from 1, as proc(5) does) of a `/proc/.../stat` file, read past the
/// command's parentheses, which may hold anything.
pub fn stat_field(stat: &Path, n: usize) -> Option<String> {
    let text = std::fs::read_to_string(stat).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    rest.split_whitespace()
        .nth(n.checked_sub(3)?)
        .map(String::from)
}

/// Whether `pid` is running (a zombie awaiting its reaper is not).
pub fn alive(pid: i32) -> bool {
    stat_field(Path::new(&format!("/proc/{pid}/stat")), 3)
        .is_some_and(|state| state != "Z" && state != "X")
}
