//! One event and its two renderings, defined once: a line of `events`
//! (`<time> <kind> <agent> <detail> [<path>]`) and an object of `events.ndjson` (`at`,
//! `kind`, `agent`, `name`, `path`, then the kind's own fields).
//!
//! Guarantees: each kind's fields are named in exactly one constructor here, and both
//! renderings are made from the same fields, so the two files never disagree; a rendered
//! line never holds a newline (every value that could is JSON-quoted), so one event is
//! exactly one line of each file; paths are workspace-relative and open verbatim under
//! the mount.

use serde_json::Value;

use crate::workspace::clock::format_utc;
use crate::workspace::{AGENTS_DIR, INBOX_DIR, MARKS_DIR, STEPS_DIR};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    AgentCreated,
    AgentDeleted,
    StepStarted,
    StepFinished,
    StepFailed,
    ToolStarted,
    ToolFinished,
    MessageDeposited,
    MessageDelivered,
    /// A message being written through this mount that will never be sent because a
    /// writer of it was killed by a signal.
    MessageDropped,
    /// A message written through this mount that was refused: a write to it was refused
    /// (it was cut), it was closed empty, or its deposit was refused at its last close.
    MessageRefused,
    MarkSet,
    MarkCleared,
    Woken,
    /// A record that does not read as the contract says (CONTRACT §4).
    BadRecord,
    /// The log reached its cap and stops here ([`super::log::MAX_LOG_BYTES`]).
    LogFull,
    /// Something now needs a look ([`super::signal`]).
    SignalRaised,
    /// It no longer does.
    SignalCleared,
    /// An act through the mount: a command written to an agent's `ctl`, or a
    /// conversation started from `new/`, with who wrote it and how it went.
    Control,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::AgentCreated => "agent-created",
            Kind::AgentDeleted => "agent-deleted",
            Kind::StepStarted => "step-started",
            Kind::StepFinished => "step-finished",
            Kind::StepFailed => "step-failed",
            Kind::ToolStarted => "tool-started",
            Kind::ToolFinished => "tool-finished",
            Kind::MessageDeposited => "message-deposited",
            Kind::MessageDelivered => "message-delivered",
            Kind::MessageDropped => "message-dropped",
            Kind::MessageRefused => "message-refused",
            Kind::MarkSet => "mark-set",
            Kind::MarkCleared => "mark-cleared",
            Kind::Woken => "woken",
            Kind::BadRecord => "bad-record",
            Kind::LogFull => "log-full",
            Kind::SignalRaised => "signal-raised",
            Kind::SignalCleared => "signal-cleared",
            Kind::Control => "control",
        }
    }
}

/// How many characters of a tool's input summary an event keeps.
pub(crate) const SUMMARY_CHARS: usize = 100;
/// What the text rendering shows for an absent value or an empty detail.
const NONE: &str = "-";

/// One thing that happened in the workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the epoch.
    pub(crate) at: i64,
    pub(crate) kind: Kind,
    /// The agent it concerns (a message's recipient); empty for the log's own events.
    pub(crate) agent: String,
    /// That agent's name, when it has one.
    pub(crate) name: Option<String>,
    /// A workspace-relative path that opens under the mount.
    pub(crate) path: Option<String>,
    /// The kind's own fields, in rendering order.
    pub(crate) fields: Vec<(&'static str, Value)>,
}

fn step_path(agent: &str, step: &str) -> String {
    format!("{STEPS_DIR}/{agent}/{step}")
}

fn tool_path(agent: &str, step: &str, tool: &str, file: &str) -> String {
    format!("{STEPS_DIR}/{agent}/{step}/tools/{tool}/{file}")
}

fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map(Into::into).unwrap_or(Value::Null)
}

impl Event {
    fn new(at: i64, kind: Kind, agent: &str, path: Option<String>) -> Self {
        Self {
            at,
            kind,
            agent: agent.to_string(),
            name: None,
            path,
            fields: Vec::new(),
        }
    }

    fn with(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.fields.push((key, value.into()));
        self
    }

    /// The same event naming its agent `name`.
    pub(crate) fn named(mut self, name: Option<&str>) -> Self {
        self.name = name.map(str::to_string);
        self
    }

    /// The same event as a home mount's root shows it: its workspace `ws` first among
    /// its fields, its path under the workspace's directory.
    pub(crate) fn in_workspace(mut self, ws: &str) -> Self {
        self.fields.insert(0, ("workspace", ws.into()));
        if let Some(p) = &mut self.path {
            *p = format!("{ws}/{p}");
        }
        self
    }

    /// The value of field `key`, if the event has it.
    pub(crate) fn field(&self, key: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub(crate) fn agent_created(at: i64, agent: &str, parent: Option<&str>) -> Self {
        Self::new(
            at,
            Kind::AgentCreated,
            agent,
            Some(format!("{AGENTS_DIR}/{agent}")),
        )
        .with("parent", opt(parent))
    }

    /// The same `agent-created` event, naming who started the agent through `new/`.
    pub(crate) fn started_by(self, pid: u32, uid: u32, comm: &str) -> Self {
        self.with("pid", pid).with("uid", uid).with("comm", comm)
    }

    pub(crate) fn agent_deleted(at: i64, agent: &str) -> Self {
        Self::new(at, Kind::AgentDeleted, agent, None)
    }

    pub(crate) fn step_started(at: i64, agent: &str, step: &str) -> Self {
        Self::new(at, Kind::StepStarted, agent, Some(step_path(agent, step))).with("step", step)
    }

    /// Step `step` finished: its last finish reason and output tokens, and what the
    /// step cost (`tokens` by litany's rule over every attempt; `wall_seconds` from
    /// `meta.json`).
    pub(crate) fn step_finished(
        at: i64,
        agent: &str,
        step: &str,
        finish: Option<&str>,
        output_tokens: Option<u64>,
        tokens: u64,
        wall_seconds: u64,
    ) -> Self {
        Self::new(at, Kind::StepFinished, agent, Some(step_path(agent, step)))
            .with("step", step)
            .with("finish", opt(finish))
            .with("output_tokens", opt(output_tokens))
            .with("tokens", tokens)
            .with("wall_seconds", wall_seconds)
    }

    pub(crate) fn step_failed(at: i64, agent: &str, step: &str, why: &str) -> Self {
        Self::new(at, Kind::StepFailed, agent, Some(step_path(agent, step)))
            .with("step", step)
            .with("why", why)
    }

    pub(crate) fn tool_started(
        at: i64,
        agent: &str,
        step: &str,
        tool_id: &str,
        tool: &str,
        input: &str,
    ) -> Self {
        let path = tool_path(agent, step, tool_id, "input.json");
        Self::new(at, Kind::ToolStarted, agent, Some(path))
            .with("tool", tool)
            .with("tool_id", tool_id)
            .with("input", summary(input))
    }

    pub(crate) fn tool_finished(
        at: i64,
        agent: &str,
        step: &str,
        tool_id: &str,
        exit_code: i64,
        stdout_bytes: u64,
        stderr_bytes: u64,
    ) -> Self {
        let path = tool_path(agent, step, tool_id, "output.json");
        Self::new(at, Kind::ToolFinished, agent, Some(path))
            .with("tool_id", tool_id)
            .with("exit_code", exit_code)
            .with("stdout_bytes", stdout_bytes)
            .with("stderr_bytes", stderr_bytes)
    }

    /// A deposit `file` in `recipient`'s inbox from `sender`.
    pub(crate) fn message_deposited(
        at: i64,
        recipient: &str,
        sender: &str,
        file: &str,
        through_mount: bool,
    ) -> Self {
        let path = format!("{INBOX_DIR}/{recipient}/{file}");
        Self::new(at, Kind::MessageDeposited, recipient, Some(path))
            .with("from", sender)
            .with("to", recipient)
            .with("through_mount", through_mount)
    }

    /// A message from `sender` that became transcript entry `entry` of `agent`.
    pub(crate) fn message_delivered(at: i64, agent: &str, sender: &str, entry: &str) -> Self {
        let path = format!(
            "{AGENTS_DIR}/{agent}/{}/{entry}",
            crate::workspace::refs::MESSAGES_DIR
        );
        Self::new(at, Kind::MessageDelivered, agent, Some(path))
            .with("from", sender)
            .with("entry", entry)
    }

    /// A message being written as `name` in `recipient`'s inbox through this mount was
    /// dropped, and `why` (`killed`), with the killed writer's pid and signal.
    pub(crate) fn message_dropped(
        at: i64,
        recipient: &str,
        name: &str,
        why: &str,
        killed: Option<(u32, i32)>,
    ) -> Self {
        let path = format!("{INBOX_DIR}/{recipient}/{name}");
        let e = Self::new(at, Kind::MessageDropped, recipient, Some(path)).with("why", why);
        match killed {
            Some((pid, signal)) => e.with("pid", pid).with("signal", signal),
            None => e,
        }
    }

    /// A message written as `name` in `recipient`'s inbox through this mount was refused:
    /// `why` in one word (`empty`, `not-utf8`, `too-large`, `no-space`, ...) and `reason`
    /// in words.
    pub(crate) fn message_refused(
        at: i64,
        recipient: &str,
        name: &str,
        why: &str,
        reason: &str,
    ) -> Self {
        let path = format!("{INBOX_DIR}/{recipient}/{name}");
        Self::new(at, Kind::MessageRefused, recipient, Some(path))
            .with("why", why)
            .with("reason", reason)
    }

    /// Mark `kind` of `agent` set, with its value for a blob mark.
    pub(crate) fn mark_set(at: i64, agent: &str, kind: &str, value: Option<&str>) -> Self {
        let path = format!("{MARKS_DIR}/{kind}/{agent}");
        Self::new(at, Kind::MarkSet, agent, Some(path))
            .with("mark", kind)
            .with("value", opt(value))
    }

    pub(crate) fn mark_cleared(at: i64, agent: &str, kind: &str) -> Self {
        Self::new(at, Kind::MarkCleared, agent, None).with("mark", kind)
    }

    /// litanyfs launched a driver (`litany advance`) for `agent`.
    pub(crate) fn woken(at: i64, agent: &str, pid: u32) -> Self {
        let path = format!(
            "{STEPS_DIR}/{agent}/{}",
            crate::workspace::steps::DRIVER_LOG
        );
        Self::new(at, Kind::Woken, agent, Some(path)).with("pid", pid)
    }

    /// A record at `path` that does not read as it should, and why.
    pub(crate) fn bad_record(at: i64, agent: &str, path: &str, why: &str) -> Self {
        Self::new(at, Kind::BadRecord, agent, Some(path.to_string())).with("why", why)
    }

    /// Signal `kind` of `agent` raised: what it `says` and the path to look at.
    pub(crate) fn signal_raised(at: i64, agent: &str, kind: &str, says: &str, path: &str) -> Self {
        Self::new(at, Kind::SignalRaised, agent, Some(path.to_string()))
            .with("signal", kind)
            .with("says", says)
    }

    pub(crate) fn signal_cleared(at: i64, agent: &str, kind: &str) -> Self {
        Self::new(at, Kind::SignalCleared, agent, None).with("signal", kind)
    }

    /// An act through the mount on `agent` (`command` as [`crate::control::Command`]
    /// describes it, or `start`), by process `pid` (`comm`) of user `uid`: `result` is
    /// `ok` or the errno's name, `detail` what litany said (a delete's census, a
    /// refusal's sentence). `path` is the file written.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn control(
        at: i64,
        agent: &str,
        path: &str,
        command: &str,
        (pid, uid, comm): (u32, u32, &str),
        result: &str,
        detail: &str,
    ) -> Self {
        Self::new(at, Kind::Control, agent, Some(path.to_string()))
            .with("command", command)
            .with("pid", pid)
            .with("uid", uid)
            .with("comm", comm)
            .with("result", result)
            .with("detail", detail)
    }

    /// The log stops here: it reached `cap` bytes.
    pub(crate) fn log_full(at: i64, cap: u64) -> Self {
        Self::new(at, Kind::LogFull, "", None).with("cap_bytes", cap)
    }

    /// The line of `events`, with its newline.
    pub(crate) fn line(&self) -> String {
        let who = self.name.as_deref().unwrap_or(&self.agent);
        let who = if who.is_empty() {
            NONE.into()
        } else {
            word(who)
        };
        let detail: Vec<String> = self
            .fields
            .iter()
            .map(|(k, v)| format!("{k}={}", value_word(v)))
            .collect();
        let detail = if detail.is_empty() {
            NONE.to_string()
        } else {
            detail.join(" ")
        };
        let mut out = format!(
            "{} {} {who} {detail}",
            format_utc(self.at),
            self.kind.as_str()
        );
        if let Some(p) = &self.path {
            out.push(' ');
            out.push_str(&word(p));
        }
        out.push('\n');
        out
    }

    /// The object of `events.ndjson`, as one line with its newline: `at`, `kind`,
    /// `agent`, `name`, `path`, then the kind's fields, in that order.
    pub(crate) fn ndjson(&self) -> String {
        let common: [(&str, Value); 5] = [
            ("at", format_utc(self.at).into()),
            ("kind", self.kind.as_str().into()),
            ("agent", self.agent.clone().into()),
            ("name", opt(self.name.clone())),
            ("path", opt(self.path.clone())),
        ];
        let mut out = String::from("{");
        let pairs = common
            .iter()
            .map(|(k, v)| (*k, v))
            .chain(self.fields.iter().map(|(k, v)| (*k, v)));
        for (i, (k, v)) in pairs.enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::from(k).to_string());
            out.push(':');
            out.push_str(&v.to_string());
        }
        out.push_str("}\n");
        out
    }
}

/// A tool input cut to one line of at most [`SUMMARY_CHARS`] characters.
pub(crate) fn summary(input: &str) -> String {
    let one_line: String = input
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let trimmed = one_line.trim();
    let mut out: String = trimmed.chars().take(SUMMARY_CHARS).collect();
    if trimmed.chars().count() > SUMMARY_CHARS {
        out.push('…');
    }
    out
}

/// `s` as one word of a line: itself when it is plain, else JSON-quoted.
fn word(s: &str) -> String {
    let plain = !s.is_empty()
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '=');
    if plain {
        s.to_string()
    } else {
        Value::from(s).to_string()
    }
}

fn value_word(v: &Value) -> String {
    match v {
        Value::Null => NONE.to_string(),
        Value::String(s) => word(s),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_796_204_571; // 2026-12-02T09:42:51Z

    #[test]
    fn a_line_and_an_object_from_the_same_fields() {
        let e = Event::tool_started(T, "a-1", "007", "toolu_1", "bash", "ls -l\n  | wc")
            .named(Some("Alpha"));
        assert_eq!(
            e.line(),
            "2026-12-02T09:42:51Z tool-started Alpha tool=bash tool_id=toolu_1 \
             input=\"ls -l   | wc\" steps/a-1/007/tools/toolu_1/input.json\n"
        );
        let v: Value = serde_json::from_str(e.ndjson().trim_end()).unwrap();
        assert_eq!(v["at"], "2026-12-02T09:42:51Z");
        assert_eq!(v["kind"], "tool-started");
        assert_eq!(v["agent"], "a-1");
        assert_eq!(v["name"], "Alpha");
        assert_eq!(v["path"], "steps/a-1/007/tools/toolu_1/input.json");
        assert_eq!(v["tool"], "bash");
        assert_eq!(v["input"], "ls -l   | wc");
        assert_eq!(e.ndjson().matches('\n').count(), 1);
        assert!(
            e.ndjson()
                .starts_with(r#"{"at":"2026-12-02T09:42:51Z","kind":"tool-started","agent":"a-1","name":"Alpha","path":"#),
            "{}",
            e.ndjson()
        );
    }

    #[test]
    fn no_value_breaks_a_line() {
        let e = Event::bad_record(T, "x\ny", "steps/x\ny/001/meta.json", "a\nb \"c\"");
        let line = e.line();
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert!(line.contains(r#"why="a\nb \"c\"""#), "{line}");
        assert!(line.starts_with("2026-12-02T09:42:51Z bad-record \"x\\ny\" "));
        let e = Event::agent_deleted(T, "a");
        assert_eq!(e.line(), "2026-12-02T09:42:51Z agent-deleted a -\n");
        let e = Event::agent_created(T, "a", None);
        assert_eq!(
            e.line(),
            "2026-12-02T09:42:51Z agent-created a parent=- agents/a\n"
        );
        let v: Value = serde_json::from_str(&e.ndjson()).unwrap();
        assert_eq!(v["parent"], Value::Null);
        assert_eq!(v["name"], Value::Null);
    }

    #[test]
    fn summaries_are_one_bounded_line() {
        let long = "x".repeat(300);
        let s = summary(&long);
        assert_eq!(s.chars().count(), SUMMARY_CHARS + 1);
        assert!(s.ends_with('…'));
        assert_eq!(summary("  echo hi\n"), "echo hi");
        assert_eq!(summary("é".repeat(100).as_str()).chars().count(), 100);
    }
}
