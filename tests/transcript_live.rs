//! `transcript.md` tells where a conversation stands, against the real litany 0.0.15 and
//! the fake adapter (`tests/harness/fake-bz`), through a real mount: a hung step streams
//! and, once `litany stop` ends it, is a wound; a running tool is in progress, then its
//! result; a `tool_control` hold is held until the control passes; pending mail shows as
//! the next entries; a compaction landed by litany's own compactor shows its summary; and
//! a real `tail -f` prints a step as it streams and nothing twice.
//!
//! Each test builds its own workspace (`Scene`) and leaves no process running.

mod common;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::harness;
use common::mount::Mounted;

/// How long a step of the fake adapter may take to show.
const PATIENCE: Duration = Duration::from_secs(60);

/// The states a live entry shows in its time's place (`src/records/format.rs`).
const STREAMING: &str = "streaming, in flight";
const CUT: &str = "cut, never committed";
const WAITING: &str = "waiting in the inbox";
const TIME_WIDTH: usize = 20;

/// A private litany home and workspace driven by the fake adapter, with configs:
/// `quiet` (the titler off, CONTRACT §8.4), `small` (quiet, compacting every 4 commits),
/// `gated` (quiet, with a tool control that holds every call until `<dir>/approved`
/// exists).
struct Scene {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    home: PathBuf,
    ws: PathBuf,
    bin: PathBuf,
}

impl Scene {
    fn new() -> Option<Scene> {
        // Without the pinned litany this fails, or is skipped and counted
        // (`LITANYFS_SKIP=litany`, tests/common/harness.rs).
        let bin = harness::litany_bin()?;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        let ws = root.join("ws");
        let s = Scene {
            _dir: dir,
            dir: root.clone(),
            home: home.clone(),
            ws: ws.clone(),
            bin,
        };
        s.ok(&["prime"]);
        let bin_dir = home.join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        let fake = bin_dir.join("fake-bz");
        std::fs::copy(harness::fake_bz_path(), &fake).unwrap();
        std::fs::write(
            home.join("models.yaml"),
            format!("adapter: {}\n", fake.display()),
        )
        .unwrap();
        let gate = bin_dir.join("gate");
        std::fs::write(
            &gate,
            format!(
                "#!/bin/sh\ncat >/dev/null\nif [ -e {approved} ]; then echo '{{\"verdict\":\"pass\"}}'; \
                 else echo '{{\"verdict\":\"hold\",\"reason\":\"a human must approve\"}}'; fi\n",
                approved = root.join("approved").display()
            ),
        )
        .unwrap();
        let strip = "grep -v 'dispatch(titler)\\|land_response(title)\\|titler_return\\|user_message' \"$1/workflow.yaml\"";
        let editors = [
            ("quiet", format!("{strip} >\"$1/w\"")),
            (
                "small",
                format!("{strip} | sed 's/^    n: 60$/    n: 4/' >\"$1/w\""),
            ),
            (
                "gated",
                format!(
                    "{{ {strip}; printf 'tool_control:\\n  command: {}\\n'; }} >\"$1/w\"",
                    gate.display()
                ),
            ),
        ];
        let created = s.ok(&["new", ws.to_str().unwrap()]);
        assert_eq!(created.trim(), ws.to_str().unwrap());
        for (name, edit) in editors {
            let editor = bin_dir.join(format!("edit-{name}"));
            std::fs::write(
                &editor,
                format!("#!/bin/sh\nset -eu\n{edit}\nmv \"$1/w\" \"$1/workflow.yaml\"\n"),
            )
            .unwrap();
            for p in [&editor, &gate, &fake] {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            let out = s
                .cmd(&["config", ws.to_str().unwrap(), name, "--from", "default"])
                .env("EDITOR", &editor)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(s)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("LITANY_HOME", &self.home)
            .env_remove("FAKE_BZ_LOG")
            .env_remove("FAKE_BZ_LINE_DELAY")
            .env_remove("FAKE_BZ_SCENARIO")
            .stdin(Stdio::null());
        c
    }

    /// Runs a verb that must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success(),
            "litany {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A new root agent on `config`, prompted with `text`, its first exchange done and
    /// the workspace quiet again.
    fn agent(&self, text: &str, config: &str) -> String {
        let id = self.ok(&[
            "prompt",
            self.ws.to_str().unwrap(),
            text,
            "--config",
            config,
        ]);
        self.settle();
        id.trim().to_string()
    }

    fn message(&self, id: &str, text: &str) {
        self.ok(&["message", self.ws.to_str().unwrap(), id, text]);
    }

    fn settle(&self) {
        harness::wait_quiescent(&self.ws, PATIENCE).expect("the harness settles");
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        // Whatever a failed test left hung: stop it, so no process outlives the test.
        if let Ok(rd) = std::fs::read_dir(self.ws.join("steps")) {
            for e in rd.flatten() {
                let _ = self
                    .cmd(&[
                        "stop",
                        self.ws.to_str().unwrap(),
                        &e.file_name().to_string_lossy(),
                    ])
                    .output();
            }
        }
        let _ = harness::wait_quiescent(&self.ws, Duration::from_secs(20));
    }
}

fn transcript(m: &Mounted, id: &str) -> String {
    let path = m.path(&format!("steps/{id}/transcript.md"));
    let bytes = std::fs::read(&path).unwrap();
    String::from_utf8(bytes).unwrap()
}

/// Polls `transcript.md` until `done` holds; the text it held then.
fn until(m: &Mounted, id: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = transcript(m, id);
        if done(&text) {
            return text;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "transcript.md never showed {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `live` with its one `state` replaced by the time at the same place in `later` is a
/// prefix of `later`: the commit overwrote the state, moved no byte, and only appended.
fn assert_grows_into(live: &str, state: &str, later: &str) {
    let at = live
        .rfind(state)
        .unwrap_or_else(|| panic!("no {state:?} in\n{live}"));
    let time = &later[at..at + TIME_WIDTH];
    assert!(
        time.starts_with("20") && time.ends_with('Z'),
        "{time:?} in\n{later}"
    );
    let mut expect = live.to_string();
    expect.replace_range(at..at + TIME_WIDTH, time);
    assert!(
        later.starts_with(&expect),
        "{expect}\n--- grew into ---\n{later}"
    );
}

#[test]
fn a_hung_step_streams_and_after_a_stop_is_a_wound() {
    let Some(s) = Scene::new() else { return };
    let id = s.agent("hi", "quiet");
    let m = Mounted::new(&s.ws);
    s.message(&id, "!hang now");
    let streaming = until(&m, &id, "the step streaming", |t| {
        t.contains(STREAMING) && t.ends_with("Working on it, slowly")
    });
    let step = streaming
        .rfind(&format!(" · {STREAMING}"))
        .map(|at| streaming[..at].rsplit("## ").next().unwrap().to_string())
        .unwrap();
    assert!(step.ends_with("claude-sonnet-5"), "{step}");
    s.ok(&["stop", s.ws.to_str().unwrap(), &id]);
    let wounded = until(&m, &id, "the wound", |t| t.contains("## wound · "));
    s.settle();
    // The streamed blocks stay where they were, the stop is named after them.
    let expect = streaming.replace(STREAMING, CUT);
    assert!(wounded.starts_with(&expect), "{expect}\n---\n{wounded}");
    let rest = &wounded[expect.len()..];
    assert!(
        rest.starts_with("\n\n### half stream: attempt 1 has no end event\n\n## wound · step 003 · stopped by `litany stop`"),
        "{rest}"
    );
    assert!(
        rest.contains(&format!("### last lines of steps/{id}/driver.log")),
        "{rest}"
    );
    assert_eq!(
        std::fs::metadata(m.path(&format!("steps/{id}/transcript.md")))
            .unwrap()
            .len(),
        transcript(&m, &id).len() as u64
    );
}

#[test]
fn a_running_tool_is_in_progress_then_its_result() {
    let Some(s) = Scene::new() else { return };
    let id = s.agent("hi", "quiet");
    let m = Mounted::new(&s.ws);
    s.message(&id, "!sleep 3");
    let running = until(&m, &id, "the tool in progress", |t| {
        t.contains(" tool · running since ")
    });
    assert!(running.ends_with("Z · bash (toolu_sleep)\n\n"), "{running}");
    let state = running.rsplit(" tool · ").next().unwrap()[..TIME_WIDTH].to_string();
    until(&m, &id, "the result", |t| t.contains("slept 3"));
    s.settle();
    let done = transcript(&m, &id);
    assert_grows_into(&running, &state, &done);
    assert!(done.contains("### tool_result toolu_sleep\n\nExit code: 0\nslept 3\n"));
    assert!(!done.contains("running since"), "{done}");
}

#[test]
fn a_held_call_is_held_until_the_control_passes() {
    let Some(s) = Scene::new() else { return };
    let id = s.agent("do it", "gated");
    let m = Mounted::new(&s.ws);
    let held = transcript(&m, &id);
    let gate = s.home.join("bin/gate");
    assert!(
        held.contains(&format!(
            "## held · bash (toolu_fake1) · a human must approve\n\nThe workflow's tool control \
             `{}` answered hold",
            gate.display()
        )),
        "{held}"
    );
    assert!(held.contains(&format!("`litany advance {} {id}`", s.ws.display())));
    // Released: the control passes at the next drive, the calls run, the hold is gone.
    std::fs::write(s.dir.join("approved"), b"").unwrap();
    s.ok(&["advance", s.ws.to_str().unwrap(), &id]);
    s.settle();
    let after = transcript(&m, &id);
    assert!(!after.contains("## held"), "{after}");
    assert!(after.contains("### tool_result toolu_fake1"), "{after}");
}

#[test]
fn pending_mail_shows_as_the_next_entries() {
    let Some(s) = Scene::new() else { return };
    let id = s.agent("hi", "quiet");
    let m = Mounted::new(&s.ws);
    let before = transcript(&m, &id);
    let waiting = {
        // Held like an executor would: the deposits wait, no driver starts.
        let _lock = harness::InboxLock::try_hold(&s.ws, &id).unwrap();
        s.message(&id, "first waiting");
        s.message(&id, "second waiting");
        let text = transcript(&m, &id);
        assert!(text.starts_with(&before));
        let tail = &text[before.len()..];
        assert!(
            tail.starts_with(&format!(
                "## 006 user · {WAITING} · from: user · deposited_at: "
            )),
            "{tail}"
        );
        assert!(
            tail.contains("\n\nfirst waiting\n\n## 007 user · "),
            "{tail}"
        );
        assert!(tail.ends_with("\n\nsecond waiting\n\n"), "{tail}");
        text
    };
    s.ok(&["scan", s.ws.to_str().unwrap()]);
    s.settle();
    let delivered = transcript(&m, &id);
    // Both states became the delivery times in place; the step that followed appended.
    let first = waiting.find(WAITING).unwrap();
    let mut expect = waiting.clone();
    expect.replace_range(
        first..first + TIME_WIDTH,
        &delivered[first..first + TIME_WIDTH],
    );
    assert_grows_into(&expect, WAITING, &delivered);
}

#[test]
fn a_compaction_landed_by_litany_shows_its_summary() {
    let Some(s) = Scene::new() else { return };
    // Compacting every 4 commits: the first exchange's checkpoint dispatches litany's own
    // compactor (the fake answers it with `write_summary`), which lands on return.
    let id = s.agent("hi", "small");
    let m = Mounted::new(&s.ws);
    let start = Instant::now();
    let text = loop {
        s.settle();
        let text = transcript(&m, &id);
        if text.contains("## compacted") || start.elapsed() > PATIENCE {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let listing = String::from_utf8(harness::git(
        &s.ws,
        &[
            "ls-tree",
            "--name-only",
            "-r",
            &format!("refs/heads/agents/{id}"),
        ],
    ))
    .unwrap();
    let summary = listing
        .lines()
        .find(|l| l.starts_with("summary/") && !l.ends_with(".refs.md"))
        .unwrap_or_else(|| panic!("no summary landed:\n{listing}"));
    let numbers: Vec<u32> = listing
        .lines()
        .filter_map(|l| l.strip_prefix("messages/")?.split('-').next()?.parse().ok())
        .collect();
    let hole = (1..*numbers.iter().max().unwrap())
        .filter(|n| !numbers.contains(n))
        .collect::<Vec<_>>();
    assert!(!hole.is_empty(), "{numbers:?}");
    let header = format!(
        "## compacted {:03} to {:03}\n\n### {summary}\n\nSummary by fake-bz: ",
        hole[0],
        hole[hole.len() - 1]
    );
    assert!(text.contains(&header), "{header}\n---\n{text}");
}

/// `tail -f`, a real process, on `transcript.md` while a step streams (30 deltas, 0.1 s
/// apart): it prints the words as they come, and at the end what it printed is the file
/// but for the states the commits overwrote in place; nothing twice, no truncation.
#[test]
fn tail_f_prints_the_step_as_it_streams_and_nothing_twice() {
    let Some(s) = Scene::new() else { return };
    let id = s.agent("hi", "quiet");
    let m = Mounted::new(&s.ws);
    let path = m.path(&format!("steps/{id}/transcript.md"));
    let mut tail = Command::new("tail")
        .args(["-c", "+1", "-f", "-s", "0.05"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = tail.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let out = s
        .cmd(&["message", s.ws.to_str().unwrap(), &id, "!stream"])
        .env("FAKE_BZ_LINE_DELAY", "0.1")
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut printed = Vec::new();
    let mut midway = false;
    let start = Instant::now();
    loop {
        while let Ok((_, chunk)) = rx.recv_timeout(Duration::from_millis(100)) {
            printed.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&printed);
        // Printed while the step still streamed: some words, not yet the last.
        if text.contains(" w5 ") && !text.contains("w30") {
            midway = true;
        }
        if text.contains("w30 \n\n### usage") || start.elapsed() > PATIENCE {
            break;
        }
    }
    s.settle();
    while let Ok((_, chunk)) = rx.recv_timeout(Duration::from_millis(500)) {
        printed.extend_from_slice(&chunk);
    }
    let _ = tail.kill();
    let mut err = String::new();
    let _ = tail.stderr.take().unwrap().read_to_string(&mut err);
    let _ = tail.wait();
    let printed = String::from_utf8(printed).unwrap();
    let file = transcript(&m, &id);
    assert!(
        midway,
        "tail -f showed no words while the step streamed:\n{printed}"
    );
    assert!(
        !err.contains("truncated"),
        "tail saw the file shrink: {err}"
    );
    assert_eq!(
        printed.len(),
        file.len(),
        "printed:\n{printed}\n--- file:\n{file}"
    );
    // Where they differ, tail printed a state whose slot the file has a time in since.
    let (p, f) = (printed.as_bytes(), file.as_bytes());
    let mut i = 0;
    while i < f.len() {
        if p[i] == f[i] {
            i += 1;
            continue;
        }
        let slot = printed[..=i].rfind(" · ").expect("a header's part") + " · ".len();
        let state = &printed[slot..slot + TIME_WIDTH];
        assert!(
            [STREAMING, WAITING].contains(&state) || state.starts_with("running since "),
            "tail printed {state:?} where the file has {:?}",
            &file[slot..slot + TIME_WIDTH]
        );
        let time = &file[slot..slot + TIME_WIDTH];
        assert!(
            time.starts_with("20") && time.ends_with('Z'),
            "{state} became {time:?}"
        );
        i = slot + TIME_WIDTH;
    }
    assert!(
        printed.contains(STREAMING),
        "tail printed the step while it streamed"
    );
    assert!(file.contains("w1 w2 w3"), "{file}");
    assert_eq!(file.matches("w30").count(), 1);
}
