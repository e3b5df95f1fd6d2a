//! The live tail of `transcript.md` ([`crate::records::live`]): each live section that
//! becomes an entry is that entry but for its state in the time's place, so the commit
//! only grows the file; the sections that become no entry say what they are.

use std::io::Write as _;

use super::ev;
use super::transcripts::{Branch, MODEL, USER};
use crate::paging::CaptureKey;
use crate::records::Records;
use crate::records::format::{CUT, STREAMING, TIME_WIDTH, WAITING, running_since};
use crate::records::live::{Facts, HeldFacts, ModelFacts, View, WoundFacts};

fn read_all(records: &Records, view: &View) -> String {
    let mut out = Vec::new();
    records.view_read(view, 0, view.len(), &mut out).unwrap();
    assert_eq!(out.len() as u64, view.len(), "the length is exact");
    String::from_utf8(out).unwrap()
}

/// `response.json` holding `lines`, opened.
fn response(dir: &tempfile::TempDir, lines: &[String]) -> (std::fs::File, CaptureKey) {
    let path = dir.path().join("response.json");
    std::fs::write(&path, super::ndjson(lines)).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let key = CaptureKey::of(&f).unwrap();
    (f, key)
}

fn model(response: Option<(std::fs::File, CaptureKey)>, live: bool) -> ModelFacts {
    ModelFacts {
        step: "002".into(),
        origin: "claude-sonnet-5".into(),
        response,
        live,
        closed: !live,
    }
}

/// `live`, with its one `state` replaced by the time at the same place in `committed`, is
/// a prefix of `committed`: the commit overwrote the state and only appended.
fn assert_grows_into(live: &str, state: &str, committed: &str) {
    let at = live
        .find(state)
        .unwrap_or_else(|| panic!("no {state:?} in {live}"));
    assert!(committed.len() >= live.len(), "{live}\n---\n{committed}");
    let time = &committed[at..at + TIME_WIDTH];
    assert!(
        time.starts_with("20") && time.ends_with('Z'),
        "{time:?} in {committed}"
    );
    let mut expect = live.to_string();
    expect.replace_range(at..at + TIME_WIDTH, time);
    assert_eq!(&committed[..expect.len()], expect, "{committed}");
}

#[test]
fn a_streaming_model_entry_is_the_entry_its_commit_adds() {
    let mut b = Branch::new();
    let tip = b.add("001-user.md", USER);
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        ev::start("m1"),
        ev::thinking_start(0),
        ev::thinking(0, "plan"),
        ev::stop(0),
        ev::text_start(1),
        ev::text(1, "Let me "),
        ev::text(1, "look — größe"),
        ev::stop(1),
        ev::tool_start(2, "t1", "bash"),
        ev::json(2, "{\"command\":"),
        ev::json(2, "\"ls -l\"}"),
        ev::stop(2),
        ev::usage(20, 12),
        ev::finish("tool_use"),
        ev::end(),
    ];
    // Part way, then whole: each view extends the one before.
    let mut seen = String::new();
    for n in [3, 6, 7, lines.len()] {
        let facts = Facts {
            model: Some(model(Some(response(&dir, &lines[..n])), true)),
            ..Facts::default()
        };
        let view = records.transcript_view(&refs, tip, facts).unwrap();
        let text = read_all(&records, &view);
        assert!(text.starts_with(&seen), "{seen}\n---\n{text}");
        seen = text;
    }
    assert!(seen.contains(&format!(
        "## 002 claude-sonnet-5 · {STREAMING}\n\n### thinking"
    )));
    let committed = r#"{"content":[{"type":"thinking","text":"plan","signature":null},{"type":"text","text":"Let me look — größe"},{"type":"tool_use","id":"t1","name":"bash","input":{"command":"ls -l"}}],"usage":{"input_tokens":20,"output_tokens":12}}"#;
    let next = b.add("002-claude-sonnet-5.json", committed.as_bytes());
    let after = String::from_utf8(records.transcript(&refs, next).unwrap().to_vec()).unwrap();
    assert_grows_into(&seen, STREAMING, &after);
    assert_eq!(after.len(), seen.len(), "nothing but the time changed");
}

/// The wound of step 002 with nothing on its logs; `stopped_mark`: a stop's mark at the tip.
fn quiet_wound(stopped_mark: Option<String>) -> WoundFacts {
    WoundFacts {
        step: "002".into(),
        why: None,
        stopped_mark,
        unsure: false,
        log: None,
    }
}

#[test]
fn a_failed_step_keeps_its_stream_and_gains_the_wound() {
    let mut b = Branch::new();
    let tip = b.add("001-user.md", USER);
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let dir = tempfile::tempdir().unwrap();
    let lines = [ev::start("m1"), ev::text_start(0), ev::text(0, "Working")];
    let streaming = Facts {
        model: Some(model(Some(response(&dir, &lines)), true)),
        ..Facts::default()
    };
    let view = records.transcript_view(&refs, tip, streaming).unwrap();
    let live = read_all(&records, &view);
    let wound = WoundFacts {
        step: "002".into(),
        why: None,
        stopped_mark: None,
        unsure: false,
        log: Some(("steps/a1/002/stderr.log".into(), "boom\n".into())),
    };
    let cut = Facts {
        model: Some(model(Some(response(&dir, &lines)), false)),
        wound: Some(wound),
        ..Facts::default()
    };
    let view = records.transcript_view(&refs, tip, cut).unwrap();
    let failed = read_all(&records, &view);
    let expect = live.replace(STREAMING, CUT);
    assert!(failed.starts_with(&expect), "{live}\n---\n{failed}");
    let rest = &failed[expect.len()..];
    assert!(
        rest.starts_with(
            "\n\n### half stream: attempt 1 has no end event\n\n\
             ## wound · step 002 · cut mid-stream, no end event"
        ),
        "{rest}"
    );
    assert!(rest.ends_with("### last lines of steps/a1/002/stderr.log\n\n```text\nboom\n```\n\n"));

    // An error that ended the last attempt, a `length` finish: each named.
    for (tail, named) in [
        (
            vec![ev::error(r#"{"provider":{"status":529}}"#, "overloaded")],
            "the model call failed: provider 529: overloaded",
        ),
        (
            vec![ev::stop(0), ev::finish("length"), ev::end()],
            "output limit: finish length, nothing committed",
        ),
    ] {
        let mut all = lines.to_vec();
        all.extend(tail);
        let facts = Facts {
            model: Some(model(Some(response(&dir, &all)), false)),
            wound: Some(quiet_wound(None)),
            ..Facts::default()
        };
        let text = read_all(
            &records,
            &records.transcript_view(&refs, tip, facts).unwrap(),
        );
        assert!(
            text.contains(&format!("## wound · step 002 · {named}\n\n")),
            "{text}"
        );
        assert!(text.ends_with("Its stderr.log and the agent's driver.log are empty.\n\n"));
        assert!(!text.contains("refused the credentials"), "{text}");
    }
    // An auth failure is named as one, as the `refused` signal names it.
    let auth = [
        lines.to_vec(),
        vec![ev::error(
            r#"{"provider":{"status":401}}"#,
            "invalid x-api-key",
        )],
    ]
    .concat();
    let facts = Facts {
        model: Some(model(Some(response(&dir, &auth)), false)),
        wound: Some(quiet_wound(None)),
        ..Facts::default()
    };
    let text = read_all(
        &records,
        &records.transcript_view(&refs, tip, facts).unwrap(),
    );
    assert!(
        text.contains("the model call failed: provider 401: invalid x-api-key\n\nThe provider refused the credentials"),
        "{text}"
    );
    // A stop's marks at the tip name the stop; the stream's word follows.
    let facts = Facts {
        model: Some(model(Some(response(&dir, &lines)), false)),
        wound: Some(quiet_wound(Some("abandoned".into()))),
        ..Facts::default()
    };
    let text = read_all(
        &records,
        &records.transcript_view(&refs, tip, facts).unwrap(),
    );
    assert!(text.contains(
        "## wound · step 002 · stopped by `litany stop` (its branch_stopped binding set \
         the abandoned mark at the tip)\n\nIts stream: cut mid-stream"
    ));
}

#[test]
fn a_waiting_deposit_is_the_entry_its_delivery_adds() {
    let mut b = Branch::new();
    let tip = b.add("001-user.md", USER);
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let second = b"---\nfrom: b1\nfrom_name: Beta\ndeposited_at: 2026-12-02T18:09:00Z\n---\nping";
    let facts = Facts {
        waiting: vec![
            ("user-002.md".into(), USER.to_vec()),
            ("b1-001.md".into(), second.to_vec()),
        ],
        ..Facts::default()
    };
    let live = read_all(
        &records,
        &records.transcript_view(&refs, tip, facts).unwrap(),
    );
    assert!(live.contains(&format!(
        "## 002 user · {WAITING} · from: user · deposited_at: 2026-12-02T18:08:10Z\n\nhello alpha"
    )));
    assert!(live.contains(&format!(
        "## 003 b1 · {WAITING} · from: b1 · from_name: Beta"
    )));
    b.add("002-user.md", USER);
    let next = b.add("003-b1.md", second);
    let after = String::from_utf8(records.transcript(&refs, next).unwrap().to_vec()).unwrap();
    // Two states, two times: replace the first, then check the second the same way.
    let at = live.find(WAITING).unwrap();
    let mut first = live.clone();
    first.replace_range(at..at + TIME_WIDTH, &after[at..at + TIME_WIDTH]);
    assert_grows_into(&first, WAITING, &after);

    // While a step runs, a deposit's number is not known: a plain section before it.
    let dir = tempfile::tempdir().unwrap();
    let facts = Facts {
        waiting: vec![("user-002.md".into(), USER.to_vec())],
        model: Some(model(Some(response(&dir, &[ev::start("m")])), true)),
        ..Facts::default()
    };
    let text = read_all(
        &records,
        &records.transcript_view(&refs, tip, facts).unwrap(),
    );
    assert!(text.contains(
        "## waiting · user-002.md · from: user · deposited_at: 2026-12-02T18:08:10Z\n\n\
         hello alpha\n\n## 002 claude-sonnet-5 · "
    ));
    // And so is a child's result, which the drain may land without an entry.
    let result = b"---\nfrom: c1\ndeposited_at: 2026-12-02T18:09:00Z\nepitaph: final-response\nterminal_ref: 0123\n---\nok";
    let facts = Facts {
        waiting: vec![("c1-001.md".into(), result.to_vec())],
        ..Facts::default()
    };
    let text = read_all(
        &records,
        &records.transcript_view(&refs, tip, facts).unwrap(),
    );
    assert!(
        text.contains("## waiting · c1-001.md · from: c1 · "),
        "{text}"
    );
}

#[test]
fn a_running_tool_is_the_result_entry_its_commit_adds() {
    let mut b = Branch::new();
    b.add("001-user.md", USER);
    let call = br#"{"content":[{"type":"tool_use","id":"t1","name":"bash","input":{"command":"sleep 5"}}],"usage":{"output_tokens":3}}"#;
    let tip = b.add("002-claude-sonnet-5.json", call);
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let since = 1_796_000_000;
    let facts = Facts {
        running: Some(("t1".into(), since)),
        ..Facts::default()
    };
    let live = read_all(
        &records,
        &records.transcript_view(&refs, tip, facts).unwrap(),
    );
    let state = running_since(since);
    assert!(
        live.ends_with(&format!("## 003 tool · {state} · bash (t1)\n\n")),
        "{live}"
    );
    let result = br#"[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"Exit code: 0\n"}],"is_error":false}]"#;
    let next = b.add("003-tool.json", result);
    let after = String::from_utf8(records.transcript(&refs, next).unwrap().to_vec()).unwrap();
    assert_grows_into(&live, &state, &after);
    // A call the tip does not know as open is not shown running.
    let facts = Facts {
        running: Some(("t9".into(), since)),
        ..Facts::default()
    };
    let view = records.transcript_view(&refs, tip, facts).unwrap();
    assert!(!view.is_live());
    let _ = MODEL;
}

#[test]
fn a_held_call_says_what_releases_it() {
    let mut b = Branch::new();
    let tip = b.add("001-user.md", USER);
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let facts = Facts {
        held: Some(HeldFacts {
            tool_use_id: "t1".into(),
            tool: "bash".into(),
            reason: "needs a human".into(),
            control: Some("/usr/local/bin/gate".into()),
            advance: "litany advance /ws a1".into(),
        }),
        ..Facts::default()
    };
    let text = read_all(
        &records,
        &records.transcript_view(&refs, tip, facts).unwrap(),
    );
    let held = &text[records.transcript(&refs, tip).unwrap().len()..];
    assert!(
        held.starts_with("## held · bash (t1) · needs a human\n\nThe workflow's tool control `/usr/local/bin/gate` answered hold"),
        "{held}"
    );
    assert!(held.contains("`litany advance /ws a1`"));
    assert!(held.contains("pass (the call runs) or refuse"));
}

/// A view's streaming part is read from the rendering as it is now: a view taken before
/// more was appended still reads its own bytes.
#[test]
fn an_older_view_reads_its_bytes_after_the_stream_grew() {
    let mut b = Branch::new();
    let tip = b.add("001-user.md", USER);
    let refs = b.refs();
    let records = Records::new(1 << 20);
    let dir = tempfile::tempdir().unwrap();
    let lines = [ev::start("m1"), ev::text_start(0), ev::text(0, "one ")];
    let facts = Facts {
        model: Some(model(Some(response(&dir, &lines)), true)),
        ..Facts::default()
    };
    let old = records.transcript_view(&refs, tip, facts).unwrap();
    let before = read_all(&records, &old);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("response.json"))
        .unwrap();
    f.write_all(format!("{}\n", ev::text(0, "two")).as_bytes())
        .unwrap();
    let facts = Facts {
        model: Some(model(
            Some((
                std::fs::File::open(dir.path().join("response.json")).unwrap(),
                CaptureKey::of(&std::fs::File::open(dir.path().join("response.json")).unwrap())
                    .unwrap(),
            )),
            true,
        )),
        ..Facts::default()
    };
    let new = records.transcript_view(&refs, tip, facts).unwrap();
    assert_eq!(read_all(&records, &old), before);
    let after = read_all(&records, &new);
    assert_eq!(after, format!("{before}two"));
    // A read in the middle, across the committed part and the stream.
    let mut mid = Vec::new();
    let from = before.len() as u64 - 10;
    records.view_read(&new, from, 8, &mut mid).unwrap();
    assert_eq!(mid, after.as_bytes()[from as usize..from as usize + 8]);
}
