//! The follower: turns workspace changes into events by diffing two [`Model`]s.
//!
//! Guarantees: an event is emitted for a difference between the model last seen and the
//! one just gathered, never for a change notice itself, so a notice lost (an inotify
//! overflow, a directory nobody watched) costs only latency, never an event; and a fact
//! seen once is never reported again, so no event is emitted twice. Steps that started
//! and ended between two looks are read in full when the next look sees the jump.
//! Deposits made through this mount are reported by the deposit hook itself
//! ([`super::Views::deposited`]) and skipped here.

use std::collections::BTreeSet;
use std::sync::Arc;

use git2::Oid;

use super::event::Event;
use super::model::{Agent, Meta, Model, Scanner, Step, StepState, Tool};
use super::signal;
use crate::workspace::ids::parent_of;

/// The most commits walked back along a branch to find the messages it delivered.
pub(crate) const DELIVERY_WALK: usize = 1000;
use crate::workspace::inbox::MESSAGE_EXT;
use crate::workspace::refs::{MESSAGES_DIR, subject};

/// Everything that happened between `old` and `new`, in the order found. `skip` says
/// whether a deposit `(recipient, file, inode)` was already reported (through this
/// mount).
pub fn diff(
    old: &Model,
    new: &Model,
    scanner: &mut Scanner,
    skip: &mut dyn FnMut(&str, &str, u64) -> bool,
) -> Vec<Event> {
    let at = new.at;
    let mut out = Vec::new();
    for id in new.agents.keys() {
        if !old.agents.contains_key(id) {
            out.push(Event::agent_created(at, id, parent_of(id)));
        }
    }
    // Both are sorted by (kind, id): one pass over each, with no key copied.
    let mut before = old.marks.iter().peekable();
    let mut cleared = Vec::new();
    for (key, m) in &new.marks {
        while let Some((gone, _)) = before.next_if(|(k, _)| *k < key) {
            cleared.push(gone);
        }
        if before.next_if(|(k, _)| *k == key).map(|(_, was)| was) != Some(m) {
            out.push(Event::mark_set(at, &key.1, &key.0, m.value.as_deref()));
        }
    }
    cleared.extend(before.map(|(k, _)| k));
    for (kind, id) in cleared {
        out.push(Event::mark_cleared(at, id, kind));
    }
    for (id, a) in &new.agents {
        let before = old.agents.get(id);
        agent(id, before, a, at, scanner, skip, &mut out);
    }
    signal_events(old, new, at, &mut out);
    for id in old.agents.keys() {
        if !new.agents.contains_key(id) {
            out.push(Event::agent_deleted(at, id));
        }
    }
    for e in &mut out {
        let name = new.name(&e.agent).or_else(|| old.name(&e.agent));
        e.name = name.map(str::to_string);
    }
    out
}

fn agent(
    id: &str,
    before: Option<&Agent>,
    a: &Agent,
    at: i64,
    scanner: &mut Scanner,
    skip: &mut dyn FnMut(&str, &str, u64) -> bool,
    out: &mut Vec<Event>,
) {
    // Steps: the old latest to its end, every step after it, the new latest as it is.
    let old_latest = before.and_then(|b| b.latest.as_ref());
    let old_running = before.is_some_and(|b| b.running);
    if let Some(new_latest) = &a.latest {
        match old_latest {
            Some(o) if o.number == new_latest.number => step(
                id,
                Some((o, true, old_running)),
                new_latest,
                true,
                a.running,
                at,
                out,
            ),
            _ => {
                let from = old_latest.map(|o| o.number);
                if let Some(o) = old_latest
                    && a.steps.contains_key(&o.number)
                {
                    let now = scanner.step(id, o.number, &o.dir);
                    step(
                        id,
                        Some((o, true, old_running)),
                        &now,
                        false,
                        a.running,
                        at,
                        out,
                    );
                }
                // A step directory that went away (or a lower one now the highest) is
                // not a new step; only numbers above the old latest are.
                let after = from.map_or(0, |f| f.saturating_add(1));
                if after < new_latest.number {
                    for (n, dir) in a.steps.range(after..new_latest.number) {
                        let s = scanner.step(id, *n, &dir.get(*n));
                        step(id, None, &s, false, a.running, at, out);
                    }
                }
                if from.is_some_and(|f| f >= new_latest.number) {
                    return deposits_and_deliveries(id, before, a, at, scanner, skip, out);
                }
                step(id, None, new_latest, true, a.running, at, out);
            }
        }
    }
    deposits_and_deliveries(id, before, a, at, scanner, skip, out);
}

/// The signals raised and cleared between `old` and `new` ([`super::signal`]), of every
/// agent of either: one pass over both (sorted by id), an agent whose signals are the
/// same (shared while what makes them stands) costing a pointer comparison.
fn signal_events(old: &Model, new: &Model, at: i64, out: &mut Vec<Event>) {
    type Signals<'a> = Option<&'a Arc<[signal::Signal]>>;
    fn one(id: &str, was: Signals, now: Signals, at: i64, out: &mut Vec<Event>) {
        let (was, now) = match (was, now) {
            (None, None) => return,
            (Some(w), Some(n)) if Arc::ptr_eq(w, n) => return,
            (w, n) => (w.map_or(&[][..], |w| &w[..]), n.map_or(&[][..], |n| &n[..])),
        };
        for s in now {
            if !was.iter().any(|w| w.kind == s.kind) {
                out.push(Event::signal_raised(
                    at,
                    id,
                    s.kind.as_str(),
                    &s.says,
                    &s.path,
                ));
            }
        }
        for w in was {
            if !now.iter().any(|s| s.kind == w.kind) {
                out.push(Event::signal_cleared(at, id, w.kind.as_str()));
            }
        }
    }
    let mut before = old.agents.iter().peekable();
    for (id, a) in &new.agents {
        while let Some((gone, b)) = before.next_if(|(k, _)| *k < id) {
            one(gone, b.signals.as_ref(), None, at, out);
        }
        let was = before
            .next_if(|(k, _)| *k == id)
            .and_then(|(_, b)| b.signals.as_ref());
        one(id, was, a.signals.as_ref(), at, out);
    }
    for (gone, b) in before {
        one(gone, b.signals.as_ref(), None, at, out);
    }
}

fn deposits_and_deliveries(
    id: &str,
    before: Option<&Agent>,
    a: &Agent,
    at: i64,
    scanner: &mut Scanner,
    skip: &mut dyn FnMut(&str, &str, u64) -> bool,
    out: &mut Vec<Event>,
) {
    // Deposits: every (name, mtime) not seen before.
    for ((file, mtime), p) in &a.pending {
        let seen = before.is_some_and(|b| b.pending.contains_key(&(file.clone(), *mtime)));
        if !seen && !skip(id, file, p.ino) {
            out.push(Event::message_deposited(at, id, &p.sender, file, false));
        }
    }
    // Deliveries: transcript commits between the old tip and the new; on a branch seen
    // for the first time, every one of its own it already holds (a child's first entry
    // is committed in the second of its dispatch, before a look may see the branch; the
    // parent's entries it inherits name the parent and are not its deliveries).
    let since = match before {
        Some(b) if b.tip != a.tip => Some(b.tip),
        Some(_) => return,
        None => None,
    };
    out.extend(deliveries(scanner, id, a.tip, since, DELIVERY_WALK, |_| at));
}

/// The messages delivered to `id` on its branch from `tip` back to `stop` (or `limit`
/// commits), oldest first; each timed by `time(author_time)`.
pub(crate) fn deliveries(
    scanner: &Scanner,
    id: &str,
    tip: Oid,
    stop: Option<Oid>,
    limit: usize,
    time: impl Fn(i64) -> i64,
) -> Vec<Event> {
    let mut walked = 0;
    let log = scanner.refs().first_parent_log(tip, &mut |c| {
        walked += 1;
        Some(c) == stop || walked > limit
    });
    let Ok((log, ended)) = log else {
        return Vec::new();
    };
    // A walk that never met `stop` went through rewritten history (a compaction landing
    // replays the branch): an entry the old tip already had was delivered before.
    let rewritten = stop.filter(|s| ended != Some(*s));
    let suffix = format!(" [{id}]");
    let mut out = Vec::new();
    for c in log.iter().rev() {
        let Some((number, origin)) = subject::transcript(&c.summary)
            .and_then(|(n, rest)| Some((n, rest.strip_suffix(&suffix)?)))
        else {
            continue;
        };
        let entry = format!("{number}-{origin}.{MESSAGE_EXT}");
        let had = |tip: Oid| {
            matches!(
                scanner.refs().entry_at(tip, &[MESSAGES_DIR, &entry]),
                Ok(Some(_))
            )
        };
        if rewritten.is_some_and(had) {
            continue;
        }
        if had(c.id) {
            out.push(Event::message_delivered(
                time(c.author_time),
                id,
                origin,
                &entry,
            ));
        }
    }
    out
}

/// The events of one step between what was seen (`old`: the step, whether it was the
/// latest, whether the agent ran) and what is seen now.
pub(crate) fn step(
    id: &str,
    old: Option<(&Step, bool, bool)>,
    s: &Step,
    latest: bool,
    running: bool,
    at: i64,
    out: &mut Vec<Event>,
) {
    let dir = &s.dir;
    if old.is_none() {
        out.push(Event::step_started(at, id, dir));
    }
    for (t, tool) in &s.tools {
        let was = old.and_then(|(o, l, r)| Some((o.tools.get(t)?, o, l && r)));
        tool_events(id, dir, t, was, (tool, s, latest && running), at, out);
    }
    let old_odd: BTreeSet<&String> = old
        .map(|(o, _, _)| o.odd_tools.iter().collect())
        .unwrap_or_default();
    for odd in &s.odd_tools {
        if !old_odd.contains(odd) {
            let path = format!("{}/{id}/{dir}/tools/{odd}", crate::workspace::STEPS_DIR);
            out.push(Event::bad_record(at, id, &path, "the tool id is not UTF-8"));
        }
    }
    let was = old.map(|(o, l, r)| o.state(l, r));
    let now = s.state(latest, running);
    if was == Some(now) && old.is_some_and(|(o, _, _)| o.meta == s.meta) {
        return;
    }
    match (&s.meta, now) {
        (Meta::Done { .. }, _) => {
            let f = s.finish.clone().unwrap_or_default();
            out.push(Event::step_finished(
                at,
                id,
                dir,
                f.reason.as_deref(),
                f.output_tokens,
                f.tokens,
                s.wall_seconds(),
            ));
        }
        (Meta::Bad(why), _) => {
            let path = format!("{}/{id}/{dir}/meta.json", crate::workspace::STEPS_DIR);
            out.push(Event::bad_record(at, id, &path, why));
        }
        (Meta::Missing, StepState::Failed) if was != Some(StepState::Failed) => {
            let why = if latest {
                "no meta.json and no executor holds the lock"
            } else {
                "no meta.json and a later step began"
            };
            out.push(Event::step_failed(at, id, dir, why));
        }
        _ => {}
    }
}

/// Why a tool record is bad, once that is settled: no or an unreadable `input.json` is
/// only odd once the tool has finished, or its step has and no executor works on it any
/// more (`live`: the latest step of a running agent). litany writes `meta.json` when the
/// model call ends and only then makes each tool's directory and its `input.json` (via
/// `input.json.tmp`), so a look between the two finds a finished step with a tool
/// directory and no input yet.
fn input_bad<'a>(tool: &'a Tool, step: &Step, live: bool) -> Option<&'a str> {
    let settled = tool.output.is_some() || (!matches!(step.meta, Meta::Missing) && !live);
    match &tool.input {
        Err(why) if settled => Some(why),
        _ => None,
    }
}

fn tool_events(
    id: &str,
    dir: &str,
    t: &str,
    old: Option<(&Tool, &Step, bool)>,
    (tool, s, live): (&Tool, &Step, bool),
    at: i64,
    out: &mut Vec<Event>,
) {
    let path = format!("{}/{id}/{dir}/tools/{t}", crate::workspace::STEPS_DIR);
    if let (Ok((name, summary)), false) =
        (&tool.input, old.is_some_and(|(o, _, _)| o.input.is_ok()))
    {
        out.push(Event::tool_started(at, id, dir, t, name, summary));
    }
    if let Some(why) = input_bad(tool, s, live)
        && old.is_none_or(|(o, os, ol)| input_bad(o, os, ol).is_none())
    {
        out.push(Event::bad_record(at, id, &path, why));
    }
    match (&tool.output, old.and_then(|(o, _, _)| o.output.as_ref())) {
        (Some(Ok(o)), None | Some(Err(_))) => out.push(Event::tool_finished(
            at,
            id,
            dir,
            t,
            o.exit_code,
            o.stdout_bytes,
            o.stderr_bytes,
        )),
        (Some(Err(why)), None) => out.push(Event::bad_record(
            at,
            id,
            &format!("{path}/output.json"),
            why,
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::views::event::Kind;
    use crate::workspace::refs::Flavour;

    /// The events but signals' (which depend on how long a state stood: see
    /// `signals_are_raised_and_cleared_once`), by kind and path.
    fn kinds(events: &[Event]) -> Vec<(&'static str, String)> {
        events
            .iter()
            .filter(|e| !matches!(e.kind, Kind::SignalRaised | Kind::SignalCleared))
            .map(|e| (e.kind.as_str(), e.path.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn differences_become_events_once() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();

        f.agent("r1", Some("Alpha"), &[]).unwrap();
        f.step("r1", 1, &[("request.json", b"{}"), ("response.json", b"")])
            .unwrap();
        f.step(
            "r1",
            1,
            &[(
                "tools/toolu_1/input.json",
                br#"{"id":"toolu_1","name":"bash","input":{"command":"seq 3"}}"#,
            )],
        )
        .unwrap();
        let m1 = s.scan();
        let e1 = diff(&m0, &m1, &mut s, &mut never);
        assert_eq!(
            kinds(&e1),
            vec![
                ("agent-created", "agents/r1".into()),
                ("step-started", "steps/r1/001".into()),
                (
                    "tool-started",
                    "steps/r1/001/tools/toolu_1/input.json".into()
                ),
                // Nobody holds the lock: a step without meta.json has failed.
                ("step-failed", "steps/r1/001".into()),
            ]
        );
        assert!(e1.iter().all(|e| e.name.as_deref() == Some("Alpha")));
        // Nothing changed: nothing to say.
        let m1b = s.scan();
        assert!(kinds(&diff(&m1, &m1b, &mut s, &mut never)).is_empty());

        f.step(
            "r1",
            1,
            &[(
                "tools/toolu_1/output.json",
                &Fixture::tool_output("1\n2\n3\n", "", 0),
            )],
        )
        .unwrap();
        f.step(
            "r1",
            1,
            &[
                (
                    "response.json",
                    b"{\"type\":\"finish\",\"reason\":\"tool_use\"}\n",
                ),
                ("meta.json", b"{}"),
            ],
        )
        .unwrap();
        // Step 2 started and ended between two looks; step 3 is under way.
        f.step("r1", 2, &[("meta.json", b"{}")]).unwrap();
        f.step("r1", 3, &[("request.json", b"{}")]).unwrap();
        f.blob_mark(
            "held",
            "r1",
            br#"{"tool_use_id":"t","tool":"bash","reason":"r"}"#,
        )
        .unwrap();
        f.inbox_file(
            "r1",
            "user-001.md",
            b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nhi",
        )
        .unwrap();
        let m2 = s.scan();
        let e2 = diff(&m1b, &m2, &mut s, &mut never);
        assert_eq!(
            kinds(&e2),
            vec![
                ("mark-set", "marks/held/r1".into()),
                (
                    "tool-finished",
                    "steps/r1/001/tools/toolu_1/output.json".into()
                ),
                ("step-finished", "steps/r1/001".into()),
                ("step-started", "steps/r1/002".into()),
                ("step-finished", "steps/r1/002".into()),
                ("step-started", "steps/r1/003".into()),
                ("step-failed", "steps/r1/003".into()),
                ("message-deposited", "inbox/r1/user-001.md".into()),
            ]
        );
        let fin = &e2[1];
        assert_eq!(fin.field("stdout_bytes"), Some(&6.into()));
        assert_eq!(e2[2].field("finish"), Some(&"tool_use".into()));
        // A deposit the mount already reported is skipped.
        f.inbox_file("r1", "user-002.md", b"x").unwrap();
        let m3 = s.scan();
        let mut ours = |a: &str, file: &str, _: u64| a == "r1" && file == "user-002.md";
        let e3 = diff(&m2, &m3, &mut s, &mut ours);
        assert!(kinds(&e3).is_empty(), "{:?}", kinds(&e3));

        // A delivery: the deposit leaves, a transcript commit adds it.
        std::fs::remove_file(f.inbox("r1").join("user-001.md")).unwrap();
        let tree = f
            .tree(&[("name", b"Alpha\n"), ("messages/005-user.md", b"hi")])
            .unwrap();
        f.commit("refs/heads/agents/r1", tree, "transcript 005: user [r1]")
            .unwrap();
        f.delete_mark("held", "r1").unwrap();
        f.agent("r1-c-x", None, &[]).unwrap();
        let m4 = s.scan();
        let e4 = diff(&m3, &m4, &mut s, &mut never);
        assert_eq!(
            kinds(&e4),
            vec![
                ("agent-created", "agents/r1-c-x".into()),
                ("mark-cleared", String::new()),
                ("message-delivered", "agents/r1/messages/005-user.md".into()),
            ]
        );
        assert_eq!(e4[0].field("parent"), Some(&"r1".into()));
        f.delete_agent("r1-c-x").unwrap();
        let m5 = s.scan();
        let e5 = diff(&m4, &m5, &mut s, &mut never);
        assert_eq!(e5.len(), 1);
        assert_eq!(e5[0].kind, Kind::AgentDeleted);
    }

    #[test]
    fn marks_set_changed_and_cleared_in_one_look() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        let mut scanner = Scanner::new(f.root()).unwrap();
        let marks = |list: &[(&str, &str, u8)]| -> Model {
            let marks = list
                .iter()
                .map(|(kind, id, v)| {
                    let mark = crate::views::model::Mark {
                        oid: git2::Oid::from_bytes(&[*v; 20]).unwrap(),
                        value: Some(v.to_string()),
                    };
                    ((kind.to_string(), id.to_string()), mark)
                })
                .collect();
            Model {
                marks,
                ..Model::default()
            }
        };
        let old = marks(&[
            ("held", "a", 1),
            ("held", "c", 1),
            ("notify", "b", 1),
            ("w", "z", 1),
        ]);
        let new = marks(&[
            ("held", "b", 1),
            ("held", "c", 2),
            ("notify", "b", 1),
            ("r", "a", 1),
        ]);
        let events = diff(&old, &new, &mut scanner, &mut |_, _, _| false);
        let seen: Vec<(&str, String, String)> = events
            .iter()
            .map(|e| {
                let mark = e.field("mark").and_then(|m| m.as_str()).unwrap_or_default();
                (e.kind.as_str(), mark.to_string(), e.agent.clone())
            })
            .collect();
        let want = [
            ("mark-set", "held", "b"),
            ("mark-set", "held", "c"),
            ("mark-set", "r", "a"),
            ("mark-cleared", "held", "a"),
            ("mark-cleared", "w", "z"),
        ]
        .map(|(k, m, a)| (k, m.to_string(), a.to_string()));
        assert_eq!(seen, want);
        assert!(diff(&new, &new, &mut scanner, &mut |_, _, _| false).is_empty());
    }

    #[test]
    fn a_step_directory_that_goes_away_is_no_new_step() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        f.step("r1", 3, &[("meta.json", b"{}")]).unwrap();
        f.step("r1", 4, &[("meta.json", b"{}")]).unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();
        std::fs::remove_dir_all(f.step_dir("r1", 4)).unwrap();
        let m1 = s.scan();
        assert!(kinds(&diff(&m0, &m1, &mut s, &mut never)).is_empty());
        // It comes back: a new directory, so a new step.
        f.step("r1", 4, &[("meta.json", b"{}")]).unwrap();
        let m2 = s.scan();
        let k = kinds(&diff(&m1, &m2, &mut s, &mut never));
        assert_eq!(k[0], ("step-started", "steps/r1/004".into()), "{k:?}");
    }

    #[test]
    fn a_burst_of_ten_thousand_deposits_is_ten_thousand_events_once() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();
        for i in 1..=10_000 {
            f.inbox_file("r1", &format!("user-{i:03}.md"), b"---\nfrom: user\n---\nx")
                .unwrap();
        }
        let m1 = s.scan();
        let mut e = diff(&m0, &m1, &mut s, &mut never);
        // Writing them may take longer than a mail signal waits.
        e.retain(|e| e.kind != Kind::SignalRaised);
        assert_eq!(e.len(), 10_000);
        let files: BTreeSet<&str> = e.iter().filter_map(|e| e.path.as_deref()).collect();
        assert_eq!(files.len(), 10_000, "each once");
        let log = crate::views::EventLog::new();
        log.append(&e);
        let text = log
            .read(crate::views::Rendering::Text, 0, u32::MAX)
            .unwrap();
        assert_eq!(text.iter().filter(|b| **b == b'\n').count(), 10_000);
        let m2 = s.scan();
        assert!(kinds(&diff(&m1, &m2, &mut s, &mut never)).is_empty());
    }

    #[test]
    fn rewritten_history_delivers_only_what_is_new() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        let tree = f.tree(&[("messages/002-user.md", b"a")]).unwrap();
        f.commit("refs/heads/agents/r1", tree, "transcript 002: user [r1]")
            .unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();
        // A compaction replays the branch: a new line of commits, the old entry kept.
        let repo = f.repo();
        let sig = git2::Signature::now("l", "l@l").unwrap();
        let t1 = repo.find_tree(tree).unwrap();
        let base = repo
            .commit(None, &sig, &sig, "transcript 002: user [r1]", &t1, &[])
            .unwrap();
        let base = repo.find_commit(base).unwrap();
        let t2 = f
            .tree(&[
                ("messages/002-user.md", b"a"),
                ("messages/003-user.md", b"b"),
            ])
            .unwrap();
        let t2 = repo.find_tree(t2).unwrap();
        let tip = repo
            .commit(None, &sig, &sig, "transcript 003: user [r1]", &t2, &[&base])
            .unwrap();
        repo.reference("refs/heads/agents/r1", tip, true, "replay")
            .unwrap();
        let m1 = s.scan();
        let k = kinds(&diff(&m0, &m1, &mut s, &mut never));
        assert_eq!(
            k,
            vec![("message-delivered", "agents/r1/messages/003-user.md".into())]
        );
    }

    #[test]
    fn bad_records_are_events() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();
        f.step(
            "r1",
            1,
            &[("meta.json", b"{nope"), ("tools/t1/output.json", b"[]")],
        )
        .unwrap();
        let m1 = s.scan();
        let e = diff(&m0, &m1, &mut s, &mut never);
        let k = kinds(&e);
        assert!(
            k.contains(&("bad-record", "steps/r1/001/tools/t1".into())),
            "{k:?}"
        );
        assert!(
            k.contains(&("bad-record", "steps/r1/001/tools/t1/output.json".into())),
            "{k:?}"
        );
        assert!(
            k.contains(&("bad-record", "steps/r1/001/meta.json".into())),
            "{k:?}"
        );
        let m2 = s.scan();
        assert!(kinds(&diff(&m1, &m2, &mut s, &mut never)).is_empty());
    }

    /// A workspace at `dir` with agent `r1`, whose executor lock the returned file holds.
    fn running_agent(dir: &std::path::Path) -> (Fixture, std::fs::File) {
        use std::os::fd::AsRawFd;
        let f = Fixture::create(dir, Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        std::fs::create_dir_all(f.inbox("r1")).unwrap();
        let lock = std::fs::File::open(f.inbox("r1")).unwrap();
        // SAFETY: a valid descriptor; the executor's lock, held by the caller.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        (f, lock)
    }

    #[test]
    fn an_empty_meta_json_is_one_being_written_not_a_bad_record() {
        let t = tempfile::tempdir().unwrap();
        let (f, lock) = running_agent(t.path());
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();
        f.step("r1", 1, &[("request.json", b"{}"), ("meta.json", b"")])
            .unwrap();
        let m1 = s.scan();
        let k = kinds(&diff(&m0, &m1, &mut s, &mut never));
        assert_eq!(k, vec![("step-started", "steps/r1/001".into())]);
        f.step("r1", 1, &[("meta.json", b"{}")]).unwrap();
        let m2 = s.scan();
        let k = kinds(&diff(&m1, &m2, &mut s, &mut never));
        assert_eq!(k, vec![("step-finished", "steps/r1/001".into())]);
        drop(lock);
    }

    #[test]
    fn a_tool_on_its_way_after_its_step_ended_is_not_a_bad_record() {
        // litany writes meta.json when the model call ends, then makes each tool's
        // directory and writes its input.json: a look in between sees a finished step
        // with a tool directory and no input yet.
        let t = tempfile::tempdir().unwrap();
        let (f, lock) = running_agent(t.path());
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();
        f.step("r1", 1, &[("request.json", b"{}"), ("meta.json", b"{}")])
            .unwrap();
        let tools = f.root().join("steps/r1/001/tools");
        std::fs::create_dir_all(tools.join("t1")).unwrap();
        let m1 = s.scan();
        let k = kinds(&diff(&m0, &m1, &mut s, &mut never));
        assert!(!k.iter().any(|(kind, _)| *kind == "bad-record"), "{k:?}");
        // Its input comes: the tool started, and nothing was bad.
        f.step(
            "r1",
            1,
            &[(
                "tools/t1/input.json",
                br#"{"id":"t1","name":"bash","input":{"command":"ls"}}"#,
            )],
        )
        .unwrap();
        let m2 = s.scan();
        assert_eq!(
            kinds(&diff(&m1, &m2, &mut s, &mut never)),
            vec![("tool-started", "steps/r1/001/tools/t1/input.json".into())]
        );
        // A tool that never gets one is bad once no executor works on the step.
        std::fs::create_dir_all(tools.join("t2")).unwrap();
        let m3 = s.scan();
        let k = kinds(&diff(&m2, &m3, &mut s, &mut never));
        assert!(!k.iter().any(|(kind, _)| *kind == "bad-record"), "{k:?}");
        drop(lock);
        let m4 = s.scan();
        let k = kinds(&diff(&m3, &m4, &mut s, &mut never));
        assert!(
            k.contains(&("bad-record", "steps/r1/001/tools/t2".into())),
            "{k:?}"
        );
    }

    #[test]
    fn a_branch_first_seen_with_its_own_delivery_tells_it() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("p1", None, &[]).unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let mut never = |_: &str, _: &str, _: u64| false;
        let m0 = s.scan();
        // A child dispatched and its first entry committed between two looks; the branch
        // also holds an entry of its parent's, which is no delivery to the child.
        let child = "p1-c1";
        f.agent(child, None, &[]).unwrap();
        let tree = f.tree(&[("messages/001-user.md", b"a")]).unwrap();
        f.commit(
            &format!("refs/heads/agents/{child}"),
            tree,
            "transcript 001: user [p1]",
        )
        .unwrap();
        let tree = f
            .tree(&[
                ("messages/001-user.md", b"a"),
                ("messages/002-p1.md", b"go"),
            ])
            .unwrap();
        f.commit(
            &format!("refs/heads/agents/{child}"),
            tree,
            "transcript 002: p1 [p1-c1]",
        )
        .unwrap();
        let m1 = s.scan();
        let k = kinds(&diff(&m0, &m1, &mut s, &mut never));
        assert_eq!(
            k.iter()
                .filter(|(kind, _)| *kind == "message-delivered")
                .collect::<Vec<_>>(),
            vec![&(
                "message-delivered",
                "agents/p1-c1/messages/002-p1.md".to_string()
            )],
            "{k:?}"
        );
        let m2 = s.scan();
        assert!(kinds(&diff(&m1, &m2, &mut s, &mut never)).is_empty());
    }
}
