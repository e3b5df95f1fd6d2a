//! The root's events in time order across workspaces.
//!
//! Each workspace's events reach the root as its views log them: first its history,
//! reconstructed from the records (which takes a while, longer in a large workspace),
//! then what happens live. Appended as they come, two workspaces' histories would
//! follow one another rather than interleave. So while the histories of the workspaces
//! found at the mount are being made, the root holds everything back; once each is in
//! (or [`GATHER_LIMIT`] has passed, or a reader opens `events` and has waited for them),
//! it appends what it held sorted by time (stable: one workspace's order is kept within
//! a second) and passes everything through from then on. A workspace found later brings
//! its history when it comes, after what the root has shown: the log is append-only, so
//! that `tail -f` never sees a line move.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::WsKey;
use crate::FastSet;
use crate::views::event::Event;
use crate::views::{EventLog, Tee};

/// The longest the root holds events back for histories still being made.
pub(crate) const GATHER_LIMIT: Duration = Duration::from_secs(30);

/// The root's log, and what it holds back while histories come in (module docs).
pub(crate) struct Merge {
    log: Arc<EventLog>,
    state: Mutex<State>,
}

enum State {
    Gathering {
        /// The workspaces whose histories are awaited; `None` until the home says which
        /// (histories that arrive before that are remembered in `done`).
        awaited: Option<FastSet<WsKey>>,
        done: FastSet<WsKey>,
        held: Vec<Event>,
        since: Instant,
    },
    Passing,
}

impl Merge {
    pub(crate) fn new(log: Arc<EventLog>) -> Arc<Self> {
        Arc::new(Self {
            log,
            state: Mutex::new(State::Gathering {
                awaited: None,
                done: FastSet::default(),
                held: Vec::new(),
                since: Instant::now(),
            }),
        })
    }

    /// The workspaces found at the mount: their histories are awaited.
    pub(crate) fn await_histories(&self, keys: impl IntoIterator<Item = WsKey>) {
        let mut st = self.state.lock();
        if let State::Gathering { awaited, done, .. } = &mut *st {
            *awaited = Some(keys.into_iter().filter(|k| !done.contains(k)).collect());
        }
        self.settle(&mut st, false);
    }

    /// Appends what is held if every awaited history is in or [`GATHER_LIMIT`] passed;
    /// with `now`, whatever is still awaited.
    pub(crate) fn flush(&self, now: bool) {
        let mut st = self.state.lock();
        self.settle(&mut st, now);
    }

    fn settle(&self, st: &mut State, now: bool) {
        let State::Gathering {
            awaited,
            held,
            since,
            ..
        } = st
        else {
            return;
        };
        let all_in = awaited.as_ref().is_some_and(|a| a.is_empty());
        if !(now || all_in || since.elapsed() >= GATHER_LIMIT) {
            return;
        }
        if let Some(a) = awaited.as_ref().filter(|a| !a.is_empty()) {
            log::info!(
                "events: {} workspaces' histories are still being made; the root shows what \
                 is in, and theirs after it",
                a.len()
            );
        }
        let mut events = std::mem::take(held);
        events.sort_by_key(|e| e.at);
        self.log.append(&events);
        *st = State::Passing;
    }
}

impl Tee for Merge {
    fn take(&self, ws: &str, events: Vec<Event>, history: bool) {
        let mut st = self.state.lock();
        match &mut *st {
            State::Passing => self.log.append(&events),
            State::Gathering {
                awaited,
                done,
                held,
                ..
            } => {
                held.extend(events);
                if history {
                    done.insert(ws.into());
                    if let Some(a) = awaited {
                        a.remove(ws);
                    }
                }
                self.settle(&mut st, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at: i64, agent: &str) -> Event {
        Event::agent_created(at, agent, None)
    }

    fn agents(log: &EventLog) -> Vec<String> {
        let text = log
            .read(crate::views::Rendering::Text, 0, u32::MAX)
            .unwrap();
        String::from_utf8(text)
            .unwrap()
            .lines()
            .map(|l| l.split(' ').nth(2).unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn histories_interleave_by_time_then_live_events_pass() {
        let log = Arc::new(EventLog::new());
        let m = Merge::new(log.clone());
        // One history arrives before the home says what it awaits.
        m.take("a", vec![ev(10, "a1"), ev(30, "a2")], true);
        m.await_histories(["a".into(), "b".into()]);
        assert!(log.is_empty(), "b's history is awaited");
        m.take("a", vec![ev(40, "a3")], false);
        m.take("b", vec![ev(20, "b1"), ev(30, "b2")], true);
        assert_eq!(agents(&log), ["a1", "b1", "a2", "b2", "a3"]);
        // From then on, as they come.
        m.take("b", vec![ev(5, "b0")], false);
        assert_eq!(agents(&log).last().map(String::as_str), Some("b0"));
    }

    #[test]
    fn a_reader_is_not_kept_waiting_for_a_slow_history() {
        let log = Arc::new(EventLog::new());
        let m = Merge::new(log.clone());
        m.await_histories(["a".into(), "slow".into()]);
        m.take("a", vec![ev(10, "a1")], true);
        assert!(log.is_empty());
        m.flush(false);
        assert!(log.is_empty(), "within the limit, still held");
        m.flush(true);
        assert_eq!(agents(&log), ["a1"]);
        m.take("slow", vec![ev(1, "s1")], true);
        assert_eq!(agents(&log), ["a1", "s1"], "appended after, never inserted");
    }
}
