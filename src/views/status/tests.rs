use super::*;
use crate::fixture::Fixture;
use crate::views::model::Scanner;
use crate::workspace::refs::Flavour;

const NOW: i64 = 1_796_204_571 + 2 * 3600;

fn workspace() -> (tempfile::TempDir, Fixture) {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    f.agent("r1-a", Some("Alpha"), &[("title", b"Fix the build\n")])
        .unwrap();
    f.agent("r1-a-c1-x", None, &[]).unwrap();
    f.agent("r2-b", Some("Beta"), &[]).unwrap();
    f.blob_mark(
        "held",
        "r2-b",
        br#"{"tool_use_id":"t","tool":"bash","reason":"ask first"}"#,
    )
    .unwrap();
    f.commit_mark("notify", "r1-a", f.agent_tip("r1-a").unwrap())
        .unwrap();
    f.blob_mark("cwd", "r1-a", b"/tmp").unwrap();
    f.step("r1-a", 1, &[("meta.json", b"{}"), ("response.json", b"")])
        .unwrap();
    f.step("r1-a", 2, &[("response.json", b"")]).unwrap();
    f.step("r1-a-c1-x", 1, &[("meta.json", b"{oops")]).unwrap();
    f.inbox_file(
        "r1-a-c1-x",
        "user-001.md",
        b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nhi",
    )
    .unwrap();
    f.inbox_file(
        "r2-b",
        "r1-a-003.md",
        b"---\nfrom: r1-a\ndeposited_at: 2026-12-02T10:42:51Z\n---\nhi",
    )
    .unwrap();
    (t, f)
}

#[test]
fn rows_follow_the_tree_and_the_state_rules() {
    let (_t, f) = workspace();
    let m = Scanner::new(f.root()).unwrap().scan();
    let rows = rows(&m, None, NOW, None);
    let ids: Vec<(&str, usize)> = rows.iter().map(|r| (r.id.as_str(), r.depth)).collect();
    assert_eq!(ids, vec![("r1-a", 0), ("r1-a-c1-x", 1), ("r2-b", 0)]);
    let [a, c, b] = [&rows[0], &rows[1], &rows[2]];
    assert_eq!(a.state, "idle");
    assert_eq!(a.step, Some(("002".into(), StepState::Failed)));
    assert_eq!(a.marks, vec!["cwd", "notify"]);
    assert_eq!(c.state, "pending");
    assert_eq!(c.parent.as_deref(), Some("r1-a"));
    assert_eq!(c.step, Some(("001".into(), StepState::Done)));
    assert!(
        c.notes.iter().any(|n| n.contains("meta.json")),
        "{:?}",
        c.notes
    );
    assert!(
        c.notes.iter().any(|n| n.contains("has waited 2h")),
        "{:?}",
        c.notes
    );
    assert_eq!(b.state, "held");
    assert_eq!(b.held.as_ref().unwrap().reason, "ask first");
    assert_eq!(b.pending, 1);
    assert!(
        b.notes.iter().all(|n| !n.contains("waited")),
        "{:?}",
        b.notes
    );

    let t = text(&rows);
    let lines: Vec<&str> = t.lines().skip(1).collect();
    assert!(
        t.starts_with("workspace: 0 tokens, 0s wall, 3 steps\n"),
        "{t}"
    );
    assert!(lines[0].starts_with("NAME"));
    assert!(lines[1].starts_with("Alpha "), "{t}");
    assert!(
        lines[1].contains(" 002:failed ") && lines[1].contains(" notify "),
        "{t}"
    );
    assert!(lines[1].ends_with("Fix the build"), "{t}");
    assert!(
        lines[2].starts_with("    ! notify: it asks for your attention"),
        "{t}"
    );
    assert!(lines[3].starts_with("  - "), "{t}");
    assert!(
        t.contains("    ! held: its bash call t waits for an answer (ask first): "),
        "{t}"
    );
    assert!(t.contains(" (marks/held/r2-b)\n"), "{t}");
    // Every row's columns line up with the header's.
    let col = lines[0].find("STATE").unwrap();
    assert_eq!(&lines[1][col..col + 4], "idle");

    let v: Value = serde_json::from_str(&json(&rows)).unwrap();
    assert_eq!(v[0]["id"], "r1-a");
    assert_eq!(v[0]["step"], "002");
    assert_eq!(v[0]["step_state"], "failed");
    assert_eq!(v[0]["marks"], json!(["cwd", "notify"]));
    assert_eq!(v[1]["parent"], "r1-a");
    assert_eq!(v[2]["held"]["tool"], "bash");
    assert_eq!(v[2]["state"], "held");
    assert_eq!(v[0]["held"], Value::Null);
}

#[test]
fn children_follow_their_parent_in_id_order_and_marks_stay_their_own() {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    // Created out of order; an orphan (its parent gone) is a root of the listing.
    for id in [
        "r2-b",
        "r1-a-c2-y",
        "r1-a",
        "r1-a-c1-x-g1-z",
        "r1-a-c1-x",
        "r9-q-c1-o",
    ] {
        f.agent(id, None, &[]).unwrap();
    }
    f.blob_mark("cwd", "r1-a-c2-y", b"/tmp").unwrap();
    f.blob_mark("cwd", "r2-b", b"/tmp").unwrap();
    f.commit_mark("notify", "r2-b", f.agent_tip("r2-b").unwrap())
        .unwrap();
    let m = Scanner::new(f.root()).unwrap().scan();
    let rows = rows(&m, None, NOW, None);
    let ids: Vec<(&str, usize)> = rows.iter().map(|r| (r.id.as_str(), r.depth)).collect();
    assert_eq!(
        ids,
        vec![
            ("r1-a", 0),
            ("r1-a-c1-x", 1),
            ("r1-a-c1-x-g1-z", 2),
            ("r1-a-c2-y", 1),
            ("r2-b", 0),
            ("r9-q-c1-o", 0),
        ]
    );
    let marks: Vec<(&str, Vec<String>)> = rows
        .iter()
        .map(|r| (r.id.as_str(), r.marks.clone()))
        .collect();
    assert_eq!(marks[3], ("r1-a-c2-y", vec!["cwd".to_string()]));
    assert_eq!(
        marks[4],
        ("r2-b", vec!["cwd".to_string(), "notify".to_string()])
    );
    assert!(marks[0].1.is_empty() && marks[1].1.is_empty());
}

#[test]
fn spend_per_agent_and_tree_and_what_needs_a_look_first() {
    let (_t, f) = workspace();
    let usage = |i: u32, o: u32| {
        format!(
            "{{\"type\":\"message_start\",\"v\":1,\"model\":\"m1\",\"role\":\"assistant\"}}\n{{\"type\":\"usage\",\"input_tokens\":{i},\"output_tokens\":{o}}}\n"
        )
    };
    let meta = br#"{"provider":"p","started_at":"2026-12-02T09:42:30Z","ended_at":"2026-12-02T09:43:35Z"}"#;
    f.step(
        "r1-a",
        1,
        &[
            ("response.json", usage(12_000, 300).as_bytes()),
            ("meta.json", meta),
        ],
    )
    .unwrap();
    f.step(
        "r1-a-c1-x",
        1,
        &[("response.json", usage(900, 100).as_bytes())],
    )
    .unwrap();
    f.step(
        "r2-b",
        1,
        &[
            ("response.json", usage(5, 5).as_bytes()),
            ("meta.json", b"{}"),
        ],
    )
    .unwrap();
    let prices =
        Prices::parse(br#"[{"provider":"p","model":"*","input":1000,"output":1000}]"#).unwrap();
    let m = Scanner::new(f.root()).unwrap().scan();
    let rows = rows(&m, None, NOW, Some(&prices));
    let [a, c, b] = [&rows[0], &rows[1], &rows[2]];
    assert_eq!(a.spend.as_ref().unwrap().tokens, 12_300);
    assert_eq!(a.spend.as_ref().unwrap().wall_seconds, 65);
    assert_eq!(a.tree.as_ref().unwrap().tokens, 13_300);
    assert_eq!(a.tree.as_ref().unwrap().steps, 3);
    assert_eq!(c.tree.as_ref().unwrap().tokens, 1000);
    // r1-a's own tokens are priced; the child's step has no provider (no meta.json).
    let cost = a.tree.as_ref().unwrap().cost.unwrap();
    assert!((cost.usd - 12.3).abs() < 1e-9, "{cost:?}");
    assert_eq!(cost.unpriced_tokens, 1000);
    assert_eq!(b.spend.as_ref().unwrap().cost.unwrap().unpriced_tokens, 10);
    let t = text(&rows);
    assert!(
        t.starts_with(
            "workspace: 13.3k tokens, 1m05s wall, 4 steps, $12.30 and 1k tokens unpriced\n"
        ),
        "{t}"
    );
    let header = t.lines().nth(1).unwrap();
    let col = header.find("TOKENS").unwrap();
    let cost_col = header.find("COST").unwrap();
    let alpha = t.lines().nth(2).unwrap();
    assert_eq!(&alpha[col..col + 6], "13.3k ", "{t}");
    assert_eq!(&alpha[cost_col..cost_col + 8], "$12.30+?", "{t}");
    let child = t.lines().find(|l| l.contains("r1-a-c1-x")).unwrap();
    assert_eq!(&child[col..col + 5], "1k   ", "{t}");
    let v: Value = serde_json::from_str(&json(&rows)).unwrap();
    assert_eq!(v[0]["tokens"], 12_300);
    assert_eq!(v[0]["tree"]["tokens"], 13_300);
    assert_eq!(v[0]["tree"]["unpriced_tokens"], 1000);
    assert_eq!(v[0]["cost_usd"], 12.3);
    assert_eq!(v[0]["budget"], Value::Null);
    assert_eq!(v[0]["signals"][0]["kind"], "notify");
    assert_eq!(v[2]["signals"][0]["path"], "marks/held/r2-b");
    // Without prices, no money anywhere.
    let plain = super::rows(&m, None, NOW, None);
    assert!(!text(&plain).contains("COST"));
    assert!(json(&plain).find("cost_usd").is_none());
    // attention: the most urgent first, whoever it is.
    let list = attention(&rows);
    let kinds: Vec<(&str, &str)> = list
        .iter()
        .map(|a| (a.signal.kind.as_str(), a.id.as_str()))
        .collect();
    assert_eq!(kinds, [("held", "r2-b"), ("notify", "r1-a")]);
    let at = attention_text(&list);
    let lines: Vec<&str> = at.lines().collect();
    assert!(lines[0].starts_with("SIGNAL  NAME   ID    PATH"), "{at}");
    assert!(
        lines[1].starts_with("held    Beta   r2-b  marks/held/r2-b"),
        "{at}"
    );
    assert!(
        lines[2].starts_with("notify  Alpha  r1-a  marks/notify/r1-a"),
        "{at}"
    );
    let aj: Value = serde_json::from_str(&attention_json(&list)).unwrap();
    assert_eq!(aj[0]["kind"], "held");
    assert_eq!(aj[1]["name"], "Alpha");
    assert_eq!(attention_text(&[]), "");
    assert_eq!(attention_json(&[]), "[]\n");
    // Confined: no other agent's spend, no tree.
    let mine = super::rows(&m, Some("r1-a"), NOW, None);
    assert_eq!(mine[0].spend.as_ref().unwrap().tokens, 12_300);
    assert!(mine[0].tree.is_none() && mine[1].spend.is_none());
}

#[test]
fn numbers_in_a_few_characters() {
    for (n, s) in [
        (0, "0"),
        (999, "999"),
        (1000, "1k"),
        (1234, "1.2k"),
        (12_345, "12.3k"),
        (99_960, "100k"),
        (123_456, "123k"),
        (999_600, "1M"),
        (1_234_567, "1.2M"),
    ] {
        assert_eq!(compact(n), s, "{n}");
    }
    assert_eq!(duration(59), "59s");
    assert_eq!(duration(65), "1m05s");
    assert_eq!(duration(3 * 3600 + 120), "3h02m");
    assert_eq!(duration(2 * 86_400 + 4 * 3600), "2d04h");
    assert_eq!(litany_root("a-b-c-d"), "a-b");
    assert_eq!(litany_root("a"), "a");
}

#[test]
fn a_confined_view_shows_others_only_what_git_shows() {
    let (_t, f) = workspace();
    let m = Scanner::new(f.root()).unwrap().scan();
    let rows = rows(&m, Some("r1-a"), NOW, None);
    let c = rows.iter().find(|r| r.id == "r1-a-c1-x").unwrap();
    assert_eq!((c.state, c.step.clone(), c.pending), (NONE, None, 0));
    assert!(c.notes.is_empty(), "{:?}", c.notes);
    let b = rows.iter().find(|r| r.id == "r2-b").unwrap();
    assert_eq!(b.state, "held", "a held mark is in git");
    assert_eq!(b.pending, 1, "r1-a's own deposit to Beta");
    let a = rows.iter().find(|r| r.id == "r1-a").unwrap();
    assert_eq!(a.step, Some(("002".into(), StepState::Failed)));
}
