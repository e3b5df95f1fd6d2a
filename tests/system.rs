//! Mounting the way a system does: the daemon started by `litanyfs mount` honours every
//! option it was given. Every mount here unmounts when its test ends, even on failure.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::mount::Mounted;
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
