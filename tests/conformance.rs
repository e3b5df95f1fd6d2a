//! Conformance of the read-only tree with a workspace the real harness wrote (litany
//! 0.0.15 driven offline by tests/harness/fake-bz): every rule of the mount, checked with
//! the ordinary tools against what is on disk and in git. Without litany 0.0.15 they fail,
//! unless `LITANYFS_SKIP` names `litany` (see `litanyfs::testing::prereq`).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::harness::{self, RealWorkspace};
use common::mount::{Mounted, eventually};

fn real() -> Option<&'static RealWorkspace> {
    harness::real_workspace()
}

fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn find_files(root: &Path) -> BTreeSet<PathBuf> {
    let (ok, out) = sh(&format!(
        "cd '{}' && find . -type f -o -type l",
        root.display()
    ));
    assert!(ok);
    out.lines()
        .map(|l| PathBuf::from(l.trim_start_matches("./")))
        .collect()
}

/// Whether `rel` (under `steps/`) is a name the mount derives rather than a record: the
/// decoded streams beside an `output.json`, `response.md` beside a `response.json`, an
/// agent's `transcript.md`, and its `latest` link, which must point at its
/// highest-numbered step directory on disk.
fn derived(backing: &Path, mount: &Path, rel: &Path) -> bool {
    if rel.ends_with("stdout") || rel.ends_with("stderr") {
        return backing.join(rel.with_file_name("output.json")).exists();
    }
    if rel.ends_with(litanyfs::tree::RESPONSE_MD) {
        return backing.join(rel.with_file_name("response.json")).exists();
    }
    if (rel.ends_with(litanyfs::tree::TRANSCRIPT_MD) || rel.ends_with(litanyfs::tree::CTL))
        && rel.components().count() == 2
    {
        return true;
    }
    if rel.file_name().is_some_and(|n| n == litanyfs::tree::LATEST) && rel.components().count() == 2
    {
        let agent = backing.join(rel.parent().unwrap());
        let highest = std::fs::read_dir(&agent)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| Some((n.parse::<u64>().ok()?, n)))
            .max()
            .map(|(_, n)| n);
        let link = std::fs::read_link(mount.join(rel)).unwrap();
        assert_eq!(
            Some(link.to_string_lossy().into_owned()),
            highest,
            "{rel:?}"
        );
        return true;
    }
    false
}

#[test]
fn step_records_match_the_disk_under_cmp_stat_and_find() {
    let Some(r) = real() else { return };
    let m = Mounted::new(&r.ws);
    let backing = r.ws.join("steps");
    let want: BTreeSet<PathBuf> = find_files(&backing)
        .into_iter()
        .filter(|p| !p.to_string_lossy().ends_with(".tmp"))
        .collect();
    // Beside each output.json the mount adds its decoded streams (tests/pages.rs), and
    // in each agent's directory a `latest` link.
    let got: BTreeSet<PathBuf> = find_files(&m.path("steps"))
        .into_iter()
        .filter(|p| !derived(&backing, &m.path("steps"), p))
        .collect();
    assert_eq!(got, want);
    assert!(want.iter().any(|p| p.ends_with("driver.log")), "{want:?}");
    assert!(want.iter().any(|p| p.ends_with("output.json")), "{want:?}");
    for rel in &want {
        let (a, b) = (backing.join(rel), m.path("steps").join(rel));
        let (ok, _) = sh(&format!("cmp '{}' '{}'", a.display(), b.display()));
        assert!(ok, "cmp {rel:?}");
        let (ma, mb) = (
            std::fs::symlink_metadata(&a).unwrap(),
            std::fs::symlink_metadata(&b).unwrap(),
        );
        assert_eq!(
            (ma.size(), ma.mtime(), ma.mtime_nsec()),
            (mb.size(), mb.mtime(), mb.mtime_nsec()),
            "{rel:?}"
        );
        let (_, sa) = sh(&format!("stat -c '%s %Y' '{}'", a.display()));
        let (_, sb) = sh(&format!("stat -c '%s %Y' '{}'", b.display()));
        assert_eq!(sa, sb, "{rel:?}");
    }
}

#[test]
fn inbox_lists_what_a_drain_would_accept() {
    let Some(r) = real() else { return };
    let m = Mounted::new(&r.ws);
    let inbox = r.ws.join("inbox");
    for dir in std::fs::read_dir(&inbox).unwrap() {
        let dir = dir.unwrap();
        if !dir.file_type().unwrap().is_dir() {
            continue;
        }
        let id = dir.file_name();
        let want: BTreeSet<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let name = e.file_name().into_string().ok()?;
                (e.file_type().unwrap().is_file() && common::drain::accepts(&name)).then_some(name)
            })
            .collect();
        let got: BTreeSet<String> = std::fs::read_dir(m.path("inbox").join(&id))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(got, want, "{id:?}");
    }
    // The deposits the script left pending are there, byte for byte.
    let rel = r.pending.strip_prefix(&r.ws).unwrap();
    let seen = std::fs::read(m.mnt.join(rel)).unwrap();
    assert_eq!(seen, std::fs::read(&r.pending).unwrap());
    assert!(String::from_utf8_lossy(&seen).ends_with(&r.pending_content));
}

#[test]
fn marks_read_as_git_says() {
    let Some(r) = real() else { return };
    let m = Mounted::new(&r.ws);
    let refs = String::from_utf8(r.git(&[
        "for-each-ref",
        "--format=%(refname) %(objecttype) %(objectname)",
        "refs/litany/",
    ]))
    .unwrap();
    let mut kinds = BTreeSet::new();
    let mut seen = 0;
    for line in refs.lines() {
        let mut parts = line.split(' ');
        let (name, otype, oid) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let rest = name.strip_prefix("refs/litany/").unwrap();
        let (kind, id) = rest.split_once('/').unwrap();
        kinds.insert(kind.to_string());
        let got = std::fs::read(m.path(&format!("marks/{kind}/{id}"))).unwrap();
        let want = if otype == "blob" {
            r.git(&["cat-file", "blob", oid])
        } else {
            format!("{oid}\n").into_bytes()
        };
        assert_eq!(got, want, "{name}");
        seen += 1;
    }
    assert!(
        kinds.contains("cwd") && kinds.contains("returned"),
        "{kinds:?}"
    );
    let listed: BTreeSet<String> = std::fs::read_dir(m.path("marks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(listed, kinds);
    assert!(seen >= 3);
    // The cwd mark is the path litany was given, with no newline.
    assert_eq!(
        std::fs::read(m.path(&format!("marks/cwd/{}", r.root_a))).unwrap(),
        r.cwd_a.as_os_str().as_encoded_bytes()
    );
}

#[test]
fn agents_and_names_read_as_git_says() {
    let Some(r) = real() else { return };
    let m = Mounted::new(&r.ws);
    let agents: BTreeSet<String> = r.agents().into_iter().collect();
    let listed: BTreeSet<String> = std::fs::read_dir(m.path("agents"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(listed, agents);
    let mut named = 0;
    for id in &agents {
        let files = String::from_utf8(r.git(&[
            "ls-tree",
            "-r",
            "--name-only",
            &format!("refs/heads/agents/{id}"),
        ]))
        .unwrap();
        let want: BTreeSet<PathBuf> = files.lines().map(PathBuf::from).collect();
        assert_eq!(find_files(&m.path(&format!("agents/{id}"))), want, "{id}");
        for f in &want {
            let spec = format!("refs/heads/agents/{id}:{}", f.display());
            assert_eq!(
                std::fs::read(m.path(&format!("agents/{id}")).join(f)).unwrap(),
                r.show(&spec).unwrap(),
                "{spec}"
            );
        }
        let name = String::from_utf8(
            r.show(&format!("refs/heads/agents/{id}:name"))
                .unwrap_or_default(),
        )
        .unwrap();
        let name = name.trim();
        if !name.is_empty() {
            named += 1;
            assert_eq!(
                std::fs::read_link(m.path(&format!("names/{name}"))).unwrap(),
                PathBuf::from(format!("../agents/{id}"))
            );
            assert_eq!(
                std::fs::read(m.path(&format!("names/{name}/goal.md"))).unwrap(),
                r.show(&format!("refs/heads/agents/{id}:goal.md")).unwrap()
            );
        }
    }
    assert!(named >= 3, "the script names Alpha, Beta and Gamma");
    assert_eq!(std::fs::read_dir(m.path("names")).unwrap().count(), named);
}

#[test]
fn a_step_the_harness_runs_shows_up_live_and_tail_follows_its_response() {
    let Some(bin) = harness::litany_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let r = RealWorkspace::build_with(&bin, &dir.path().join("rw")).unwrap();
    let m = Mounted::new(&r.ws);
    let backing = r.ws.join(format!("steps/{}", r.root_b));
    let steps = m.path(&format!("steps/{}", r.root_b));
    let before: BTreeSet<String> = std::fs::read_dir(&backing)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    // The fake adapter writes its events slowly, so response.json grows while we watch.
    let out = Command::new(&r.litany)
        .args(["message", "--"])
        .arg(&r.ws)
        .arg(&r.root_b)
        .arg("one more step")
        .env("LITANY_HOME", &r.home)
        .env("FAKE_BZ_LINE_DELAY", "0.25")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut response = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            response = std::fs::read_dir(&steps)
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().into_string().unwrap())
                .find(|n| !before.contains(n) && n.bytes().all(|b| b.is_ascii_digit()))
                .map(|n| steps.join(n).join("response.json"))
                .filter(|p| p.exists());
            response.is_some()
        }),
        "no new step with a response.json appeared under the mount"
    );
    let response = response.unwrap();
    let mut tail = Command::new("tail")
        .args(["-n", "+1", "-f", "-s", "0.1"])
        .arg(&response)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = tail.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) {
        let end = line.contains("\"type\":\"end\"");
        lines.push(line);
        if end {
            break;
        }
    }
    let _ = tail.kill();
    let _ = tail.wait();
    harness::wait_quiescent(&r.ws, Duration::from_secs(20)).expect("the harness settles");
    let rel = response.strip_prefix(&m.mnt).unwrap();
    let written = std::fs::read_to_string(r.ws.join(rel)).unwrap();
    let written: Vec<&str> = written.lines().collect();
    assert!(written.len() >= 5, "{written:?}");
    assert_eq!(
        lines,
        written[..lines.len()],
        "tail -f printed something the harness did not write"
    );
    assert!(
        lines.last().is_some_and(|l| l.contains("\"type\":\"end\"")),
        "tail -f never reached the end: {lines:?}"
    );
    // Once the harness is done, every record of the agent matches the disk.
    let want: BTreeSet<PathBuf> = find_files(&backing)
        .into_iter()
        .filter(|p| !p.to_string_lossy().ends_with(".tmp"))
        .collect();
    let records_only = |p: &PathBuf| {
        !(p.ends_with("stdout") || p.ends_with("stderr"))
            && p.file_name().is_none_or(|n| {
                n != litanyfs::tree::LATEST
                    && n != litanyfs::tree::RESPONSE_MD
                    && n != litanyfs::tree::TRANSCRIPT_MD
                    && n != litanyfs::tree::CTL
            })
    };
    assert!(eventually(Duration::from_secs(3), || find_files(&steps)
        .into_iter()
        .filter(records_only)
        .collect::<BTreeSet<_>>()
        == want));
    for rel in &want {
        assert_eq!(
            std::fs::read(backing.join(rel)).unwrap(),
            std::fs::read(steps.join(rel)).unwrap(),
            "{rel:?}"
        );
    }
}
