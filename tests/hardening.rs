//! The boundaries the mount holds on a real mount: the agent-confined view, hostile
//! backing content, symlinks, auto-unmount, allow-other permissions, resource bounds and
//! a slow reader that must not stall the others.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::mount::{Mounted, alive, eventually, is_mounted};
use common::workspace::Ws;
use litanyfs::fixture::Fixture;
use litanyfs::testing::wait::wait_for;
use litanyfs::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";
const B: &str = "20261202T094227Z-0abc0def";
const SECRET: &str = "b-secret-7f3a";

fn workspace() -> Ws {
    let w = Ws::new(Flavour::Litany);
    let f = &w.f;
    f.agent(A, Some("Alpha"), &[]).unwrap();
    f.agent(B, Some("Beta"), &[]).unwrap();
    for (id, word) in [(A, "a-public"), (B, SECRET)] {
        let out = Fixture::tool_output(&format!("{word}\n").repeat(2000), word, 0);
        f.step(
            id,
            1,
            &[
                ("request.json", word.as_bytes()),
                ("tools/toolu_1/output.json", &out),
            ],
        )
        .unwrap();
        f.inbox_file(
            id,
            "user-001.md",
            format!("---\nfrom: user\n---\n{word}").as_bytes(),
        )
        .unwrap();
    }
    w
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn enoent(p: &Path) {
    let e = std::fs::symlink_metadata(p).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{}", p.display());
    assert!(std::fs::read(p).is_err(), "{}", p.display());
}

#[test]
fn the_agent_view_shows_only_its_own_records_by_any_path() {
    let w = workspace();
    // A relative symlink in A's own records that points at B's: followed inside the mount.
    std::os::unix::fs::symlink(
        format!("../{B}/001/request.json"),
        w.f.root().join(format!("steps/{A}/peek")),
    )
    .unwrap();
    let m = Mounted::with_args(w.f.root(), &["--agent", A, "--no-wake"]);
    assert_eq!(names(&m.path("steps")), BTreeSet::from([A.to_string()]));
    for p in [
        format!("steps/{B}"),
        format!("steps/{B}/001"),
        format!("steps/{B}/001/request.json"),
        format!("steps/{B}/001/tools/toolu_1/output.json"),
        format!("steps/{B}/001/tools/toolu_1/output.json#stdout@0"),
        format!("steps/{B}/001/tools/toolu_1/stdout"),
        format!("steps/{A}/../{B}/001/request.json"),
        format!("steps/{A}/peek"),
        format!("inbox/{B}/user-001.md"),
    ] {
        if p.ends_with("peek") {
            // The link itself is shown as a link; what it names is not reachable.
            assert!(
                std::fs::symlink_metadata(m.path(&p))
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
            assert!(std::fs::read(m.path(&p)).is_err());
        } else {
            enoent(&m.path(&p));
        }
    }
    // Its own records and pages are all there.
    assert_eq!(
        std::fs::read(m.path(&format!("steps/{A}/001/request.json"))).unwrap(),
        b"a-public"
    );
    assert!(
        std::fs::read(m.path(&format!("steps/{A}/001/tools/toolu_1/output.json#stdout@0")))
            .unwrap()
            .starts_with(b"a-public")
    );
    // Other inboxes are listed (to write to) but show nothing; its own shows its deposits.
    assert!(names(&m.path(&format!("inbox/{B}"))).is_empty());
    assert_eq!(
        names(&m.path(&format!("inbox/{A}"))),
        BTreeSet::from(["user-001.md".to_string()])
    );
    // No tool finds B's secret anywhere under the mount.
    let grep = Command::new("grep")
        .args(["-r", "-l", SECRET])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&grep.stdout)
    );
    let find = Command::new("find").arg(m.path("steps")).output().unwrap();
    assert!(!String::from_utf8_lossy(&find.stdout).contains(B));
    // Deposits are stamped from the agent, whatever it writes.
    std::fs::write(
        m.path(&format!("inbox/{B}/hello")),
        "---\nfrom: user\n---\nhi",
    )
    .unwrap();
    let real: Vec<_> = std::fs::read_dir(w.f.inbox(B))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let ours = real
        .iter()
        .find(|n| n.starts_with(A))
        .expect("a deposit from A");
    let body = std::fs::read_to_string(w.f.inbox(B).join(ours)).unwrap();
    assert!(
        body.starts_with(&format!("---\nfrom: {A}\nfrom_name: Alpha\n")),
        "{body}"
    );
    // --agent with a different --sender, or an unknown agent, is refused at mount.
    let t = tempfile::tempdir().unwrap();
    for args in [vec!["--agent", A, "--sender", B], vec!["--agent", "nobody"]] {
        let mut a: Vec<&OsStr> = vec![
            "mount".as_ref(),
            w.f.root().as_os_str(),
            t.path().as_os_str(),
        ];
        a.extend(args.iter().map(OsStr::new));
        let out = common::mount::litanyfs(&a);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| l.starts_with("litanyfs:"))
                .count(),
            1
        );
    }
}

#[test]
fn hostile_backing_content_is_served_or_refused_never_fatal() {
    let w = workspace();
    let steps = w.f.root().join(format!("steps/{A}"));
    let odd: Vec<Vec<u8>> = vec![
        b"with space".to_vec(),
        b"new\nline".to_vec(),
        vec![b'n', 0xff, 0xfe, b'x'],
        vec![b'l'; 255],
    ];
    for name in &odd {
        let dir = steps.join(OsStr::from_bytes(name));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("request.json"), name).unwrap();
    }
    let tools = steps.join("002/tools");
    for (tool, body) in [
        ("trunc", &b"{\"stdout\": \"abc"[..]),
        ("bad", b"not json"),
        ("empty", b""),
    ] {
        std::fs::create_dir_all(tools.join(tool)).unwrap();
        std::fs::write(tools.join(tool).join("output.json"), body).unwrap();
    }
    std::fs::write(steps.join("002/staging.json"), b"{\"content\":[").unwrap();
    std::fs::write(steps.join("002/leftover.tmp"), b"x").unwrap();
    let huge = steps.join("003");
    std::fs::create_dir(&huge).unwrap();
    for i in 0..10_000 {
        std::fs::write(huge.join(format!("f{i:05}")), b"").unwrap();
    }
    let m = Mounted::with_args(w.f.root(), &["--no-wake"]);
    let base = m.path(&format!("steps/{A}"));
    for name in &odd {
        let p = base.join(OsStr::from_bytes(name)).join("request.json");
        assert_eq!(std::fs::read(&p).unwrap(), *name);
    }
    assert_eq!(names(&base.join("003")).len(), 10_000);
    let listed = names(&base.join("002"));
    assert!(
        listed.contains("staging.json") && !listed.contains("leftover.tmp"),
        "{listed:?}"
    );
    for tool in ["trunc", "bad", "empty"] {
        let dir = base.join("002/tools").join(tool);
        assert_eq!(
            names(&dir),
            BTreeSet::from(["output.json".to_string()]),
            "no streams for an unreadable record"
        );
        enoent(&dir.join("output.json#stdout@0"));
        assert!(std::fs::read(dir.join("output.json")).is_ok());
    }
    // A directory vanishing and reappearing while it is listed.
    let churn = steps.join("004");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let c2 = churn.clone();
    let t = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = std::fs::create_dir(&c2);
            for i in 0..20 {
                let _ = std::fs::write(c2.join(format!("{i}")), b"x");
            }
            let _ = std::fs::remove_dir_all(&c2);
        }
    });
    for _ in 0..300 {
        if let Ok(rd) = std::fs::read_dir(base.join("004")) {
            for e in rd.flatten() {
                let _ = std::fs::read(e.path());
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    t.join().unwrap();
    // Still alive and answering.
    assert!(m.path("steps").exists());
    assert!(m.daemon_pid().is_some_and(alive));
    assert!(!m.log_text().contains("panicked"), "{}", m.log_text());
}

#[test]
fn symlinks_are_shown_as_links_and_never_served_as_files() {
    let w = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"outside").unwrap();
    let steps = w.f.root().join(format!("steps/{A}"));
    std::os::unix::fs::symlink(outside.path().join("secret"), steps.join("abs-link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), steps.join("dir-link")).unwrap();
    let m = Mounted::with_args(w.f.root(), &["--no-wake"]);
    let link = m.path(&format!("steps/{A}/abs-link"));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        outside.path().join("secret")
    );
    // A directory swapped for a symlink after it was looked up is shown as what it now
    // is, a symlink: the daemon serves nothing through it (following a link is the
    // reader's kernel's business, as on any filesystem).
    let d = steps.join("001");
    let seen = m.path(&format!("steps/{A}/001"));
    assert!(std::fs::symlink_metadata(&seen).unwrap().is_dir());
    std::fs::rename(&d, steps.join("001-moved")).unwrap();
    std::os::unix::fs::symlink(outside.path(), &d).unwrap();
    assert!(eventually(Duration::from_secs(3), || {
        std::fs::symlink_metadata(&seen).is_ok_and(|m| m.file_type().is_symlink())
    }));
    assert_eq!(std::fs::read_link(&seen).unwrap(), outside.path());
    assert!(!m.log_text().contains("outside"), "{}", m.log_text());
}

#[test]
fn auto_unmount_clears_the_mount_when_the_daemon_dies() {
    let w = workspace();
    // With fusermount3's auto_unmount a dying daemon raced it, about one SIGKILL in
    // twenty on a busy machine: so do twenty here, four at a time, every CPU kept busy.
    let done = std::sync::atomic::AtomicBool::new(false);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..cpus {
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let dying: Vec<_> = (0..4)
            .map(|t| {
                let root = w.f.root();
                s.spawn(move || {
                    for round in 0..5 {
                        kill_and_see_it_cleared(root, &format!("{t}.{round}"));
                    }
                })
            })
            .collect();
        let results: Vec<_> = dying.into_iter().map(|h| h.join()).collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

#[test]
fn the_daemon_keeps_nothing_its_caller_held_open() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let w = workspace();
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two new descriptors, which the OwnedFds take over; the write
    // end is left without close-on-exec, so `litanyfs mount` and its daemon inherit it,
    // as they would any descriptor their caller holds.
    let (read, write) = unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), 0), 0);
        assert_eq!(libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC), 0);
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    let m = Mounted::with_args(w.f.root(), &["--no-wake"]);
    drop(write);
    // The caller's pipe ends once what it started is done with it, and the daemon stays:
    // it must not hold it, or whoever reads that pipe waits as long as the mount lives.
    let mut p = libc::pollfd {
        fd: read.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, 5000) };
    assert!(
        n == 1 && p.revents & libc::POLLHUP != 0,
        "the pipe's write end is still held (poll {n}, revents {:#x})",
        p.revents
    );
    assert!(m.daemon_pid().is_some_and(alive));
    assert!(m.path("steps").is_dir());
}

#[test]
fn auto_unmount_leaves_a_clean_unmount_and_the_next_mount_alone() {
    let w = workspace();
    let first = Mounted::with_args(w.f.root(), &["--auto-unmount", "--no-wake"]);
    let mnt = first.mnt.clone();
    let sentinel = standing_by(&mnt);
    assert_eq!(sentinel.len(), 1, "{sentinel:?}");
    let pid: i32 = sentinel[0].split(' ').next().unwrap().parse().unwrap();
    // Held still until the place is mounted again, so that it finds its daemon gone and
    // a live mount where the dead one would be, and must leave it be.
    // SAFETY: signals to the sentinel this test's mount started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let resume = Resume(pid);
    let out = common::mount::litanyfs(&[OsStr::new("unmount"), mnt.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let again = common::mount::litanyfs(&[
        OsStr::new("mount"),
        OsStr::new("--no-wake"),
        w.f.root().as_os_str(),
        mnt.as_os_str(),
    ]);
    assert!(again.status.success(), "{again:?}");
    drop(resume);
    assert!(
        eventually(Duration::from_secs(5), || standing_by(&mnt).is_empty()),
        "the first sentinel stayed: {:?}",
        standing_by(&mnt)
    );
    assert!(is_mounted(&mnt), "the sentinel unmounted the next mount");
    assert!(std::fs::read_dir(mnt.join("steps")).unwrap().count() > 0);
    // Unmounts what is mounted there now, the second mount, as it would on a failure.
    drop(first);
}

/// Lets a stopped process go on when dropped, even when the test fails first.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: SIGCONT to the process this test stopped.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// The processes standing by the mount at `mnt` other than its daemon (the sentinel):
/// each as its pid, its command line and its state.
fn standing_by(mnt: &Path) -> Vec<String> {
    let mnt = mnt.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            let by_mount = args.contains(&mnt) && !args.contains(&b"--foreground".as_slice());
            let state = std::fs::read_to_string(e.path().join("status"))
                .ok()?
                .lines()
                .find(|l| l.starts_with("State:"))?
                .to_string();
            by_mount.then(|| {
                let pid = e.file_name().to_string_lossy().into_owned();
                format!("{pid} {} {state}", String::from_utf8_lossy(&cmd))
            })
        })
        .collect()
}

/// Mounts with `--auto-unmount`, uses the mount, SIGKILLs the daemon, and asserts that
/// the mount goes and nothing is left standing by it.
fn kill_and_see_it_cleared(root: &Path, round: &str) {
    let m = Mounted::with_args(root, &["--auto-unmount", "--no-wake"]);
    // Used first, as any mount is: fusermount3's own auto_unmount looks for a dead mount
    // by opening its root, and once the kernel stops asking the daemon to open
    // directories (after the first listing) that open succeeds on a dead mount.
    assert!(std::fs::read_dir(&m.mnt).unwrap().count() > 0);
    assert!(std::fs::read_dir(m.path("steps")).unwrap().count() > 0);
    let pid = m.daemon_pid().unwrap();
    let standing = || standing_by(&m.mnt);
    let sentinel = standing();
    assert!(
        sentinel.len() == 1 && sentinel[0].contains("sentinel"),
        "round {round}: {sentinel:?}"
    );
    // It holds the standard three and its pipe, nothing of the daemon's: a /dev/fuse
    // descriptor there would keep the dead connection up.
    let held: Vec<String> = std::fs::read_dir(format!(
        "/proc/{}/fd",
        sentinel[0].split(' ').next().unwrap()
    ))
    .unwrap()
    .flatten()
    .map(|e| {
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        format!("{} {}", e.file_name().to_string_lossy(), target.display())
    })
    .collect();
    assert_eq!(held.len(), 4, "round {round}: {held:?}");
    assert!(
        held.iter().filter(|h| h.contains("pipe:")).count() == 1,
        "round {round}: {held:?}"
    );
    // SAFETY: the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let cleared = eventually(Duration::from_secs(5), || !is_mounted(&m.mnt));
    assert!(
        cleared,
        "round {round}: still mounted after SIGKILL with --auto-unmount: daemon {pid} {}; \
         standing by: {:?}",
        if alive(pid) { "still running" } else { "gone" },
        standing()
    );
    assert!(
        eventually(Duration::from_secs(5), || standing().is_empty()),
        "round {round}: left behind: {:?}",
        standing()
    );
}

#[test]
fn allow_other_lets_others_read_and_the_kernel_enforce_the_modes() {
    // Acting as another user takes root.
    if !(litanyfs::testing::prereq::root() && litanyfs::testing::prereq::programs(&["setpriv"])) {
        return;
    }
    let w = workspace();
    let m = Mounted::with_args(w.f.root(), &["--allow-other", "--no-wake"]);
    let opts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = opts
        .lines()
        .find(|l| l.contains(m.mnt.to_str().unwrap()))
        .unwrap()
        .to_string();
    assert!(
        line.contains("default_permissions") && line.contains("allow_other"),
        "{line}"
    );
    let as_nobody = |cmd: &str| {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                cmd,
            ])
            .output()
            .unwrap()
    };
    // The tempdir holding the mountpoint must be traversable by others for this test.
    let mut p = m.mnt.parent();
    while let Some(d) = p {
        let _ = std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755));
        p = d.parent().filter(|d| d != &Path::new("/tmp"));
    }
    let read = as_nobody(&format!(
        "cat '{}'",
        m.path(&format!("steps/{A}/001/request.json")).display()
    ));
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert_eq!(read.stdout, b"a-public");
    let write = as_nobody(&format!(
        "echo hi > '{}'",
        m.path(&format!("inbox/{A}/note")).display()
    ));
    assert!(!write.status.success());
    assert!(
        String::from_utf8_lossy(&write.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&write.stderr)
    );
    // Root (the owner) still deposits.
    std::fs::write(m.path(&format!("inbox/{A}/note")), b"from root").unwrap();
    // Acting is the owner's alone: another user can neither command an agent, nor read
    // its ctl, nor start a conversation.
    let ctl = m.path(&format!("steps/{A}/ctl"));
    assert!(ctl.exists(), "A has a ctl");
    for cmd in [
        format!("echo stop > '{}'", ctl.display()),
        format!("cat '{}'", ctl.display()),
        format!("echo hi > '{}'", m.path("new/Intruder").display()),
        format!("ls '{}'", m.path("new").display()),
    ] {
        let out = as_nobody(&cmd);
        assert!(!out.status.success(), "{cmd}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn floods_of_garbage_lookups_do_not_grow_memory() {
    let w = workspace();
    let m = Mounted::with_args(w.f.root(), &["--no-wake"]);
    let pid = m.daemon_pid().unwrap();
    let base = m.path(&format!("steps/{A}/001"));
    for i in 0..2_000 {
        let _ = std::fs::metadata(base.join(format!("warmup-{i}")));
    }
    let before = rss_kib(pid);
    for i in 0..50_000 {
        let _ = std::fs::metadata(base.join(format!("garbage-{i}")));
        let _ = std::fs::metadata(base.join(format!("tools/toolu_1/output.json#stdout@x{i}")));
    }
    let after = rss_kib(pid);
    assert!(
        after < before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB over 100k garbage lookups"
    );
}

/// A bind mount, detached when dropped.
struct Bind(std::path::PathBuf);

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A stopped process, continued when dropped.
struct Stopped(i32);

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: continuing the daemon this test stopped.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Whether every thread of `pid` is stopped by a signal (state `T` in its stat).
fn all_stopped(pid: i32) -> bool {
    let states: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|t| std::fs::read_to_string(t.path().join("stat")).unwrap_or_default())
        .map(|stat| {
            // The state follows the parenthesised name, which may hold spaces.
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        .collect();
    !states.is_empty() && states.iter().all(|s| *s == Some('T'))
}

/// The threads of `pid` that wait for a FUSE filesystem's answer: (tid, name).
fn waiting_on_fuse(pid: i32) -> Vec<(String, String)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|t| {
            let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
            awaits_fuse_answer(&read("wchan"), &read("stack"))
        })
        .map(|t| {
            let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            (
                t.file_name().to_string_lossy().into_owned(),
                name.trim_end().to_string(),
            )
        })
        .collect()
}

/// Whether a thread with this wchan and kernel stack sleeps until a FUSE daemon
/// answers. The caller sleeps in fs/fuse/dev.c's `request_wait_answer`, which a kernel
/// may inline into `__fuse_request_send` or `__fuse_simple_request`, so wchan names
/// whichever of them is left; a daemon's own idle thread sleeps in `fuse_dev_do_read`,
/// which is not a wait for an answer. The stack (root only, where the kernel keeps it)
/// is the second witness when wchan says nothing.
fn awaits_fuse_answer(wchan: &str, stack: &str) -> bool {
    const WAITS: [&str; 3] = [
        "request_wait_answer",
        "__fuse_request_send",
        "__fuse_simple_request",
    ];
    let wchan = wchan.trim();
    WAITS.contains(&wchan)
        || stack
            .lines()
            .take_while(|l| !l.contains("fuse_dev_do_read"))
            .any(|l| WAITS.iter().any(|w| l.contains(w)))
}

/// Every thread of `pid`: name, wchan and kernel stack, for a failure's message.
fn threads_of(pid: i32) -> String {
    let mut out = String::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
        out += &format!(
            "{} {} wchan={}\n{}",
            t.file_name().to_string_lossy(),
            read("comm").trim_end(),
            read("wchan"),
            read("stack")
        );
    }
    out
}

#[test]
fn a_slow_reader_does_not_stall_a_listing_in_another_shell() {
    // A read the daemon cannot finish until the test lets it: the record lives on a
    // second litanyfs mount, bind-mounted into the first one's backing step, whose daemon
    // the test stops. While the first daemon waits on it for the reader, listings in
    // another shell must be answered; once the second daemon goes on, so does the read.
    if !(litanyfs::testing::prereq::root() && litanyfs::testing::prereq::programs(&["mount"])) {
        return;
    }
    const DEADLINE: Duration = Duration::from_secs(20);
    let inner = Ws::new(Flavour::Litany);
    inner.f.agent(B, None, &[]).unwrap();
    let rec = Fixture::tool_output(&"x".repeat(10_000), "", 0);
    inner
        .f
        .step(B, 1, &[("tools/toolu_big/output.json", &rec)])
        .unwrap();
    let slow_fs = Mounted::with_args(inner.f.root(), &["--no-wake"]);
    let w = workspace();
    let step = w.f.root().join(format!("steps/{A}/009"));
    std::fs::create_dir_all(&step).unwrap();
    let bound = Command::new("mount")
        .arg("--bind")
        .arg(slow_fs.path(&format!("steps/{B}/001")))
        .arg(&step)
        .status()
        .unwrap();
    assert!(bound.success(), "mount --bind");
    let _bind = Bind(step.clone());
    let m = Mounted::with_args(w.f.root(), &["--no-wake"]);
    let page = m.path(&format!(
        "steps/{A}/009/tools/toolu_big/output.json#stdout@4096"
    ));
    let daemon = m.daemon_pid().unwrap();
    let slow_daemon = slow_fs.daemon_pid().unwrap();
    // SAFETY: stopping the daemon of this test's own second mount.
    assert_eq!(unsafe { libc::kill(slow_daemon, libc::SIGSTOP) }, 0);
    let stopped = Stopped(slow_daemon);
    // kill(2) returns before every thread has stopped: wait until they all have.
    wait_for(
        || all_stopped(slow_daemon),
        DEADLINE,
        "every thread of the second daemon to stop",
    );
    let slow = std::thread::spawn(move || std::fs::read(&page).map(|b| b.len()));
    // A request thread (fuser names them `fuser-<n>`) waits on the stopped mount: the
    // slow read is in the daemon. (Its events thread may wait there too.)
    if !litanyfs::testing::wait::within(DEADLINE, || {
        waiting_on_fuse(daemon)
            .iter()
            .any(|(_, name)| name.starts_with("fuser-"))
    }) {
        panic!(
            "timed out after {DEADLINE:?} waiting for a request thread of the daemon to \
             wait on the stopped mount; the daemon's threads:\n{}",
            threads_of(daemon)
        );
    }
    let (b, marks) = (m.path(&format!("steps/{B}/001")), m.path("marks"));
    let listing = std::thread::spawn(move || (names(&b), names(&marks)));
    wait_for(
        || listing.is_finished(),
        DEADLINE,
        "the listings in another shell while the slow read is held",
    );
    let (listed, marks) = listing.join().unwrap();
    assert!(listed.contains("request.json") && marks.is_empty());
    assert!(
        !slow.is_finished(),
        "the slow read ended with its source stopped"
    );
    drop(stopped);
    assert_eq!(slow.join().unwrap().unwrap(), 4096);
}

/// A stand-in harness: records its argv and working directory in `<record>.<pid>` and
/// says one line on stderr. Returns (script, record prefix).
fn recording_harness(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let record = dir.join("harness-record");
    let script = dir.join("fake-litany");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             out={record}.$$\n\
             {{\n\
             printf 'argv:'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo\n\
             echo \"cwd: $(pwd)\"\n\
             echo \"env: ${{LITANYFS_READY_PIPE-}}${{NOTIFY_SOCKET-}}\"\n\
             }} > $out.tmp && mv $out.tmp $out\n\
             echo 'driver says hi' >&2\n",
            record = record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (script, record)
}

/// What the stand-in harness recorded, waiting up to 10 s for `n` launches.
fn harness_records(record: &Path, n: usize) -> Vec<String> {
    let dir = record.parent().unwrap();
    let prefix = format!("{}.", record.file_name().unwrap().to_str().unwrap());
    let mut found = Vec::new();
    eventually(Duration::from_secs(10), || {
        found = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                (name.starts_with(&prefix) && !name.ends_with(".tmp")).then_some(name)
            })
            .map(|n| std::fs::read_to_string(dir.join(n)).unwrap())
            .collect();
        found.len() >= n
    });
    found
}

#[test]
fn a_planted_driver_log_symlink_is_not_followed_and_the_wake_is_logged() {
    let w = workspace();
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("bashrc");
    std::fs::write(&outside, "mine\n").unwrap();
    let log = w.f.root().join(format!("steps/{A}/driver.log"));
    std::os::unix::fs::symlink(&outside, &log).unwrap();
    let (script, record) = recording_harness(t.path());
    let m = Mounted::with_args(w.f.root(), &["--harness", script.to_str().unwrap()]);
    std::fs::write(m.path(&format!("inbox/{A}/note")), "wake up\n").unwrap();
    let recs = harness_records(&record, 1);
    assert_eq!(recs.len(), 1, "the driver was launched: {}", m.log_text());
    assert!(
        eventually(Duration::from_secs(10), || m
            .log_text()
            .contains("driver says hi")),
        "the driver's stderr reached the daemon's log: {}",
        m.log_text()
    );
    let text = m.log_text();
    assert!(
        text.contains(&format!("{}: not used", log.display())),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine\n");
    assert!(std::fs::symlink_metadata(&log).unwrap().is_symlink());
}

#[test]
fn an_agent_named_like_an_option_is_woken_as_an_id_in_a_clean_launch() {
    const X: &str = "--x";
    let w = workspace();
    w.f.agent(X, None, &[]).unwrap();
    std::fs::create_dir_all(w.f.inbox(X)).unwrap();
    let t = tempfile::tempdir().unwrap();
    let (script, record) = recording_harness(t.path());
    let m = Mounted::with_env(
        w.f.root(),
        &["--harness", script.to_str().unwrap()],
        &[("NOTIFY_SOCKET", OsStr::new("/nonexistent/notify"))],
    );
    assert!(
        m.log_text()
            .contains(&format!("waking agents with {}", script.display())),
        "{}",
        m.log_text()
    );
    std::fs::write(m.path(&format!("inbox/{X}/note")), "hi\n").unwrap();
    let recs = harness_records(&record, 1);
    let ws = std::fs::canonicalize(w.f.root()).unwrap();
    // The id comes after `--`, the driver runs in `/`, and neither the daemon's
    // readiness pipe nor its service manager's socket reaches it.
    assert_eq!(
        recs,
        [format!(
            "argv: [advance] [--] [{}] [{X}]\ncwd: /\nenv: \n",
            ws.display()
        )],
        "{}",
        m.log_text()
    );
}

/// Sets every directory of `root` (itself included) to `dir` and every file to `file`.
fn chmod_tree(root: &Path, dir: u32, file: u32) {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(root).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            chmod_tree(&e.path(), dir, file);
        } else if t.is_file() {
            std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(file)).unwrap();
        }
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(dir)).unwrap();
}

/// `cmd` run by `sh` as user `uid` (and group `uid`), with no supplementary groups.
fn as_user(uid: u32, cmd: &str) -> std::process::Output {
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "sh",
            "-c",
            cmd,
        ])
        .output()
        .unwrap()
}

/// Lets others reach the mountpoint `m` (the test's temporary directories are private).
fn reachable(m: &Mounted) {
    let mut p = m.mnt.parent();
    while let Some(d) = p {
        let _ = std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755));
        p = d.parent().filter(|d| d != &Path::new("/tmp"));
    }
}

fn mode_of(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.mode() & 0o7777, m.uid())
}

#[test]
fn allow_other_shows_no_more_than_a_private_workspace_grants() {
    let w = workspace();
    w.f.blob_mark("returned", A, b"done\n").unwrap();
    chmod_tree(w.f.root(), 0o700, 0o600);
    let m = Mounted::with_args(w.f.root(), &["--allow-other", "--no-wake"]);
    reachable(&m);
    // Each node shows the view's bits masked by what its file (or, for what is derived
    // from git or the whole workspace, the workspace) grants: its owner's alone.
    for (path, want) in [
        (String::new(), 0o500),
        ("steps".into(), 0o500),
        (format!("steps/{A}/001"), 0o500),
        (format!("steps/{A}/001/request.json"), 0o400),
        (format!("steps/{A}/001/tools/toolu_1/output.json"), 0o400),
        (format!("steps/{A}/001/tools/toolu_1/stdout"), 0o400),
        (
            format!("steps/{A}/001/tools/toolu_1/output.json#stdout@0"),
            0o400,
        ),
        (format!("steps/{A}/transcript.md"), 0o400),
        (format!("agents/{A}"), 0o500),
        (format!("agents/{A}/name"), 0o400),
        (format!("marks/returned/{A}"), 0o400),
        (format!("inbox/{A}"), 0o700),
        (format!("inbox/{A}/user-001.md"), 0o400),
        ("status".into(), 0o400),
    ] {
        assert_eq!(mode_of(&m.path(&path)), (want, 0), "{path}");
    }
    // Another user reads and writes nothing.
    for cmd in [
        format!(
            "cat '{}'",
            m.path(&format!("steps/{A}/001/request.json")).display()
        ),
        format!("ls '{}'", m.mnt.display()),
        format!("cat '{}'", m.path("status").display()),
        format!(
            "echo hi > '{}'",
            m.path(&format!("inbox/{A}/note")).display()
        ),
    ] {
        let out = as_user(65534, &cmd);
        assert!(!out.status.success(), "{cmd}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The owner still reads and deposits; a draft is its writer's, 0600.
    assert_eq!(
        std::fs::read(m.path(&format!("steps/{A}/001/request.json"))).unwrap(),
        b"a-public"
    );
    let draft = m.path(&format!("inbox/{A}/note"));
    let mut f = std::fs::File::create(&draft).unwrap();
    std::io::Write::write_all(&mut f, b"from the owner").unwrap();
    assert_eq!(mode_of(&draft), (0o600, 0));
    drop(f);
    assert!(eventually(Duration::from_secs(5), || names(&w.f.inbox(A))
        .contains("user-002.md")));
}

#[test]
fn view_modes_show_the_fixed_modes_for_a_shared_setup() {
    let w = workspace();
    chmod_tree(w.f.root(), 0o700, 0o600);
    let m = Mounted::with_args(w.f.root(), &["--allow-other", "--view-modes", "--no-wake"]);
    reachable(&m);
    assert_eq!(mode_of(&m.mnt).0, 0o555);
    assert_eq!(mode_of(&m.path(&format!("inbox/{A}"))).0, 0o755);
    let rec = m.path(&format!("steps/{A}/001/request.json"));
    assert_eq!(mode_of(&rec).0, 0o444);
    let out = as_user(65534, &format!("cat '{}'", rec.display()));
    assert_eq!(
        out.stdout,
        b"a-public",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_depositor_writes_messages_into_a_private_workspace_and_reads_nothing() {
    let w = workspace();
    chmod_tree(w.f.root(), 0o700, 0o600);
    let m = Mounted::with_args(
        w.f.root(),
        &["--allow-other", "--no-wake", "--depositors", "65534:65532"],
    );
    reachable(&m);
    assert_eq!(mode_of(&m.mnt).0, 0o501);
    assert_eq!(mode_of(&m.path("inbox")).0, 0o501);
    assert_eq!(mode_of(&m.path(&format!("inbox/{A}"))).0, 0o1703);
    let note = m.path(&format!("inbox/{A}/note"));
    // The depositor's draft is its own while written, and its message lands whole.
    let out = as_user(
        65534,
        &format!(
            "exec 3> '{n}' && printf 'from an agent' >&3 && stat -c '%a %u' '{n}' && exec 3>&-",
            n = note.display()
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "600 65534\n");
    assert!(eventually(Duration::from_secs(5), || names(&w.f.inbox(A))
        .contains("user-002.md")));
    let sent = std::fs::read_to_string(w.f.inbox(A).join("user-002.md")).unwrap();
    assert!(sent.ends_with("\n---\nfrom an agent"), "{sent}");
    // It reads nothing the workspace does not grant it.
    let out = as_user(
        65534,
        &format!(
            "cat '{}'",
            m.path(&format!("inbox/{A}/user-001.md")).display()
        ),
    );
    assert!(!out.status.success());
    // Nor can another user write to the sent message's name, which stays its writer's.
    let out = as_user(65533, &format!("echo hi > '{}'", note.display()));
    assert!(!out.status.success());
    // A user not named is refused, and the refusal names it.
    let out = as_user(
        65533,
        &format!(
            "echo hi > '{}'",
            m.path(&format!("inbox/{A}/other")).display()
        ),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        m.log_text().contains("user 65533 may not deposit here"),
        "{}",
        m.log_text()
    );
    assert!(!names(&w.f.inbox(A)).contains("user-003.md"));
}

#[test]
fn depositors_without_allow_other_are_refused_at_mount() {
    let w = workspace();
    let err = common::mount::refused_mount(w.f.root(), &["--depositors", "1001"]);
    assert!(err.contains("--depositors needs --allow-other"), "{err}");
}

/// Adds file `name` of `len` bytes to agent `id`'s tree, written to git a MiB at a time.
fn add_big_blob(f: &Fixture, id: &str, name: &str, len: usize) {
    let repo = f.repo();
    let odb = repo.odb().unwrap();
    let mut w = odb.writer(len, git2::ObjectType::Blob).unwrap();
    let chunk: Vec<u8> = (0..1 << 20).map(|i| b'a' + (i % 23) as u8).collect();
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len());
        std::io::Write::write_all(&mut w, &chunk[..n]).unwrap();
        left -= n;
    }
    let oid = w.finalize().unwrap();
    let tip = repo.find_commit(f.agent_tip(id).unwrap()).unwrap();
    let mut tb = repo.treebuilder(Some(&tip.tree().unwrap())).unwrap();
    tb.insert(name, oid, 0o100644).unwrap();
    let tree = tb.write().unwrap();
    f.commit(&litanyfs::workspace::refs::agent_ref(id), tree, "big")
        .unwrap();
}

#[test]
fn huge_git_and_record_content_is_bounded_and_stalls_nothing_else() {
    let w = workspace();
    add_big_blob(&w.f, A, "huge.bin", 500 << 20);
    add_big_blob(&w.f, A, "mid.bin", 30 << 20);
    w.f.blob_mark("returned", B, b"done\n").unwrap();
    // A response.json with a 50 MB line among ordinary ones.
    let mut response = b"{\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n".to_vec();
    response.extend(b"{\"junk\":\"");
    response.extend(std::iter::repeat_n(b'y', 50 << 20));
    response.extend(b"\"}\n{\"type\":\"message_stop\"}\n");
    w.f.step(A, 2, &[("response.json", &response)]).unwrap();
    drop(response);
    let m = Mounted::with_args(w.f.root(), &["--no-wake"]);
    let pid = m.daemon_pid().unwrap();
    let peak = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let at_start = peak();
    // The 50 MB line shows as a line naming it, and the rest of the record renders;
    // the line was never held (holding it takes a 64 MiB buffer).
    let md = std::fs::read_to_string(m.path(&format!("steps/{A}/002/response.md"))).unwrap();
    assert!(
        md.contains("bytes, longer than the 8 MiB a line is read; not shown"),
        "{md}"
    );
    let after_line = peak();
    let huge = m.path(&format!("agents/{A}/huge.bin"));
    assert_eq!(std::fs::metadata(&huge).unwrap().len(), 500 << 20);
    // Past the bound: refused at open, read from nowhere, said in the log.
    let e = std::fs::File::open(&huge).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
    assert!(
        m.log_text()
            .contains("more than the 32 MiB the view reads whole")
    );
    // Under it: read whole, and while it and the huge one are asked for over and over,
    // the other views answer.
    let mid = m.path(&format!("agents/{A}/mid.bin"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy: Vec<_> = [huge.clone(), mid.clone()]
        .into_iter()
        .map(|p| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(bytes) = std::fs::read(&p) {
                        assert_eq!(bytes.len(), 30 << 20);
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    for _ in 0..20 {
        assert!(
            std::fs::read_to_string(m.path("status"))
                .unwrap()
                .contains(A)
        );
        assert_eq!(
            names(&m.path("marks/returned")),
            BTreeSet::from([B.to_string()])
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in busy {
        assert!(t.join().unwrap() > 0);
    }
    let at_end = peak();
    eprintln!(
        "daemon peak RSS: {at_start} KiB, {after_line} KiB after the long line, {at_end} KiB at the end"
    );
    assert!(
        after_line < at_start + 40 * 1024,
        "the long line was held: peak RSS {at_start} -> {after_line} KiB"
    );
    // The 30 MB blob read whole (git's copy and ours) and never the 500 MB one.
    assert!(
        at_end < at_start + 150 * 1024,
        "peak RSS {at_start} -> {at_end} KiB"
    );
}
