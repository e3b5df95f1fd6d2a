//! The read-only tree on a real mount, checked with std::fs and the ordinary tools
//! (ls, cat, cmp, find, stat, grep, tail -f, cp). Every mount is a [`Mounted`], which
//! unmounts even when the test fails.

mod common;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::mount::{Mounted, alive, eventually, is_mounted, litanyfs};
use common::workspace::Ws;
use litanyfs::fixture::Fixture;
use litanyfs::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";
const B: &str = "20261202T094227Z-0abc0def";
const LIVE: Duration = Duration::from_secs(3);

fn workspace(flavour: Flavour) -> Ws {
    let w = Ws::new(flavour);
    let f = &w.f;
    let tip = f
        .agent(A, Some("Alpha"), &[("messages/001-user.md", b"hello\n")])
        .unwrap();
    f.agent(B, Some("Beta"), &[]).unwrap();
    f.commit_mark("returned", A, tip).unwrap();
    f.blob_mark("cwd", A, b"/srv/project").unwrap();
    f.blob_mark(
        "held",
        B,
        br#"{"tool_use_id":"t","tool":"bash","reason":"r"}"#,
    )
    .unwrap();
    let out = Fixture::tool_output(&"x".repeat(10_000), "warn\n", 0);
    f.step(
        A,
        1,
        &[
            ("request.json", b"{\n  \"model\": \"m\"\n}"),
            ("response.json", b"{\"type\":\"end\"}\n"),
            ("meta.json", b"{}"),
            ("stderr.log", b""),
            ("tools/toolu_1/input.json", b"{}"),
            ("tools/toolu_1/output.json", &out),
            ("tools/toolu_1/output.json.tmp", b"{\"stdout\":"),
        ],
    )
    .unwrap();
    std::fs::write(
        f.root().join("steps").join(A).join("driver.log"),
        b"log line\n",
    )
    .unwrap();
    f.inbox_file(
        A,
        "user-001.md",
        b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nfirst",
    )
    .unwrap();
    f.inbox_file(A, ".user-002.md.tmp", b"---\npartial")
        .unwrap();
    f.inbox_file(A, "stray.txt", b"not a deposit").unwrap();
    w
}

fn sh(cmd: &str) -> (bool, String, String) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What the mount root lists, sorted: the workspace's `agents`, `inbox`, `steps`, then
/// `marks`, `names`, the six views and `new`.
const ROOT: [&str; 12] = [
    "agents",
    "attention",
    "attention.json",
    "events",
    "events.ndjson",
    "inbox",
    "marks",
    "names",
    "new",
    "status",
    "status.json",
    "steps",
];

fn ls(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn refusals_are_one_line_and_non_zero() {
    let w = workspace(Flavour::Litany);
    let t = tempfile::tempdir().unwrap();
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let full = t.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"").unwrap();
    let cases: Vec<(Vec<&OsStr>, &str)> = vec![
        (
            vec!["mount".as_ref(), t.path().as_os_str(), empty.as_os_str()],
            "is not a workspace (no repo.git)",
        ),
        (
            vec![
                "mount".as_ref(),
                w.f.root().as_os_str(),
                "/nonexistent/mnt".as_ref(),
            ],
            "does not exist",
        ),
        (
            vec!["mount".as_ref(), w.f.root().as_os_str(), full.as_os_str()],
            "is not empty",
        ),
        (
            vec!["unmount".as_ref(), empty.as_os_str()],
            "is not mounted",
        ),
    ];
    for (args, want) in cases {
        let out = litanyfs(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(
            err.trim_end()
                .lines()
                .filter(|l| l.starts_with("litanyfs:"))
                .count(),
            1,
            "{err}"
        );
    }
    let m = Mounted::new(w.f.root());
    let out = litanyfs(&["mount".as_ref(), w.f.root().as_os_str(), m.mnt.as_os_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is already mounted"));
}

#[test]
fn root_mirrors_the_workspace_and_steps_match_the_disk() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    assert_eq!(ls(&m.mnt), ROOT);

    let backing = w.f.root().join("steps");
    let mut want: Vec<PathBuf> = files_under(&backing)
        .into_iter()
        .filter(|p| !p.to_string_lossy().ends_with(".tmp"))
        .collect();
    want.sort();
    // Beside each output.json the mount adds its decoded streams (tests/pages.rs), and in
    // each agent's directory a `latest` link to its highest-numbered step.
    let got: Vec<PathBuf> = files_under(&m.path("steps"))
        .into_iter()
        .filter(|p| !(p.ends_with("stdout") || p.ends_with("stderr")))
        .filter(|p| {
            !(p.ends_with("latest")
                || p.ends_with("response.md")
                || p.ends_with("transcript.md")
                || p.ends_with("ctl"))
        })
        .collect();
    assert_eq!(got, want);
    let latest = m.path(&format!("steps/{A}/latest"));
    assert_eq!(std::fs::read_link(&latest).unwrap(), Path::new("001"));
    assert_eq!(
        std::fs::read(latest.join("request.json")).unwrap(),
        std::fs::read(backing.join(format!("{A}/001/request.json"))).unwrap(),
        "latest/ reads the step it points at"
    );
    for rel in &want {
        let (real, seen) = (backing.join(rel), m.path("steps").join(rel));
        assert_eq!(
            std::fs::read(&real).unwrap(),
            std::fs::read(&seen).unwrap(),
            "{rel:?}"
        );
        let (a, b) = (
            std::fs::metadata(&real).unwrap(),
            std::fs::metadata(&seen).unwrap(),
        );
        assert_eq!(
            (a.size(), a.mtime(), a.mtime_nsec()),
            (b.size(), b.mtime(), b.mtime_nsec()),
            "{rel:?}"
        );
        assert_eq!(b.mode() & 0o777, 0o444, "{rel:?}");
        let (ok, _, err) = sh(&format!("cmp '{}' '{}'", real.display(), seen.display()));
        assert!(ok, "cmp {rel:?}: {err}");
    }
    let tmp = m.path(&format!("steps/{A}/001/tools/toolu_1/output.json.tmp"));
    assert_eq!(
        std::fs::metadata(&tmp).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
}

/// Reading through the mount changes nothing in the workspace: after a walk, a `grep -r`
/// and a `cat` of every derived file (which the daemon sizes and renders from the
/// records), every backing file and directory under `steps/` keeps the atime it had,
/// where a plain read on the same filesystem moves it.
#[test]
fn reading_through_the_mount_leaves_the_workspace_atimes() {
    use std::fs::{File, FileTimes};
    use std::time::{Duration as D, SystemTime};
    let w = workspace(Flavour::Litany);
    let backing = w.f.root().join("steps");
    // Older than a day, so that relatime would update it at the next read.
    let old = SystemTime::UNIX_EPOCH + D::from_secs(946_684_800);
    let mut all = files_under(&backing);
    let mut dirs = vec![backing.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                all.push(p.strip_prefix(&backing).unwrap().to_path_buf());
                dirs.push(p);
            }
        }
    }
    let set_old = |p: &Path| {
        let f = File::open(p).unwrap();
        f.set_times(FileTimes::new().set_accessed(old)).unwrap();
    };
    for rel in &all {
        set_old(&backing.join(rel));
    }
    set_old(&backing);
    let m = Mounted::new(w.f.root());
    let seen = files_under(&m.path("steps"));
    assert!(seen.iter().any(|p| p.ends_with("response.md")), "{seen:?}");
    for rel in &seen {
        let p = m.path("steps").join(rel);
        if std::fs::symlink_metadata(&p).unwrap().is_file() {
            std::fs::read(&p).unwrap();
        }
    }
    let (ok, _, err) = sh(&format!(
        "grep -r -c nothing-here '{}'",
        m.path("steps").display()
    ));
    assert!(!ok && err.is_empty(), "grep -r: {err}");
    let atime = |p: &Path| std::fs::metadata(p).unwrap().accessed().unwrap();
    let moved: Vec<_> = all
        .iter()
        .filter(|rel| atime(&backing.join(rel)) != old)
        .collect();
    assert!(
        moved.is_empty(),
        "atimes moved by reads through the mount: {moved:?}"
    );
    // The control: a plain read here does move an old atime (else nothing was shown).
    let control = backing.join(&all[0]);
    std::fs::read(&control).ok();
    std::fs::read_dir(&control).map(|d| d.count()).ok();
    assert_ne!(
        atime(&control),
        old,
        "this filesystem keeps no atimes: the test shows nothing"
    );
}

#[test]
fn ordinary_tools_work() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let mnt = m.mnt.display();
    let (ok, out, err) = sh(&format!("find {mnt} -name output.json"));
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        format!("{mnt}/steps/{A}/001/tools/toolu_1/output.json")
    );
    let (ok, out, _) = sh(&format!("grep -rl warn {mnt}/steps | sort"));
    assert!(ok);
    // The record, and the decoded stderr stream beside it.
    assert_eq!(
        out.trim(),
        format!(
            "{mnt}/steps/{A}/001/tools/toolu_1/output.json\n{mnt}/steps/{A}/001/tools/toolu_1/stderr"
        )
    );
    let (ok, out, _) = sh(&format!("cat {mnt}/names/Alpha/messages/001-user.md"));
    assert!(ok);
    assert_eq!(out, "hello\n");
    let (ok, out, _) = sh(&format!("stat -c '%s %a %F' {mnt}/marks/returned/{A}"));
    assert!(ok);
    assert_eq!(out.trim(), "41 444 regular file");
    let (ok, out, _) = sh(&format!("ls -l {mnt}/names"));
    assert!(ok);
    assert!(out.contains(&format!("Alpha -> ../agents/{A}")), "{out}");
    let t = tempfile::tempdir().unwrap();
    let (ok, _, err) = sh(&format!(
        "cp -r {mnt}/steps {}/copy && cp -p {mnt}/agents/{A}/goal.md {}/",
        t.path().display(),
        t.path().display()
    ));
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read(t.path().join("goal.md")).unwrap(),
        b"Do the thing.\n"
    );
    assert!(
        t.path()
            .join(format!("copy/{A}/001/tools/toolu_1/output.json"))
            .exists()
    );
    let (ok, out, _) = sh(&format!(
        "less -FX {mnt}/steps/{A}/driver.log < /dev/null | cat"
    ));
    assert!(ok);
    assert_eq!(out, "log line\n");
}

#[test]
fn inbox_shows_pending_deposits_only() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    assert_eq!(ls(&m.path("inbox")), [A]);
    assert_eq!(ls(&m.path(&format!("inbox/{A}"))), ["user-001.md"]);
    assert_eq!(
        std::fs::read(m.path(&format!("inbox/{A}/user-001.md"))).unwrap(),
        b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nfirst"
    );
    // Every shape of name CONTRACT §3.6 speaks of, in another inbox: the drain takes
    // `<sender>-<u32>.md` with a sender neither empty nor dotted, nothing else.
    for name in [
        "user-7.md",
        "user-+8.md",
        "user-0009.md",
        "p1-abc-001.md",
        ".user-001.md",
        ".p1-abc-002.md",
        "-003.md",
        "user004.md",
        "user-abc.md",
        "user-.md",
        "user-4294967296.md",
        "user-005.md.tmp",
        ".user-006.md.tmp",
        "user-007.txt",
        "4913",
    ] {
        w.f.inbox_file(B, name, b"---\nfrom: user\n---\nx").unwrap();
    }
    std::fs::create_dir(w.f.inbox(B).join("user-010.md")).unwrap();
    assert!(eventually(LIVE, || ls(&m.path(&format!("inbox/{B}")))
        == ["p1-abc-001.md", "user-+8.md", "user-0009.md", "user-7.md"]));
}

#[test]
fn marks_agents_and_names() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    assert_eq!(ls(&m.path("marks")), ["cwd", "held", "returned"]);
    assert_eq!(
        std::fs::read(m.path(&format!("marks/cwd/{A}"))).unwrap(),
        b"/srv/project"
    );
    let tip = w.f.agent_tip(A).unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path(&format!("marks/returned/{A}"))).unwrap(),
        format!("{tip}\n")
    );
    assert_eq!(ls(&m.path("agents")), [A, B]);
    assert_eq!(
        ls(&m.path(&format!("agents/{A}"))),
        ["goal.md", "messages", "name", "soul.md"]
    );
    assert_eq!(
        std::fs::read_link(m.path("names/Beta")).unwrap(),
        PathBuf::from(format!("../agents/{B}"))
    );
    assert_eq!(std::fs::read(m.path("names/Beta/name")).unwrap(), b"Beta\n");
    // No worktree exists at all: agents/ is read from git.
    assert!(!w.f.root().join("agents").exists());
}

#[test]
fn lernie_workspaces_show_lernie_marks() {
    let w = workspace(Flavour::Lernie);
    let m = Mounted::new(w.f.root());
    assert_eq!(ls(&m.path("marks")), ["cwd", "held", "returned"]);
    assert_eq!(
        std::fs::read(m.path(&format!("marks/cwd/{A}"))).unwrap(),
        b"/srv/project"
    );
}

#[test]
fn clashing_names_are_left_out_and_logged() {
    let w = workspace(Flavour::Litany);
    w.f.agent(B, Some("Alpha"), &[]).unwrap();
    let m = Mounted::new(w.f.root());
    assert!(ls(&m.path("names")).is_empty());
    assert!(
        eventually(LIVE, || m.log_text().contains("names/Alpha: left out")),
        "{}",
        m.log_text()
    );
}

#[test]
fn changes_show_up_live() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let f = &w.f;
    // A new step, a new deposit, a drained deposit.
    f.step(A, 2, &[("request.json", b"{}")]).unwrap();
    assert!(eventually(LIVE, || m
        .path(&format!("steps/{A}/002/request.json"))
        .exists()));
    f.inbox_file(A, "user-002.md", b"---\nsecond").unwrap();
    assert!(eventually(LIVE, || ls(&m.path(&format!("inbox/{A}")))
        == ["user-001.md", "user-002.md"]));
    std::fs::rename(
        f.inbox(A).join("user-001.md"),
        f.root().join("delivered.md"),
    )
    .unwrap();
    assert!(eventually(LIVE, || !m
        .path(&format!("inbox/{A}/user-001.md"))
        .exists()));
    // An appended record.
    let resp = f.step_dir(A, 1).join("response.json");
    let mut h = std::fs::OpenOptions::new()
        .append(true)
        .open(&resp)
        .unwrap();
    h.write_all(b"{\"type\":\"usage\"}\n").unwrap();
    let want = std::fs::read(&resp).unwrap();
    let seen = m.path(&format!("steps/{A}/001/response.json"));
    assert!(eventually(LIVE, || std::fs::read(&seen).unwrap() == want));
    // New and moved refs.
    let tip = f
        .agent(A, Some("Alpha"), &[("messages/002-x.md", b"2")])
        .unwrap();
    f.commit_mark("returned", A, tip).unwrap();
    f.blob_mark("role", A, b"planner").unwrap();
    assert!(eventually(LIVE, || std::fs::read_to_string(
        m.path(&format!("marks/returned/{A}"))
    )
    .ok()
        == Some(format!("{tip}\n"))));
    assert!(eventually(LIVE, || std::fs::read(
        m.path(&format!("marks/role/{A}"))
    )
    .ok()
    .as_deref()
        == Some(b"planner".as_slice())));
    assert!(eventually(LIVE, || m
        .path(&format!("agents/{A}/messages/002-x.md"))
        .exists()));
    f.delete_agent(B).unwrap();
    assert!(eventually(LIVE, || ls(&m.path("agents")) == [A]));
    assert!(eventually(LIVE, || !m.path("names/Beta").exists()));
}

/// `latest` and `transcript.md` are kept by the kernel as long as watched records are,
/// so what changes them must reach it: a new step moves `latest` and its times with its
/// directory's, a moved branch grows `transcript.md`, a deleted one takes it away.
#[test]
fn latest_and_transcript_md_follow_their_changes() {
    let w = workspace(Flavour::Litany);
    std::fs::create_dir_all(w.f.root().join("steps").join(B)).unwrap();
    let m = Mounted::new(w.f.root());
    let f = &w.f;
    let latest = m.path(&format!("steps/{A}/latest"));
    let transcript = m.path(&format!("steps/{A}/transcript.md"));
    let theirs = m.path(&format!("steps/{B}/transcript.md"));
    // Listed and looked at, so the kernel holds all three.
    ls(&m.path(&format!("steps/{A}")));
    let before = std::fs::symlink_metadata(&latest).unwrap();
    assert!(
        !std::fs::read_to_string(&transcript)
            .unwrap()
            .contains("step 002")
    );
    assert!(theirs.exists());
    std::thread::sleep(Duration::from_millis(20));
    f.step(A, 2, &[("request.json", b"{}")]).unwrap();
    let disk = f.root().join("steps").join(A);
    // Its times first: a readlink would make the kernel ask for them anyway.
    assert!(
        eventually(LIVE, || {
            let (seen, want) = (
                std::fs::symlink_metadata(&latest).unwrap(),
                std::fs::metadata(&disk).unwrap(),
            );
            (seen.mtime(), seen.mtime_nsec()) == (want.mtime(), want.mtime_nsec())
        }),
        "latest kept the times of {before:?}"
    );
    assert_eq!(std::fs::read_link(&latest).unwrap(), Path::new("002"));
    // The new step is a part of the transcript too: wait for it, so that what grows
    // next is the branch's doing alone.
    assert!(eventually(LIVE, || std::fs::read_to_string(&transcript)
        .unwrap()
        .contains("step 002")));
    let text = std::fs::read_to_string(&transcript).unwrap();
    f.agent(A, Some("Alpha"), &[("messages/002-user.md", b"second\n")])
        .unwrap();
    // Its size first: a read would make the kernel ask for it anyway.
    assert!(eventually(LIVE, || std::fs::metadata(&transcript)
        .unwrap()
        .len()
        > text.len() as u64));
    let now = std::fs::read_to_string(&transcript).unwrap();
    assert!(now.contains("second"), "{now}");
    assert_eq!(
        std::fs::metadata(&transcript).unwrap().len(),
        now.len() as u64
    );
    f.delete_agent(B).unwrap();
    assert!(eventually(LIVE, || std::fs::symlink_metadata(&theirs).is_err()));
}

#[test]
fn tail_follows_a_growing_record() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let resp = w.f.step_dir(A, 1).join("response.json");
    let mut tail = Command::new("tail")
        .args(["-n", "+1", "-f", "-s", "0.1"])
        .arg(m.path(&format!("steps/{A}/001/response.json")))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(tail.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "{\"type\":\"end\"}");
    let mut h = std::fs::OpenOptions::new()
        .append(true)
        .open(&resp)
        .unwrap();
    for i in 0..3 {
        writeln!(h, "{{\"line\":{i}}}").unwrap();
        h.flush().unwrap();
        std::thread::sleep(Duration::from_millis(150));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..3 {
            if let Some(Ok(l)) = lines.next() {
                let _ = tx.send(l);
            }
        }
    });
    let got: Vec<String> = (0..3)
        .filter_map(|_| rx.recv_timeout(Duration::from_secs(5)).ok())
        .collect();
    let _ = tail.kill();
    let _ = tail.wait();
    assert_eq!(got, ["{\"line\":0}", "{\"line\":1}", "{\"line\":2}"]);
}

/// A record is read through the daemon and the page cache while small and passed through
/// once large; an open that comes while another is held takes the held one's way,
/// whatever the size is now (the kernel fails an open of the other way with `EIO`).
#[test]
fn a_record_held_open_across_the_passthrough_size_opens_again_and_reads_whole() {
    use std::io::Read;
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let rel = format!("steps/{A}/001/response.json");
    let backing = w.f.step_dir(A, 1).join("response.json");
    let big = litanyfs::tree::PASSTHROUGH_BYTES as usize;
    let read_all = |want: &[u8]| {
        let through = m.path(&rel);
        // The size the mount reports follows the backing file's by its invalidation.
        assert!(
            eventually(LIVE, || std::fs::metadata(&through)
                .is_ok_and(|md| md.len() == want.len() as u64)),
            "size never reached {}",
            want.len()
        );
        let mut got = Vec::new();
        let read = std::fs::File::open(&through).and_then(|mut f| f.read_to_end(&mut got));
        assert!(read.is_ok(), "{rel}: {read:?}");
        assert!(
            got == want,
            "{rel}: {} bytes read, {} wanted",
            got.len(),
            want.len()
        );
    };
    // Small while held, then grown past the size.
    let held = std::fs::File::open(m.path(&rel)).unwrap();
    let mut content = std::fs::read(&backing).unwrap();
    let line = format!("{{\"pad\":\"{}\"}}\n", "p".repeat(1000));
    let mut h = std::fs::OpenOptions::new()
        .append(true)
        .open(&backing)
        .unwrap();
    while content.len() < big + 4096 {
        h.write_all(line.as_bytes()).unwrap();
        content.extend_from_slice(line.as_bytes());
    }
    drop(h);
    read_all(&content);
    let mut got = Vec::new();
    (&held).read_to_end(&mut got).unwrap();
    assert!(got == content, "the held open read {} bytes", got.len());
    drop(held);
    // Large while held, then cut below it.
    let held = std::fs::File::open(m.path(&rel)).unwrap();
    let small = content[..100].to_vec();
    std::fs::write(&backing, &small).unwrap();
    read_all(&small);
    let mut got = Vec::new();
    (&held).read_to_end(&mut got).unwrap();
    assert_eq!(got, small, "the held open");
    drop(held);
    // Nothing held: each open takes the way its size says, and reads what is there.
    read_all(&small);
}

#[test]
fn inode_numbers_are_stable_and_names_reused_get_new_ones() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let req = m.path(&format!("steps/{A}/001/request.json"));
    let ino = std::fs::metadata(&req).unwrap().ino();
    let _ = ls(&m.path(&format!("steps/{A}/001")));
    assert_eq!(std::fs::metadata(&req).unwrap().ino(), ino);
    let mark = m.path(&format!("marks/cwd/{A}"));
    let mark_ino = std::fs::metadata(&mark).unwrap().ino();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(std::fs::metadata(&mark).unwrap().ino(), mark_ino);
    // Deliver user-001.md, then deposit a new user-001.md: a new file, a new number.
    let dep = m.path(&format!("inbox/{A}/user-001.md"));
    let first = std::fs::metadata(&dep).unwrap().ino();
    std::fs::rename(
        w.f.inbox(A).join("user-001.md"),
        w.f.root().join("delivered.md"),
    )
    .unwrap();
    w.f.inbox_file(A, "user-001.md", b"---\nanother").unwrap();
    // Once the kernel's entry expires, the name resolves to the new file, with a new number.
    assert!(eventually(LIVE, || std::fs::metadata(&dep)
        .is_ok_and(|m| m.ino() != first)));
    assert_eq!(std::fs::read(&dep).unwrap(), b"---\nanother");
}

/// The numbers the daemon held at its last census line (`RUST_LOG` has it at debug).
fn census_numbers(m: &Mounted) -> Option<usize> {
    let log = m.log_text();
    let line = log.lines().rev().find(|l| l.contains("census: "))?;
    let before = line.split(" inode numbers").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// How many files the daemon asked the kernel to forget, in all.
fn forgotten(m: &Mounted) -> usize {
    m.log_text()
        .lines()
        .filter_map(|l| l.split("asked the kernel to forget ").nth(1))
        .filter_map(|r| r.split(' ').next()?.parse::<usize>().ok())
        .sum()
}

#[test]
fn files_nobody_uses_are_handed_back_to_the_kernel_past_the_bound() {
    let w = workspace(Flavour::Litany);
    let bulk = w.f.root().join("steps").join(A).join("001").join("bulk");
    std::fs::create_dir(&bulk).unwrap();
    let n = litanyfs::tree::INODES_KEPT + 2_000;
    for i in 0..n {
        std::fs::write(bulk.join(format!("f{i}")), b"x").unwrap();
    }
    let m = Mounted::new(w.f.root());
    let dir = m.path(&format!("steps/{A}/001/bulk"));
    // One file stays open throughout, one is read on.
    let mut held = std::fs::File::open(dir.join("f0")).unwrap();
    let read_on = dir.join("f1");
    let walked = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().metadata().unwrap().ino() != 0)
        .count();
    assert_eq!(walked, n);
    let idle = dir.join("f2");
    let idle_ino = std::fs::metadata(&idle).unwrap().ino();
    // Two upkeeps (10 s each): the first sees every file just used, the next hands
    // back those not used since; the kernel then forgets them.
    let handed_back = eventually(Duration::from_secs(45), || {
        let _ = std::fs::metadata(&read_on);
        forgotten(&m) >= n - 2 && census_numbers(&m).is_some_and(|c| c < 1_000)
    });
    assert!(
        handed_back,
        "{} handed back, the daemon holds {:?} numbers:\n{}",
        forgotten(&m),
        census_numbers(&m),
        m.log_text()
    );
    // Nothing is lost: the held file reads, the others resolve again, a backing file
    // under its own number.
    let mut s = String::new();
    std::io::Read::read_to_string(&mut held, &mut s).unwrap();
    assert_eq!(s, "x");
    assert_eq!(std::fs::metadata(&idle).unwrap().ino(), idle_ino);
    assert_eq!(std::fs::read(&read_on).unwrap(), b"x");
    assert_eq!(ls(&dir).len(), n);
}

#[test]
fn every_change_is_refused_with_erofs() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let file = m.path(&format!("steps/{A}/001/request.json"));
    let dir = m.path(&format!("steps/{A}"));
    let erofs = |r: std::io::Result<()>, what: &str| {
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EROFS), "{what}");
    };
    erofs(
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .map(drop),
        "open for write",
    );
    erofs(
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .map(drop),
        "open for append",
    );
    erofs(std::fs::write(dir.join("new"), b"x"), "create");
    erofs(
        std::fs::write(m.path("inbox/note"), b"x"),
        "create in inbox/ itself",
    );
    erofs(std::fs::remove_file(&file), "unlink");
    erofs(std::fs::rename(&file, dir.join("moved")), "rename");
    erofs(std::fs::create_dir(dir.join("d")), "mkdir");
    erofs(
        std::fs::remove_dir(m.path(&format!("steps/{A}/001/tools/toolu_1"))),
        "rmdir",
    );
    erofs(std::os::unix::fs::symlink("x", dir.join("l")), "symlink");
    erofs(std::fs::hard_link(&file, dir.join("h")), "link");
    erofs(
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)),
        "chmod",
    );
    let c = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path.
    let r = unsafe { libc::truncate(c.as_ptr(), 0) };
    erofs(
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        },
        "truncate",
    );
    erofs(
        std::fs::write(m.path(&format!("marks/cwd/{A}")), b"/elsewhere"),
        "write a mark",
    );
    erofs(
        std::fs::write(m.path(&format!("agents/{A}/goal.md")), b"new goal"),
        "write agent content",
    );
    let (ok, _, err) = sh(&format!("touch {}", file.display()));
    assert!(!ok && err.contains("Read-only file system"), "{err}");
    assert_eq!(
        std::fs::read(w.f.step_dir(A, 1).join("request.json")).unwrap(),
        b"{\n  \"model\": \"m\"\n}"
    );
    assert!(
        eventually(LIVE, || m.log_text().contains("read-only in this view")),
        "{}",
        m.log_text()
    );
}

/// An upgrade: SIGTERM while a file is open detaches the mount lazily, and the old daemon
/// serves that file until it is closed; a new daemon mounts at the same point meanwhile.
/// When the old one ends, the new mount stays (fuser unmounted the mount point by path).
#[test]
fn a_sigtermed_daemon_ending_leaves_the_mount_made_after_it() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let pid = m.daemon_pid().expect("daemon pid");
    let held = std::fs::File::open(m.path("status")).expect("open status");
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(
        eventually(Duration::from_secs(5), || !is_mounted(&m.mnt)),
        "still mounted after SIGTERM"
    );
    assert!(alive(pid), "the old daemon serves the file still open");
    let out = litanyfs(&[
        "mount".as_ref(),
        w.f.root().as_os_str(),
        m.mnt.as_os_str(),
        "--log-file".as_ref(),
        m.log.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(held);
    assert!(
        eventually(Duration::from_secs(5), || !alive(pid)),
        "the old daemon outlived its last file"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        is_mounted(&m.mnt),
        "the old daemon unmounted the new mount\n{}",
        m.log_text()
    );
    assert!(std::fs::read(m.path("status")).is_ok(), "{}", m.log_text());
}

#[test]
fn sigterm_unmounts_and_sigkill_leaves_a_mount_the_next_mount_heals() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let pid = m.daemon_pid().expect("daemon pid");
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(
        eventually(Duration::from_secs(5), || !is_mounted(&m.mnt)),
        "still mounted after SIGTERM"
    );
    assert!(
        eventually(Duration::from_secs(5), || !alive(pid)),
        "daemon still alive after SIGTERM"
    );

    let out = litanyfs(&[
        "mount".as_ref(),
        w.f.root().as_os_str(),
        m.mnt.as_os_str(),
        "--log-file".as_ref(),
        m.log.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = m.daemon_pid().expect("daemon pid");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
    let err = std::fs::read_dir(&m.mnt).unwrap_err();
    assert!(
        matches!(
            err.raw_os_error(),
            Some(libc::ENOTCONN | libc::ECONNABORTED)
        ),
        "{err}"
    );
    let out = litanyfs(&[
        "mount".as_ref(),
        w.f.root().as_os_str(),
        m.mnt.as_os_str(),
        "--log-file".as_ref(),
        m.log.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("clearing a stale mount"), "{stderr}");
    assert_eq!(ls(&m.mnt), ROOT);
}

#[test]
fn unmount_command_ends_the_daemon() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let pid = m.daemon_pid().expect("daemon pid");
    let out = litanyfs(&["unmount".as_ref(), m.mnt.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&m.mnt));
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
    assert!(ls(&m.mnt).is_empty());
}

#[test]
fn streams_of_a_large_capture_show_their_sizes_though_listed_unparsed() {
    // A capture over the eager-parse size is listed without being read; `ls -l`, `stat`
    // and a walk with lstat must still see the decoded streams' real sizes (the listing
    // tells the kernel not to keep its placeholder attributes).
    let w = workspace(Flavour::Litany);
    let stdout = "y".repeat(litanyfs::tree::EAGER_STREAMS_BYTES as usize + 4096);
    let out = Fixture::tool_output(&stdout, "e\n", 0);
    w.f.step(A, 2, &[("tools/big/output.json", &out)]).unwrap();
    let m = Mounted::new(w.f.root());
    let dir = m.path(&format!("steps/{A}/002/tools/big"));
    let mut sizes: Vec<(String, u64)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, std::fs::symlink_metadata(e.path()).unwrap().len())
        })
        .filter(|(n, _)| n != "output.json")
        .collect();
    sizes.sort();
    assert_eq!(
        sizes,
        [("stderr".into(), 2), ("stdout".into(), stdout.len() as u64)]
    );
    let (ok, listing, _) = sh(&format!("ls -l '{}'", dir.display()));
    assert!(ok);
    assert!(
        listing.contains(&format!(" {} ", stdout.len())),
        "ls -l shows the real size:\n{listing}"
    );
    assert_eq!(
        std::fs::read(dir.join("stdout")).unwrap().len(),
        stdout.len()
    );
}

#[test]
fn a_step_pruned_and_another_made_at_once_never_shows_the_pruned_ones_insides() {
    // ext4 hands a freed inode number to the next file made, so a step pruned and
    // another made at once take over its directories' numbers. The kernel meets each
    // number again before the daemon's invalidation of the pruned names reaches it: the
    // new directory must not inherit what the kernel cached under the old one.
    let w = workspace(Flavour::Litany);
    let m = Mounted::new(w.f.root());
    let mut reused = 0;
    for round in 0..60 {
        let old = w.f.root().join(format!("steps/{A}/001"));
        std::fs::create_dir_all(old.join("tools/toolu_old")).unwrap();
        std::fs::write(old.join("tools/toolu_old/input.json"), b"{}").unwrap();
        let seen = m.path(&format!("steps/{A}/001/tools/toolu_old/input.json"));
        assert!(std::fs::metadata(&seen).is_ok(), "round {round}: {seen:?}");
        let old_ino = std::fs::metadata(old.join("tools")).unwrap().ino();
        std::fs::remove_dir_all(&old).unwrap();
        let step = format!("steps/{B}/{:03}", round + 1);
        let new = w.f.root().join(&step);
        std::fs::create_dir_all(new.join("tools/toolu_new")).unwrap();
        std::fs::write(new.join("tools/toolu_new/input.json"), b"{}").unwrap();
        let inos = [
            new.as_path(),
            &new.join("tools"),
            &new.join("tools/toolu_new"),
        ]
        .map(|p| std::fs::metadata(p).unwrap().ino());
        reused += usize::from(inos.contains(&old_ino));
        let tool = m.path(&format!("{step}/tools/toolu_new"));
        assert!(
            eventually(LIVE, || names(&tool).is_ok_and(|n| n == ["input.json"])),
            "round {round}: {tool:?} lists {:?}, on disk {:?}",
            names(&tool),
            names(&new.join("tools/toolu_new"))
        );
    }
    // The test means something only where numbers were reused.
    assert!(reused > 0, "no inode number was reused in 60 rounds");
}

/// The sorted names in `dir`, or the error reading it.
fn names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut v = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<Vec<String>>>()?;
    v.sort();
    Ok(v)
}

/// Each thread's niceness: field 19 of `/proc/<pid>/task/<tid>/stat`.
fn thread_nices(pid: i32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    tasks
        .filter_map(|t| common::mount::stat_field(&t.ok()?.path().join("stat"), 19))
        .filter_map(|n| n.parse().ok())
        .collect()
}

#[test]
fn nice_sets_every_daemon_thread_and_its_session_group() {
    let w = workspace(Flavour::Litany);
    let m = Mounted::with_args(w.f.root(), &["--nice", "5"]);
    let pid = m.daemon_pid().expect("daemon pid");
    // Every thread but the one the history lowers further (19) has the niceness asked for.
    let nices = thread_nices(pid);
    assert!(nices.len() > 3, "{nices:?}");
    assert!(nices.iter().all(|n| *n == 5 || *n == 19), "{nices:?}");
    let grouped = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .is_ok_and(|v| v.trim() == "1");
    if grouped {
        let group = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).unwrap();
        assert!(group.trim_end().ends_with("nice 5"), "{group}");
    }
    // A niceness out of range is refused before anything is mounted.
    let err = common::mount::refused_mount(w.f.root(), &["--nice", "-21"]);
    assert!(err.contains("-21"), "{err}");
}
