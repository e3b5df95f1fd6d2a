//! `status`, `status.json`, `events` and `events.ndjson` on real mounts of workspaces the
//! real harness wrote (litany 0.0.15 driven offline by tests/harness/fake-bz):
//! - a finished workspace: the reconstructed history has every agent, step, tool and
//!   delivered or pending message the records hold, in time order, with paths that open
//!   under the mount, and `status.json` agrees with the refs, the inboxes and the steps;
//! - a live run: while a `tail -f events` process follows, `litany message` (with the
//!   lock held, so `status` says `running`), `litany scan`, a deposit through the mount,
//!   a slow model call (`in-flight`) ended by `litany stop` (`failed`), `litany dispatch`
//!   and `litany prompt` each show as their events, in order, once each.
//!
//! Without litany 0.0.15 they fail, unless `LITANYFS_SKIP` names `litany` (see
//! `litanyfs::testing::prereq`).

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::harness::{self, InboxLock, RealWorkspace};
use common::mount::{Mounted, eventually};
use litanyfs::testing::wait::wait_for;
use serde_json::Value;

/// How long anything asynchronous may take before the test fails (generous: the
/// machine may be busy; this is no performance assertion).
const DEADLINE: Duration = Duration::from_secs(20);

fn read(m: &Mounted, rel: &str) -> String {
    String::from_utf8(std::fs::read(m.path(rel)).expect(rel)).expect("UTF-8")
}

fn ndjson(m: &Mounted) -> Vec<Value> {
    read(m, "events.ndjson")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one object per line"))
        .collect()
}

fn status_json(m: &Mounted) -> Vec<Value> {
    match serde_json::from_str(&read(m, "status.json")).expect("status.json parses") {
        Value::Array(rows) => rows,
        other => panic!("not an array: {other}"),
    }
}

fn row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no row for {id}: {rows:?}"))
}

/// Deposits the drain would accept in `inbox/<id>` (CONTRACT §3.6).
fn pending(ws: &Path, id: &str) -> usize {
    std::fs::read_dir(ws.join("inbox").join(id))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| common::drain::accepts(n))
                .count()
        })
        .unwrap_or(0)
}

fn step_dirs(ws: &Path, id: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(ws.join("steps").join(id))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Waits until the history has been logged: the daemon says so once it has appended it
/// (`events: N events reconstructed from the records`).
fn settled_events(m: &Mounted) -> Vec<Value> {
    // Reading the events starts the follower, which starts the history.
    wait_for(
        || std::fs::metadata(m.path("events")).is_ok_and(|md| md.len() > 0),
        DEADLINE,
        "the first events",
    );
    wait_for(
        || {
            m.log_text()
                .contains(" events reconstructed from the records")
        },
        DEADLINE,
        "the history to be logged",
    );
    ndjson(m)
}

fn has(events: &[Value], kind: &str, agent: &str, path: &str) -> bool {
    events
        .iter()
        .any(|e| e["kind"] == kind && e["agent"] == agent && e["path"] == path)
}

#[test]
fn a_finished_workspace_is_reconstructed_and_its_status_agrees() {
    let Some(r) = harness::real_workspace() else {
        return;
    };
    let m = Mounted::new(&r.ws);
    let names: Vec<String> = std::fs::read_dir(&m.mnt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    for f in ["status", "status.json", "events", "events.ndjson"] {
        assert!(names.iter().any(|n| n == f), "{f} not listed: {names:?}");
    }
    let events = settled_events(&m);
    let text = read(&m, "events");
    assert_eq!(
        text.lines().count(),
        events.len(),
        "one line per event in both"
    );

    let agents = r.agents();
    assert!(agents.len() >= 4, "{agents:?}");
    for id in &agents {
        assert!(
            has(&events, "agent-created", id, &format!("agents/{id}")),
            "{id} created"
        );
        for step in step_dirs(&r.ws, id) {
            let dir = format!("steps/{id}/{step}");
            assert!(has(&events, "step-started", id, &dir), "{dir} started");
            let done = r.ws.join(&dir).join("meta.json").exists();
            let end = if done { "step-finished" } else { "step-failed" };
            assert!(has(&events, end, id, &dir), "{dir} {end}");
            let Ok(tools) = std::fs::read_dir(r.ws.join(&dir).join("tools")) else {
                continue;
            };
            for t in tools.flatten() {
                let t = t.file_name().into_string().unwrap();
                let tdir = format!("{dir}/tools/{t}");
                assert!(
                    has(&events, "tool-started", id, &format!("{tdir}/input.json")),
                    "{tdir} started"
                );
                assert!(
                    has(&events, "tool-finished", id, &format!("{tdir}/output.json")),
                    "{tdir} finished"
                );
            }
        }
    }
    // The two deposits left pending, at their inbox paths.
    for p in [&r.pending, &r.pending_agent] {
        let rel = p
            .strip_prefix(&r.ws)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            has(&events, "message-deposited", &r.root_a, &rel),
            "{rel} deposited"
        );
    }
    // Every delivered message is in the committed transcript it became.
    let delivered: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "message-delivered")
        .collect();
    assert!(delivered.len() >= agents.len(), "{delivered:?}");
    // Time order, and every path opens under the mount.
    let times: Vec<&str> = events.iter().map(|e| e["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    for e in &events {
        if let Some(p) = e["path"].as_str() {
            assert!(m.path(p).symlink_metadata().is_ok(), "{p} does not open");
        }
    }
    // Marks: one mark-set per mark ref.
    let marks = harness::git(
        &r.ws,
        &["for-each-ref", "--format=%(refname)", "refs/litany/"],
    );
    let marks = String::from_utf8(marks).unwrap();
    let sets = events.iter().filter(|e| e["kind"] == "mark-set").count();
    assert_eq!(sets, marks.lines().count(), "{marks}");

    // `cat events` ends.
    let mut cat = Command::new("cat")
        .arg(m.path("events"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = Vec::new();
    cat.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(cat.wait().unwrap().success());
    assert_eq!(out, text.as_bytes());

    // status.json: one row per agent branch; pending as the drain counts; nobody runs.
    let rows = status_json(&m);
    let ids: BTreeSet<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, agents.iter().map(String::as_str).collect());
    for id in &agents {
        let row = row(&rows, id);
        assert_eq!(row["pending"], pending(&r.ws, id), "{id}");
        let want = if pending(&r.ws, id) > 0 {
            "pending"
        } else {
            "idle"
        };
        assert_eq!(row["state"], want, "{id}");
        let steps = step_dirs(&r.ws, id);
        assert_eq!(
            row["step"].as_str(),
            steps.last().map(String::as_str),
            "{id}"
        );
    }
    assert_eq!(row(&rows, &r.titler_c)["parent"], r.root_c.as_str());
    assert_eq!(row(&rows, &r.root_a)["name"], "Alpha");
    assert!(
        row(&rows, &r.root_c)["marks"]
            .as_array()
            .unwrap()
            .contains(&"workflow".into())
    );
    let status = read(&m, "status");
    assert!(status.starts_with("workspace: "), "{status}");
    assert!(
        status.lines().nth(1).unwrap().starts_with("NAME "),
        "{status}"
    );
    let titler = status.lines().find(|l| l.contains(&r.titler_c)).unwrap();
    assert!(titler.starts_with("  "), "a child is indented: {status}");
}

/// `tail -f` of a mounted file, collected by a thread.
struct Tail {
    child: Child,
    out: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Tail {
    fn follow(path: &Path, from: u64) -> Self {
        let mut child = Command::new("tail")
            .arg("-c")
            .arg(format!("+{}", from + 1))
            .arg("-f")
            .arg(path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("tail");
        let mut stdout = child.stdout.take().unwrap();
        let out = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { child, out }
    }

    fn text(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Waits until a line containing every one of `parts` arrives.
    fn wait_for(&self, parts: &[&str]) -> String {
        let found = eventually(DEADLINE, || {
            self.text()
                .lines()
                .any(|l| parts.iter().all(|p| l.contains(p)))
        });
        let text = self.text();
        assert!(found, "no line with {parts:?} in tail -f:\n{text}");
        text
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The position of the first line holding every one of `parts`.
fn line_of(text: &str, parts: &[&str]) -> usize {
    text.lines()
        .position(|l| parts.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("no line with {parts:?}:\n{text}"))
}

#[test]
fn a_live_run_shows_in_status_and_in_tail_f() {
    let Some(bin) = harness::litany_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let r = RealWorkspace::build_with(&bin, &dir.path().join("real")).expect("workspace");
    let home = r.home.clone();
    let m = Mounted::with_env(
        &r.ws,
        &["--harness", bin.to_str().unwrap()],
        &[("LITANY_HOME", home.as_os_str())],
    );
    settled_events(&m);
    let start = std::fs::metadata(m.path("events")).unwrap().len();
    let tail = Tail::follow(&m.path("events"), start);
    let a = r.root_a.clone();
    let b = r.root_b.clone();

    // An executor holds Alpha's lock: running, and a message waits.
    let lock = InboxLock::try_hold(&r.ws, &a).unwrap();
    assert!(
        eventually(DEADLINE, || row(&status_json(&m), &a)["state"] == "running"),
        "{}",
        read(&m, "status")
    );
    assert_eq!(
        harness::locked_inboxes(&r.ws),
        vec![r.ws.join("inbox").join(&a)]
    );
    let (code, err) = harness::litany_message(&r.ws, &home, &a, "while locked", None);
    assert_eq!(code, 0, "{err}");
    tail.wait_for(&["message-deposited Alpha from=user", "through_mount=false"]);
    let rows = status_json(&m);
    assert_eq!(row(&rows, &a)["pending"], pending(&r.ws, &a));
    assert_eq!(row(&rows, &a)["pending"], 3);
    let alpha_line = read(&m, "status");
    let alpha_line = alpha_line.lines().find(|l| l.contains(&a)).unwrap();
    assert!(alpha_line.contains(" running "), "{alpha_line}");

    // Released and scanned: a driver drains all three and steps.
    drop(lock);
    let scan = harness::litany(&home, &["scan".as_ref(), r.ws.as_os_str()]);
    assert!(scan.status.success(), "{scan:?}");
    harness::wait_quiescent(&r.ws, Duration::from_secs(60)).expect("the harness settles");
    let next = step_dirs(&r.ws, &a).last().cloned().unwrap();
    let fin = format!("steps/{a}/{next}");
    let text = tail.wait_for(&["step-finished Alpha", &fin]);
    let deposited = line_of(&text, &["message-deposited Alpha"]);
    let delivered = line_of(&text, &["message-delivered Alpha"]);
    let started = line_of(&text, &["step-started Alpha", &fin]);
    let finished = line_of(&text, &["step-finished Alpha", &fin]);
    assert!(
        deposited < delivered && delivered < started && started < finished,
        "{text}"
    );
    assert!(
        eventually(DEADLINE, || {
            let rows = status_json(&m);
            let row = row(&rows, &a);
            row["state"] == "idle" && row["pending"] == 0 && row["step_state"] == "done"
        }),
        "{}",
        read(&m, "status")
    );

    // A deposit through the mount, and the driver it launches.
    std::fs::write(m.path(&format!("inbox/{b}/note")), "through the mount").unwrap();
    tail.wait_for(&["message-deposited Beta", "through_mount=true"]);
    tail.wait_for(&["woken Beta pid="]);
    harness::wait_quiescent(&r.ws, Duration::from_secs(60)).expect("the harness settles");
    let beta_last = step_dirs(&r.ws, &b).last().cloned().unwrap();
    tail.wait_for(&["step-finished Beta", &format!("steps/{b}/{beta_last}")]);

    // A slow model call (the driver inherits the adapter's delay): in flight while it
    // streams, then stopped, and failed.
    let slow = Command::new(&bin)
        .args(["message".as_ref(), "--".as_ref(), r.ws.as_os_str()])
        .args([b.as_str(), "slowly"])
        .env("LITANY_HOME", &home)
        .env("FAKE_BZ_LINE_DELAY", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(slow.status.success(), "{slow:?}");
    assert!(
        eventually(DEADLINE, || {
            let rows = status_json(&m);
            let row = row(&rows, &b);
            row["state"] == "running" && row["step_state"] == "in-flight"
        }),
        "{}",
        read(&m, "status")
    );
    let flight = step_dirs(&r.ws, &b).last().cloned().unwrap();
    let flight_path = format!("steps/{b}/{flight}");
    assert!(!r.ws.join(&flight_path).join("meta.json").exists());
    tail.wait_for(&["step-started Beta", &flight_path]);
    let stop = harness::litany(&home, &["stop".as_ref(), r.ws.as_os_str(), b.as_ref()]);
    assert!(stop.status.success(), "{stop:?}");
    harness::wait_quiescent(&r.ws, Duration::from_secs(60)).expect("the harness settles");
    tail.wait_for(&["step-failed Beta", &flight_path]);
    let rows = status_json(&m);
    assert_eq!(row(&rows, &b)["step"], flight.as_str(), "{rows:?}");
    assert_eq!(row(&rows, &b)["step_state"], "failed", "{rows:?}");

    // A child dispatched under Alpha.
    let out = harness::litany(
        &home,
        &[
            "dispatch".as_ref(),
            "worker".as_ref(),
            r.ws.as_os_str(),
            a.as_ref(),
            "--goal".as_ref(),
            "count to three".as_ref(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let child = String::from_utf8(out.stdout).unwrap().trim().to_string();
    tail.wait_for(&[
        "agent-created",
        &format!("parent={a}"),
        &format!("agents/{child}"),
    ]);
    harness::wait_quiescent(&r.ws, Duration::from_secs(60)).expect("the harness settles");
    let status = read(&m, "status");
    let child_line = status.lines().find(|l| l.contains(&child)).unwrap();
    assert!(
        child_line.starts_with("  "),
        "indented under Alpha:\n{status}"
    );
    assert_eq!(row(&status_json(&m), &child)["parent"], a.as_str());

    // A new agent.
    let out = harness::litany(
        &home,
        &[
            "prompt".as_ref(),
            r.ws.as_os_str(),
            "hello".as_ref(),
            "--name".as_ref(),
            "Delta".as_ref(),
            "--config".as_ref(),
            "quiet".as_ref(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let d = String::from_utf8(out.stdout).unwrap().trim().to_string();
    // The branch points at its config commit before its dispatch commit names it; the
    // creation is told once it is born, with its name.
    tail.wait_for(&["agent-created Delta", &format!("agents/{d}")]);
    tail.wait_for(&["tool-finished Delta", "exit_code=0"]);
    harness::wait_quiescent(&r.ws, Duration::from_secs(60)).expect("the harness settles");
    let d_last = step_dirs(&r.ws, &d).last().cloned().unwrap();
    let text = tail.wait_for(&["step-finished Delta", &format!("steps/{d}/{d_last}")]);
    assert!(
        line_of(&text, &["agent-created", &format!("agents/{d}")])
            < line_of(&text, &["step-started Delta"]),
        "{text}"
    );

    // Nothing twice: every line of the live part is unique, and the log the tail saw is
    // exactly the file's end.
    let lines: Vec<&str> = text.lines().collect();
    let unique: BTreeSet<&str> = lines.iter().copied().collect();
    assert_eq!(unique.len(), lines.len(), "a line shown twice:\n{text}");
    let whole = read(&m, "events");
    assert!(whole.ends_with(&text) || whole[start as usize..].starts_with(&text));
    let ndjson = ndjson(&m);
    assert_eq!(ndjson.len(), whole.lines().count());
    assert!(
        ndjson
            .iter()
            .any(|e| e["kind"] == "woken" && e["agent"] == b.as_str())
    );
    assert!(
        ndjson
            .iter()
            .any(|e| e["through_mount"] == true && e["agent"] == b.as_str())
    );
    let status = read(&m, "status");
    assert!(status.lines().any(|l| l.starts_with("Delta ")), "{status}");
    drop(tail);
    drop(m);
}

#[test]
fn a_confined_mount_shows_its_agent_and_what_git_shows_of_the_others() {
    let Some(r) = harness::real_workspace() else {
        return;
    };
    let m = Mounted::with_args(&r.ws, &["--agent", &r.root_a]);
    let events = settled_events(&m);
    let mine = |e: &Value| e["agent"] == r.root_a.as_str() || e["from"] == r.root_a.as_str();
    for e in &events {
        let kind = e["kind"].as_str().unwrap();
        let public = matches!(
            kind,
            "agent-created" | "agent-deleted" | "mark-set" | "mark-cleared"
        );
        assert!(public || mine(e), "not {}'s to see: {e}", r.root_a);
    }
    assert!(has(
        &events,
        "step-started",
        &r.root_a,
        &format!("steps/{}/001", r.root_a)
    ));
    assert!(has(
        &events,
        "agent-created",
        &r.root_b,
        &format!("agents/{}", r.root_b)
    ));
    assert!(
        !events
            .iter()
            .any(|e| e["kind"] == "step-started" && e["agent"] == r.root_b.as_str())
    );
    // Alpha's result to Beta was Alpha's own deposit.
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "message-deposited" && e["agent"] == r.root_b.as_str()),
        "{events:?}"
    );
    let rows = status_json(&m);
    assert_eq!(row(&rows, &r.root_a)["state"], "pending");
    assert_eq!(row(&rows, &r.root_a)["pending"], 2);
    let beta = row(&rows, &r.root_b);
    assert_eq!(
        (beta["state"].as_str(), &beta["step"]),
        (Some("-"), &Value::Null)
    );
    assert_eq!(beta["name"], "Beta");
}
