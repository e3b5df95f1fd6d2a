//! Conversations started through this mount (`new/`), so that the `agent-created`
//! event of each says who started it: the writer's pid, uid and command.
//!
//! The follower finds a new agent by its ref, on its own schedule, while the start learns
//! the agent's id when litany has it: either may come first. While a start is under way
//! the follower's `agent-created` events of root agents are held back; when it ends,
//! the one for its agent is given the writer and all are let go. One found after the
//! start ended is given the writer from what the start left ([`STARTED_KEEP`]).

use std::time::{Duration, Instant};

use super::event::{Event, Kind};

/// How long a start's writer is kept for an `agent-created` event found after it.
pub(crate) const STARTED_KEEP: Duration = Duration::from_secs(60);
/// The most `agent-created` events held back while starts are under way (past it they
/// pass unannotated: a start is never a reason to lose an event).
const HELD_MAX: usize = 1024;

/// Who wrote a goal: pid, uid and command name.
pub(crate) type Starter = (u32, u32, String);

#[derive(Default)]
pub(super) struct Starts {
    busy: usize,
    held: Vec<Event>,
    by: Vec<(String, Starter, Instant)>,
}

fn is_root_created(e: &Event) -> bool {
    e.kind == Kind::AgentCreated && e.field("parent").is_none_or(|p| p.is_null())
}

impl Starts {
    /// A start is under way.
    pub(crate) fn begin(&mut self) {
        self.busy += 1;
    }

    /// A start ended, with agent `id` started by `who`, or none: the events held for it,
    /// to be logged.
    pub(crate) fn end(&mut self, started: Option<(&str, Starter)>) -> Vec<Event> {
        self.busy = self.busy.saturating_sub(1);
        let now = Instant::now();
        self.by
            .retain(|(_, _, at)| now.duration_since(*at) < STARTED_KEEP);
        if let Some((id, who)) = started {
            self.by.push((id.to_string(), who, now));
        }
        let held = if self.busy == 0 {
            std::mem::take(&mut self.held)
        } else {
            // Only its own agent's goes now; the others wait for their starts.
            let (mine, rest) = std::mem::take(&mut self.held)
                .into_iter()
                .partition(|e| self.by.iter().any(|(id, ..)| *id == e.agent));
            self.held = rest;
            mine
        };
        held.into_iter().map(|e| self.annotated(e)).collect()
    }

    /// `events` as they may be logged now: a root's `agent-created` given its starter,
    /// or held back while a start is under way.
    pub(crate) fn pass(&mut self, events: Vec<Event>) -> Vec<Event> {
        let mut out = Vec::with_capacity(events.len());
        for e in events {
            if !is_root_created(&e) {
                out.push(e);
            } else if self.by.iter().any(|(id, ..)| *id == e.agent) {
                out.push(self.annotated(e));
            } else if self.busy > 0 && self.held.len() < HELD_MAX {
                self.held.push(e);
            } else {
                out.push(e);
            }
        }
        out
    }

    fn annotated(&self, e: Event) -> Event {
        match self.by.iter().find(|(id, ..)| *id == e.agent) {
            Some((_, (pid, uid, comm), _)) => e.started_by(*pid, *uid, comm),
            None => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_created_event_names_its_starter_in_either_order() {
        let who = (42, 1000, "bash".to_string());
        // Found while the start is under way: held, then given the writer.
        let mut s = Starts::default();
        s.begin();
        let other = Event::step_started(1, "x", "001");
        let out = s.pass(vec![Event::agent_created(1, "a", None), other.clone()]);
        assert_eq!(out, vec![other]);
        let out = s.end(Some(("a", who.clone())));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field("pid"), Some(&42.into()));
        assert_eq!(out[0].field("uid"), Some(&1000.into()));
        assert_eq!(out[0].field("comm"), Some(&"bash".into()));
        // Found after: given the writer at once; a child's passes as it is.
        let mut s = Starts::default();
        s.begin();
        assert!(s.end(Some(("b", who))).is_empty());
        let out = s.pass(vec![
            Event::agent_created(1, "b", None),
            Event::agent_created(1, "b-1-2", Some("b")),
        ]);
        assert_eq!(out[0].field("pid"), Some(&42.into()));
        assert_eq!(out[1].field("pid"), None);
        // A start that failed lets what it held go, unannotated.
        let mut s = Starts::default();
        s.begin();
        assert!(s.pass(vec![Event::agent_created(1, "c", None)]).is_empty());
        let out = s.end(None);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field("pid"), None);
    }
}
