//! Past the kernel's inotify watch limit: said once in the log, and what cannot be
//! watched is still shown right and live (re-read at short intervals). This lowers the
//! per-user limit for the length of the test and puts it back even when the test fails,
//! so it is the only test of its binary.

mod common;

use std::time::Duration;

use common::mount::{Mounted, eventually};
use common::workspace::Ws;
use litanyfs::watch::WATCH_LIMIT_SYSCTL;
use litanyfs::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";

/// The watch limit as it was, put back when dropped.
struct Limit(String);

impl Drop for Limit {
    fn drop(&mut self) {
        let _ = std::fs::write(WATCH_LIMIT_SYSCTL, &self.0);
    }
}

/// The inotify watches in use now, by every process (root's count is what the limit
/// bounds; counting everyone's over-counts, which only lowers the headroom).
fn watches_in_use() -> usize {
    let mut n = 0;
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        for fd in std::fs::read_dir(p.path().join("fdinfo"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(t) = std::fs::read_to_string(fd.path()) {
                n += t.lines().filter(|l| l.starts_with("inotify wd:")).count();
            }
        }
    }
    n
}

#[test]
fn directories_past_the_watch_limit_are_told_once_and_stay_live() {
    // Lowering a sysctl takes root.
    if !litanyfs::testing::prereq::root() {
        return;
    }
    let was = std::fs::read_to_string(WATCH_LIMIT_SYSCTL)
        .unwrap_or_else(|e| panic!("read {WATCH_LIMIT_SYSCTL}: {e}"));
    let w = Ws::new(Flavour::Litany);
    w.f.agent(A, None, &[]).unwrap();
    const STEPS: u32 = 60;
    for s in 1..=STEPS {
        w.f.step(
            A,
            s,
            &[("request.json", b"{}"), ("tools/t1/input.json", b"{}")],
        )
        .unwrap();
    }
    // Room for a third of the step directories the walk will want watched.
    let room = watches_in_use() + STEPS as usize;
    let _limit = Limit(was);
    std::fs::write(WATCH_LIMIT_SYSCTL, room.to_string())
        .unwrap_or_else(|e| panic!("set {WATCH_LIMIT_SYSCTL} to {room}: {e}"));
    let m = Mounted::new(w.f.root());
    let mut found = 0;
    for s in 1..=STEPS {
        let names = std::fs::read_dir(m.path(&format!("steps/{A}/{s:03}/tools/t1")))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>();
        assert_eq!(names, ["input.json"], "step {s}");
        found += 1;
    }
    assert_eq!(found, STEPS);
    let log = m.log_text();
    let told = log.matches("inotify watch limit").count();
    assert_eq!(told, 1, "{log}");
    assert!(log.contains("cannot watch: the watch limit"), "{log}");
    // The last step's tool directory is past the limit, and a new entry there still shows.
    let last = format!("steps/{A}/{STEPS:03}/tools/t1");
    std::fs::write(w.f.step_dir(A, STEPS).join("tools/t1/output.json"), b"{}").unwrap();
    assert!(
        eventually(Duration::from_secs(2), || {
            std::fs::read_dir(m.path(&last))
                .is_ok_and(|d| d.flatten().any(|e| e.file_name() == "output.json"))
        }),
        "{last}/output.json never showed"
    );
}
