//! What needs a look: the signals yog derives from a workspace (ECOSYSTEM §3), each
//! made here from one [`Model`], so `status`, `attention` and the events tell the same.
//!
//! | kind | raised while | cleared by |
//! |---|---|---|
//! | `held` | the `held` mark stands | an advance whose tool control answers pass or refuse |
//! | `refused` | `stopped`, and the failure text names an auth failure | a next step that ends cleanly |
//! | `truncated` | `stopped`, and the last finish reason is `length` | a next step that ends cleanly |
//! | `stopped` | a root agent that no executor runs, whose highest step's newest attempt did not end cleanly (or that has no step), with no `abandoned` mark; not when a stop cut the call | a next step that ends cleanly, or an `abandoned` mark |
//! | `budget` | the `budget-exhausted` mark stands | removing the mark |
//! | `conflicted` | the `conflicted` mark stands | removing the mark |
//! | `mail` | deposits the drain accepts wait and no executor holds the lock | the drain |
//! | `notify` | the `notify` mark stands | removing the mark |
//!
//! A *clean* end is an `end` after a `finish` with no `error` and a reason other than
//! `length`. A call a stop cut (`litany stop`: SIGTERM to the adapter, which dies with
//! no `end` and says nothing) leaves the signature litany itself tells a stop by: an
//! attempt with no `end` and no `error`, and an empty `stderr.log`; that is the operator's
//! own doing and raises nothing. The failure text is the attempt's `error` event, else
//! the tail of `stderr.log`; an error kind `auth` is a refusal too.
//!
//! Under `--agent ID`, another agent's signals are those git shows (its marks: `held`,
//! `budget`, `conflicted`, `notify`); its steps and inbox are not ID's to see.

use std::path::Path;
use std::sync::Arc;

use super::model::{Agent, Held, Meta, Model};
use crate::workspace::ids::parent_of;
use crate::workspace::{INBOX_DIR, MARKS_DIR, STEPS_DIR};

/// What needs a look, most urgent first (the order `attention` lists them in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum SignalKind {
    Held,
    Refused,
    Truncated,
    Stopped,
    Budget,
    Conflicted,
    Mail,
    Notify,
}

impl SignalKind {
    pub(crate) const ALL: [SignalKind; 8] = [
        SignalKind::Held,
        SignalKind::Refused,
        SignalKind::Truncated,
        SignalKind::Stopped,
        SignalKind::Budget,
        SignalKind::Conflicted,
        SignalKind::Mail,
        SignalKind::Notify,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SignalKind::Held => "held",
            SignalKind::Refused => "refused",
            SignalKind::Truncated => "truncated",
            SignalKind::Stopped => "stopped",
            SignalKind::Budget => "budget",
            SignalKind::Conflicted => "conflicted",
            SignalKind::Mail => "mail",
            SignalKind::Notify => "notify",
        }
    }

    /// The mark that raises it, for a kind git shows (visible to every agent).
    pub(crate) fn mark(self) -> Option<&'static str> {
        match self {
            SignalKind::Held => Some(HELD),
            SignalKind::Budget => Some(BUDGET_EXHAUSTED),
            SignalKind::Conflicted => Some(CONFLICTED),
            SignalKind::Notify => Some(NOTIFY),
            SignalKind::Refused
            | SignalKind::Truncated
            | SignalKind::Stopped
            | SignalKind::Mail => None,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<SignalKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The marks signals are read from.
pub(crate) const HELD: &str = "held";
pub(crate) const NOTIFY: &str = "notify";
pub(crate) const CONFLICTED: &str = "conflicted";
pub(crate) const BUDGET_EXHAUSTED: &str = "budget-exhausted";
pub(crate) const ABANDONED: &str = "abandoned";

/// The finish reason of a call cut at the model's output limit.
pub(crate) const LENGTH: &str = "length";

use crate::records::failure::refusal;

/// One raised signal: its kind, a sentence saying what happened and what answers it,
/// and the workspace-relative path to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signal {
    pub(crate) kind: SignalKind,
    pub(crate) says: String,
    pub(crate) path: String,
}

/// How an agent's highest step stands, for the step signals.
enum Stand {
    /// Live, at rest, or cut by a stop: nothing to say.
    Fine,
    /// Never ran.
    NoStep,
    /// Its newest attempt hit the output limit.
    Truncated(String),
    /// Its newest attempt failed, and why (the error, the stderr tail, or a summary).
    Failed {
        step: String,
        why: String,
        refused: bool,
    },
}

fn stand(id: &str, a: &Agent) -> Stand {
    if a.running {
        return Stand::Fine;
    }
    let Some(latest) = &a.latest else {
        return Stand::NoStep;
    };
    if !matches!(latest.meta, Meta::Missing) {
        // litany writes `meta.json` only after a call that succeeded.
        return Stand::Fine;
    }
    let step = latest.dir.clone();
    let attempt = a
        .account
        .last
        .as_ref()
        .filter(|(n, _)| *n == latest.number)
        .and_then(|(_, at)| at.clone());
    let stderr = a.account.stderr.as_deref();
    let Some(at) = attempt else {
        // No attempt: no response at all. Empty and silent is a stop before the adapter
        // spoke; anything on stderr is the adapter dying before it could.
        return match stderr {
            Some(text) => Stand::Failed {
                step,
                why: tail(text),
                refused: refusal(text),
            },
            None if latest.has_response || latest.stderr.is_some() => Stand::Fine,
            // No response.json yet and nobody runs it: the call never started.
            None => Stand::Failed {
                step,
                why: "the model call never started".into(),
                refused: false,
            },
        };
    };
    if at.finish.as_deref() == Some(LENGTH) {
        return Stand::Truncated(step);
    }
    if at.clean() {
        return Stand::Fine;
    }
    if let Some(err) = &at.error {
        return Stand::Failed {
            step,
            why: err.clone(),
            refused: refusal(err),
        };
    }
    match stderr {
        Some(text) => Stand::Failed {
            step,
            why: tail(text),
            refused: refusal(text),
        },
        // No end, no error, nothing on stderr: the stop signature.
        None if !at.ended => Stand::Fine,
        None => Stand::Failed {
            step,
            why: format!("the call of {id} ended with no finish"),
            refused: false,
        },
    }
}

/// The last line of a failure's text, shortened to one line.
fn tail(text: &str) -> String {
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    super::event::summary(last)
}

/// How long a state must stand before it raises `mail` or a step signal: a deposit
/// waits a moment for the driver its writer launches, and a new agent for its first
/// step's lock, and neither needs a look.
pub(crate) const SETTLE_SECS: i64 = 3;

/// The marks signals are read from, as bits of one mask per agent.
const MARK_BITS: [(&str, u8); 5] = [
    (HELD, 1),
    (NOTIFY, 2),
    (CONFLICTED, 4),
    (BUDGET_EXHAUSTED, 8),
    (ABANDONED, 16),
];

fn bit(kind: &str) -> u8 {
    MARK_BITS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(0, |(_, b)| *b)
}

/// What an agent's signals are made from: while it is the same, so are they. The
/// latest step and the account are held (and compared by identity): the scanner and the
/// ledger share one of each while nothing under it moved.
#[derive(Clone)]
struct Basis {
    marks: u8,
    held: Option<git2::Oid>,
    root: bool,
    running: bool,
    latest: Option<Arc<super::model::Step>>,
    account: Arc<super::model::Account>,
    pending: usize,
    quiet: bool,
    mail_due: bool,
}

impl PartialEq for Basis {
    fn eq(&self, o: &Basis) -> bool {
        let latest = match (&self.latest, &o.latest) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        latest
            && Arc::ptr_eq(&self.account, &o.account)
            && (self.marks, self.held, self.root, self.running)
                == (o.marks, o.held, o.root, o.running)
            && (self.pending, self.quiet, self.mail_due) == (o.pending, o.quiet, o.mail_due)
    }
}

/// The signals last made for each agent, and what from, so an idle look makes none.
#[derive(Default)]
pub(crate) struct Memo(crate::FastMap<String, (Basis, Signals)>);

/// An agent's signals: `None` when nothing needs a look.
pub(crate) type Signals = Option<Arc<[Signal]>>;

impl Memo {
    /// Forgets every agent `keep` says no.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.0.retain(|id, _| keep(id));
    }
}

/// Sets every agent's signals in `model` ([`super::model::Agent::signals`]), as the
/// whole workspace sees them ([`visible`] confines them); `ws` is the workspace's
/// directory, for the commands the sentences give. An agent whose [`Basis`] stands keeps
/// the signals `memo` has.
pub(crate) fn assign(model: &mut Model, ws: &Path, memo: &mut Memo) {
    let made: Vec<Signals> = {
        let mut masks: crate::FastMap<&str, (u8, Option<git2::Oid>)> = Default::default();
        for ((kind, id), m) in &model.marks {
            let b = bit(kind);
            if b != 0 {
                let e = masks.entry(id.as_str()).or_default();
                e.0 |= b;
                if kind == HELD {
                    e.1 = Some(m.oid);
                }
            }
        }
        let at = model.at;
        let settled = |t: Option<i64>| t.is_none_or(|t| at - t >= SETTLE_SECS);
        model
            .agents
            .iter()
            .map(|(id, a)| {
                let (marks, held) = masks.get(id.as_str()).copied().unwrap_or_default();
                let basis = Basis {
                    marks,
                    held,
                    root: parent_of(id).is_none_or(|p| !model.agents.contains_key(p)),
                    running: a.running,
                    latest: a.latest.clone(),
                    account: a.account.clone(),
                    pending: a.pending.len(),
                    quiet: settled(a.latest.as_ref().map(|l| l.mtime).or(a.last_activity)),
                    mail_due: settled(a.pending.values().map(|p| p.mtime).min()),
                };
                if let Some((b, s)) = memo.0.get(id.as_str())
                    && *b == basis
                {
                    return s.clone();
                }
                let s = signals(model, id, &basis, ws);
                let s: Signals = (!s.is_empty()).then(|| s.into());
                memo.0.insert(id.clone(), (basis, s.clone()));
                s
            })
            .collect()
    };
    for (a, s) in model.agents.values_mut().zip(made) {
        a.signals = s;
    }
}

/// Whether agent `confined` may see signal `kind` of agent `id`: its own, and of the
/// others what git shows (the marks).
pub(crate) fn visible(kind: SignalKind, id: &str, confined: Option<&str>) -> bool {
    confined.is_none_or(|me| me == id) || kind.mark().is_some()
}

/// The signals of agent `id`, whose facts are `basis`, most urgent first.
fn signals(model: &Model, id: &str, basis: &Basis, ws: &Path) -> Vec<Signal> {
    let Some(a) = model.agents.get(id) else {
        return Vec::new();
    };
    let ws = ws.display();
    let has = |kind: &str| basis.marks & bit(kind) != 0;
    let mut out = Vec::new();
    let mut push = |kind: SignalKind, says: String, path: String| {
        out.push(Signal { kind, says, path });
    };
    let mark_path = |kind: &str| format!("{MARKS_DIR}/{kind}/{id}");
    if has(HELD) {
        let held = model
            .marks
            .get(&(HELD.to_string(), id.to_string()))
            .and_then(|m| m.value.as_deref())
            .and_then(Held::parse);
        let what = match &held {
            Some(h) => format!(
                "its {} call {} waits for an answer ({})",
                h.tool, h.tool_use_id, h.reason
            ),
            None => "a tool call waits for an answer".into(),
        };
        push(
            SignalKind::Held,
            format!(
                "{what}: once the workflow's tool control would pass or refuse it, `litany advance {ws} {id}` goes on"
            ),
            mark_path(HELD),
        );
    }
    if basis.root && !has(ABANDONED) && basis.quiet {
        let step_path = |step: &str| format!("{STEPS_DIR}/{id}/{step}/response.md");
        match stand(id, a) {
            Stand::Fine => {}
            Stand::Truncated(step) => push(
                SignalKind::Truncated,
                format!(
                    "the model hit its output limit mid-answer in step {step} and nothing was committed: ask for less or raise the role's max_output_tokens, then `litany message {ws} {id} …` goes on"
                ),
                step_path(&step),
            ),
            Stand::Failed {
                step,
                why,
                refused: true,
            } => push(
                SignalKind::Refused,
                format!(
                    "the provider turned the credentials down in step {step} ({why}); no step can succeed until someone logs in again, then `litany message {ws} {id} …` retries"
                ),
                step_path(&step),
            ),
            Stand::Failed { step, why, .. } => push(
                SignalKind::Stopped,
                format!(
                    "step {step} failed ({why}) and nothing runs it: read it, then `litany message {ws} {id} …` goes on, or `git --git-dir {ws}/repo.git update-ref refs/litany/{ABANDONED}/{id} HEAD` gives it up"
                ),
                step_path(&step),
            ),
            Stand::NoStep => push(
                SignalKind::Stopped,
                format!(
                    "it never ran a step and nothing runs it: `litany advance {ws} {id}` starts it"
                ),
                format!("{STEPS_DIR}/{id}"),
            ),
        }
    }
    let unmark =
        |kind: &str| format!("`git --git-dir {ws}/repo.git update-ref -d refs/litany/{kind}/{id}`");
    if has(BUDGET_EXHAUSTED) {
        // The limit and the spend are in the row (`budget`): a sentence is the same
        // wherever it is told, and the events' model does not read workflows.
        push(
            SignalKind::Budget,
            format!(
                "its tree spent its budget and stopped: raise `budgets:` in its workflow, then {} and message it",
                unmark(BUDGET_EXHAUSTED)
            ),
            mark_path(BUDGET_EXHAUSTED),
        );
    }
    if has(CONFLICTED) {
        push(
            SignalKind::Conflicted,
            format!(
                "landing its work conflicted: resolve it on its branch, then {}",
                unmark(CONFLICTED)
            ),
            mark_path(CONFLICTED),
        );
    }
    if !a.running && !a.pending.is_empty() && basis.mail_due {
        let n = a.pending.len();
        let (what, them) = if n == 1 {
            ("1 message waits".to_string(), "it")
        } else {
            (format!("{n} messages wait"), "them")
        };
        push(
            SignalKind::Mail,
            format!(
                "{what} and no executor takes {them}: `litany advance {ws} {id}` (or `litany scan {ws}`) delivers {them}"
            ),
            format!("{INBOX_DIR}/{id}"),
        );
    }
    if has(NOTIFY) {
        push(
            SignalKind::Notify,
            format!(
                "it asks for your attention: read {STEPS_DIR}/{id}/transcript.md, then {}",
                unmark(NOTIFY)
            ),
            mark_path(NOTIFY),
        );
    }
    out.sort_by_key(|s| s.kind);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::views::model::Scanner;
    use crate::workspace::refs::Flavour;

    use std::collections::BTreeMap;

    /// Every agent's signals made afresh, by id.
    fn gather(m: &mut Model, ws: &Path) -> BTreeMap<String, Arc<[Signal]>> {
        assign(m, ws, &mut Memo::default());
        m.agents
            .iter()
            .filter_map(|(id, a)| Some((id.clone(), a.signals.clone()?)))
            .collect()
    }

    const START: &[u8] =
        b"{\"type\":\"message_start\",\"v\":1,\"model\":\"m\",\"role\":\"assistant\"}\n";
    const END: &[u8] = b"{\"type\":\"end\"}\n";

    fn response(lines: &[&[u8]]) -> Vec<u8> {
        let mut v = START.to_vec();
        for l in lines {
            v.extend_from_slice(l);
        }
        v
    }

    /// The kinds of every agent's signals once every state has stood long enough.
    fn kinds(f: &Fixture, confined: Option<&str>) -> BTreeMap<String, Vec<&'static str>> {
        let mut m = Scanner::new(f.root()).unwrap().scan();
        m.at += SETTLE_SECS + 1;
        gather(&mut m, f.root())
            .into_iter()
            .map(|(id, s)| {
                let k = s
                    .iter()
                    .filter(|s| visible(s.kind, &id, confined))
                    .map(|s| s.kind.as_str())
                    .collect();
                (id, k)
            })
            .filter(|(_, k): &(String, Vec<&str>)| !k.is_empty())
            .collect()
    }

    #[test]
    fn every_signal_by_its_rule() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        let finish = |r: &str| format!("{{\"type\":\"finish\",\"reason\":\"{r}\"}}\n").into_bytes();
        // At rest: a clean end and meta.json.
        f.agent("rest-a", None, &[]).unwrap();
        f.step(
            "rest-a",
            1,
            &[
                ("response.json", &response(&[&finish("stop"), END])),
                ("meta.json", b"{}"),
            ],
        )
        .unwrap();
        // Truncated: finish length, no meta.json.
        f.agent("long-a", None, &[]).unwrap();
        f.step(
            "long-a",
            1,
            &[("response.json", &response(&[&finish("length"), END]))],
        )
        .unwrap();
        // Refused: an error event naming a 401.
        f.agent("auth-a", None, &[]).unwrap();
        let err = b"{\"type\":\"error\",\"kind\":{\"provider\":{\"status\":401}},\"message\":\"401 Unauthorized\"}\n";
        f.step("auth-a", 1, &[("response.json", &response(&[err, END]))])
            .unwrap();
        // Refused, told by stderr.log alone (the adapter died before it could speak).
        f.agent("cred-a", None, &[]).unwrap();
        f.step(
            "cred-a",
            1,
            &[
                ("response.json", b""),
                ("stderr.log", b"bz: no credentials for anthropic\n"),
            ],
        )
        .unwrap();
        // Stopped: a transport error, retries spent.
        f.agent("fail-a", None, &[]).unwrap();
        let reset = b"{\"type\":\"error\",\"kind\":\"transport\",\"message\":\"reset\"}\n";
        f.step("fail-a", 1, &[("response.json", &response(&[reset, END]))])
            .unwrap();
        // Cut by a stop: no end, no error, nothing on stderr. Nothing to say.
        f.agent("cut-a", None, &[]).unwrap();
        f.step(
            "cut-a",
            1,
            &[("response.json", &response(&[])), ("stderr.log", b"")],
        )
        .unwrap();
        // Failed, but abandoned; and failed, but a child (its parent hears of it).
        f.agent("gone-a", None, &[]).unwrap();
        f.step("gone-a", 1, &[("response.json", &response(&[reset, END]))])
            .unwrap();
        let tip = f.agent_tip("gone-a").unwrap();
        f.commit_mark("abandoned", "gone-a", tip).unwrap();
        f.agent("rest-a-kid-x", None, &[]).unwrap();
        f.step(
            "rest-a-kid-x",
            1,
            &[("response.json", &response(&[reset, END]))],
        )
        .unwrap();
        // Never ran, with mail waiting.
        f.agent("new-a", None, &[]).unwrap();
        f.inbox_file("new-a", "user-001.md", b"---\nfrom: user\n---\nhi")
            .unwrap();
        // Marks.
        f.agent("mark-a", None, &[]).unwrap();
        f.step("mark-a", 1, &[("meta.json", b"{}")]).unwrap();
        let tip = f.agent_tip("mark-a").unwrap();
        for kind in [NOTIFY, CONFLICTED, BUDGET_EXHAUSTED] {
            f.commit_mark(kind, "mark-a", tip).unwrap();
        }
        f.blob_mark(
            HELD,
            "mark-a",
            br#"{"tool_use_id":"t1","tool":"bash","reason":"ask"}"#,
        )
        .unwrap();

        let all = kinds(&f, None);
        let want: BTreeMap<String, Vec<&str>> = [
            ("long-a", vec!["truncated"]),
            ("auth-a", vec!["refused"]),
            ("cred-a", vec!["refused"]),
            ("fail-a", vec!["stopped"]),
            ("new-a", vec!["stopped", "mail"]),
            ("mark-a", vec!["held", "budget", "conflicted", "notify"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(all, want);
        // Confined to one agent: its own, and the others' marks.
        let confined = kinds(&f, Some("fail-a"));
        let want: BTreeMap<String, Vec<&str>> = [
            ("fail-a", vec!["stopped"]),
            ("mark-a", vec!["held", "budget", "conflicted", "notify"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(confined, want);
        // What the sentences say, and where they point.
        let mut m = Scanner::new(f.root()).unwrap().scan();
        m.at += SETTLE_SECS + 1;
        let g = gather(&mut m, f.root());
        let auth = &g["auth-a"][0];
        assert!(
            auth.says.contains("provider 401: 401 Unauthorized"),
            "{}",
            auth.says
        );
        assert_eq!(auth.path, "steps/auth-a/001/response.md");
        let held = &g["mark-a"][0];
        assert!(
            held.says
                .starts_with("its bash call t1 waits for an answer (ask)"),
            "{}",
            held.says
        );
        assert_eq!(held.path, "marks/held/mark-a");
        assert_eq!(g["new-a"][1].path, "inbox/new-a");
        assert!(
            g["new-a"][1].says.starts_with("1 message waits"),
            "{}",
            g["new-a"][1].says
        );
        // A state that has not stood long enough raises nothing yet.
        let mut fresh = Scanner::new(f.root()).unwrap().scan();
        fresh.at = fresh.agents["fail-a"].latest.as_ref().unwrap().mtime + SETTLE_SECS - 1;
        let g = gather(&mut fresh, f.root());
        assert!(!g.contains_key("fail-a"));
        assert_eq!(g["mark-a"].len(), 4);
    }

    #[test]
    fn an_idle_look_makes_no_signal_again() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        let tip = f.agent_tip("r1").unwrap();
        f.commit_mark(NOTIFY, "r1", tip).unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let one = s.scan().agents["r1"].signals.clone().unwrap();
        let two = s.scan().agents["r1"].signals.clone().unwrap();
        assert!(Arc::ptr_eq(&one, &two), "the same signals, not made again");
        f.commit_mark(CONFLICTED, "r1", tip).unwrap();
        let three = s.scan().agents["r1"].signals.clone().unwrap();
        let kinds: Vec<&str> = three.iter().map(|s| s.kind.as_str()).collect();
        assert_eq!(kinds, ["conflicted", "notify"]);
        f.delete_mark(NOTIFY, "r1").unwrap();
        f.delete_mark(CONFLICTED, "r1").unwrap();
        assert!(s.scan().agents["r1"].signals.is_none());
    }
}
