use super::steps::{Finish, StepName};
use super::*;

#[test]
fn a_step_name_is_kept_only_when_it_is_not_the_number_as_litany_writes_it() {
    for (n, name, kept) in [
        (7, "007", false),
        (1000, "1000", false),
        (7, "7", true),
        (7, "0007", true),
    ] {
        let s = StepName::of(n, name.to_string());
        assert_eq!(s.0.is_some(), kept, "{name}");
        assert_eq!(s.get(n), name);
    }
    assert_eq!(
        std::mem::size_of::<StepName>(),
        2 * std::mem::size_of::<usize>()
    );
}
use crate::fixture::Fixture;
use crate::workspace::refs::Flavour;

#[test]
fn deposited_at_reads_the_frontmatter_clock() {
    assert_eq!(
        deposited_at("---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nhi"),
        Some(1_796_204_571)
    );
    assert_eq!(deposited_at("deposited_at: 2026-12-02T09:42:51Z\n"), None);
}

#[test]
fn a_scan_reads_agents_steps_tools_inboxes_and_marks() {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    f.agent("r1", Some("Alpha"), &[("title", b"Fix the build\n")])
        .unwrap();
    f.agent("r1-c1-x", None, &[]).unwrap();
    f.blob_mark(
        "held",
        "r1",
        br#"{"tool_use_id":"t","tool":"bash","reason":"ask"}"#,
    )
    .unwrap();
    let tip = f.agent_tip("r1").unwrap();
    f.commit_mark("notify", "r1", tip).unwrap();
    f.step("r1", 1, &[
        ("meta.json", br#"{"started_at":"2026-12-02T09:42:30Z","ended_at":"2026-12-02T09:42:31Z"}"#),
        ("response.json", b"{\"type\":\"usage\",\"output_tokens\":7}\n{\"type\":\"finish\",\"reason\":\"tool_use\"}\n{\"type\":\"end\"}\n"),
        ("tools/toolu_1/input.json", br#"{"id":"toolu_1","name":"bash","input":{"command":"ls -l"}}"#),
    ]).unwrap();
    f.step(
        "r1",
        1,
        &[(
            "tools/toolu_1/output.json",
            &Fixture::tool_output("ab", "c", 2),
        )],
    )
    .unwrap();
    f.step("r1", 2, &[("meta.json", b"{not json")]).unwrap();
    f.step(
        "r1-c1-x",
        1,
        &[("tools/odd/output.json", &Fixture::tool_output("", "", 0))],
    )
    .unwrap();
    f.inbox_file(
        "r1",
        "user-001.md",
        b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nhi",
    )
    .unwrap();
    f.inbox_file("r1", ".user-002.md.tmp", b"x").unwrap();
    let mut s = Scanner::new(f.root()).unwrap();
    let m = s.scan();
    let a = &m.agents["r1"];
    assert_eq!(a.name.as_deref(), Some("Alpha"));
    assert_eq!(a.title.as_deref(), Some("Fix the build"));
    assert!(!a.running);
    assert_eq!(a.pending.len(), 1);
    let p = a.pending.values().next().unwrap();
    assert_eq!(
        (p.sender.as_str(), p.deposited_at),
        ("user", Some(1_796_204_571))
    );
    assert_eq!(a.steps.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    let latest = a.latest.as_ref().unwrap();
    assert_eq!(latest.number, 2);
    assert!(matches!(latest.meta, Meta::Bad(_)), "{:?}", latest.meta);
    let one = s.step("r1", 1, "001");
    assert_eq!(
        one.finish,
        Some(Finish {
            reason: Some("tool_use".into()),
            output_tokens: Some(7),
            tokens: 7,
        })
    );
    let tool = &one.tools["toolu_1"];
    assert_eq!(tool.input, Ok(("bash".into(), "ls -l".into())));
    let out = tool.output.clone().unwrap().unwrap();
    assert_eq!(
        (out.exit_code, out.stdout_bytes, out.stderr_bytes),
        (2, 2, 1)
    );
    let child = m.agents["r1-c1-x"].latest.as_ref().unwrap();
    assert!(child.tools["odd"].input.is_err());
    assert_eq!(child.state(true, false), StepState::Failed);
    assert_eq!(child.state(true, true), StepState::InFlight);
    let marks: Vec<&str> = m.marks_of("r1").map(|(k, _)| k).collect();
    assert_eq!(marks, vec!["held", "notify"]);
    let held = m.marks[&("held".to_string(), "r1".to_string())]
        .value
        .clone()
        .unwrap();
    assert_eq!(Held::parse(&held).unwrap().tool, "bash");
    assert_eq!(
        m.marks[&("notify".to_string(), "r1".to_string())].value,
        None
    );
    // A second scan of nothing changed agrees.
    let again = s.scan();
    assert_eq!(again.agents, m.agents);
}

#[test]
fn the_caches_keep_only_the_latest_steps_of_living_agents() {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    f.agent("r1", None, &[]).unwrap();
    f.agent("r2", None, &[]).unwrap();
    let tool = Fixture::tool_output("a", "", 0);
    for id in ["r1", "r2"] {
        f.step(id, 1, &[("tools/t/output.json", &tool)]).unwrap();
    }
    let mut s = Scanner::new(f.root()).unwrap();
    s.scan();
    assert_eq!((s.step_cache.len(), s.tool_cache.len()), (2, 2));
    // Idle looks prune nothing and keep everything.
    s.scan();
    assert!(!s.grown);
    assert_eq!((s.step_cache.len(), s.tool_cache.len()), (2, 2));
    // A new step replaces its agent's old one in both caches...
    f.step("r1", 2, &[("tools/u/output.json", &tool)]).unwrap();
    s.scan();
    let rel = |id, n| {
        f.step_dir(id, n)
            .strip_prefix(f.root())
            .unwrap()
            .to_path_buf()
    };
    let mut cached: Vec<&PathBuf> = s.step_cache.keys().collect();
    cached.sort();
    assert_eq!(cached, [&rel("r1", 2), &rel("r2", 1)]);
    assert_eq!(s.tool_cache.len(), 2);
    // ...and a deleted agent leaves them.
    f.delete_agent("r2").unwrap();
    s.scan();
    assert_eq!((s.step_cache.len(), s.tool_cache.len()), (1, 1));
    assert!(s.titles.len() <= 1);
}

#[test]
fn a_settled_step_is_not_read_again_until_the_full_scan() {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    f.agent("r1", None, &[]).unwrap();
    f.step("r1", 1, &[("meta.json", b"{}")]).unwrap();
    f.step(
        "r1",
        1,
        &[("tools/t/output.json", &Fixture::tool_output("a", "", 0))],
    )
    .unwrap();
    let mut s = Scanner::new(f.root()).unwrap();
    let exit = |m: &Model| {
        let step = m.agents["r1"].latest.clone().unwrap();
        step.tools["t"].output.clone().unwrap().unwrap().exit_code
    };
    assert_eq!(exit(&s.scan()), 0);
    // Rewritten in place by something that holds no lock: unseen for a while...
    let out = f.step_dir("r1", 1).join("tools/t/output.json");
    std::fs::write(&out, Fixture::tool_output("a", "", 3)).unwrap();
    assert_eq!(exit(&s.scan()), 0);
    // ...and seen by the full scan.
    let seen = (0..FULL_SCAN_EVERY).any(|_| exit(&s.scan()) == 3);
    assert!(seen);
    // A new tool directory is seen at once by the holder of the executor lock...
    f.step(
        "r1",
        1,
        &[("tools/u/input.json", br#"{"name":"bash","input":{}}"#)],
    )
    .unwrap();
    std::fs::create_dir_all(f.inbox("r1")).unwrap();
    let dir = std::fs::File::open(f.inbox("r1")).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor.
    assert_eq!(unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) }, 0);
    let latest = |m: Model| m.agents["r1"].latest.clone().unwrap();
    assert!(latest(s.scan()).tools.contains_key("u"));
    drop(dir);
    // ...and a new step by anyone.
    f.step("r1", 2, &[("request.json", b"{}")]).unwrap();
    assert_eq!(latest(s.scan()).number, 2);
}

#[test]
fn a_held_flock_makes_the_agent_running() {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    f.agent("r1", None, &[]).unwrap();
    std::fs::create_dir_all(f.inbox("r1")).unwrap();
    let mut s = Scanner::new(f.root()).unwrap();
    assert!(!s.scan().agents["r1"].running);
    let dir = std::fs::File::open(f.inbox("r1")).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor.
    assert_eq!(unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) }, 0);
    assert!(s.scan().agents["r1"].running);
    drop(dir);
    assert!(!s.scan().agents["r1"].running);
}

fn usage(input: u32, output: u32) -> Vec<u8> {
    format!("{{\"type\":\"usage\",\"input_tokens\":{input},\"output_tokens\":{output}}}\n")
        .into_bytes()
}

#[test]
fn spend_is_litanys_rule_and_a_finished_step_is_read_once() {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    f.agent("r1", None, &[]).unwrap();
    let meta = br#"{"provider":"p","started_at":"2026-12-02T09:42:30Z","ended_at":"2026-12-02T09:42:40Z"}"#;
    let mut one = usage(100, 10);
    one.extend(usage(5, 1)); // a second attempt counts too
    f.step("r1", 1, &[("response.json", &one), ("meta.json", meta)])
        .unwrap();
    f.step("r1", 2, &[("response.json", &usage(7, 3)[..20])])
        .unwrap();
    let mut s = Scanner::new(f.root()).unwrap();
    let spend = |m: &Model| m.agents["r1"].account.spend.clone();
    let m = s.scan();
    assert_eq!(
        (spend(&m).tokens, spend(&m).wall_seconds, spend(&m).steps),
        (116, 10, 2)
    );
    // The open step, streaming under its executor's lock: what was appended, once its
    // line is complete.
    std::fs::create_dir_all(f.inbox("r1")).unwrap();
    let lock = std::fs::File::open(f.inbox("r1")).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let open = f.step_dir("r1", 2).join("response.json");
    std::fs::write(&open, usage(7, 3)).unwrap();
    assert_eq!(spend(&s.scan()).tokens, 126);
    let mut more = usage(7, 3);
    more.extend(usage(1, 1));
    std::fs::write(&open, &more).unwrap();
    assert_eq!(spend(&s.scan()).tokens, 128);
    // A finished step is never read again: a line added to it later is not seen (no
    // harness writes one), which is what keeps a look's cost flat.
    let done = f.step_dir("r1", 1).join("response.json");
    let mut grown = one.clone();
    grown.extend(usage(1000, 0));
    std::fs::write(&done, grown).unwrap();
    f.step("r1", 2, &[("meta.json", b"{}")]).unwrap();
    drop(lock);
    let m = s.scan();
    assert_eq!(spend(&m).tokens, 128);
    assert_eq!(
        m.agents["r1"]
            .latest
            .as_ref()
            .unwrap()
            .finish
            .as_ref()
            .unwrap()
            .tokens,
        12
    );
    // Who spent them: the provider of meta.json, the model of the attempt.
    assert!(
        spend(&m)
            .by_payer
            .iter()
            .any(|((p, _), t)| p.as_deref() == Some("p") && t.total() == 116),
        "{:?}",
        spend(&m).by_payer
    );
    // A step litany's budget does not see (not three digits) is not counted.
    f.step(
        "r1",
        1000,
        &[("response.json", &usage(50, 50)), ("meta.json", b"{}")],
    )
    .unwrap();
    let m = s.scan();
    assert_eq!((spend(&m).tokens, spend(&m).steps), (128, 2));
    // A fresh scanner (a fresh read) agrees with litany's rule over what is there now.
    let m = Scanner::new(f.root()).unwrap().scan();
    assert_eq!(spend(&m).tokens, 1128);
}

#[test]
fn the_budget_is_read_from_the_governing_workflow() {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
    let repo = f.repo();
    let config = |yaml: &[u8], on: &str| -> git2::Oid {
        let tree = f
            .tree(&[("version", b"2\n"), ("workflow.yaml", yaml)])
            .unwrap();
        f.commit(&format!("refs/heads/config/{on}"), tree, "config: edit")
            .unwrap()
    };
    let base = config(b"budgets: {max_total_tokens: 100}\n", "default");
    // An agent forked off the lineage, and the lineage moved on: the tip governs.
    let sig = git2::Signature::now("l", "l@l").unwrap();
    let tree = repo
        .find_tree(f.tree(&[("name", b"A\n")]).unwrap())
        .unwrap();
    let parent = repo.find_commit(base).unwrap();
    let tip = repo
        .commit(
            Some("refs/heads/agents/r1-a"),
            &sig,
            &sig,
            "dispatch: worker [r1-a]",
            &tree,
            &[&parent],
        )
        .unwrap();
    let moved = config(b"budgets:\n  max_total_tokens: 500\n", "default");
    f.step("r1-a", 1, &[("response.json", &usage(40, 2))])
        .unwrap();
    let mut s = Scanner::new(f.root()).unwrap();
    let m = s.scan_for_status();
    let b = m.agents["r1-a"].budget.clone().unwrap();
    assert_eq!(
        (b.max_total_tokens, b.workflow, &b.from),
        (Some(500), moved, &WorkflowFrom::LineageTip)
    );
    // A workflow mark on it governs instead.
    f.commit_mark("workflow", "r1-a", base).unwrap();
    let m = s.scan_for_status();
    let b = m.agents["r1-a"].budget.clone().unwrap();
    assert_eq!((b.max_total_tokens, b.workflow), (Some(100), base));
    assert_eq!(
        b.from,
        WorkflowFrom::Mark {
            holder: "r1-a".into()
        }
    );
    // No budget set: none.
    f.commit_mark("workflow", "r1-a", f.agent_tip("r1-a").unwrap_or(tip))
        .unwrap();
    let quiet = config(b"retry: {max_attempts: 2}\n", "quiet");
    f.commit_mark("workflow", "r1-a", quiet).unwrap();
    assert!(s.scan_for_status().agents["r1-a"].budget.is_none());
    // A follower's scan does not look.
    assert!(s.scan().agents["r1-a"].budget.is_none());
}
