//! Transcripts over a fixture repository: order, times, growth and rewritten history.

use crate::fixture::Fixture;
use crate::records::Records;
use crate::workspace::refs::{Flavour, Refs, agent_ref};

const ID: &str = "a1";

/// An agent whose branch gains one `transcript NNN:` commit per entry.
pub(super) struct Branch {
    pub(super) _dir: tempfile::TempDir,
    pub(super) f: Fixture,
    pub(super) files: Vec<(String, Vec<u8>)>,
}

impl Branch {
    pub(super) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let f = Fixture::create(&dir.path().join("ws"), Flavour::Litany).unwrap();
        f.agent(ID, Some("Alpha"), &[]).unwrap();
        Branch {
            _dir: dir,
            f,
            files: Vec::new(),
        }
    }

    pub(super) fn tree(&self) -> git2::Oid {
        let files: Vec<(&str, &[u8])> = self
            .files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        self.f.tree(&files).unwrap()
    }

    pub(super) fn add(&mut self, name: &str, bytes: &[u8]) -> git2::Oid {
        self.files
            .push((format!("messages/{name}"), bytes.to_vec()));
        let (number, rest) = name.split_once('-').unwrap();
        let origin = rest.rsplit_once('.').unwrap().0;
        let tree = self.tree();
        self.f
            .commit_at(
                &agent_ref(ID),
                tree,
                &format!("transcript {number}: {origin} [{ID}]"),
                COMMITTED,
            )
            .unwrap()
    }

    pub(super) fn refs(&self) -> Refs {
        Refs::open(&self.f.root().join("repo.git")).unwrap()
    }
}

pub(super) const USER: &[u8] =
    b"---\nfrom: user\ndeposited_at: 2026-12-02T18:08:10Z\n---\nhello alpha";
pub(super) const MODEL: &[u8] =
    br#"{"content":[{"type":"text","text":"done"}],"usage":{"input_tokens":20,"output_tokens":1}}"#;
pub(super) const TOOL: &[u8] = br#"[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"Exit code: 0\n"}],"is_error":false}]"#;

/// When the fixture's transcript commits are made, and how a header shows it.
const COMMITTED: i64 = 1_796_204_571;
const COMMITTED_UTC: &str = "2026-12-02T09:42:51Z";

#[test]
fn entries_render_in_number_order_with_their_commit_times() {
    let mut b = Branch::new();
    b.add("001-user.md", USER);
    b.add("002-claude-sonnet-5.json", MODEL);
    b.add("003-tool.json", TOOL);
    // 1000 sorts after 003 by number, not by name; a name without a number is no entry.
    b.add("1000-claude-sonnet-5.json", MODEL);
    let tip = b.add("999-tool.json", TOOL);
    b.files.push(("messages/notes.md".into(), b"x".to_vec()));
    let tree = b.tree();
    let _ = tip;
    let tip =
        b.f.commit_at(&agent_ref(ID), tree, "stray", COMMITTED)
            .unwrap();
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let got = String::from_utf8(records.transcript(&refs, tip).unwrap().to_vec()).unwrap();
    let headers: Vec<&str> = got
        .lines()
        .filter(|l| l.starts_with("## ") && !l.starts_with("## compacted"))
        .collect();
    let numbers: Vec<&str> = headers
        .iter()
        .map(|h| h.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(numbers, ["001", "002", "003", "999", "1000"], "{got}");
    // The numbers litany never reached are a hole: shown where they were.
    assert!(
        got.contains("\n## compacted 004 to 998\n\n## 999 tool"),
        "{got}"
    );
    assert!(
        headers.iter().all(|h| h.contains(COMMITTED_UTC)),
        "{headers:?}"
    );
    assert!(
        got.starts_with(&format!("## 001 user · {COMMITTED_UTC}")),
        "{got}"
    );
    assert!(got.contains(
        " · from: user · deposited_at: 2026-12-02T18:08:10Z\n\nhello alpha\n\n## 002 claude-sonnet-5 · "
    ));
    assert!(got.contains(
        "\n\n### text\n\ndone\n\n### usage input_tokens=20 output_tokens=1\n\n## 003 tool · "
    ));
    assert!(got.contains("\n\n### tool_result t1\n\nExit code: 0\n\n\n## compacted 004"));
}

#[test]
fn a_growing_branch_extends_its_rendering_and_a_rewrite_renders_afresh() {
    let mut b = Branch::new();
    b.add("001-user.md", USER);
    let t1 = b.add("002-claude-sonnet-5.json", MODEL);
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let first = records.transcript(&refs, t1).unwrap();
    let t2 = b.add("003-tool.json", TOOL);
    let second = records.transcript(&refs, t2).unwrap();
    assert!(second.starts_with(&first));
    assert_eq!(
        records.entries(),
        1,
        "the extended tip replaces the one it grew from"
    );
    // The same tip, asked again: the same bytes, not a new rendering.
    assert!(std::sync::Arc::ptr_eq(
        &second,
        &records.transcript(&refs, t2).unwrap()
    ));
    // Extended or fresh, the bytes are the same.
    let fresh = Records::new(1 << 20).transcript(&refs, t2).unwrap();
    assert_eq!(second, fresh);

    // A compaction landing: a new root commit whose tree lost entry 001 and kept 002
    // (carried over, so no commit names it), then a replayed 003.
    b.files.remove(0);
    b.files.pop();
    let tree = b.tree();
    let repo = b.f.repo();
    let sig = git2::Signature::now("litany", "litany@localhost").unwrap();
    let base = repo
        .commit(
            None,
            &sig,
            &sig,
            "compaction base",
            &repo.find_tree(tree).unwrap(),
            &[],
        )
        .unwrap();
    repo.reference(&agent_ref(ID), base, true, "compaction")
        .unwrap();
    let t3 = b.add("003-tool.json", TOOL);
    let third = String::from_utf8(records.transcript(&refs, t3).unwrap().to_vec()).unwrap();
    assert!(
        third.starts_with("## compacted 001\n\n## 002 claude-sonnet-5 · time unknown\n\n"),
        "{third}"
    );
    assert!(!third.contains("## 001"), "{third}");
    assert!(third.contains("## 003 tool · 2"), "{third}");
    assert_eq!(records.entries(), 2);
}

/// A compaction's hole is shown where it was, with the summaries at the tip under the
/// last hole (an extract, `NNN.refs.md`, is no summary); a compaction that left no hole
/// (the next entry reused the first free number) shows its summaries after the first
/// entry.
#[test]
fn compacted_entries_are_a_section_with_the_summaries_at_the_tip() {
    let mut b = Branch::new();
    b.files
        .push(("summary/001.md".into(), b"first pass summary".to_vec()));
    b.files
        .push(("summary/002.md".into(), b"second pass summary".to_vec()));
    b.files
        .push(("summary/002.refs.md".into(), b"an extract".to_vec()));
    b.add("001-user.md", USER);
    b.add("003-claude-sonnet-5.json", MODEL);
    let tip = b.add("007-tool.json", TOOL);
    let refs = b.refs();
    let got = String::from_utf8(
        Records::new(1 << 20)
            .transcript(&refs, tip)
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    let headers: Vec<&str> = got.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(
        headers
            .iter()
            .map(|h| h.split(" · ").next().unwrap())
            .collect::<Vec<_>>(),
        [
            "## 001 user",
            "## compacted 002",
            "## 003 claude-sonnet-5",
            "### text",
            "### usage input_tokens=20 output_tokens=1",
            "## compacted 004 to 006",
            "### summary/001.md",
            "### summary/002.md",
            "## 007 tool",
            "### tool_result t1",
        ],
        "{got}"
    );
    assert!(got.contains(
        "## compacted 004 to 006\n\n### summary/001.md\n\nfirst pass summary\n\n\
         ### summary/002.md\n\nsecond pass summary\n\n## 007 tool"
    ));
    assert!(!got.contains("an extract"));

    let mut b = Branch::new();
    b.files
        .push(("summary/001.md".into(), b"all of it".to_vec()));
    b.add("001-user.md", USER);
    let tip = b.add("002-claude-sonnet-5.json", MODEL);
    let got = String::from_utf8(
        Records::new(1 << 20)
            .transcript(&b.refs(), tip)
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(
        got.contains("hello alpha\n\n## compacted\n\n### summary/001.md\n\nall of it\n\n## 002 "),
        "{got}"
    );
}

#[test]
fn a_tip_without_messages_renders_empty() {
    let b = Branch::new();
    let refs = b.refs();
    let tip = b.f.agent_tip(ID).unwrap();
    assert!(
        Records::new(1024)
            .transcript(&refs, tip)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn lernie_entries_render_the_same_way_without_usage() {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::create(&dir.path().join("ws"), Flavour::Lernie).unwrap();
    let user = b"---\nfrom: user\ndeposited_at: 2026-01-01T00:00:00Z\n---\nhi";
    // lernie: a bare block array named `assistant`, thinking without a signature, and a
    // cut marker with no read_tool_output address.
    let model = br#"[{"type":"thinking","text":"hm"},{"type":"text","text":"ok"}]"#;
    let marker = "[... stdout truncated: 9 bytes / 1 lines total; showing the first 2 and last 2 bytes; full record: steps/a1/001/tools/t/output.json ...]";
    let tool = serde_json::to_vec(&serde_json::json!([{
        "type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": marker}]
    }]))
    .unwrap();
    let mut files: Vec<(&str, &[u8])> = vec![("messages/001-user.md", user)];
    f.commit_at(
        &agent_ref(ID),
        f.tree(&files).unwrap(),
        "transcript 001: user [a1]",
        COMMITTED,
    )
    .unwrap();
    files.push(("messages/002-assistant.json", model));
    f.commit_at(
        &agent_ref(ID),
        f.tree(&files).unwrap(),
        "transcript 002: assistant [a1]",
        COMMITTED,
    )
    .unwrap();
    files.push(("messages/003-tool.json", &tool));
    let tip = f
        .commit(
            &agent_ref(ID),
            f.tree(&files).unwrap(),
            "transcript 003: tool [a1]",
        )
        .unwrap();
    let refs = Refs::open(&f.root().join("repo.git")).unwrap();
    let got = String::from_utf8(
        Records::new(1 << 20)
            .transcript(&refs, tip)
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(
        got.contains(&format!("\n\nhi\n\n## 002 assistant · {COMMITTED_UTC}")),
        "{got}"
    );
    assert!(
        got.contains("\n\n### thinking\n\nhm\n\n### text\n\nok\n\n## 003 tool"),
        "{got}"
    );
    assert!(!got.contains("### usage"), "{got}");
    assert!(
        got.ends_with(&format!("### tool_result t\n\n{marker}\n\n")),
        "{got}"
    );
}

/// A transcript past its bound keeps its newest entries, says how many it left out, and
/// shows an entry too large on its own as a line naming its size.
#[test]
fn a_transcript_keeps_its_newest_entries_within_its_bound() {
    use crate::records::transcript::MAX_TRANSCRIPT_BYTES;
    let mut b = Branch::new();
    let part = MAX_TRANSCRIPT_BYTES / 4 + MAX_TRANSCRIPT_BYTES / 16;
    let body = |c: char| {
        let mut m = b"---\nfrom: user\n---\n".to_vec();
        m.extend(std::iter::repeat_n(c as u8, part));
        m
    };
    b.add("001-user.md", &body('a'));
    b.add("002-user.md", &body('b'));
    let t3 = b.add("003-user.md", &body('c'));
    let refs = b.refs();
    let records = Records::new(64 << 20);
    let whole = records.transcript(&refs, t3).unwrap();
    assert!(whole.starts_with(b"## 001 user"), "three fit");
    // A fourth would pass the bound: rendered afresh, the oldest left out.
    let t4 = b.add("004-user.md", &body('d'));
    let got = records.transcript(&refs, t4).unwrap();
    assert!(got.len() <= MAX_TRANSCRIPT_BYTES, "{}", got.len());
    let text = String::from_utf8_lossy(&got);
    let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
    assert!(
        headers[0].starts_with("## 1 earlier entries left out"),
        "{headers:?}"
    );
    assert_eq!(headers.len(), 4, "{headers:?}");
    assert!(headers[1].starts_with("## 002 user") && headers[3].starts_with("## 004 user"));
    // An entry whose rendering alone would pass the bound is named, not shown.
    let t5 = b.add("005-user.md", &vec![b'e'; MAX_TRANSCRIPT_BYTES + 1]);
    let got = records.transcript(&refs, t5).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains(&format!(
            "### entry of {} bytes, too large to show here: messages/005-user.md",
            MAX_TRANSCRIPT_BYTES + 1
        )),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
    assert!(got.len() <= MAX_TRANSCRIPT_BYTES);
}
