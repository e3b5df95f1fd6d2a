//! History: what happened before the mount, reconstructed from the records.
//!
//! Guarantees: the reconstruction is made from the same first [`Model`] the follower
//! diffs from, so an event is either history (it shows in that model) or live (a
//! difference from it), never both; it keeps only the newest [`HISTORY_MAX_EVENTS`]
//! events (a bounded heap, so memory stays bounded however old the workspace), in time
//! order, with the records' own times: `meta.json`'s `started_at`/`ended_at`,
//! `output.json`'s, a deposit's `deposited_at`, commit times for creations and
//! deliveries, and mtimes where a record has no time; the signals standing in the first
//! model are raised at their mark's time, else the agent's last activity. Not
//! reconstructible (no record keeps them): agents deleted before the mount, marks and
//! signals cleared before it, and drivers launched by earlier mounts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use git2::Oid;

use super::event::{Event, Kind};
use super::follow;
use super::model::{Meta, Model, Scanner, Step, deposited_at};
use crate::FastMap;
use crate::workspace::ids::parent_of;
use crate::workspace::refs::{MESSAGES_DIR, subject};

/// The most events reconstructed: the newest ones are kept.
pub(crate) const HISTORY_MAX_EVENTS: usize = 10_000;
/// The most commits walked back along one branch.
pub(crate) const HISTORY_WALK: usize = 10_000;

/// The newest `max` of the events pushed, kept in a bounded heap.
struct Newest {
    max: usize,
    seq: u64,
    heap: BinaryHeap<Reverse<(i64, u64)>>,
    events: FastMap<u64, Event>,
}

impl Newest {
    fn new(max: usize) -> Self {
        Self {
            max,
            seq: 0,
            heap: BinaryHeap::new(),
            events: FastMap::default(),
        }
    }

    fn push(&mut self, e: Event) {
        self.seq += 1;
        self.heap.push(Reverse((e.at, self.seq)));
        self.events.insert(self.seq, e);
        while self.heap.len() > self.max {
            if let Some(Reverse((_, s))) = self.heap.pop() {
                self.events.remove(&s);
            }
        }
    }

    /// Oldest first; within one second, in the order pushed.
    fn into_sorted(self) -> Vec<Event> {
        let mut keys: Vec<(i64, u64)> = self.heap.into_iter().map(|Reverse(k)| k).collect();
        keys.sort_unstable();
        let mut events = self.events;
        keys.into_iter()
            .filter_map(|(_, s)| events.remove(&s))
            .collect()
    }
}

/// The events that led to `m0`, the newest `max` of them, oldest first.
pub(crate) fn reconstruct(m0: &Model, scanner: &mut Scanner, max: usize) -> Vec<Event> {
    let mut out = Newest::new(max);
    let snap = scanner.refs().snapshot().ok();
    for ((kind, id), m) in &m0.marks {
        let at = snap
            .as_ref()
            .and_then(|s| s.moved_at(&s.flavour.mark_ref(kind, id)))
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(m0.at, |d| d.as_secs() as i64);
        out.push(Event::mark_set(at, id, kind, m.value.as_deref()));
    }
    // What needs a look now, since the fact that raised it: its mark's move, else the
    // agent's last activity.
    for (id, a) in &m0.agents {
        for sig in a.signals.iter().flat_map(|s| s.iter()) {
            let mark_at = sig.kind.mark().and_then(|kind| {
                let s = snap.as_ref()?;
                let t = s.moved_at(&s.flavour.mark_ref(kind, id))?;
                Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64)
            });
            let at = mark_at.or(a.last_activity).unwrap_or(m0.at);
            out.push(Event::signal_raised(
                at,
                id,
                sig.kind.as_str(),
                &sig.says,
                &sig.path,
            ));
        }
    }
    for (id, a) in &m0.agents {
        branch(scanner, id, a.tip, &mut out);
        // Steps, newest first, until the newest `max` of this agent alone are found; then
        // told oldest first, so that steps within one second keep their order.
        let mut found = 0;
        let mut batches = Vec::new();
        for (n, dir) in a.steps.iter().rev() {
            let latest = a.latest.as_ref().filter(|l| l.number == *n);
            let read;
            let s = match latest {
                Some(l) => &**l,
                None => {
                    read = scanner.step(id, *n, &dir.get(*n));
                    &read
                }
            };
            let mut evs = Vec::new();
            follow::step(id, None, s, latest.is_some(), a.running, 0, &mut evs);
            found += evs.len();
            for e in &mut evs {
                e.at = time_of(e, s);
            }
            batches.push(evs);
            if found >= max {
                break;
            }
        }
        for e in batches.into_iter().rev().flatten() {
            out.push(e);
        }
        for ((file, _), p) in &a.pending {
            let at = p.deposited_at.unwrap_or(p.mtime);
            out.push(Event::message_deposited(at, id, &p.sender, file, false));
        }
    }
    let mut events = out.into_sorted();
    for e in &mut events {
        e.name = m0.name(&e.agent).map(str::to_string);
    }
    events
}

/// What agent `id`'s branch says: its creation, and each message delivered to it (with
/// its deposit, timed by its `deposited_at`).
fn branch(scanner: &Scanner, id: &str, tip: Oid, out: &mut Newest) {
    let suffix = format!("[{id}]");
    let mut walked = 0;
    let Ok((log, _)) = scanner.refs().first_parent_log(tip, &mut |_| {
        walked += 1;
        walked > HISTORY_WALK
    }) else {
        return;
    };
    let created = log
        .iter()
        .rev()
        .find(|c| c.summary.ends_with(&suffix) && subject::is_dispatch(&c.summary))
        .or_else(|| log.iter().rev().find(|c| c.summary.ends_with(&suffix)))
        .or(log.first());
    if let Some(c) = created {
        out.push(Event::agent_created(c.author_time, id, parent_of(id)));
    }
    for e in follow::deliveries(scanner, id, tip, None, HISTORY_WALK, |t| t) {
        if let (Some(from), Some(entry)) = (
            e.field("from").and_then(|v| v.as_str()),
            e.field("entry").and_then(|v| v.as_str()),
        ) && let Some(at) = delivered_deposit_time(scanner, tip, entry)
        {
            let mut d = Event::message_deposited(at, id, from, entry, false);
            // The inbox file is gone; the message lives on in the transcript.
            d.path.clone_from(&e.path);
            out.push(d);
        }
        out.push(e);
    }
}

fn delivered_deposit_time(scanner: &Scanner, tip: Oid, entry: &str) -> Option<i64> {
    let refs = scanner.refs();
    match refs.entry_at(tip, &[MESSAGES_DIR, entry]).ok()?? {
        crate::workspace::refs::GitEntry::Blob { oid, .. } => {
            deposited_at(&String::from_utf8_lossy(&refs.blob(oid).ok()?))
        }
        _ => None,
    }
}

/// A reconstructed step event's own time, from the record it reports.
fn time_of(e: &Event, s: &Step) -> i64 {
    let (started, ended) = match s.meta {
        Meta::Done { started, ended, .. } => (started, ended),
        _ => (None, None),
    };
    let tool = e
        .field("tool_id")
        .and_then(|v| v.as_str())
        .and_then(|t| s.tools.get(t));
    let output = tool
        .and_then(|t| t.output.as_ref())
        .and_then(|o| o.as_ref().ok());
    let at = match e.kind {
        Kind::StepStarted => started,
        Kind::StepFinished => ended,
        Kind::ToolStarted => output
            .and_then(|o| o.started)
            .or(tool.and_then(|t| t.input_mtime)),
        Kind::ToolFinished => output.and_then(|o| o.ended),
        _ => None,
    };
    at.unwrap_or(s.mtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::workspace::refs::Flavour;

    #[test]
    fn the_newest_are_kept_in_time_order() {
        let mut n = Newest::new(3);
        for (i, at) in [5, 1, 9, 3, 9, 7].into_iter().enumerate() {
            n.push(Event::agent_deleted(at, &format!("a{i}")));
        }
        let kept: Vec<(i64, String)> = n
            .into_sorted()
            .into_iter()
            .map(|e| (e.at, e.agent))
            .collect();
        assert_eq!(
            kept,
            vec![(7, "a5".into()), (9, "a2".into()), (9, "a4".into())]
        );
    }

    #[test]
    fn a_finished_workspace_is_told_in_order() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", Some("Alpha"), &[]).unwrap();
        f.step(
            "r1",
            1,
            &[
                (
                    "meta.json",
                    br#"{"started_at":"2026-12-02T09:42:30Z","ended_at":"2026-12-02T09:42:40Z"}"#,
                ),
                (
                    "response.json",
                    b"{\"type\":\"finish\",\"reason\":\"tool_use\"}\n",
                ),
                (
                    "tools/toolu_1/input.json",
                    br#"{"id":"toolu_1","name":"bash","input":{"command":"seq 3"}}"#,
                ),
            ],
        )
        .unwrap();
        f.step(
            "r1",
            1,
            &[(
                "tools/toolu_1/output.json",
                &Fixture::tool_output("1\n", "", 0),
            )],
        )
        .unwrap();
        f.step(
            "r1",
            2,
            &[(
                "meta.json",
                br#"{"started_at":"2026-12-02T09:42:41Z","ended_at":"2026-12-02T09:42:50Z"}"#,
            )],
        )
        .unwrap();
        f.inbox_file(
            "r1",
            "user-002.md",
            b"---\nfrom: user\ndeposited_at: 2026-12-02T09:43:00Z\n---\nagain",
        )
        .unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let m0 = s.scan();
        let mut h = Scanner::new(f.root()).unwrap();
        let events = reconstruct(&m0, &mut h, HISTORY_MAX_EVENTS);
        let got: Vec<(String, &str)> = events
            .iter()
            .filter(|e| e.kind != Kind::AgentCreated)
            .map(|e| (crate::workspace::clock::format_utc(e.at), e.kind.as_str()))
            .collect();
        let want = [
            ("2026-12-02T09:42:30Z", "step-started"),
            ("2026-12-02T09:42:30Z", "tool-started"),
            ("2026-12-02T09:42:31Z", "tool-finished"),
            ("2026-12-02T09:42:40Z", "step-finished"),
            ("2026-12-02T09:42:41Z", "step-started"),
            ("2026-12-02T09:42:50Z", "step-finished"),
            ("2026-12-02T09:43:00Z", "message-deposited"),
        ];
        let want: Vec<(String, &str)> = want.iter().map(|(a, k)| (a.to_string(), *k)).collect();
        assert_eq!(got, want);
        assert_eq!(
            events
                .iter()
                .filter(|e| e.kind == Kind::AgentCreated)
                .count(),
            1
        );
        assert!(events.iter().all(|e| e.name.as_deref() == Some("Alpha")));
        // Bounded: only the newest are kept.
        let few = reconstruct(&m0, &mut h, 2);
        // (The fixture's commits are dated now, after every record.)
        let kinds: Vec<Kind> = few.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, vec![Kind::MessageDeposited, Kind::AgentCreated]);
        // Nothing the first model shows is live: a diff from it is empty.
        let m1 = s.scan();
        // (But signals, which a state raises once it has stood a while.)
        let live = follow::diff(&m0, &m1, &mut s, &mut |_, _, _| false);
        assert!(
            live.iter()
                .all(|e| matches!(e.kind, Kind::SignalRaised | Kind::SignalCleared)),
            "{live:?}"
        );
    }

    #[test]
    fn steps_within_one_second_are_told_in_their_order() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        let meta = br#"{"started_at":"2026-12-02T09:42:30Z","ended_at":"2026-12-02T09:42:30Z"}"#;
        for n in 1..=3 {
            f.step("r1", n, &[("meta.json", meta)]).unwrap();
        }
        let m0 = Scanner::new(f.root()).unwrap().scan();
        let mut h = Scanner::new(f.root()).unwrap();
        let got: Vec<(String, &str)> = reconstruct(&m0, &mut h, HISTORY_MAX_EVENTS)
            .iter()
            .filter(|e| e.kind != Kind::AgentCreated)
            .map(|e| (e.path.clone().unwrap_or_default(), e.kind.as_str()))
            .collect();
        let want: Vec<(String, &str)> = (1..=3)
            .flat_map(|n| {
                let p = format!("steps/r1/{n:03}");
                [(p.clone(), "step-started"), (p, "step-finished")]
            })
            .collect();
        assert_eq!(got, want);
    }
}
