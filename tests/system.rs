//! Mounting the way a system does: the daemon honours every option it was given, and a
//! `--foreground` mount under a service manager tells it when it is ready and when it
//! stops. Every mount here unmounts when its test ends, even on failure.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::mount::{BIN, Mounted, alive, eventually, is_mounted};
use common::workspace::Ws;
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
    let m = Mounted::with_args(
        w.f.root(),
        &["--read-only", "--agent", A, "--threads", "2", "--no-wake"],
    );
    let args = daemon_args(&m);
    for want in ["--read-only", "--agent", A, "--threads", "2", "--no-wake"] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    assert_eq!(names(&m.path("steps")), BTreeSet::from([A.to_string()]));
    let err = std::fs::write(m.path(&format!("inbox/{A}/note")), b"hi").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert!(names(&w.f.root().join("inbox").join(A)).is_empty());
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
        && std::fs::read_dir(mnt).is_ok_and(|d| d.count() == 5)
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
    let child = Command::new(BIN)
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
