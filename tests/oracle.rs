//! Facts about a workspace written by the REAL litany 0.0.15 (driven offline
//! through `scripts/real-workspace` and `tests/harness/fake-bz`), checked
//! against CONTRACT §1–§6. Without litany 0.0.15 they fail, unless
//! `LITANYFS_SKIP` names `litany` (see `litanyfs::testing::prereq`).

mod common;

use common::harness::{self, InboxLock, RealWorkspace};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

/// The shared workspace, or return from the test when litany is skipped.
macro_rules! oracle {
    () => {
        match harness::real_workspace() {
            Some(w) => w,
            None => return,
        }
    };
}

const MALFORMED_TAIL: &str = "expected steps/<agent-id>/<NNN>/tools/<tool-id>/output.json\
#<stdout|stderr>@<byte offset>, copied verbatim from the marker in the cut result\n";

fn seq(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// What toolu_fake2 writes to stderr (see tests/harness/fake-bz).
fn multibyte_stderr() -> String {
    "€ héllo wörld €\n".repeat(500)
}

fn roots(w: &RealWorkspace) -> [&str; 3] {
    [&w.root_a, &w.root_b, &w.root_c]
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

fn is_hex40(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// `<YYYYMMDD>T<HHMMSS>Z-<8 lowercase hex, first 0-3>` (CONTRACT §2.2).
fn is_segment(s: &str) -> bool {
    let Some((ts, short)) = s.split_once('-') else {
        return false;
    };
    let t = ts.as_bytes();
    t.len() == 16
        && t[8] == b'T'
        && t[15] == b'Z'
        && t.iter()
            .enumerate()
            .all(|(i, c)| i == 8 || i == 15 || c.is_ascii_digit())
        && short.len() == 8
        && short
            .bytes()
            .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        && matches!(short.as_bytes()[0], b'0'..=b'3')
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Top-level keys of a pretty-printed JSON object, in file order.
fn top_level_keys(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("  \""))
        .filter_map(|l| l.split_once('"').map(|(k, _)| k.to_string()))
        .collect()
}

/// Splits a deposit into (frontmatter lines, body) and checks the delimiters.
fn split_deposit(bytes: &[u8]) -> (Vec<String>, String) {
    let text = std::str::from_utf8(bytes).expect("deposit is UTF-8");
    let rest = text
        .strip_prefix("---\n")
        .expect("deposit starts with ---\\n");
    let (front, body) = rest.split_once("\n---\n").expect("closing ---");
    (
        front.lines().map(str::to_string).collect(),
        body.to_string(),
    )
}

fn run_fake_bz(stdin: &str) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new("sh")
        .arg(harness::fake_bz_path())
        .env_remove("FAKE_BZ_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run fake-bz");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

// ---------------------------------------------------------------------------
// §1, §2: layout and registry
// ---------------------------------------------------------------------------

#[test]
fn workspace_layout_and_registry() {
    let w = oracle!();
    assert!(w.ws.join("repo.git").is_dir());
    assert_eq!(
        w.git(&["symbolic-ref", "HEAD"]),
        b"refs/heads/config/default\n"
    );
    let heads =
        String::from_utf8(w.git(&["for-each-ref", "--format=%(refname)", "refs/heads/"])).unwrap();
    assert!(!heads.lines().any(|r| r == "refs/heads/main"), "{heads}");
    for cfg in ["default", "quiet", "stock"] {
        assert!(
            heads
                .lines()
                .any(|r| r == format!("refs/heads/config/{cfg}")),
            "{heads}"
        );
    }

    let agents: BTreeSet<String> = w.agents().into_iter().collect();
    let expected: BTreeSet<String> = [&w.root_a, &w.root_b, &w.root_c, &w.titler_c]
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(agents, expected);
    for root in roots(w) {
        assert_eq!(root.len(), 25, "{root}");
        assert!(is_segment(root), "{root}");
    }
    let child_segment = w
        .titler_c
        .strip_prefix(&format!("{}-", w.root_c))
        .expect("titler id descends from Gamma");
    assert!(is_segment(child_segment), "{}", w.titler_c);

    for id in &agents {
        let dotgit = w.ws.join("agents").join(id).join(".git");
        assert!(dotgit.is_file(), "{} is a worktree", dotgit.display());
        assert!(read(&dotgit).starts_with(b"gitdir: "));
    }
    assert_eq!(
        w.show(&format!("agents/{}:name", w.root_a)).unwrap(),
        b"Alpha\n"
    );
    assert_eq!(
        w.show(&format!("agents/{}:name", w.root_b)).unwrap(),
        b"Beta\n"
    );
    assert_eq!(
        w.show(&format!("agents/{}:name", w.root_c)).unwrap(),
        b"Gamma\n"
    );
    // A child never keeps its parent's name: the titler wears a minted one.
    let titler_name = w.show(&format!("agents/{}:name", w.titler_c)).unwrap();
    assert!(titler_name.ends_with(b"\n") && titler_name.len() > 1);
    assert_ne!(titler_name, b"Gamma\n");
    // Only the stock-workflow root has a landed title.
    assert!(w.show(&format!("agents/{}:title", w.root_c)).is_some());
    assert!(w.show(&format!("agents/{}:title", w.root_a)).is_none());
    // Control files never reach agent trees.
    for control in [
        "manifest.yaml",
        "workflow.yaml",
        "providers.yaml",
        "version",
    ] {
        assert!(
            w.show(&format!("agents/{}:{control}", w.root_a)).is_none(),
            "{control}"
        );
    }
}

#[test]
fn commit_subjects_and_transcripts() {
    let w = oracle!();
    let subjects = |id: &str| {
        String::from_utf8(w.git(&["log", "--format=%s", &format!("agents/{id}")])).unwrap()
    };
    let a = subjects(&w.root_a);
    for s in [
        "config: init [config/default]".to_string(),
        format!("dispatch: worker [{}]", w.root_a),
        format!("transcript 001: user [{}]", w.root_a),
        format!("transcript 003: tool [{}]", w.root_a),
        format!("transcript 006: {} [{}]", w.root_b, w.root_a),
    ] {
        assert!(a.lines().any(|l| l == s), "missing {s:?} in\n{a}");
    }
    assert!(
        subjects(&w.root_c)
            .lines()
            .any(|l| l == format!("landing: title [{}]", w.titler_c))
    );
    assert!(
        subjects(&w.titler_c)
            .lines()
            .any(|l| l == format!("dispatch: titler [{}]", w.titler_c))
    );

    let names = String::from_utf8(w.git(&[
        "ls-tree",
        "--name-only",
        &format!("agents/{}", w.root_a),
        "messages/",
    ]))
    .unwrap();
    let expected = [
        "messages/001-user.md".to_string(),
        "messages/002-claude-sonnet-5.json".into(),
        "messages/003-tool.json".into(),
        "messages/004-tool.json".into(),
        "messages/005-claude-sonnet-5.json".into(),
        format!("messages/006-{}.md", w.root_b),
        "messages/007-claude-sonnet-5.json".into(),
    ];
    assert_eq!(names.lines().collect::<Vec<_>>(), expected);

    // A tool entry is a bare array holding one tool_result, one per call.
    for (entry, id) in [("003", "toolu_fake1"), ("004", "toolu_fake2")] {
        let bytes = w
            .show(&format!("agents/{}:messages/{entry}-tool.json", w.root_a))
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let arr = v.as_array().expect("tool entry is an array");
        assert_eq!(arr.len(), 1);
        assert_eq!(arr[0]["type"], "tool_result");
        assert_eq!(arr[0]["tool_use_id"], id);
    }
    // The model entry: {"content":[…],"usage":{…}}.
    let model: serde_json::Value = serde_json::from_slice(
        &w.show(&format!(
            "agents/{}:messages/002-claude-sonnet-5.json",
            w.root_a
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(model["content"].as_array().unwrap().len(), 2);
    assert_eq!(model["usage"]["input_tokens"], 10);

    // Alpha's reply to Beta was delivered to Beta as a result deposit.
    let delivered = w
        .show(&format!("agents/{}:messages/006-{}.md", w.root_b, w.root_a))
        .unwrap();
    let (front, body) = split_deposit(&delivered);
    assert_eq!(front[0], format!("from: {}", w.root_a));
    assert_eq!(front[1], "from_name: Alpha");
    assert!(is_timestamp(
        front[2].strip_prefix("deposited_at: ").unwrap()
    ));
    assert_eq!(front[3], "epitaph: final-response");
    assert!(is_hex40(front[4].strip_prefix("terminal_ref: ").unwrap()));
    assert_eq!(front.len(), 5);
    assert_eq!(body, "done");
}

// ---------------------------------------------------------------------------
// §4: step records
// ---------------------------------------------------------------------------

#[test]
fn step_records() {
    let w = oracle!();
    let first_response = run_fake_bz("{}");
    let later_response = run_fake_bz("{\"x\":\"tool_result\"}");
    let all = [w.root_a.as_str(), &w.root_b, &w.root_c, &w.titler_c];
    for id in all {
        let dir = w.ws.join("steps").join(id);
        assert!(dir.join("driver.log").is_file(), "{id}: driver.log");
        let mut steps: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != "driver.log")
            .collect();
        steps.sort();
        assert!(steps.len() >= 2, "{id}: {steps:?}");
        for (i, s) in steps.iter().enumerate() {
            assert_eq!(*s, format!("{:03}", i + 1), "{id}: {steps:?}");
            let step = dir.join(s);
            for f in ["request.json", "response.json", "meta.json", "stderr.log"] {
                assert!(step.join(f).is_file(), "{}/{f}", step.display());
            }
            assert!(!step.join("staging.json").exists());
            assert!(read(&step.join("stderr.log")).is_empty());

            let request = String::from_utf8(read(&step.join("request.json"))).unwrap();
            let keys = top_level_keys(&request);
            let mut sorted = keys.clone();
            sorted.sort();
            assert_eq!(keys, sorted, "request.json keys are sorted");
            assert!(keys.len() >= 10, "{keys:?}");
            assert_eq!(json(&step.join("request.json"))["cache_key"], id);

            let meta_text = String::from_utf8(read(&step.join("meta.json"))).unwrap();
            assert_eq!(
                top_level_keys(&meta_text),
                [
                    "commit",
                    "config_commit",
                    "workflow_commit",
                    "provider",
                    "dropped_orphans",
                    "started_at",
                    "ended_at"
                ]
            );
            let meta = json(&step.join("meta.json"));
            assert!(is_hex40(meta["commit"].as_str().unwrap()));
            assert_eq!(meta["provider"], "anthropic");
            assert!(is_timestamp(meta["started_at"].as_str().unwrap()));
            assert!(is_timestamp(meta["ended_at"].as_str().unwrap()));

            // response.json is the adapter's stdout, verbatim.
            let response = read(&step.join("response.json"));
            let want = if i == 0 {
                &first_response
            } else {
                &later_response
            };
            assert_eq!(&response, want, "{}", step.display());
        }

        let step1 = dir.join("001");
        let is_root = id != w.titler_c;
        // The titler's bash calls are declined: no tool records at all.
        assert_eq!(step1.join("tools").is_dir(), is_root, "{id}");
        if !is_root {
            continue;
        }
        let mut tools: Vec<String> = std::fs::read_dir(step1.join("tools"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        tools.sort();
        assert_eq!(tools, ["toolu_fake1", "toolu_fake2"]);
        for (tool, stdout, stderr) in [
            ("toolu_fake1", seq(3000), String::new()),
            ("toolu_fake2", seq(10), multibyte_stderr()),
        ] {
            let t = step1.join("tools").join(tool);
            let mut files: Vec<String> = std::fs::read_dir(&t)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            files.sort();
            assert_eq!(files, ["input.json", "output.json"], "no .tmp left");
            let input_text = String::from_utf8(read(&t.join("input.json"))).unwrap();
            assert_eq!(top_level_keys(&input_text), ["id", "name", "input"]);
            let input = json(&t.join("input.json"));
            assert_eq!(input["id"], tool);
            assert_eq!(input["name"], "bash");
            let output_text = String::from_utf8(read(&t.join("output.json"))).unwrap();
            assert_eq!(
                top_level_keys(&output_text),
                ["stdout", "stderr", "exit_code", "started_at", "ended_at"]
            );
            let output = json(&t.join("output.json"));
            assert_eq!(output["stdout"], stdout.as_str(), "{tool}");
            assert_eq!(output["stderr"], stderr.as_str(), "{tool}");
            assert_eq!(output["exit_code"], 0);
            assert!(is_timestamp(output["started_at"].as_str().unwrap()));
        }
    }
    assert_eq!(seq(3000).len(), 13893);
    assert_eq!(multibyte_stderr().len(), 11000);
}

// ---------------------------------------------------------------------------
// §3: pending deposits
// ---------------------------------------------------------------------------

#[test]
fn pending_deposits_stay_in_the_inbox() {
    let w = oracle!();
    let inbox = w.ws.join("inbox").join(&w.root_a);
    assert_eq!(w.pending, inbox.join("user-001.md"));
    assert_eq!(w.pending_agent, inbox.join(format!("{}-001.md", w.root_b)));
    let mut entries: Vec<String> = std::fs::read_dir(&inbox)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    entries.sort();
    let mut want = vec!["user-001.md".to_string(), format!("{}-001.md", w.root_b)];
    want.sort();
    assert_eq!(entries, want, "no temp files, nothing else");

    let (front, body) = split_deposit(&read(&w.pending));
    assert_eq!(front.len(), 2, "{front:?}");
    assert_eq!(front[0], "from: user");
    assert!(is_timestamp(
        front[1].strip_prefix("deposited_at: ").unwrap()
    ));
    assert_eq!(body, w.pending_content);
    assert_eq!(body, "pending from user", "no newline added");

    let (front, body) = split_deposit(&read(&w.pending_agent));
    assert_eq!(front.len(), 3, "{front:?}");
    assert_eq!(front[0], format!("from: {}", w.root_b));
    assert_eq!(front[1], "from_name: Beta");
    assert!(is_timestamp(
        front[2].strip_prefix("deposited_at: ").unwrap()
    ));
    assert_eq!(body, w.pending_agent_content);

    // The script left the workspace quiescent: no driver, no lock.
    assert!(harness::workspace_processes(&w.ws).is_empty());
    assert!(harness::locked_inboxes(&w.ws).is_empty());
}

// ---------------------------------------------------------------------------
// §6: marks
// ---------------------------------------------------------------------------

#[test]
fn marks() {
    let w = oracle!();
    let rev = |r: &str| String::from_utf8(w.git(&["rev-parse", r])).unwrap();
    let kind = |r: &str| String::from_utf8(w.git(&["cat-file", "-t", r])).unwrap();

    let cwd = format!("refs/litany/cwd/{}", w.root_a);
    assert_eq!(kind(&cwd), "blob\n");
    let blob = w.git(&["cat-file", "blob", &cwd]);
    assert_eq!(blob, w.cwd_a.as_os_str().as_encoded_bytes(), "no newline");

    let role = format!("refs/litany/role/{}", w.root_c);
    assert_eq!(kind(&role), "blob\n");
    assert_eq!(w.git(&["cat-file", "blob", &role]), b"planner");

    assert_eq!(
        rev(&format!("refs/litany/workflow/{}", w.root_c)),
        rev("refs/heads/config/quiet")
    );
    assert_eq!(
        rev(&format!("refs/litany/retarget/{}", w.root_c)),
        rev("refs/heads/config/default")
    );
    // returned = the child's terminal ref (the titler's branch tip).
    assert_eq!(
        rev(&format!("refs/litany/returned/{}", w.titler_c)),
        rev(&format!("refs/heads/agents/{}", w.titler_c))
    );
    assert_eq!(
        kind(&format!("refs/litany/returned/{}", w.root_a)),
        "commit\n"
    );
    // No temp mark files left behind.
    for e in std::fs::read_dir(w.ws.join("repo.git")).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        assert!(!n.ends_with(".tmp"), "{n}");
    }
}

// ---------------------------------------------------------------------------
// §5: markers, addresses, read_tool_output
// ---------------------------------------------------------------------------

#[test]
fn printed_markers_and_addresses() {
    let w = oracle!();
    let addresses = w.marker_addresses();
    let got: BTreeSet<&str> = addresses.iter().map(|a| a.address.as_str()).collect();
    let mut want = BTreeSet::new();
    for r in roots(w) {
        want.insert(format!(
            "steps/{r}/001/tools/toolu_fake1/output.json#stdout@2048"
        ));
        want.insert(format!(
            "steps/{r}/001/tools/toolu_fake2/output.json#stderr@2048"
        ));
    }
    assert_eq!(got, want.iter().map(String::as_str).collect());
    for a in &addresses {
        let (total, lines) = if a.stream == "stdout" {
            (13893, 3000)
        } else {
            (11000, 500)
        };
        assert_eq!((a.total, a.lines), (total, lines), "{}", a.address);
        assert_eq!(a.step, "001");
        assert!(w.ws.join(&a.record).is_file(), "{}", a.record);
        assert!(
            a.found_in.starts_with(&format!("agents/{}:", a.agent_id)),
            "{}",
            a.found_in
        );
    }

    let markers = w.markers();
    for m in &markers {
        assert_eq!((m.marker.head, m.marker.tail), (2048, 2048));
        if let Some(addr) = &m.marker.address {
            let a = harness::split_address(addr).unwrap();
            assert_eq!(m.marker.label, a.stream);
            assert_eq!(m.marker.record, a.record);
            assert_eq!(a.offset, m.marker.head);
        }
    }
    // A context file is cut too, but its marker names the file and has no
    // address; its label is neither stdout nor stderr.
    let context: Vec<_> = markers
        .iter()
        .filter(|m| m.marker.label == "context file")
        .collect();
    assert_eq!(context.len(), 1, "{markers:#?}");
    let c = &context[0];
    assert_eq!(c.branch, w.root_a);
    assert_eq!(c.entry, "messages/003-tool.json");
    assert_eq!(
        Path::new(&c.marker.record),
        w.cwd_a.join("AGENTS.md").as_path()
    );
    assert_eq!((c.marker.total, c.marker.lines), (6292, 400));
    assert_eq!(c.marker.address, None);
}

#[test]
fn every_address_pages_to_the_end() {
    let w = oracle!();
    for a in w.marker_addresses() {
        let record = json(&w.ws.join(&a.record));
        let stream = record[a.stream.as_str()]
            .as_str()
            .unwrap()
            .as_bytes()
            .to_vec();
        let mut offset = a.offset;
        let mut collected = Vec::new();
        loop {
            let (code, page, banner) = harness::read_tool_output(
                &w.ws,
                &a.agent_id,
                &format!("{}#{}@{offset}", a.record, a.stream),
            );
            assert_eq!(code, 0, "{banner}");
            let end = (offset + harness::PAGE_BYTES).min(stream.len());
            assert_eq!(page, &stream[offset..end], "page at {offset}");
            assert_eq!(
                banner,
                harness::expected_banner(&a.record, &a.stream, offset, end, stream.len())
            );
            collected.extend_from_slice(&page);
            if end == stream.len() {
                break;
            }
            offset = end;
        }
        assert_eq!(collected, &stream[a.offset..]);
    }
}

#[test]
fn pages_split_multibyte_characters_raw() {
    let w = oracle!();
    let addr = format!(
        "steps/{}/001/tools/toolu_fake2/output.json#stderr@2048",
        w.root_a
    );
    let (code, page, _) = harness::read_tool_output(&w.ws, &w.root_a, &addr);
    assert_eq!(code, 0);
    assert_eq!(page.len(), 4096);
    assert!(
        std::str::from_utf8(&page).is_err(),
        "page ends inside a char"
    );
    let want = multibyte_stderr();
    assert_eq!(page, &want.as_bytes()[2048..6144]);
    // The marker offset itself (2048) starts inside a character too.
    assert!(!want.is_char_boundary(2048));
}

#[test]
fn offsets_at_and_past_the_end() {
    let w = oracle!();
    for a in w.marker_addresses() {
        let len = a.total;
        let record = &a.record;
        let s = &a.stream;
        let (code, page, banner) =
            harness::read_tool_output(&w.ws, &a.agent_id, &format!("{record}#{s}@{len}"));
        assert_eq!((code, page.len()), (0, 0), "{banner}");
        assert_eq!(banner, harness::expected_banner(record, s, len, len, len));

        let past = len + 1;
        let (code, page, err) =
            harness::read_tool_output(&w.ws, &a.agent_id, &format!("{record}#{s}@{past}"));
        assert_eq!((code, page.len()), (1, 0));
        assert_eq!(
            err,
            format!(
                "litany tool read_tool_output: offset {past} is past the end of {s} ({len} bytes)\n"
            )
        );
    }
}

#[test]
fn read_tool_output_declines() {
    let w = oracle!();
    let (a, b) = (&w.root_a, &w.root_b);
    let record = format!("steps/{a}/001/tools/toolu_fake1/output.json");

    // Confinement: only the address's own agent may page it.
    let (code, out, err) = harness::read_tool_output(&w.ws, b, &format!("{record}#stdout@2048"));
    assert_eq!((code, out.len()), (1, 0));
    assert_eq!(
        err,
        format!(
            "litany tool read_tool_output: address names agent \"{a}\", and you are \"{b}\": \
             an agent may page only its own tool captures\n"
        )
    );

    for bad in [
        format!("{record}#stdin@0"),
        format!("{record}#STDOUT@0"),
        format!("{record}#stdout@-1"),
        format!("{record}#stdout@"),
        format!("{record}#stdout"),
        format!("{record}@0"),
        format!("/{record}#stdout@0"),
        format!("./{record}#stdout@0"),
        format!("steps/{a}/00a/tools/toolu_fake1/output.json#stdout@0"),
        format!("steps/{a}/001/tools/../output.json#stdout@0"),
        format!("steps/{a}/001/tools/toolu_fake1/input.json#stdout@0"),
        format!("{record}#stdout@99999999999999999999999"),
        String::new(),
    ] {
        let (code, out, err) = harness::read_tool_output(&w.ws, a, &bad);
        assert_eq!((code, out.len()), (1, 0), "{bad}");
        assert_eq!(
            err,
            format!("litany tool read_tool_output: malformed address {bad:?}: {MALFORMED_TAIL}"),
            "{bad}"
        );
    }

    // Rust's integer parser takes a leading '+': the address is accepted.
    let (code, out, err) = harness::read_tool_output(&w.ws, a, &format!("{record}#stdout@+5"));
    assert_eq!((code, out.len()), (0, 4096), "{err}");
    assert!(err.starts_with("read_tool_output: bytes 5-4101 of 13893 "));

    // Well-formed but absent: the error names the joined path.
    let missing = format!("steps/{a}/0001/tools/toolu_fake1/output.json");
    let (code, _, err) = harness::read_tool_output(&w.ws, a, &format!("{missing}#stdout@0"));
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "litany tool read_tool_output: no capture at {}: No such file or directory (os error 2)\n",
            w.ws.join(&missing).display()
        )
    );

    let (code, _, err) = harness::read_tool_output_stdin(
        &w.ws,
        a,
        format!("{{\"address\":\"{record}#stdout@0\",\"extra\":1}}").as_bytes(),
    );
    assert_eq!(code, 1);
    assert!(
        err.starts_with("litany tool read_tool_output: invalid input JSON: unknown field `extra`"),
        "{err}"
    );
}

#[test]
fn read_tool_output_on_bad_records() {
    // read_tool_output joins LITANY_CONV_REPO and the record and reads it:
    // no workspace guard, so a bare directory with a steps/ tree is enough.
    if harness::real_workspace().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("steps/ghost/001/tools");
    let write = |tool: &str, bytes: &[u8]| {
        std::fs::create_dir_all(tools.join(tool)).unwrap();
        std::fs::write(tools.join(tool).join("output.json"), bytes).unwrap();
    };
    write(
        "ok",
        br#"{"stdout":"\u00e9x","stderr":"e","exit_code":0,"started_at":"a","ended_at":"b","extra":1}"#,
    );
    write("trunc", br#"{"stdout":"abc"#);
    write(
        "nostderr",
        br#"{"stdout":"abc","exit_code":0,"started_at":"a","ended_at":"b"}"#,
    );
    let addr = |tool: &str| format!("steps/ghost/001/tools/{tool}/output.json#stdout@0");

    let (code, out, err) = harness::read_tool_output(dir.path(), "ghost", &addr("ok"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "éx".as_bytes(),
        "JSON escapes are decoded before paging"
    );

    for (tool, why) in [
        ("trunc", "EOF while parsing a string at line 1 column 14"),
        ("nostderr", "missing field `stderr` at line 1 column 62"),
    ] {
        let (code, out, err) = harness::read_tool_output(dir.path(), "ghost", &addr(tool));
        assert_eq!((code, out.len()), (1, 0));
        assert_eq!(
            err,
            format!(
                "litany tool read_tool_output: capture at {}/steps/ghost/001/tools/{tool}/output.json did not parse: {why}\n",
                dir.path().display()
            )
        );
    }
}

// ---------------------------------------------------------------------------
// §3: litany message, in a private workspace
// ---------------------------------------------------------------------------

#[test]
fn message_deposits_and_sequence_numbers() {
    if harness::real_workspace().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let w = RealWorkspace::build(&dir.path().join("rw")).unwrap_or_else(|e| panic!("{e}"));
    let inbox = w.ws.join("inbox").join(&w.root_b);
    let lock = InboxLock::try_hold(&w.ws, &w.root_b).expect("Beta is idle");

    let (code, err) = harness::litany_message(&w.ws, &w.home, "Beta", "hello", None);
    assert_eq!((code, err.as_str()), (0, ""));
    let (front, body) = split_deposit(&read(&inbox.join("user-001.md")));
    assert_eq!(front[0], "from: user");
    assert_eq!(front.len(), 2);
    assert_eq!(body, "hello");

    // Sender = a named agent: from_name; by id; a trailing newline is kept.
    let (code, _) = harness::litany_message(&w.ws, &w.home, &w.root_b, "hi\n", Some(&w.root_a));
    assert_eq!(code, 0);
    let (front, body) = split_deposit(&read(&inbox.join(format!("{}-001.md", w.root_a))));
    assert_eq!(front[0], format!("from: {}", w.root_a));
    assert_eq!(front[1], "from_name: Alpha");
    assert_eq!(body, "hi\n");

    // Content that looks like an option is fine through the helper (`--`).
    let (code, err) = harness::litany_message(&w.ws, &w.home, "Beta", "--help", None);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(split_deposit(&read(&inbox.join("user-002.md"))).1, "--help");
    // …but not without `--`: clap takes it as a flag.
    let raw = harness::litany(
        &w.home,
        &[
            OsStr::new("message"),
            w.ws.as_os_str(),
            OsStr::new("Beta"),
            OsStr::new("-x"),
        ],
    );
    assert_eq!(raw.status.code(), Some(2));

    // Sequence = 1 + the largest `user-<u32>.md`, gaps kept, `+` accepted.
    std::fs::write(inbox.join("user-007.md"), "x").unwrap();
    harness::litany_message(&w.ws, &w.home, "Beta", "a", None);
    assert!(inbox.join("user-008.md").is_file());
    std::fs::write(inbox.join("user-+20.md"), "x").unwrap();
    harness::litany_message(&w.ws, &w.home, "Beta", "b", None);
    assert!(inbox.join("user-021.md").is_file());
    std::fs::write(inbox.join("user-999.md"), "x").unwrap();
    harness::litany_message(&w.ws, &w.home, "Beta", "c", None);
    assert!(inbox.join("user-1000.md").is_file(), "width is a minimum");

    let (code, err) = harness::litany_message(&w.ws, &w.home, "nobody", "x", None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("litany message: no agent \"nobody\""),
        "{err}"
    );
    let (code, err) = harness::litany_message(&w.ws, &w.home, "../x", "x", None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("litany message: agent id \"../x\""),
        "{err}"
    );

    // Busy: nothing was launched, nothing drained.
    assert!(harness::workspace_processes(&w.ws).is_empty());
    drop(lock);
    harness::wait_quiescent(&w.ws, Duration::from_secs(10)).unwrap();
    assert!(inbox.join("user-001.md").is_file());
}
