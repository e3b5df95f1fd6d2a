//! Waking the recipient after a deposit, as `litany message` does (CONTRACT §3.8), without
//! ever touching the executor lock.
//!
//! Guarantees: whether an executor holds `inbox/<id>` is read from `/proc/locks`, never
//! probed with `flock` (a probe can make a starting driver lose its acquire, §3.7) and
//! never through a held directory fd (`litany stop` would take us for the executor). When
//! nobody holds it, `<harness> advance -- <ws> <id>` is launched as litany's
//! `AdvanceLauncher` does: `setsid` in the child, stdin/stdout `/dev/null`, stderr
//! appended to `steps/<id>/driver.log`, `LITANY_LOCK_FD` removed, everything else
//! inherited. A deposit's wake never waits on the child (a `nudge` watches it for
//! [`NUDGE_WATCH`], to tell its writer when litany declined at once); a small reaper
//! thread collects its exit status so no zombie stays behind. Every failure leaves the
//! deposit standing.
//!
//! The launch is hardened where litany's own need not be, since the daemon may serve
//! other users and outlive the shell that started it:
//! - the harness is an absolute path, resolved once ([`find_harness`]: `--harness`, or
//!   the first executable `litany` in an *absolute* `PATH` entry; a relative entry, `.`
//!   or an empty one, would make the working directory choose the program);
//! - the child runs in `/`, not in whatever directory the daemon was started from, and
//!   without the daemon's own variables ([`PRIVATE_ENV`]: its readiness pipe, its
//!   service manager's socket);
//! - the id comes after `--` (litany's parser takes it so), so `refs/heads/agents/--x`,
//!   a valid ref, is an id and never an option; an id that is not one path component is
//!   not woken at all.
//!
//! The log and its directory are made with the confined primitives of
//! [`backing`](crate::workspace::backing): beneath the workspace root, through no
//! symlink, into a regular file of one name. Anyone who can write into the workspace
//! could otherwise plant `steps/<id>/driver.log -> ~/.bashrc` and have the daemon append
//! there; such a log is refused with a log line, and the driver still runs, its stderr
//! going to the daemon's own.
//!
//! A wake may also be handed to [`Later`], a thread of its own, so that a writer's
//! `close` does not wait for the lock check or the launch. It only ever runs after the
//! deposit that asked for it is linked, which is all litany's wake rule needs; requests
//! for an agent already waiting in its queue are folded into that one.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::workspace::backing::{cstring, make_dirs_beneath, open_append_beneath, open_root};
use crate::workspace::ids::is_component;
use crate::workspace::steps::DRIVER_LOG;
use crate::workspace::{INBOX_DIR, STEPS_DIR};

/// The harness binary searched for on `PATH` when none is configured.
pub(crate) const HARNESS_BIN: &str = "litany";
/// The lock baton a successor adopts; a launched driver must acquire, never adopt.
pub(crate) const LOCK_FD_ENV: &str = "LITANY_LOCK_FD";
/// What a launched driver never inherits: litany's lock baton, and what is the daemon's
/// alone (its readiness pipe; the service manager's notify socket, socket activation
/// and watchdog, which would otherwise let a driver speak for the mount's unit).
pub(crate) const PRIVATE_ENV: [&str; 8] = [
    LOCK_FD_ENV,
    crate::process::READY_ENV,
    "NOTIFY_SOCKET",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
];
/// Where a launched driver runs: nowhere the daemon's starter chose.
pub(crate) const DRIVER_CWD: &str = "/";

/// What happened after a deposit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Nobody held the lock; `advance` was launched (its pid).
    Launched { pid: u32 },
    /// An executor holds the lock and will drain at its next step boundary, or launch
    /// for this deposit when it releases (litany's release rule).
    Busy,
    /// No harness binary is known; the deposit waits for the next driver.
    NoHarness,
    /// The launch failed (logged); the deposit waits for the next driver.
    Failed(String),
    /// The driver was launched and ended, failing, within the watch asked for
    /// ([`Waker::wake_watched`]): litany declined to advance the agent (its reason is in
    /// the driver's log).
    Ended { pid: u32, status: String },
    /// Waking is turned off (`--no-wake`); the deposit waits for the next driver.
    Off,
    /// Handed to [`Later`]; its outcome is logged there.
    Queued,
}

/// The harness to launch, as an absolute path: `explicit` made absolute (against the
/// working directory of the moment), else the first executable `litany` in an absolute
/// entry of `PATH`. Relative entries (`.`, `bin`, an empty one) are skipped: they name
/// wherever the process happens to be.
pub(crate) fn find_harness(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return std::path::absolute(p).ok();
    }
    harness_on(&std::env::var_os("PATH")?)
}

/// The first executable `litany` in the absolute entries of `path` (a `PATH` value).
fn harness_on(path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(HARNESS_BIN))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Whether some process holds a `flock` on the directory `inbox` — the executor lock —
/// read from `/proc/locks` without taking or probing it.
///
/// Why a read is race-safe where a probe is not, and why it is as safe as litany's own
/// probe-then-launch: the caller reads only *after* its deposit has its final name.
/// - If the lock is seen held, its release comes after that read, so after the deposit
///   existed. litany's holder either drains at its next step boundary, or exits through
///   the release rule (`driver::release_then_reprobe`: drop the lock, re-read the inbox,
///   launch for any deposit its last read did not see) and its exit protocol's
///   self-relaunch. Either way the deposit is delivered. A brief holder that is not an
///   executor is litany's own probe (`message`, `scan`, exit protocol), which launches a
///   driver right after releasing, and that driver sees the deposit too. This is exactly
///   the `Busy` reasoning `litany message` relies on.
/// - If the lock is seen free, the caller launches; the driver acquires the lock like any
///   other, and if it loses, the winner is a holder covered by the first case.
/// - The read takes nothing, so a driver starting at the same instant always wins its own
///   non-blocking acquire; a probing `flock` could make it exit as a silent no-op.
/// - Every way this can misread errs towards "free": a lock invisible from our pid
///   namespace (locks_show hides them), an unreadable `/proc/locks`, a filesystem whose
///   `st_dev` differs from the superblock's (btrfs subvolumes, some overlays). "Free"
///   costs one redundant `advance` that loses the acquire and exits as a no-op; it never
///   costs a delivery. A lock seen held is always a real `FLOCK` on this very inode.
pub(crate) fn executor_busy(inbox: &Path) -> io::Result<bool> {
    let meta = std::fs::metadata(inbox)?;
    // A reading begun after this call, however shared (crate::locks): after the deposit.
    let held = crate::locks::held()?;
    Ok(crate::locks::is_held(&held, meta.dev(), meta.ino()))
}

/// `steps/<id>/driver.log`, opened for append (created with its directory), confined
/// (module docs): a symlink anywhere on the way is refused, not followed.
fn driver_log(root: &Path, agent: &str) -> io::Result<File> {
    let root = open_root(root)?;
    let dir = make_dirs_beneath(&root, &[STEPS_DIR, agent])?;
    open_append_beneath(&dir, &cstring(DRIVER_LOG.as_bytes())?)
}

/// Where a driver's stderr goes: its `driver.log`, or, when that cannot be had safely
/// (a planted symlink, a FIFO, a directory the daemon may not write), the daemon's own
/// stderr, said in a log line.
fn driver_stderr(root: &Path, agent: &str) -> Stdio {
    match driver_log(root, agent) {
        Ok(log) => Stdio::from(log),
        Err(e) => {
            log::warn!(
                "{}: not used ({e}); the driver for {agent} logs to this log instead",
                root.join(STEPS_DIR).join(agent).join(DRIVER_LOG).display()
            );
            Stdio::inherit()
        }
    }
}

/// The launch command: litany's `AdvanceLauncher`, hardened (module docs), without
/// spawning it.
fn driver_command(harness: &Path, root: &Path, agent: &str, stderr: Stdio) -> Command {
    let mut cmd = harness_command(harness, true);
    cmd.arg("advance")
        .arg("--")
        .arg(root)
        .arg(agent)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    cmd
}

/// Any run of the harness from the daemon, hardened as a driver's launch is (module
/// docs): in [`DRIVER_CWD`], without [`PRIVATE_ENV`]. A driver (`detached`) gets a
/// session of its own, so the daemon's terminal or group never receives what is meant
/// for it, nor the reverse; a verb the daemon waits for gets a process group of its own
/// only, which lets it be spawned without a `fork` of the whole daemon (with a hook
/// between fork and exec, as `setsid` needs, every spawn copies the daemon's page
/// tables: milliseconds for a large cache). The caller adds the verb and its arguments.
pub(crate) fn harness_command(harness: &Path, detached: bool) -> Command {
    let mut cmd = Command::new(harness);
    cmd.current_dir(DRIVER_CWD).stdin(Stdio::null());
    for var in PRIVATE_ENV {
        cmd.env_remove(var);
    }
    if !detached {
        cmd.process_group(0);
        return cmd;
    }
    // SAFETY: the hook runs between fork and exec and only calls `setsid`, which is
    // async-signal-safe. Its failure (already a group leader) is ignored, as litany does.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd
}

/// How long a nudge watches the driver it launched: one that ends failing within this
/// is the nudge's failure, told to the writer (litany declines at once to advance a
/// branch stopped in the middle of a tool, for one). A deposit's wake never waits.
pub(crate) const NUDGE_WATCH: Duration = Duration::from_secs(1);

/// Launches `<harness> advance -- <root> <agent>` detached and watches it for `watch`
/// (a deposit's wake: zero): its pid, and its exit status if it ended failing in that
/// time. Past the watch, a reaper thread collects the exit status. `agent` must be one
/// path component (`EINVAL` otherwise).
fn launch_watched(
    harness: &Path,
    root: &Path,
    agent: &str,
    watch: Duration,
) -> io::Result<(u32, Option<std::process::ExitStatus>)> {
    if !is_component(agent) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let stderr = driver_stderr(root, agent);
    let mut child = driver_command(harness, root, agent, stderr).spawn()?;
    let pid = child.id();
    let until = std::time::Instant::now() + watch;
    while std::time::Instant::now() < until {
        match child.try_wait() {
            Ok(Some(status)) => return Ok((pid, (!status.success()).then_some(status))),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break,
        }
    }
    reap(child);
    Ok((pid, None))
}

/// Waits for `child` on a thread of its own, so the exit status is collected whenever
/// the driver ends and the caller never blocks.
pub(crate) fn reap(mut child: Child) {
    let pid = child.id();
    let spawned = std::thread::Builder::new()
        .name("litanyfs-reap".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            if let Err(e) = child.wait() {
                log::warn!("driver {pid}: wait failed: {e}");
            }
        });
    if let Err(e) = spawned {
        log::warn!("driver {pid}: no reaper thread ({e}); it stays a zombie when it exits");
    }
}

/// Wakes agents of one workspace after deposits: the lock read, then the launch.
pub(crate) struct Waker {
    root: PathBuf,
    harness: Option<PathBuf>,
    warned: AtomicBool,
    /// Told of every driver launched: the agent and the driver's pid.
    on_launch: std::sync::OnceLock<OnLaunch>,
}

/// What a [`Waker`] tells of each launch ([`Waker::on_launch`]).
pub(crate) type OnLaunch = Box<dyn Fn(&str, u32) + Send + Sync>;

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker")
            .field("root", &self.root)
            .field("harness", &self.harness)
            .finish_non_exhaustive()
    }
}

impl Waker {
    /// `harness` as configured, else `litany` from `PATH` (resolved once, here, to an
    /// absolute path). The root is made absolute too: the driver runs in `/`.
    pub(crate) fn new(root: &Path, harness: Option<&Path>) -> Self {
        Self {
            root: std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf()),
            harness: find_harness(harness),
            warned: AtomicBool::new(false),
            on_launch: std::sync::OnceLock::new(),
        }
    }

    /// Has `hook` told of every driver launched from now on (once; a second hook is
    /// refused and logged).
    pub(crate) fn on_launch(&self, hook: OnLaunch) {
        if self.on_launch.set(hook).is_err() {
            log::warn!("a launch hook is already set; the new one is ignored");
        }
    }

    pub(crate) fn harness(&self) -> Option<&Path> {
        self.harness.as_deref()
    }

    /// Launches a driver for `agent` unless an executor holds its lock.
    pub(crate) fn wake(&self, agent: &str) -> Wake {
        self.wake_watched(agent, Duration::ZERO)
    }

    /// [`Waker::wake`], watching the driver for `watch` ([`NUDGE_WATCH`]): one that
    /// ended failing in that time is [`Wake::Ended`].
    pub(crate) fn wake_watched(&self, agent: &str, watch: Duration) -> Wake {
        let Some(harness) = &self.harness else {
            if !self.warned.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "no `{HARNESS_BIN}` on PATH and none configured: deposits wait in their \
                     inbox until a driver runs (e.g. `litany scan`)"
                );
            }
            return Wake::NoHarness;
        };
        if !is_component(agent) {
            log::warn!("not waking {agent:?}: not an agent id (one path component)");
            return Wake::Failed(format!("{agent:?} is not an agent id"));
        }
        let inbox = self.root.join(INBOX_DIR).join(agent);
        match executor_busy(&inbox) {
            Ok(true) => return Wake::Busy,
            Ok(false) => {}
            Err(e) => log::debug!("{}: lock state unknown ({e}); launching", inbox.display()),
        }
        match launch_watched(harness, &self.root, agent, watch) {
            Ok((pid, ended)) => {
                log::debug!(
                    "launched {} advance for {agent} (pid {pid})",
                    harness.display()
                );
                if let Some(hook) = self.on_launch.get() {
                    hook(agent, pid);
                }
                match ended {
                    None => Wake::Launched { pid },
                    Some(status) => Wake::Ended {
                        pid,
                        status: status.to_string(),
                    },
                }
            }
            Err(e) => {
                log::warn!("launching {} advance for {agent}: {e}", harness.display());
                Wake::Failed(e.to_string())
            }
        }
    }
}

/// Wakes agents on a thread of its own (module docs).
pub(crate) struct Later {
    shared: Arc<LaterShared>,
    thread: Option<JoinHandle<()>>,
}

struct LaterShared {
    waker: Arc<Waker>,
    queue: Mutex<LaterQueue>,
    ready: Condvar,
}

#[derive(Default)]
struct LaterQueue {
    /// Agents to wake, in the order asked; each at most once.
    agents: VecDeque<String>,
    stop: bool,
}

impl Later {
    pub(crate) fn new(waker: Arc<Waker>) -> io::Result<Self> {
        let shared = Arc::new(LaterShared {
            waker,
            queue: Mutex::new(LaterQueue::default()),
            ready: Condvar::new(),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("litanyfs-wake".into())
            .spawn(move || worker.run())?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Asks for `agent` to be woken. A request for it that has not started yet covers
    /// this one too: its lock check runs after this deposit was linked.
    pub(crate) fn wake(&self, agent: &str) -> Wake {
        let mut q = self.shared.queue.lock();
        if !q.agents.iter().any(|a| a == agent) {
            q.agents.push_back(agent.to_string());
            self.shared.ready.notify_one();
        }
        Wake::Queued
    }
}

/// How long the wake thread rests after a round of wakes, so that a run of deposits is
/// folded into few wakes (and few wakeups of this thread).
const LATER_PAUSE: Duration = Duration::from_millis(5);

impl LaterShared {
    fn run(&self) {
        loop {
            let agents: Vec<String> = {
                let mut q = self.queue.lock();
                while q.agents.is_empty() {
                    if q.stop {
                        return;
                    }
                    self.ready.wait(&mut q);
                }
                q.agents.drain(..).collect()
            };
            for agent in agents {
                let outcome = self.waker.wake(&agent);
                log::debug!("woke {agent}: {outcome:?}");
            }
            if !self.queue.lock().stop {
                std::thread::sleep(LATER_PAUSE);
            }
        }
    }
}

impl Drop for Later {
    /// Runs the wakes still queued, then stops the thread.
    fn drop(&mut self) {
        self.shared.queue.lock().stop = true;
        self.shared.ready.notify_one();
        super::join(self.thread.take(), "wake");
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A fake harness that records its argv, session, stdio and environment.
    pub(crate) fn fake_harness(dir: &Path) -> (PathBuf, PathBuf) {
        let record = dir.join("harness-record");
        let script = dir.join("fake-litany");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n\
                 out={record}.$$\n\
                 i=$(readlink /proc/$$/fd/0); o=$(readlink /proc/$$/fd/1); e=$(readlink /proc/$$/fd/2)\n\
                 {{\n\
                 printf 'argv:'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo\n\
                 echo \"pid: $$\"\n\
                 echo \"sid: $(cut -d' ' -f6 /proc/$$/stat)\"\n\
                 echo \"stdin: $i\"\n\
                 echo \"stdout: $o\"\n\
                 echo \"stderr: $e\"\n\
                 echo \"lockfd: ${{LITANY_LOCK_FD-unset}}\"\n\
                 }} > $out.tmp && mv $out.tmp $out\n\
                 echo 'driver says hi' >&2\n",
                record = record.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        (script, record)
    }

    /// The records the fake harness wrote, waiting up to `wait` for at least one.
    pub(crate) fn records(record: &Path, wait: Duration) -> Vec<String> {
        let deadline = Instant::now() + wait;
        loop {
            let dir = record.parent().unwrap();
            let prefix = format!("{}.", record.file_name().unwrap().to_str().unwrap());
            let found: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    (name.starts_with(&prefix) && !name.ends_with(".tmp")).then_some(name)
                })
                .map(|n| std::fs::read_to_string(dir.join(n)).unwrap())
                .collect();
            if !found.is_empty() || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Holds the executor lock of `inbox` from a child `flock` process until killed, and
    /// waits until `/proc/locks` shows it.
    pub(crate) fn hold_lock(inbox: &Path) -> Child {
        std::fs::create_dir_all(inbox).unwrap();
        // `-o`: the lock stays with `flock` itself (not `sleep`), so killing it releases.
        let child = Command::new("flock")
            .args(["-n", "-o"])
            .arg(inbox)
            .args(["sleep", "60"])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !executor_busy(inbox).unwrap() {
            assert!(
                Instant::now() < deadline,
                "flock never showed in /proc/locks"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    pub(crate) fn release(mut holder: Child) {
        holder.kill().unwrap();
        holder.wait().unwrap();
    }

    #[test]
    fn sees_a_real_flock_without_taking_it() {
        let t = tempfile::tempdir().unwrap();
        let inbox = t.path().join("inbox/a1");
        std::fs::create_dir_all(&inbox).unwrap();
        assert!(!executor_busy(&inbox).unwrap());
        let holder = hold_lock(&inbox);
        assert!(executor_busy(&inbox).unwrap());
        release(holder);
        let deadline = Instant::now() + Duration::from_secs(10);
        while executor_busy(&inbox).unwrap() {
            assert!(Instant::now() < deadline, "lock never went away");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn the_command_scrubs_the_baton() {
        let t = tempfile::tempdir().unwrap();
        let log = driver_log(t.path(), "a1").unwrap();
        let cmd = driver_command(Path::new("/bin/true"), t.path(), "a1", log.into());
        let envs: Vec<_> = cmd.get_envs().collect();
        for var in PRIVATE_ENV {
            assert!(envs.contains(&(std::ffi::OsStr::new(var), None)), "{var}");
        }
        assert!(envs.contains(&(std::ffi::OsStr::new("NOTIFY_SOCKET"), None)));
        assert!(envs.contains(&(std::ffi::OsStr::new("LITANYFS_READY_PIPE"), None)));
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/")));
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(
            args,
            [
                std::ffi::OsStr::new("advance"),
                std::ffi::OsStr::new("--"),
                t.path().as_os_str(),
                std::ffi::OsStr::new("a1")
            ]
        );
    }

    #[test]
    fn launches_detached_with_litanys_stdio() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("ws");
        std::fs::create_dir_all(root.join("inbox/a1")).unwrap();
        let (script, record) = fake_harness(t.path());
        let waker = Waker::new(&root, Some(&script));
        let Wake::Launched { pid } = waker.wake("a1") else {
            panic!("not launched")
        };
        let recs = records(&record, Duration::from_secs(10));
        assert_eq!(recs.len(), 1, "{recs:?}");
        let rec = &recs[0];
        let log = root.join("steps/a1/driver.log");
        assert!(
            rec.contains(&format!("argv: [advance] [--] [{}] [a1]\n", root.display())),
            "{rec}"
        );
        assert!(rec.contains(&format!("pid: {pid}\nsid: {pid}\n")), "{rec}");
        assert!(
            rec.contains("stdin: /dev/null\nstdout: /dev/null\n"),
            "{rec}"
        );
        assert!(
            rec.contains(&format!("stderr: {}\n", log.display())),
            "{rec}"
        );
        assert!(rec.contains("lockfd: unset"), "{rec}");
        // The stderr sink is appended to, and the exited driver leaves no zombie.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let logged = std::fs::read_to_string(&log).unwrap_or_default();
            let gone = !Path::new(&format!("/proc/{pid}")).exists();
            if logged == "driver says hi\n" && gone {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "log {logged:?}, /proc/{pid} still there: {:?}",
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::write(&log, "earlier\n").unwrap();
        assert!(matches!(waker.wake("a1"), Wake::Launched { .. }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&log).unwrap() != "earlier\ndriver says hi\n" {
            assert!(Instant::now() < deadline, "driver.log was not appended to");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A `driver.log` planted as a symlink is not followed (nothing written where it
    /// points), and the driver is launched all the same.
    #[test]
    fn a_planted_log_symlink_is_not_followed_and_the_driver_still_runs() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("ws");
        std::fs::create_dir_all(root.join("inbox/a1")).unwrap();
        std::fs::create_dir_all(root.join("steps/a1")).unwrap();
        let outside = t.path().join("bashrc");
        std::fs::write(&outside, "mine\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("steps/a1/driver.log")).unwrap();
        // And a whole steps/<id> that is a link to elsewhere.
        std::fs::create_dir_all(root.join("inbox/a2")).unwrap();
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("steps/a2")).unwrap();
        let (script, record) = fake_harness(t.path());
        let waker = Waker::new(&root, Some(&script));
        assert!(matches!(waker.wake("a1"), Wake::Launched { .. }));
        assert!(matches!(waker.wake("a2"), Wake::Launched { .. }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while records(&record, Duration::from_secs(10)).len() < 2 {
            assert!(Instant::now() < deadline, "both drivers ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine\n");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        assert!(
            std::fs::symlink_metadata(root.join("steps/a1/driver.log"))
                .unwrap()
                .is_symlink()
        );
    }

    /// Only absolute `PATH` entries are searched, and what is found or given is absolute.
    #[test]
    fn the_harness_is_absolute_and_never_found_through_a_relative_path_entry() {
        let t = tempfile::tempdir().unwrap();
        let (script, _) = fake_harness(t.path());
        let bin = t.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::rename(&script, bin.join(HARNESS_BIN)).unwrap();
        // `bin` named relative to the working directory: a relative entry that does
        // lead to a `litany`, and is skipped all the same.
        let cwd = std::env::current_dir().unwrap();
        let up = "../".repeat(cwd.components().count() - 1);
        let rel_bin = format!("{up}{}", bin.display().to_string().trim_start_matches('/'));
        assert!(Path::new(&rel_bin).join(HARNESS_BIN).is_file(), "{rel_bin}");
        let only_rel = std::ffi::OsString::from(format!(":.:{rel_bin}"));
        assert_eq!(harness_on(&only_rel), None);
        let then_abs = std::ffi::OsString::from(format!("{rel_bin}:{}", bin.display()));
        assert_eq!(harness_on(&then_abs), Some(bin.join(HARNESS_BIN)));
        let given = find_harness(Some(Path::new("some/litany"))).unwrap();
        assert!(
            given.is_absolute() && given.ends_with("some/litany"),
            "{given:?}"
        );
    }

    /// An id that is not one path component is never launched.
    #[test]
    fn a_bad_id_is_not_woken() {
        let t = tempfile::tempdir().unwrap();
        let (script, record) = fake_harness(t.path());
        let waker = Waker::new(t.path(), Some(&script));
        for bad in ["", "..", "a/b"] {
            assert!(matches!(waker.wake(bad), Wake::Failed(_)), "{bad:?}");
        }
        assert!(records(&record, Duration::from_millis(300)).is_empty());
    }

    #[test]
    fn does_not_launch_while_the_lock_is_held() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("ws");
        let (script, record) = fake_harness(t.path());
        let holder = hold_lock(&root.join("inbox/a1"));
        let waker = Waker::new(&root, Some(&script));
        assert_eq!(waker.wake("a1"), Wake::Busy);
        release(holder);
        assert!(records(&record, Duration::from_millis(500)).is_empty());
        assert!(
            !root.join("steps").exists(),
            "nothing launched, nothing logged"
        );
    }

    #[test]
    fn carries_on_without_a_harness() {
        let t = tempfile::tempdir().unwrap();
        let waker = Waker {
            root: t.path().to_path_buf(),
            harness: None,
            warned: AtomicBool::new(false),
            on_launch: std::sync::OnceLock::new(),
        };
        assert_eq!(waker.wake("a1"), Wake::NoHarness);
        assert_eq!(waker.wake("a1"), Wake::NoHarness);
        let missing = Waker::new(t.path(), Some(&t.path().join("nope")));
        assert!(matches!(missing.wake("a1"), Wake::Failed(_)));
    }
}
