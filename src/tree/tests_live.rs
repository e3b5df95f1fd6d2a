//! `transcript.md`'s live tail over fixture workspaces: which facts of the step records,
//! the inbox and the marks show as which section ([`super::live`]), and an open file
//! following them.

use std::os::fd::AsRawFd;

use super::*;
use crate::fixture::Fixture;
use crate::records::format::{CUT, STREAMING, WAITING};
use crate::workspace::refs::{Flavour, agent_ref};

const A: &str = "20261202T094226Z-0122ccc2";
const USER: &[u8] = b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:26Z\n---\nhello";
const REQUEST: &[u8] = b"{\n  \"max_tokens\": 4096,\n  \"messages\": [],\n  \"model\": \"claude-sonnet-5\",\n  \"tools\": []\n}";

/// Agent A with its first entry committed, and its tree.
fn setup() -> (tempfile::TempDir, Fixture, Tree, git2::Oid) {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    let tip = f
        .agent(A, Some("Alpha"), &[("messages/001-user.md", USER)])
        .unwrap();
    std::fs::create_dir_all(f.inbox(A)).unwrap();
    std::fs::create_dir_all(f.root().join("steps").join(A)).unwrap();
    let tree = Tree::new(Workspace::open(f.root()).unwrap()).unwrap();
    (t, f, tree, tip)
}

/// Holds `inbox/<id>` as litany's executor does (a `FLOCK` on the directory) while alive
/// (the descriptor is kept for its lock).
struct Executor(#[allow(dead_code)] std::fs::File);

impl Executor {
    fn hold(f: &Fixture, id: &str) -> Self {
        let dir = std::fs::File::open(f.inbox(id)).unwrap();
        // SAFETY: flock on a descriptor this value owns.
        assert_eq!(unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) }, 0);
        Executor(dir)
    }
}

fn transcript(tree: &Tree) -> String {
    let node = Node::record(RecordView::Transcript { agent: A.into() });
    let attr = tree.getattr(&node).unwrap();
    let opened = tree.open(&node, &attr.identity, OpenMode::Read).unwrap();
    let bytes = tree.read(&node, &opened.content, 0, 1 << 24).unwrap();
    assert_eq!(attr.size, bytes.len() as u64, "stat is exact");
    String::from_utf8(bytes).unwrap()
}

/// Adds a commit to A's branch holding `files` on top of its tree.
fn commit(f: &Fixture, files: &[(&str, &[u8])], subject: &str) -> git2::Oid {
    let mut all: Vec<(&str, &[u8])> = vec![
        ("goal.md", b"Do the thing.\n"),
        ("soul.md", b"You are careful.\n"),
        ("name", b"Alpha\n"),
        ("messages/001-user.md", USER),
    ];
    all.extend_from_slice(files);
    let tree = f.tree(&all).unwrap();
    f.commit(&agent_ref(A), tree, subject).unwrap()
}

fn lines(events: &[&str]) -> Vec<u8> {
    events
        .iter()
        .flat_map(|e| format!("{e}\n").into_bytes())
        .collect()
}

const START: &str = r#"{"type":"message_start","v":1,"id":"m1","model":"fake","role":"assistant"}"#;
const TEXT: &str = r#"{"type":"content_start","index":0,"kind":{"text":{}}}"#;
const WORDS: &str = r#"{"type":"content_delta","index":0,"delta":{"text_delta":"Working on it"}}"#;
const STOP: &str = r#"{"type":"content_stop","index":0}"#;
const FINISH: &str = r#"{"type":"finish","reason":"stop"}"#;
const END: &str = r#"{"type":"end"}"#;

#[test]
fn a_step_streams_until_its_entry_is_committed() {
    let (_t, f, tree, tip) = setup();
    let _executor = Executor::hold(&f, A);
    f.step(
        A,
        1,
        &[
            ("request.json", REQUEST),
            ("response.json", &lines(&[START, TEXT, WORDS])),
            ("staging.json", b"{\"content\":["),
            ("stderr.log", b""),
        ],
    )
    .unwrap();
    let streaming = transcript(&tree);
    assert!(
        streaming.ends_with(&format!(
            "## 002 claude-sonnet-5 · {STREAMING}\n\n### text\n\nWorking on it"
        )),
        "{streaming}"
    );
    // The stream ends: the view only grew.
    let mut response = std::fs::OpenOptions::new()
        .append(true)
        .open(f.step_dir(A, 1).join("response.json"))
        .unwrap();
    std::io::Write::write_all(&mut response, &lines(&[STOP, FINISH, END])).unwrap();
    let ended = transcript(&tree);
    assert!(ended.starts_with(&streaming), "{ended}");
    assert!(ended.ends_with("Working on it\n\n"), "{ended}");
    let streaming = ended;
    // The call ended: meta.json names the tip the step started from, staging.json is
    // renamed into the worktree, the commit is not there yet. Still the stream.
    f.step(
        A,
        1,
        &[(
            "meta.json",
            format!("{{\"commit\": \"{tip}\", \"started_at\": \"2026-12-02T09:42:27Z\"}}")
                .as_bytes(),
        )],
    )
    .unwrap();
    std::fs::remove_file(f.step_dir(A, 1).join("staging.json")).unwrap();
    assert_eq!(transcript(&tree), streaming);
    // The commit lands: the entry, and nothing live.
    commit(
        &f,
        &[(
            "messages/002-claude-sonnet-5.json",
            br#"{"content":[{"type":"text","text":"Working on it"}]}"#,
        )],
        &format!("transcript 002: claude-sonnet-5 [{A}]"),
    );
    tree.refs_changed();
    let committed = transcript(&tree);
    assert!(!committed.contains(STREAMING), "{committed}");
    let at = streaming.find(STREAMING).unwrap();
    assert_eq!(committed[..at], streaming[..at]);
    assert_eq!(
        committed[at + STREAMING.len()..],
        streaming[at + STREAMING.len()..]
    );
}

#[test]
fn a_stopped_step_is_cut_and_wounded() {
    let (_t, f, tree, tip) = setup();
    f.step(
        A,
        1,
        &[
            ("request.json", REQUEST),
            ("response.json", &lines(&[START, TEXT, WORDS])),
            ("staging.json", b"{\"content\":["),
            ("stderr.log", b"first\nsecond\n"),
        ],
    )
    .unwrap();
    let got = transcript(&tree);
    assert!(
        got.contains(&format!("## 002 claude-sonnet-5 · {CUT}\n\n")),
        "{got}"
    );
    assert!(
        got.contains("## wound · step 001 · cut mid-stream, no end event"),
        "{got}"
    );
    assert!(got.ends_with(&format!(
        "### last lines of steps/{A}/001/stderr.log\n\n```text\nfirst\nsecond\n```\n\n"
    )));
    // An empty stderr.log: the driver's log instead; a stop's mark at the tip names it.
    std::fs::write(f.step_dir(A, 1).join("stderr.log"), b"").unwrap();
    std::fs::write(
        f.root().join("steps").join(A).join("driver.log"),
        b"litany: notice: x\n",
    )
    .unwrap();
    f.commit_mark("abandoned", A, tip).unwrap();
    tree.refs_changed();
    let got = transcript(&tree);
    assert!(
        got.contains("## wound · step 001 · stopped by `litany stop`"),
        "{got}"
    );
    assert!(got.ends_with(&format!(
        "### last lines of steps/{A}/driver.log\n\n```text\nlitany: notice: x\n```\n\n"
    )));
    // A step that never reached the model: no request.
    std::fs::create_dir_all(f.step_dir(A, 2)).unwrap();
    let got = transcript(&tree);
    assert!(!got.contains(CUT), "the newest step is 002 now");
    assert!(
        got.contains("## wound · step 002 · stopped by `litany stop`"),
        "{got}"
    );
}

#[test]
fn a_running_tool_is_in_progress_and_a_held_call_says_what_releases_it() {
    let (_t, f, tree, tip) = setup();
    let call = br#"{"content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"sleep 9"}}]}"#;
    let config = f
        .commit(
            "refs/heads/config/held",
            f.tree(&[("workflow.yaml", b"tool_control:\n  command: /opt/gate\n")])
                .unwrap(),
            "config: held",
        )
        .unwrap();
    let now = commit(
        &f,
        &[("messages/002-claude-sonnet-5.json", call)],
        &format!("transcript 002: claude-sonnet-5 [{A}]"),
    );
    f.step(
        A,
        1,
        &[
            ("request.json", REQUEST),
            ("response.json", b""),
            (
                "meta.json",
                format!("{{\"commit\": \"{tip}\", \"workflow_commit\": \"{config}\"}}").as_bytes(),
            ),
            ("tools/toolu_1/input.json", b"{\"id\":\"toolu_1\"}"),
        ],
    )
    .unwrap();
    let _ = now;
    // Nobody runs it: nothing is in progress.
    assert!(!transcript(&tree).contains("running since"));
    let executor = Executor::hold(&f, A);
    let got = transcript(&tree);
    assert!(
        got.contains("## 003 tool · running since ") && got.ends_with("Z · bash (toolu_1)\n\n"),
        "{got}"
    );
    // Its result: the entry, and nothing live.
    std::fs::write(
        f.step_dir(A, 1).join("tools/toolu_1/output.json"),
        Fixture::tool_output("", "", 0),
    )
    .unwrap();
    assert!(!transcript(&tree).contains("running since"));
    drop(executor);

    // Held instead: the mark, and the control from the step's workflow commit.
    std::fs::remove_dir_all(f.step_dir(A, 1).join("tools")).unwrap();
    f.blob_mark(
        "held",
        A,
        br#"{"tool_use_id":"toolu_1","tool":"bash","reason":"ask a human"}"#,
    )
    .unwrap();
    tree.refs_changed();
    let got = transcript(&tree);
    assert!(
        got.contains(
            "## held · bash (toolu_1) · ask a human\n\nThe workflow's tool control `/opt/gate` \
             answered hold"
        ),
        "{got}"
    );
    assert!(got.contains(&format!("`litany advance {} {A}`", f.root().display())));
}

#[test]
fn waiting_deposits_are_the_next_entries_in_drain_order() {
    let (_t, f, tree, _) = setup();
    let older = f
        .inbox_file(A, "user-009.md", b"---\nfrom: user\n---\nfirst")
        .unwrap();
    f.inbox_file(A, "user-002.md", b"---\nfrom: user\n---\nsecond")
        .unwrap();
    f.inbox_file(A, ".user-003.md.tmp", b"half").unwrap();
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&older)
        .unwrap()
        .set_modified(past)
        .unwrap();
    let got = transcript(&tree);
    let tail = &got[got.find("## 002").unwrap()..];
    assert_eq!(
        tail,
        format!(
            "## 002 user · {WAITING} · from: user\n\nfirst\n\n## 003 user · {WAITING} · \
             from: user\n\nsecond\n\n"
        )
    );
}

/// A delivery renames the deposit into the worktree, and the inbox is listed before the
/// worktree: caught between the two, the one file is in both listings. It shows once,
/// where the commit will put it; twice would make the file shrink under `tail -f`.
#[test]
fn a_deposit_caught_mid_delivery_shows_once() {
    let (_t, f, tree, parent) = setup();
    // A step whose entry is committed (its `meta.json` names the tip's parent), and its
    // executor still holding the agent: when a drain runs.
    let tip = commit(&f, &[], "transcript 002: x");
    assert_ne!(parent, tip);
    f.step(
        A,
        1,
        &[
            ("request.json", REQUEST),
            ("response.json", b""),
            (
                "meta.json",
                format!("{{\"commit\": \"{parent}\"}}").as_bytes(),
            ),
        ],
    )
    .unwrap();
    let _executor = Executor::hold(&f, A);
    let deposit = f
        .inbox_file(A, "user-002.md", b"---\nfrom: user\n---\nsecond")
        .unwrap();
    let messages = f.root().join("agents").join(A).join("messages");
    std::fs::create_dir_all(&messages).unwrap();
    // Both names of one inode: what the two listings see across the rename.
    std::fs::hard_link(&deposit, messages.join("002-user.md")).unwrap();
    let got = transcript(&tree);
    assert_eq!(got.matches("second").count(), 1, "{got}");
    assert!(got.contains(&format!("## 002 user · {WAITING}")), "{got}");
    assert!(!got.contains("## 003"), "{got}");
}

/// An open `transcript.md` reads one view while reads fall inside it, and follows the
/// agent from its end, as `tail -f` reads it.
#[test]
fn an_open_transcript_follows_from_its_end() {
    let (_t, f, tree, _) = setup();
    let node = Node::record(RecordView::Transcript { agent: A.into() });
    let attr = tree.getattr(&node).unwrap();
    let opened = tree.open(&node, &attr.identity, OpenMode::Read).unwrap();
    assert!(opened.direct_io);
    let len = attr.size;
    let first = tree.read(&node, &opened.content, 0, 10).unwrap();
    f.inbox_file(A, "user-002.md", USER).unwrap();
    // Inside the view: its bytes, though the file grew.
    assert_eq!(tree.read(&node, &opened.content, 0, 10).unwrap(), first);
    // From the end: what was added.
    let added = tree.read(&node, &opened.content, len, 1 << 20).unwrap();
    assert!(
        String::from_utf8(added)
            .unwrap()
            .starts_with(&format!("## 002 user · {WAITING}")),
    );
    assert_eq!(
        tree.getattr(&node).unwrap().size,
        transcript(&tree).len() as u64
    );
}
