//! Where a conversation stands after its committed entries: the live tail of
//! `transcript.md`, rendered from facts the tree gathers from the step records, the inbox
//! and the marks ([`Facts`]).
//!
//! **Sections, in this order, each only when it applies:**
//! - *waiting*: the deposits pending in the inbox, in the order the drain takes them;
//! - *streaming*: the newest step's model entry while it is not committed;
//! - *in progress*: the tool of the newest step that runs now;
//! - *held*: the call a tool control held, and what releases it;
//! - *wound*: the newest step failed: how, and the last lines of its log.
//!
//! **Offsets do not move in the common case.** A live section that becomes an entry is
//! rendered as that entry will be (same number, origin, fields, blocks, usage), with its
//! state where the entry's time goes, exactly as wide ([`format::TIME_WIDTH`]): the
//! streaming model entry (`streaming, in flight`, blocks as the fold of its
//! `response.json` renders them one level down, [`super::response::Fold::entry`]), the
//! running tool's result (`running since 09:42Z` and the call it answers, so the header is
//! the committed one's), and a deposit the next drain delivers (`waiting in the inbox`).
//! When the commit lands, its time overwrites the state and the rest only grows: the file
//! grows by what is new and `tail -f` prints each addition once. A step that fails keeps
//! its streamed blocks (`cut, never committed`) and gains the wound after them.
//!
//! The same holds in the instant between litany writing an entry into the worktree and
//! committing it (a delivery renames the deposit there, a tool's result is written
//! there): the written entry is shown, with the state it had.
//!
//! Everything else is rendered afresh: a deposit arriving while a step runs (it is shown
//! as a plain `waiting` section before the step, since its number is not known yet), a
//! retried attempt (its notes are in the stream, not in the entry), a held call released,
//! a wound healed by the next step, a compaction. Sections that become no entry (`held`,
//! `wound`, a plain `waiting`) say so in their header.

use std::fs::File;
use std::sync::Arc;

use super::format;
use super::transcript::{Transcript, frontmatter_fields, message, split_frontmatter};
use crate::paging::CaptureKey;
use crate::workspace::inbox::MESSAGE_EXT;

/// How many lines of a failed step's log the wound shows.
pub(crate) const WOUND_LOG_LINES: usize = 12;

/// The state of a result litany wrote without running a tool (a refusal, a decline),
/// until its commit.
const WRITTEN: &str = "being committed";

/// The frontmatter field that makes a deposit a child's result, which the drain may land
/// without an entry (CONTRACT §3.3, §3.6).
const RESULT_FIELD: &str = "terminal_ref";

/// What the tree found of where an agent stands.
#[derive(Debug, Default)]
pub struct Facts {
    /// Entries litany has written into the agent's worktree and not committed yet (the
    /// moment between a delivery's or a tool result's write and its commit), by number:
    /// (file name, bytes, when the tool it answers started, for a tool's result).
    pub written: Vec<(String, Vec<u8>, Option<i64>)>,
    /// Deposits pending in the inbox, in the order the drain takes them: (name, bytes).
    pub waiting: Vec<(String, Vec<u8>)>,
    /// The newest step's model entry, while it is not committed.
    pub model: Option<ModelFacts>,
    /// The tool of the newest step that runs now: (`tool_use` id, seconds since the epoch
    /// its `input.json` was written).
    pub running: Option<(String, i64)>,
    /// The held call.
    pub held: Option<HeldFacts>,
    /// The newest step failed.
    pub wound: Option<WoundFacts>,
}

/// The newest step's model entry, not committed.
#[derive(Debug)]
pub struct ModelFacts {
    /// The step directory's name (`005`).
    pub step: String,
    /// The entry's origin: the model the request named (litany names the entry after it).
    pub origin: String,
    /// Its `response.json`, opened, when there is one.
    pub response: Option<(File, CaptureKey)>,
    /// Still streaming (an executor holds the agent); otherwise cut.
    pub live: bool,
    /// Nothing will be appended to `response.json` any more.
    pub closed: bool,
}

/// The `held` mark's call and what releases it.
#[derive(Debug)]
pub struct HeldFacts {
    pub(crate) tool_use_id: String,
    pub(crate) tool: String,
    pub(crate) reason: String,
    /// The governing workflow's `tool_control` command, when it could be read.
    pub(crate) control: Option<String>,
    /// The command that asks the control again (`litany advance <ws> <id>`).
    pub(crate) advance: String,
}

/// The newest step failed.
#[derive(Debug)]
pub struct WoundFacts {
    pub step: String,
    /// Why, when the step records say more than the stream does (no `response.json`).
    pub(crate) why: Option<String>,
    /// The step's `meta.json` is written (its call ended) but the tip read is still the
    /// one it started from: a tip read before the commit, or a commit that never came.
    pub(crate) unsure: bool,
    /// The mark a stop's terminal path set at the branch tip, if one is there: litany's
    /// stock workflow binds `branch_stopped`, which only `litany stop`'s epitaph fires,
    /// to `mark_abandoned` and `notify_ui`.
    pub(crate) stopped_mark: Option<String>,
    /// The workspace-relative path of the log shown and its last lines; `None` when both
    /// `stderr.log` and `driver.log` are empty or missing.
    pub(crate) log: Option<(String, String)>,
}

/// One piece of the live tail.
#[derive(Debug)]
pub(super) enum Part {
    Bytes(Vec<u8>),
    /// The streaming entry's blocks: the entry-shaped rendering of its `response.json`.
    Stream {
        file: File,
        key: CaptureKey,
        closed: bool,
        len: u64,
    },
}

impl Part {
    pub(super) fn len(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::Stream { len, .. } => *len,
        }
    }
}

/// `transcript.md` at one moment: the committed part and the live tail.
#[derive(Debug)]
pub struct View {
    pub(super) committed: Arc<Vec<u8>>,
    pub(super) parts: Vec<Part>,
    len: u64,
}

impl View {
    pub(super) fn new(committed: Arc<Vec<u8>>, parts: Vec<Part>) -> Self {
        let len = committed.len() as u64 + parts.iter().map(Part::len).sum::<u64>();
        View {
            committed,
            parts,
            len,
        }
    }

    /// The exact length of `transcript.md` as this view shows it.
    #[allow(clippy::len_without_is_empty)] // a file's size, not a collection's count
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether anything follows the committed entries.
    #[cfg(test)]
    pub(crate) fn is_live(&self) -> bool {
        !self.parts.is_empty()
    }
}

/// A number as litany writes it in an entry's name (`{:03}`).
fn number(n: u32) -> String {
    format!("{n:03}")
}

/// The sections before the streaming entry's blocks, and after them: the caller puts the
/// rendering of `response.json` in between.
pub(super) struct Sections {
    pub(super) before: Vec<u8>,
    pub(super) after: Vec<u8>,
}

/// Renders every section of `facts` but the streaming blocks, after `committed`. `wound`
/// is how the newest step failed, as its stream tells (the caller folded it).
pub(super) fn sections(committed: &Transcript, facts: &Facts, wound_kind: &str) -> Sections {
    let mut before = Vec::new();
    let mut after = Vec::new();
    // Written, not committed: each as it will read, its state for its time (a delivery
    // was waiting, a result was running), so that the commit only fills the time in.
    let states: Vec<String> = facts
        .written
        .iter()
        .map(|(name, _, since)| match since {
            Some(since) => format::live_state(&format::running_since(*since)),
            None if name.rsplit_once('.').map(|(_, e)| e) == Some(MESSAGE_EXT) => {
                format::live_state(format::WAITING)
            }
            None if name.contains(&format!("-{}.", super::transcript::TOOL_ORIGIN)) => {
                format::live_state(WRITTEN)
            }
            None => format::live_state(format::STREAMING),
        })
        .collect();
    let written: Vec<(&str, &[u8], &str)> = facts
        .written
        .iter()
        .zip(&states)
        .map(|((n, b, _), s)| (n.as_str(), b.as_slice(), s.as_str()))
        .collect();
    let max = committed.render_after(&written, &mut before);
    let ahead = facts.model.is_some() || facts.running.is_some() || facts.held.is_some();
    let results = facts.waiting.iter().any(|(_, b)| is_result(b));
    let mut next = max.saturating_add(1);
    for (name, bytes) in &facts.waiting {
        if ahead || results {
            plain_waiting(name, bytes, &mut before);
        } else {
            let sender = crate::workspace::inbox::pending_sender(name).unwrap_or(name);
            let state = format::live_state(format::WAITING);
            message(&number(next), sender, Some(&state), bytes, &mut before);
            next = next.saturating_add(1);
        }
    }
    if let Some(m) = &facts.model {
        let state = format::live_state(if m.live {
            format::STREAMING
        } else {
            format::CUT
        });
        format::entry(
            &mut before,
            &number(next),
            &m.origin,
            Some(&state),
            &[],
            &[],
        );
    }
    if let Some((id, since)) = &facts.running
        && let Some((_, name)) = committed.open_calls.iter().find(|(i, _)| i == id)
    {
        let state = format::live_state(&format::running_since(*since));
        format::entry(
            &mut after,
            &number(next),
            super::transcript::TOOL_ORIGIN,
            Some(&state),
            &[],
            &[(name, id)],
        );
    }
    if let Some(h) = &facts.held {
        held(h, &mut after);
    }
    if let Some(w) = &facts.wound {
        wound(w, wound_kind, &mut after);
    }
    Sections { before, after }
}

/// Whether a deposit is a child's result (its frontmatter names a `terminal_ref`).
fn is_result(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    split_frontmatter(&text).is_some_and(|(front, _)| {
        frontmatter_fields(front)
            .iter()
            .any(|(k, _)| *k == RESULT_FIELD)
    })
}

/// `## waiting · <name> · from: … · deposited_at: …` and the body: a deposit whose entry
/// number is not known yet.
fn plain_waiting(name: &str, bytes: &[u8], out: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(bytes);
    let (fields, body) = match split_frontmatter(&text) {
        Some((front, body)) => (frontmatter_fields(front), body),
        None => (Vec::new(), &*text),
    };
    let mut details = vec![name.to_string()];
    details.extend(fields.iter().map(|(k, v)| format!("{k}: {v}")));
    let details: Vec<&str> = details.iter().map(String::as_str).collect();
    format::live_section(out, "waiting", &details);
    format::paragraph(out, body);
}

fn held(h: &HeldFacts, out: &mut Vec<u8>) {
    let call = format!("{} ({})", h.tool, h.tool_use_id);
    format::live_section(out, "held", &[&call, &h.reason]);
    let control = h
        .control
        .as_deref()
        .map_or(String::new(), |c| format!(" `{c}`"));
    format::paragraph(
        out,
        &format!(
            "The workflow's tool control{control} answered hold: litany parked this call \
             before running it. It is released when a later `{}` (a message to the agent \
             starts one) asks the control again and gets pass (the call runs) or refuse (the \
             reason becomes the call's error result).",
            h.advance
        ),
    );
}

fn wound(w: &WoundFacts, stream: &str, out: &mut Vec<u8>) {
    let step = format!("step {}", w.step);
    let headline = match (&w.stopped_mark, &w.why) {
        (Some(mark), _) => format!(
            "stopped by `litany stop` (its branch_stopped binding set the {mark} mark at the tip)"
        ),
        (None, Some(why)) => why.clone(),
        (None, None) => stream.to_string(),
    };
    format::live_section(out, "wound", &[&step, &headline]);
    if (w.stopped_mark.is_some() || w.why.is_some()) && !stream.is_empty() {
        format::paragraph(out, &format!("Its stream: {stream}."));
    }
    if w.stopped_mark.is_none() && refused(w, stream) {
        format::paragraph(out, REFUSED_NOTE);
    }
    match &w.log {
        Some((path, lines)) => {
            format::named(out, format::ENTRY_BLOCK, &format!("last lines of {path}"));
            format::fenced(out, "text", lines.trim_end_matches('\n'));
        }
        None => format::paragraph(out, "Its stderr.log and the agent's driver.log are empty."),
    }
}

/// How a wound whose failure names an auth failure says so.
const REFUSED_NOTE: &str = "The provider refused the credentials (an auth failure, `refused` in \
     `attention`): fix the key or the provider's configuration, then message or nudge it.";

/// How [`wound_kind`] begins for a call that failed with an `error` event.
const FAILED_CALL: &str = "the model call failed: ";

/// Whether the failure names an auth failure, read as the `refused` signal reads it:
/// the `error` event's text, else `stderr.log`.
fn refused(w: &WoundFacts, stream: &str) -> bool {
    if let Some(err) = stream.strip_prefix(FAILED_CALL) {
        return super::failure::refusal(err);
    }
    w.log.as_ref().is_some_and(|(path, lines)| {
        path.ends_with(crate::workspace::steps::STDERR_FILE) && super::failure::refusal(lines)
    })
}

/// How a failed step's stream ended, in words.
pub(super) fn wound_kind(outcome: Option<&super::response::Outcome>, in_attempt: bool) -> String {
    use super::response::Outcome;
    if in_attempt {
        return "cut mid-stream, no end event: stopped, killed or its adapter died".into();
    }
    match outcome {
        Some(Outcome::Failed(why)) => format!("{FAILED_CALL}{why}"),
        Some(Outcome::Finished(Some(r))) if r == "length" => {
            "output limit: finish length, nothing committed".into()
        }
        Some(Outcome::Finished(r)) => format!(
            "stopped after the model call (finish {}) before its meta.json",
            r.as_deref().unwrap_or("(none)")
        ),
        None => "no event in response.json".into(),
    }
}

/// The last `n` lines of `text`.
pub(crate) fn last_lines(text: &str, n: usize) -> &str {
    let trimmed = text.trim_end_matches('\n');
    let mut cut = trimmed.len();
    for _ in 0..n {
        match trimmed[..cut].rfind('\n') {
            Some(i) => cut = i,
            None => return trimmed,
        }
    }
    &trimmed[cut + 1..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_of_a_log() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(last_lines("a\nb\nc", 5), "a\nb\nc");
        assert_eq!(last_lines("", 3), "");
        assert_eq!(last_lines("x\n\n", 1), "x");
    }
}
