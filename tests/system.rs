//! Mounting the way a system does: through mount(8) and an fstab line (the helper
//! `/sbin/mount.fuse.litanyfs`, and `mount.fuse3`), with the daemon honouring every
//! option it was given, and a `--foreground` mount under a service manager telling it
//! when it is ready and when it stops. Every mount here unmounts when its test ends,
//! even on failure, and the helper a test installs is removed (what was there before
//! put back) when it ends. Needs root, as mount(8) does.
//!
//! With `LITANYFS_INSTALLED=1` (CI, after installing the Debian package) they drive the
//! installed files instead: `/usr/bin/litanyfs`, and the package's own helper, which is
//! checked and never replaced.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::mount::{Mounted, alive, bin, daemon_pid, eventually, installed, is_mounted};
use common::workspace::Ws;
use litanyfs::testing::prereq;
use litanyfs::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";
const B: &str = "20261202T094227Z-0abc0def";

/// Two agents, each with a step record and an inbox.
fn workspace() -> Ws {
    let w = Ws::new(Flavour::Litany);
    for id in [A, B] {
        w.f.agent(id, None, &[]).unwrap();
        w.f.step(id, 1, &[("request.json", b"{}")]).unwrap();
        std::fs::create_dir_all(w.f.root().join("inbox").join(id)).unwrap();
    }
    w
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The daemon's own arguments, as the kernel shows them.
fn daemon_args(m: &Mounted) -> Vec<String> {
    let pid = m.daemon_pid().expect("daemon pid");
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
fn a_daemon_mount_honours_its_options() {
    let w = workspace();
    // The same options as flags, and as `-o` after `litanyfs mount WS MNT`.
    let o = format!("ro,agent={A},threads=2,no_wake");
    let forms: [&[&str]; 2] = [
        &["--read-only", "--agent", A, "--threads", "2", "--no-wake"],
        &["-o", &o],
    ];
    for form in forms {
        let m = Mounted::with_args(w.f.root(), form);
        let args = daemon_args(&m);
        for want in ["--read-only", "--agent", A, "--threads", "2", "--no-wake"] {
            assert!(
                args.iter().any(|a| a == want),
                "{form:?}: {want} missing: {args:?}"
            );
        }
        assert_eq!(names(&m.path("steps")), BTreeSet::from([A.to_string()]));
        let err = std::fs::write(m.path(&format!("inbox/{A}/note")), b"hi").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{form:?}: {err}");
        assert!(names(&w.f.root().join("inbox").join(A)).is_empty());
    }
}

/// A `litanyfs mount --foreground` this test started: when dropped, its mount is
/// detached and the process killed, whatever the test did.
struct Foreground {
    child: Child,
    mnt: PathBuf,
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mnt)
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `mnt` is a mount that answers: another device than its parent, listing the
/// workspace's top level.
fn answers(mnt: &Path) -> bool {
    let parent = std::fs::metadata(mnt.parent().unwrap()).unwrap().dev();
    std::fs::metadata(mnt).is_ok_and(|m| m.dev() != parent)
        && std::fs::read_dir(mnt).is_ok_and(|d| d.count() == litanyfs::tree::TOP_LEVEL.len())
}

/// The next datagram on `sock`, as text.
fn message(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn foreground_tells_the_service_manager_ready_once_the_mount_answers_and_stopping() {
    let w = workspace();
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let socket = t.path().join("notify");
    let sock = UnixDatagram::bind(&socket).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let child = Command::new(bin())
        .args(["mount", "--foreground", "--no-wake"])
        .arg(w.f.root())
        .arg(&mnt)
        .env("NOTIFY_SOCKET", &socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let _fg = Foreground {
        child,
        mnt: mnt.clone(),
    };

    let ready = message(&sock);
    // The mount is there and answers the moment READY=1 arrives: it was sent after.
    assert!(is_mounted(&mnt), "READY=1 before the mount: {ready:?}");
    assert!(answers(&mnt), "READY=1 before the mount answers: {ready:?}");
    let lines: Vec<&str> = ready.lines().collect();
    assert!(lines.contains(&"READY=1"), "{ready:?}");
    let status = format!(
        "STATUS=serving {} at {}",
        w.f.root().display(),
        mnt.display()
    );
    assert!(lines.contains(&status.as_str()), "{ready:?}");

    // SAFETY: signalling the process this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let stopping = message(&sock);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    assert!(
        eventually(Duration::from_secs(5), || !is_mounted(&mnt)),
        "still mounted after SIGTERM"
    );
    assert!(
        eventually(Duration::from_secs(5), || !alive(pid)),
        "still running after SIGTERM"
    );
}

/// Where mount(8) looks for the helper of the type `fuse.litanyfs`.
const HELPER: &str = "/sbin/mount.fuse.litanyfs";
/// Serialises the tests that install [`HELPER`] (mount(8) prefers it to mount.fuse3)
/// within this process; [`HELPER_LOCK_FILE`] does so across processes.
static HELPER_LOCK: Mutex<()> = Mutex::new(());
/// The `flock` that keeps two test runs on one machine (two checkouts, or CI beside a
/// developer) from moving each other's [`HELPER`] aside and leaving one behind.
const HELPER_LOCK_FILE: &str = "/run/lock/litanyfs-test-mount-helper.lock";

/// Holds [`HELPER_LOCK_FILE`] locked until dropped (closing the file releases it).
struct FileLock(#[allow(dead_code)] std::fs::File);

impl FileLock {
    fn take(path: &str) -> Self {
        let dir = Path::new(path).parent().unwrap_or(Path::new("/"));
        let at = if dir.is_dir() {
            PathBuf::from(path)
        } else {
            std::env::temp_dir().join(Path::new(path).file_name().unwrap())
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&at)
            .unwrap_or_else(|e| panic!("{}: {e}", at.display()));
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this owns; it blocks until the other run is done.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(
            rc,
            0,
            "flock {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        );
        Self(file)
    }
}

/// [`HELPER`] leading to the binary under test, for as long as it lives. Testing this
/// build, it is a symlink made here, and whatever was there before is moved aside and put
/// back; testing the installed package, it is the package's, checked and left alone.
struct Helper {
    /// Whether [`HELPER`] was made here (and so is removed when this is dropped).
    made: bool,
    saved: Option<PathBuf>,
    // Released after `drop` has put HELPER back (fields drop after the Drop body).
    _file_lock: FileLock,
    _lock: MutexGuard<'static, ()>,
}

impl Helper {
    /// `None` when the test is to be skipped (see `litanyfs::testing::prereq`): installing
    /// [`HELPER`] and mount(8) itself take root.
    fn install() -> Option<Self> {
        if !(prereq::root() && prereq::programs(&["mount", "umount", "findmnt"])) {
            return None;
        }
        let lock = HELPER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let file_lock = FileLock::take(HELPER_LOCK_FILE);
        if installed() {
            let link = std::fs::read_link(HELPER)
                .unwrap_or_else(|e| panic!("the package's {HELPER}: {e}"));
            assert_eq!(
                std::fs::canonicalize(HELPER).unwrap(),
                std::fs::canonicalize(bin()).unwrap(),
                "{HELPER} -> {} is not {}",
                link.display(),
                bin()
            );
            return Some(Self {
                made: false,
                saved: None,
                _file_lock: file_lock,
                _lock: lock,
            });
        }
        let saved = std::fs::symlink_metadata(HELPER).is_ok().then(|| {
            let aside = PathBuf::from(format!("{HELPER}.litanyfs-test-saved"));
            std::fs::rename(HELPER, &aside).unwrap();
            aside
        });
        std::os::unix::fs::symlink(bin(), HELPER).unwrap();
        Some(Self {
            made: true,
            saved,
            _file_lock: file_lock,
            _lock: lock,
        })
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if !self.made {
            return;
        }
        let _ = std::fs::remove_file(HELPER);
        if let Some(aside) = &self.saved {
            let _ = std::fs::rename(aside, HELPER);
        }
    }
}

/// A mountpoint mount(8) may have mounted: when dropped, it is detached and its daemon
/// ended.
struct SysMount {
    mnt: PathBuf,
}

impl Drop for SysMount {
    fn drop(&mut self) {
        let pid = daemon_pid(&self.mnt);
        if is_mounted(&self.mnt) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mnt)
                .status();
        }
        if let Some(pid) = pid
            && !eventually(Duration::from_secs(5), || !alive(pid))
        {
            // SAFETY: signalling the daemon serving this test's mount.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `findmnt`'s SOURCE, FSTYPE and OPTIONS of `mnt`, if it is mounted.
fn findmnt(mnt: &Path) -> Option<(String, String, String)> {
    let out = run(Command::new("findmnt")
        .args(["-n", "-r", "-o", "SOURCE,FSTYPE,OPTIONS", "--mountpoint"])
        .arg(mnt));
    let line = text(&out.stdout);
    let mut f = line.split_whitespace().map(String::from);
    Some((f.next()?, f.next()?, f.next()?))
}

/// A fresh, empty mountpoint in `t`, with its guard.
fn mountpoint(t: &Path) -> SysMount {
    let mnt = t.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    SysMount { mnt }
}

#[test]
fn an_fstab_line_mounts_with_its_options_and_umount_unmounts() {
    let Some(_helper) = Helper::install() else {
        return;
    };
    let w = workspace();
    let t = tempfile::tempdir().unwrap();
    let m = mountpoint(t.path());
    let ws = w.f.root();
    let fstab = t.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# a comment\n{} {} fuse.litanyfs defaults,agent={A},no_wake,allow_other,\
             view_modes,depositors=65534,nofail,_netdev,noauto,\
             x-systemd.requires=local-fs.target 0 0\n",
            ws.display(),
            m.mnt.display()
        ),
    )
    .unwrap();
    // mount(8) gives its helper no PATH and no HOME: the default log is where a login's
    // would be, the home the password database gives this user (asked of getent, not of
    // the code under test).
    let home = passwd_home_of_euid();
    let name = m
        .mnt
        .to_string_lossy()
        .trim_start_matches('/')
        .replace('/', "_");
    let log = home.join(format!(".local/state/litanyfs/{name}.log"));
    let _ = std::fs::remove_file(&log);
    let _log_gone = Removed(log.clone());

    let out = run(Command::new("mount").arg("--fstab").arg(&fstab).arg(&m.mnt));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(findmnt(&m.mnt).is_some(), "findmnt does not see the mount");
    let (source, fstype, options) = findmnt(&m.mnt).unwrap();
    assert_eq!(source, ws.display().to_string());
    assert_eq!(fstype, "fuse.litanyfs");
    for o in ["nosuid", "nodev", "allow_other", "default_permissions"] {
        assert!(options.split(',').any(|x| x == o), "{o} not in {options}");
    }
    // agent= confines the view and stamps deposits from the agent.
    assert_eq!(names(&m.mnt.join("steps")), BTreeSet::from([A.to_string()]));
    std::fs::write(m.mnt.join(format!("inbox/{B}/note")), b"from A").unwrap();
    let sent = names(&ws.join("inbox").join(B));
    assert!(
        sent.len() == 1 && sent.iter().all(|n| n.starts_with(&format!("{A}-"))),
        "{sent:?}"
    );
    // The agent, running as a user of its own (the doc's fstab line): it reads its
    // records and deposits, as that user; the message is its own while written.
    let mut p = m.mnt.parent();
    while let Some(d) = p {
        let _ = std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755));
        p = d.parent().filter(|d| d != &Path::new("/tmp"));
    }
    let agent = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(format!(
            "cat steps/{A}/001/request.json && echo 'from the agent' > inbox/{B}/n2"
        ))
        .current_dir(&m.mnt)
        .output()
        .unwrap();
    assert!(agent.status.success(), "{}", text(&agent.stderr));
    assert_eq!(agent.stdout, b"{}");
    assert!(eventually(Duration::from_secs(5), || names(
        &ws.join("inbox").join(B)
    )
    .len()
        == 2));
    assert!(
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("mounted and answering")),
        "no log at {}",
        log.display()
    );
    // The line counts as mounted: mount -a leaves it alone.
    let again = run(Command::new("mount").arg("--fstab").arg(&fstab).arg("-a"));
    assert!(again.status.success(), "{}", text(&again.stderr));

    let pid = daemon_pid(&m.mnt).expect("daemon pid");
    let out = run(Command::new("umount").arg(&m.mnt));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(findmnt(&m.mnt).is_none(), "findmnt still sees it");
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
}

/// This user's home directory in the password database, as `getent passwd` reads it.
fn passwd_home_of_euid() -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let out = run(Command::new("getent").arg("passwd").arg(uid.to_string()));
    assert!(out.status.success(), "getent passwd {uid}: {out:?}");
    // name:password:uid:gid:gecos:home:shell
    let line = text(&out.stdout);
    let home = line.trim_end().split(':').nth(5).unwrap_or_default();
    assert!(home.starts_with('/'), "getent passwd {uid}: {line:?}");
    PathBuf::from(home)
}

/// Removes a file when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn mount_fuse3_runs_litanyfs_with_the_o_list() {
    // mount.fuse3 runs `litanyfs WORKSPACE MOUNTPOINT -o OPTIONS` through /bin/sh, found
    // on PATH; mount(8) would give it none, so it is called here directly. The installed
    // package's binary is found on the system's PATH alone; this build's through a
    // directory put first.
    if !prereq::programs(&["mount.fuse3", "umount", "findmnt"]) {
        return;
    }
    let w = workspace();
    let t = tempfile::tempdir().unwrap();
    let m = mountpoint(t.path());
    let mut path = String::from("/usr/sbin:/usr/bin:/sbin:/bin");
    if !installed() {
        let dir = t.path().join("bin");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(bin(), dir.join("litanyfs")).unwrap();
        path = format!("{}:{path}", dir.display());
    }
    let log = t.path().join("daemon.log");
    let out = run(Command::new("mount.fuse3")
        .arg(w.f.root())
        .arg(&m.mnt)
        .args(["-t", "fuse.litanyfs", "-o"])
        .arg(format!("ro,agent={A},log_file={}", log.display()))
        .env_clear()
        .env("PATH", path));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(findmnt(&m.mnt).map(|f| f.1), Some("fuse.litanyfs".into()));
    assert_eq!(names(&m.mnt.join("steps")), BTreeSet::from([A.to_string()]));
    let err = std::fs::write(m.mnt.join(format!("inbox/{B}/note")), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let out = run(Command::new("umount").arg(&m.mnt));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!is_mounted(&m.mnt));
}

#[test]
fn mount_refusals_are_one_line_each_and_mount_nothing() {
    let Some(_helper) = Helper::install() else {
        return;
    };
    let w = workspace();
    let t = tempfile::tempdir().unwrap();
    let m = mountpoint(t.path());
    let full = t.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"").unwrap();
    let missing = t.path().join("no-such-workspace");
    let ws = w.f.root();
    let cases: [(&Path, &Path, &str, String); 3] = [
        (
            ws,
            &m.mnt,
            "ro,bogus",
            "unknown mount option `bogus`".into(),
        ),
        (
            &missing,
            &m.mnt,
            "ro",
            format!("workspace {} does not exist", missing.display()),
        ),
        (
            ws,
            &full,
            "ro",
            format!("mountpoint {} is not empty", full.display()),
        ),
    ];
    for (source, target, options, want) in cases {
        let out = run(Command::new("mount")
            .args(["-t", "fuse.litanyfs", "-o", options])
            .arg(source)
            .arg(target));
        let err = text(&out.stderr);
        assert!(
            !out.status.success(),
            "{options} {source:?} {target:?} mounted"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("litanyfs: ") && err.contains(&want),
            "{err}"
        );
        assert!(!is_mounted(target), "{target:?} is mounted");
        assert!(findmnt(target).is_none());
    }
}

#[test]
fn version_names_what_the_kernel_granted_at_the_last_mount() {
    let w = workspace();
    let state = tempfile::tempdir().unwrap();
    let version = || {
        let out = run(Command::new(bin())
            .arg("--version")
            .env("XDG_STATE_HOME", state.path()));
        assert!(out.status.success());
        text(&out.stdout)
    };
    let before = version();
    assert!(before.starts_with(&format!("litanyfs {}\n", env!("LITANYFS_VERSION"))));
    assert!(before.contains("no mount logged in"), "{before}");
    let log = state.path().join("litanyfs/a.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let t = tempfile::tempdir().unwrap();
    let m = mountpoint(t.path());
    let out = run(Command::new(bin())
        .arg("mount")
        .arg("--log-file")
        .arg(&log)
        .arg(w.f.root())
        .arg(&m.mnt));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after = version();
    assert!(after.contains(&log.display().to_string()), "{after}");
    assert!(after.contains("kernel FUSE protocol 7."), "{after}");
    assert!(after.contains("granted "), "{after}");
}
