//! What the soak runs against: a scratch litany home of real 0.0.15 workspaces driven by
//! `tests/harness/soak-bz`, the home mount over it, and the guards that put the machine
//! back (the mount, the daemon's small `TMPDIR` filesystem, the inotify queue limit)
//! however the run ends.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The crate's root (where `tests/harness/` is).
pub fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A small xorshift generator: the soak needs no more, and a seed replays a run's choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Runs `cmd` to its end; its stdout, or what went wrong.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One workspace of the home and the root agents the soak drives.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Its directory name: its name under the mount.
    pub name: String,
    pub dir: PathBuf,
    pub roots: Vec<String>,
    /// The root the actor stops and starts again, which nothing else writes to: a stop
    /// mid-tool leaves a root litany will not advance again (ARCH §6 in its words), so
    /// the writers' roots are never stopped, and this one is forked from its history
    /// when that happens.
    pub acted: String,
}

/// The scratch litany home (`LITANY_HOME`): config and data root in one.
pub struct Home {
    pub dir: PathBuf,
    pub litany: PathBuf,
    /// The daemon's and the drivers' `TMPDIR`: a small tmpfs the disk fault fills.
    pub tmp: PathBuf,
    pub workspaces: Vec<Workspace>,
}

impl Home {
    /// `litany prime`, the soak adapter, a `quiet` config (no titler) per workspace and
    /// `roots` agents in each, each prompted once.
    pub fn build(
        dir: &Path,
        tmp: &Path,
        litany: &Path,
        workspaces: usize,
        roots: usize,
    ) -> Result<Self, String> {
        let mut home = Self {
            dir: dir.to_path_buf(),
            litany: litany.to_path_buf(),
            tmp: tmp.to_path_buf(),
            workspaces: Vec::new(),
        };
        home.run(&["prime"])?;
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
        let adapter = bin.join("soak-bz");
        std::fs::copy(crate_root().join("tests/harness/soak-bz"), &adapter)
            .map_err(|e| format!("copy soak-bz: {e}"))?;
        std::fs::write(
            dir.join("models.yaml"),
            format!("adapter: {}\n", adapter.display()),
        )
        .map_err(|e| e.to_string())?;
        let strip = bin.join("strip-titler");
        std::fs::write(
            &strip,
            "#!/bin/sh\nset -eu\nf=\"$1/workflow.yaml\"\n\
             grep -v 'dispatch(titler)\\|land_response(title)\\|titler_return\\|user_message' \
             \"$f\" >\"$f.new\"\nmv \"$f.new\" \"$f\"\n",
        )
        .map_err(|e| e.to_string())?;
        run(Command::new("chmod").arg("+x").arg(&strip))?;
        for w in 0..workspaces {
            let path = PathBuf::from(home.run(&["new"])?.trim());
            let ws = path.to_string_lossy().into_owned();
            home.cmd(&["config", &ws, "quiet", "--from", "default"])
                .env("EDITOR", &strip)
                .output()
                .map_err(|e| e.to_string())
                .and_then(|o| {
                    o.status
                        .success()
                        .then_some(())
                        .ok_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned())
                })?;
            let mut ids = Vec::new();
            for r in 0..roots {
                let name = format!("W{w}R{r}");
                let id = home.run(&[
                    "prompt",
                    &ws,
                    "soak:quiet hello",
                    "--name",
                    &name,
                    "--config",
                    "quiet",
                ])?;
                ids.push(id.trim().to_string());
            }
            let acted = home
                .run(&[
                    "prompt",
                    &ws,
                    "soak:quiet hello",
                    "--name",
                    &format!("W{w}S"),
                    "--config",
                    "quiet",
                ])?
                .trim()
                .to_string();
            home.workspaces.push(Workspace {
                acted,
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                dir: path,
                roots: ids,
            });
        }
        Ok(home)
    }

    /// Ends compaction in every workspace, as an operator would: a `litany config`
    /// commit on the `quiet` branch that takes the `compaction:` block out of its
    /// `workflow.yaml`, which every agent follows from its next step boundary (litany
    /// resolves the workflow afresh at each). Each compaction makes a compactor agent
    /// that stays, so until then the workspaces grow all run (crate::load::DISPATCH_CAP).
    pub fn stop_compactions(&self) -> Result<(), String> {
        let editor = self.dir.join("bin").join("no-compaction");
        std::fs::write(
            &editor,
            "#!/bin/sh\nset -eu\nf=\"$1/workflow.yaml\"\n\
             awk '/^compaction:/ { skip = 1; next } skip && /^[^ ]/ { skip = 0 } !skip' \
             \"$f\" >\"$f.new\"\nmv \"$f.new\" \"$f\"\n",
        )
        .map_err(|e| e.to_string())?;
        run(Command::new("chmod").arg("+x").arg(&editor))?;
        for w in &self.workspaces {
            let ws = w.dir.to_string_lossy();
            let declined = run(self.cmd(&["config", &ws, "quiet"]).env("EDITOR", &editor))?;
            let now = run(Command::new("git")
                .arg("--git-dir")
                .arg(w.dir.join("repo.git"))
                .args(["show", "config/quiet:workflow.yaml"]))?;
            if !declined.trim().is_empty() || now.lines().any(|l| l.starts_with("compaction:")) {
                return Err(format!(
                    "compaction still on in {ws} (litany config said {declined:?})"
                ));
            }
        }
        Ok(())
    }

    /// A litany command with this home's environment (and nothing of an enclosing
    /// session's).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.litany);
        c.args(args)
            .env("LITANY_HOME", &self.dir)
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null());
        for v in [
            "XDG_DATA_HOME",
            "XDG_CONFIG_HOME",
            "LITANY_CONV_REPO",
            "LITANY_CONV_BRANCH",
            "LITANY_TOOL_ID",
            "LITANY_LOCK_FD",
        ] {
            c.env_remove(v);
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        run(&mut self.cmd(args))
    }

    /// Every `(workspace, root)` pair.
    pub fn agents(&self) -> Vec<(usize, String)> {
        self.workspaces
            .iter()
            .enumerate()
            .flat_map(|(i, w)| w.roots.iter().map(move |r| (i, r.clone())))
            .collect()
    }
}

/// Pids of processes other than this one with an argument under `dir` (drivers, tools,
/// tails, writers), and the litanyfs daemons serving a mount there.
pub fn processes_under(dir: &Path) -> Vec<(u32, String)> {
    let me = std::process::id();
    let needle = dir.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmd
            .split(|b| *b == 0)
            .any(|a| a.windows(needle.len()).any(|w| w == needle))
        {
            let shown = String::from_utf8_lossy(&cmd).replace('\0', " ");
            found.push((pid, shown.trim().to_string()));
        }
    }
    found
}

/// Inbox directories of the workspaces that some process holds a flock on (an executor
/// at work), from `/proc/locks`, never probed.
pub fn locked_inboxes(workspaces: &[Workspace]) -> usize {
    let locked = flocked();
    workspaces
        .iter()
        .filter_map(|w| std::fs::read_dir(w.dir.join("inbox")).ok())
        .flat_map(|rd| rd.flatten())
        .filter(|e| lock_key(&e.path()).is_some_and(|k| locked.contains(&k)))
        .count()
}

/// Whether agent `id` of the workspace at `dir` is live: an executor holds its inbox's
/// lock.
pub fn is_live(dir: &Path, id: &str) -> bool {
    lock_key(&dir.join("inbox").join(id)).is_some_and(|k| flocked().contains(&k))
}

/// How `/proc/locks` names the file at `path` (`major:minor:inode`, in hex).
fn lock_key(path: &Path) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let dev = m.dev();
    let major = (dev >> 8) & 0xfff;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    Some(format!("{major:02x}:{minor:02x}:{}", m.ino()))
}

/// The files some process holds a `flock` on now, as [`lock_key`] names them.
fn flocked() -> std::collections::HashSet<String> {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&"FLOCK")).then(|| f.get(5).map(|k| k.to_string()))?
        })
        .collect()
}

pub fn is_mounted(mnt: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let needle = mnt.to_string_lossy().replace(' ', "\\040");
    mounts
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(needle.as_str()))
}

/// Mount points at or under `dir`.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let d = dir.to_string_lossy().into_owned();
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&d))
        .map(str::to_string)
        .collect()
}

pub use litanyfs::testing::daemon_pid;

/// Whether `pid` runs (a zombie does not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

/// A process's resident set, in KiB.
pub fn rss_kib(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The home mount: mounted again after each fault, counted by generation, and always
/// unmounted (a dead one detached) when dropped.
pub struct Mount {
    pub bin: PathBuf,
    pub mnt: PathBuf,
    pub log: PathBuf,
    pub source: PathBuf,
    pub litany: PathBuf,
    pub tmp: PathBuf,
    /// `--cache-bytes` for the daemon, when not its default.
    pub cache_bytes: Option<u64>,
    pub nice: Option<i8>,
    /// Bumped at each (re)mount; the threads use it to restart what a remount ends.
    pub generation: AtomicU64,
    /// When the current generation was mounted.
    pub since: Mutex<Instant>,
}

impl Mount {
    pub fn mount(&self) -> Result<(), String> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("mount");
        if let Some(b) = self.cache_bytes {
            cmd.arg("--cache-bytes").arg(b.to_string());
        }
        if let Some(n) = self.nice {
            cmd.arg("--nice").arg(n.to_string());
        }
        let out = cmd
            .arg(&self.source)
            .arg(&self.mnt)
            .arg("--log-file")
            .arg(&self.log)
            .arg("--harness")
            .arg(&self.litany)
            .env("LITANY_HOME", &self.source)
            .env("TMPDIR", &self.tmp)
            .env(
                "RUST_LOG",
                format!("litanyfs=info,{}=debug", litanyfs::testing::CENSUS_TARGET),
            )
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "mount: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        *self.since.lock() = Instant::now();
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub fn pid(&self) -> Option<i32> {
        daemon_pid(&self.mnt)
    }

    /// Sends `sig` to the daemon. SIGTERM: waits for the mount to leave the namespace
    /// (the daemon detaches it, lazily when files are open, and serves those until they
    /// are closed). SIGKILL: waits for the daemon to die, then detaches the dead mount as
    /// an operator would (`fusermount3 -uz`). The daemon's pid.
    pub fn kill(&self, sig: i32) -> Result<i32, String> {
        let pid = self.pid().ok_or("no daemon to kill")?;
        // SAFETY: signalling the daemon serving our own mount.
        unsafe { libc::kill(pid, sig) };
        if sig == libc::SIGKILL {
            if !wait_until(Duration::from_secs(20), || !alive(pid)) {
                return Err(format!("daemon {pid} alive 20 s after SIGKILL"));
            }
            run(Command::new("fusermount3").arg("-uz").arg(&self.mnt))?;
        } else if !wait_until(Duration::from_secs(20), || !is_mounted(&self.mnt)) {
            return Err(format!(
                "{} still mounted 20 s after signal {sig}",
                self.mnt.display()
            ));
        }
        Ok(pid)
    }

    pub fn unmount(&self) -> Result<(), String> {
        let pid = self.pid();
        run(Command::new(&self.bin).arg("unmount").arg(&self.mnt))?;
        if let Some(pid) = pid
            && !wait_until(Duration::from_secs(10), || !alive(pid))
        {
            return Err(format!("daemon {pid} alive 10 s after unmount"));
        }
        Ok(())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new(&self.bin)
                .arg("unmount")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
        }
        if is_mounted(&self.mnt) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mnt)
                .status();
        }
        if let Some(pid) = self.pid() {
            // SAFETY: the daemon of our own mount, which is gone.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A small tmpfs, unmounted when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    pub fn new(dir: &Path, bytes: u64) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=1777"))
            .arg("soak-tmp")
            .arg(dir))?;
        Ok(Self(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

pub const QUEUE_LIMIT: &str = "/proc/sys/fs/inotify/max_queued_events";

/// The inotify queue limit lowered; put back when dropped (and by `scripts/soak`'s trap,
/// should this process die without unwinding).
pub struct LoweredQueue {
    pub was: String,
}

/// The queue limit the run lowers to for a minute.
pub const LOWERED_QUEUE: u32 = 16;
/// The kernel's own `max_queued_events` (`fs/notify/inotify/inotify_user.c`).
const KERNEL_QUEUE: u32 = 16384;

impl LoweredQueue {
    /// Puts back a limit that a run killed during its lowered minute left at
    /// [`LOWERED_QUEUE`] (its `Drop` never ran), so that this run's daemons do not overflow
    /// all run long (it happened: a ninth 30-minute run found 16 and kept it); says so.
    pub fn undo_left_behind() -> Result<(), String> {
        let now = std::fs::read_to_string(QUEUE_LIMIT).map_err(|e| e.to_string())?;
        if now.trim() == LOWERED_QUEUE.to_string() {
            std::fs::write(QUEUE_LIMIT, KERNEL_QUEUE.to_string())
                .map_err(|e| format!("{QUEUE_LIMIT}: {e}"))?;
            eprintln!(
                "soak: {QUEUE_LIMIT} was {LOWERED_QUEUE}, as a killed run leaves it; put back to \
                 {KERNEL_QUEUE}"
            );
        }
        Ok(())
    }

    pub fn lower(to: u32) -> Result<Self, String> {
        let was = std::fs::read_to_string(QUEUE_LIMIT)
            .map_err(|e| e.to_string())?
            .trim()
            .to_string();
        std::fs::write(QUEUE_LIMIT, to.to_string()).map_err(|e| format!("{QUEUE_LIMIT}: {e}"))?;
        Ok(Self { was })
    }
}

impl Drop for LoweredQueue {
    fn drop(&mut self) {
        let _ = std::fs::write(QUEUE_LIMIT, &self.was);
    }
}
