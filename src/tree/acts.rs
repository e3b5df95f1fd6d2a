//! The files that act: `steps/<id>/ctl`, which takes commands for a living agent
//! ([`crate::control`]), and `new/`, where a goal written into a file starts a
//! conversation.
//!
//! Guarantees:
//! - `ctl` exists for every agent with a ref (under `--agent ID`, only for ID's
//!   descendants, whose `steps/<id>/` then shows `ctl` alone); it is `0600` and the
//!   mount owner's (`0400` on a read-only mount). Reading it gives the agent's status
//!   row, the commands it takes and what releases a held tool call; each write is one
//!   command, refused at once when it is not one or may not be run here, else carried
//!   out by a worker that answers the write with its result ([`Deferred`]): no request
//!   thread waits on a child process. Every command, refused or run, is a `control`
//!   event and a log line naming the path, the writer and the result.
//! - `new/` (`0700`, the mount owner's; absent under `--agent`) holds drafts as an inbox
//!   does ([`super::drafts`], keyed [`NEW_DRAFTS`]): nothing starts before the last
//!   close, a writer killed while holding it starts nothing, a write that would make the
//!   goal not UTF-8 is `EILSEQ`, one past the goal's bound `EFBIG`; dot files stay
//!   private. The last close starts `litany prompt` and returns once the new agent's ref
//!   exists ([`crate::control::start`]).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;

use super::drafts::{Draft, DraftState, Gone};
use super::node::{ActNode, DraftNode, Place};
use super::{Attr, Child, Content, ErrorKind, Identity, Kind, Node, Tree, TreeError};
use crate::control::start::{Goal, MAX_GOAL_BYTES, START_LIMIT, name_of};
use crate::control::{ActError, COMMANDS, CONFINED_COMMANDS, Command, Policy, pool, run};
use crate::deposit::{Depositor, Wake};
use crate::views::Views;

/// An agent's command file, beside its step directories.
pub const CTL: &str = "ctl";
/// Where goals are written, at the workspace root.
pub const NEW_DIR: &str = "new";
/// The key `new/`'s drafts are kept under among the drafts (never an agent id: it holds
/// a `/`).
pub(crate) const NEW_DRAFTS: &str = "/new";
/// How long a start waits for its agent's `steps/<id>/` once the agent exists (litany
/// makes it with the first step; a start that fails before one has none).
pub(crate) const STEPS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
/// `ctl`'s mode: the mount owner's alone (with `--allow-other`, the kernel keeps
/// everyone else out).
pub(crate) const CTL_PERM: u16 = 0o600;
/// `new/`'s mode.
pub(crate) const NEW_PERM: u16 = 0o700;

/// Who wrote a command or a goal, for the event and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writer {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
}

impl Writer {
    /// The writer's command name, from `/proc` (empty once it has gone).
    fn comm(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default()
    }
}

/// What is left of a request once it is decided: carried out by a worker, which
/// answers the request with its result ([`crate::control::pool`]).
pub struct Deferred(Box<dyn FnOnce() -> Result<(), TreeError> + Send>);

impl Deferred {
    pub(crate) fn new(f: impl FnOnce() -> Result<(), TreeError> + Send + 'static) -> Self {
        Self(Box::new(f))
    }

    /// Carries it out here.
    pub(crate) fn run(self) -> Result<(), TreeError> {
        (self.0)()
    }

    /// The same, its error changed by `f` (a home puts the path under its workspace).
    pub(crate) fn map_err(self, f: impl FnOnce(TreeError) -> TreeError + Send + 'static) -> Self {
        Deferred::new(move || self.run().map_err(f))
    }

    /// Carries it out on a worker, handing the result to `then`; when no worker takes
    /// it (the queue is full), `then` hears `EAGAIN` at once.
    pub(crate) fn run_elsewhere(
        self,
        path: String,
        then: impl FnOnce(Result<(), TreeError>) + Send + 'static,
    ) {
        let then = Arc::new(parking_lot::Mutex::new(Some(then)));
        let theirs = then.clone();
        let job: pool::Job = Box::new(move || {
            let r = self.run();
            if let Some(then) = theirs.lock().take() {
                then(r);
            }
        });
        if pool::submit(job).is_err()
            && let Some(then) = then.lock().take()
        {
            then(Err(TreeError::new(
                path,
                ErrorKind::Act(ActError::new(
                    libc::EAGAIN,
                    format!("{} acts wait already; try again", pool::MAX_QUEUED),
                )),
            )))
        }
    }
}

/// Everything a worker needs to carry out a command on `agent`, taken from the tree
/// (which the worker cannot borrow).
struct Actor {
    depositor: Arc<Depositor>,
    /// Read afresh after an act, so the tree shows what it changed at once.
    refs: Arc<crate::workspace::refs::Refs>,
    sender: String,
    views: Arc<Views>,
    root: PathBuf,
    agent: String,
    path: String,
    writer: Writer,
    comm: String,
}

impl Actor {
    fn harness(&self) -> Result<PathBuf, ActError> {
        self.depositor
            .waker()
            .harness()
            .map(PathBuf::from)
            .ok_or_else(|| {
                ActError::new(
                    libc::EOPNOTSUPP,
                    "no litany binary: set harness= (--harness), or put litany on an \
                     absolute PATH entry",
                )
            })
    }

    /// Runs litany's verb for `command` to its end: its stdout, or its refusal.
    fn litany(&self, command: &Command) -> Result<String, ActError> {
        let Some(argv) = command.argv(&self.root, &self.agent) else {
            return Ok(String::new());
        };
        let ran = run::run(&self.harness()?, &argv, run::RUN_LIMIT)?;
        run::classify(&argv, &ran)
    }

    /// Launches a driver unless the agent is live.
    fn wake(&self) -> Result<String, ActError> {
        let watch = crate::deposit::wake::NUDGE_WATCH;
        match self.depositor.waker().wake_watched(&self.agent, watch) {
            Wake::Launched { pid } => Ok(format!("driver pid {pid}")),
            Wake::Ended { pid, status } => Err(ActError::new(
                libc::EIO,
                format!(
                    "the driver (pid {pid}) ended at once, {status}: litany would not \
                     advance the agent (its reason is the last line of steps/{}/{})",
                    self.agent,
                    crate::workspace::steps::DRIVER_LOG
                ),
            )),
            Wake::Busy => Err(ActError::new(
                libc::EBUSY,
                "the agent is live: an executor holds its lock",
            )),
            Wake::NoHarness => Err(self
                .harness()
                .err()
                .unwrap_or_else(|| ActError::new(libc::EOPNOTSUPP, "no litany binary"))),
            Wake::Failed(why) => Err(ActError::new(libc::EIO, why)),
            Wake::Off | Wake::Queued => Ok(String::new()),
        }
    }

    fn carry_out(&self, command: &Command) -> Result<String, ActError> {
        match command {
            Command::Nudge => self.wake(),
            Command::Interrupt(text) => {
                self.litany(command)?;
                self.views.depositing(&self.agent);
                let r = self
                    .depositor
                    .deposit(&self.agent, &self.sender, text.as_bytes());
                let published = r
                    .as_ref()
                    .ok()
                    .map(|d| (d.published.name.as_str(), d.published.ino));
                self.views.deposited(&self.agent, &self.sender, published);
                let done = r.map_err(|e| {
                    ActError::new(
                        e.errno().unwrap_or(libc::EIO),
                        format!("stopped; the message was refused: {e}"),
                    )
                })?;
                let said = format!("deposited {}", done.published.name);
                if done.wake == Wake::Off {
                    // An interrupt wakes the agent even where deposits do not.
                    return Ok(format!("{said}; {}", self.wake()?));
                }
                Ok(said)
            }
            Command::Delete { tree, .. } => {
                self.not_live(*tree)?;
                self.litany(command)
            }
            other => self.litany(other),
        }
    }

    /// `EBUSY` when the agent (or, for `subtree`, any of its descendants) is live: being
    /// driven is what must end first, whatever else litany's delete would say of it.
    fn not_live(&self, subtree: bool) -> Result<(), ActError> {
        let mut ids = vec![self.agent.clone()];
        if subtree && let Ok(snap) = self.refs.snapshot() {
            ids.extend(
                snap.agents
                    .keys()
                    .filter(|a| crate::control::is_descendant(a, &self.agent))
                    .cloned(),
            );
        }
        for id in ids {
            let inbox = self.root.join(crate::workspace::INBOX_DIR).join(&id);
            if crate::deposit::executor_busy(&inbox).unwrap_or(false) {
                return Err(ActError::new(
                    libc::EBUSY,
                    format!("{id} is live (an executor holds its lock): stop it first"),
                ));
            }
        }
        Ok(())
    }

    /// The event and the log line of `command`'s `result`.
    fn report(&self, command: &str, result: &Result<String, ActError>) {
        self.refs.invalidate();
        let who = (self.writer.pid, self.writer.uid, self.comm.as_str());
        let (word, detail) = match result {
            Ok(said) => ("ok".to_string(), said.clone()),
            Err(e) => (e.word(), e.summary().to_string()),
        };
        match result {
            Ok(_) => log::info!(
                "{}: {command} by pid {} ({}, uid {}): ok{}",
                self.path,
                self.writer.pid,
                self.comm,
                self.writer.uid,
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({detail})")
                }
            ),
            Err(e) => log::warn!(
                "{}: {command} by pid {} ({}, uid {}): {word}: {e}",
                self.path,
                self.writer.pid,
                self.comm,
                self.writer.uid
            ),
        }
        self.views
            .control(&self.agent, &self.path, command, who, &word, &detail);
    }
}

fn act_error(path: &str, e: ActError) -> TreeError {
    TreeError::new(path, ErrorKind::Act(e))
}

impl Tree {
    /// Who may act through this tree.
    pub(super) fn policy(&self) -> Policy {
        Policy {
            read_only: self.deposits.is_none(),
            confined: self.confined.clone(),
        }
    }

    /// Whether agent `id` has a ref now.
    fn living(&self, id: &str) -> bool {
        self.snapshot()
            .map(|s| s.agents.contains_key(id))
            .unwrap_or(false)
    }

    /// The `ctl` that `name` names in backing directory `place`, if any.
    pub(super) fn ctl_child(&self, place: &Place, name: &OsStr) -> Option<Node> {
        let Place::AgentSteps { agent } = place else {
            return None;
        };
        (name == CTL && self.policy().has_ctl(agent) && self.living(agent)).then(|| {
            Node::Act(Arc::new(ActNode::Ctl {
                agent: agent.to_string(),
            }))
        })
    }

    /// Adds `ctl` to the listing of `steps/<agent>/`.
    pub(super) fn push_ctl(&self, out: &mut Vec<Child>, place: &Place) {
        if out.iter().any(|c| c.name == CTL) {
            return;
        }
        if let Some(node) = self.ctl_child(place, OsStr::new(CTL))
            && let Ok(attr) = self.getattr(&node)
        {
            out.push(Child::new(CTL, node, attr));
        }
    }

    /// The drafts key of directory `node`: an inbox's agent, or [`NEW_DRAFTS`].
    pub(super) fn drafts_key<'a>(&self, node: &'a Node) -> Option<&'a str> {
        match node {
            Node::Act(a) if matches!(**a, ActNode::NewDir) => Some(NEW_DRAFTS),
            _ => node.inbox_agent(),
        }
    }

    /// Whether a conversation may be started here (the file `name` in `new/`).
    pub(super) fn may_start(&self, parent: &Node, name: &OsStr) -> Result<(), TreeError> {
        self.policy()
            .allows_start()
            .map_err(|e| act_error(&parent.join(name), e))
    }

    pub(super) fn act_attr(&self, node: &Node, a: &ActNode) -> Result<Attr, TreeError> {
        let policy = self.policy();
        let (kind, perm) = match a {
            ActNode::Ctl { agent } => {
                if !policy.has_ctl(agent) || !self.living(agent) {
                    return Err(TreeError::not_found(node.path()));
                }
                (Kind::File, if policy.read_only { 0o400 } else { CTL_PERM })
            }
            ActNode::NewDir => {
                if !policy.has_new() {
                    return Err(TreeError::not_found(node.path()));
                }
                (Kind::Dir, if policy.read_only { 0o500 } else { NEW_PERM })
            }
        };
        let mtime = match a {
            ActNode::NewDir => self
                .drafts
                .changed_at(NEW_DRAFTS)
                .unwrap_or(self.born)
                .max(self.born),
            ActNode::Ctl { .. } => self.born,
        };
        Ok(Attr {
            kind,
            size: 0,
            perm,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            mtime,
            ctime: mtime,
            atime: mtime,
            identity: Identity::Virtual(node.clone()),
            owner: None,
        })
    }

    /// The entry `name` of `new/`: a goal being written.
    pub(super) fn act_child(
        &self,
        parent: &Node,
        a: &ActNode,
        name: &OsStr,
    ) -> Result<Node, TreeError> {
        match a {
            ActNode::NewDir => self
                .drafts
                .get(NEW_DRAFTS, name)
                .map(|d| {
                    Node::draft(DraftNode {
                        agent: NEW_DRAFTS.to_string(),
                        id: d.id,
                        name: name.to_os_string(),
                    })
                })
                .ok_or_else(|| TreeError::not_found(parent.join(name))),
            ActNode::Ctl { .. } => Err(TreeError::new(parent.path(), ErrorKind::NotDir)),
        }
    }

    pub(super) fn act_list(&self, node: &Node, a: &ActNode) -> Result<Vec<Child>, TreeError> {
        match a {
            ActNode::NewDir => {
                self.act_attr(node, a)?;
                let mut out = Vec::new();
                self.push_drafts(&mut out, NEW_DRAFTS);
                Ok(out)
            }
            ActNode::Ctl { .. } => Err(TreeError::new(node.path(), ErrorKind::NotDir)),
        }
    }

    /// What an open of `ctl` serves: its text to a reader; nothing to a writer, whose
    /// every write is a command (refused on a read-only mount).
    pub(super) fn act_open(
        &self,
        node: &Node,
        a: &ActNode,
        write: bool,
    ) -> Result<Content, TreeError> {
        self.act_attr(node, a)?;
        let ActNode::Ctl { agent } = a else {
            return Err(TreeError::new(node.path(), ErrorKind::IsDir));
        };
        if write {
            if self.policy().read_only {
                return Err(TreeError::read_only(node.path()));
            }
            return Ok(Content::Bytes(Arc::new(Vec::new())));
        }
        Ok(Content::Bytes(Arc::new(self.ctl_text(agent).into_bytes())))
    }

    /// `ctl`'s text: the agent's status row, the commands, and what releases a held
    /// tool call.
    fn ctl_text(&self, agent: &str) -> String {
        let rows: Vec<_> = self
            .views
            .rows()
            .into_iter()
            .filter(|r| r.id == agent)
            .map(|mut r| {
                r.depth = 0;
                r
            })
            .collect();
        // The table without its first line, the workspace's total.
        let table = crate::views::status::text(&rows);
        let mut out = table
            .split_once('\n')
            .map_or(table.as_str(), |(_, rest)| rest)
            .to_string();
        let policy = self.policy();
        out.push_str("\ncommands (one per write, as in `echo stop > ctl`):\n");
        for line in COMMANDS.lines() {
            let verb = line.split_whitespace().next().unwrap_or("");
            if policy.confined.is_none() || CONFINED_COMMANDS.contains(&verb) {
                out.push_str("  ");
                out.push_str(line);
                out.push('\n');
            }
        }
        if policy.read_only {
            out.push_str("  (this mount is read-only: every command answers EROFS)\n");
        }
        out.push_str(&format!(
            "\na held tool call (marks/held/{agent}) is released only by the workflow's \
             tool_control command, which litany asks again at the agent's next advance \
             (nudge); litanyfs does not answer it.\n"
        ));
        out
    }

    /// A write of `data` to `ctl` by `writer`: refused now when it is not a command or
    /// may not be run, else the command, to be carried out by a worker.
    pub(crate) fn write_act(
        &self,
        node: &Node,
        data: &[u8],
        writer: Writer,
    ) -> Result<Deferred, TreeError> {
        let Node::Act(a) = node else {
            return Err(self.refusal(node));
        };
        let ActNode::Ctl { agent } = &**a else {
            return Err(TreeError::new(node.path(), ErrorKind::IsDir));
        };
        self.act_attr(node, a)?;
        let path = node.path();
        let Some(deposits) = &self.deposits else {
            return Err(TreeError::read_only(path));
        };
        let actor = Actor {
            depositor: deposits.depositor.clone(),
            refs: self.refs.clone(),
            sender: deposits.sender.clone(),
            views: self.views.clone(),
            root: self.ws.root().to_path_buf(),
            agent: agent.clone(),
            path: path.clone(),
            writer,
            comm: writer.comm(),
        };
        let command = Command::parse(data)
            .and_then(|c| self.policy().allows(&c, agent).map(|()| c))
            .and_then(|c| self.confirmed(c, agent));
        let command = match command {
            Ok(c) => c,
            Err(e) => {
                // What was written, as far as an event names it: its first word, short.
                let head = String::from_utf8_lossy(&data[..data.len().min(64)]);
                let verb: String = head
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(32)
                    .collect();
                actor.report(&verb, &Err(e.clone()));
                return Err(act_error(&path, e));
            }
        };
        Ok(Deferred::new(move || {
            let described = command.describe();
            let result = actor.carry_out(&command);
            actor.report(&described, &result);
            result.map(|_| ()).map_err(|e| act_error(&actor.path, e))
        }))
    }

    /// A `delete` names the agent again, by its id or its name.
    fn confirmed(&self, c: Command, agent: &str) -> Result<Command, ActError> {
        if let Command::Delete { confirm, .. } = &c {
            let name = self.snapshot().ok().and_then(|s| {
                s.names
                    .iter()
                    .find(|(_, id)| *id == agent)
                    .map(|(n, _)| n.clone())
            });
            if confirm != agent && Some(confirm) != name.as_ref() {
                return Err(ActError::new(
                    libc::EINVAL,
                    format!(
                        "{} names {confirm:?}, not this agent ({agent}{}): type its id or \
                         name to confirm",
                        c.verb(),
                        name.map(|n| format!(", {n}")).unwrap_or_default()
                    ),
                ));
            }
        }
        Ok(c)
    }

    /// Goal `name` in `new/` starts nothing: `word` and `reason` say why (its writer
    /// was killed, it was closed empty or cut): a `control` event and a log line.
    pub(super) fn goal_given_up(&self, name: &str, writer: Writer, word: &str, reason: &str) {
        let path = format!("{NEW_DIR}/{name}");
        let comm = writer.comm();
        log::warn!("{path}: started nothing: {word}: {reason}");
        self.views.control(
            "",
            &path,
            "start",
            (writer.pid, writer.uid, &comm),
            word,
            reason,
        );
    }

    /// The bound of a goal written into `new/`: `EFBIG` past it, at the write.
    pub(super) fn check_goal_len(&self, node: &Node, len: u64) -> Result<(), TreeError> {
        match node {
            Node::Draft(d) if d.agent == NEW_DRAFTS && len > MAX_GOAL_BYTES as u64 => {
                Err(TreeError::new(
                    node.path(),
                    ErrorKind::TooBig {
                        size: len,
                        max: MAX_GOAL_BYTES as u64,
                    },
                ))
            }
            _ => Ok(()),
        }
    }

    /// The last close of goal `d` (its state `st`, locked): what starts the
    /// conversation, to be carried out by a worker. A goal with no text is refused now.
    pub(super) fn start_later(
        &self,
        node: &Node,
        d: &Arc<Draft>,
        st: &mut DraftState,
    ) -> Result<Deferred, TreeError> {
        let path = node.path();
        let Some(deposits) = &self.deposits else {
            return Err(TreeError::read_only(path));
        };
        let file = d.name().to_string_lossy().into_owned();
        let goal = std::str::from_utf8(st.buf())
            .map_err(|_| ActError::new(libc::EILSEQ, "the goal is not UTF-8"))
            .and_then(Goal::parse);
        let writer = Writer {
            pid: st.hands.writers.last().map_or(0, |w| w.tid),
            uid: st.owner.map_or(u32::MAX, |(uid, _)| uid),
        };
        let actor = Actor {
            depositor: deposits.depositor.clone(),
            refs: self.refs.clone(),
            sender: deposits.sender.clone(),
            views: self.views.clone(),
            root: self.ws.root().to_path_buf(),
            agent: String::new(),
            path: path.clone(),
            writer,
            comm: writer.comm(),
        };
        let goal = match goal {
            Ok(g) => g,
            Err(e) => {
                st.give_up(Gone::Refused { errno: e.errno });
                self.drafts.touch(NEW_DRAFTS);
                actor.report("start", &Err(e.clone()));
                return Err(act_error(&path, e));
            }
        };
        // From here another close of it waits for this one's answer.
        st.attempting();
        let name = name_of(&file).map(str::to_string);
        let argv = goal.argv(&actor.root, name.as_deref());
        let repo = self.ws.repo_dir();
        let draft = d.clone();
        Ok(Deferred::new(move || {
            actor.views.starting();
            let started = actor.harness().and_then(|harness| {
                let git = git2::Repository::open_bare(&repo)
                    .map_err(|e| ActError::new(libc::EIO, format!("open repo.git: {e}")))?;
                let agents = || living_agents(&git);
                let s = crate::control::start::start(
                    &harness,
                    &actor.root,
                    &argv,
                    &agents,
                    START_LIMIT,
                )?;
                // Its name is on the dispatch commit, a moment after the ref, and its
                // `steps/<id>/` (where its `ctl` is) comes with its first step: the close
                // returns once `names/<Name>` resolves, and `steps/<id>/ctl` if litany
                // gets that far within STEPS_GRACE.
                let at = std::time::Instant::now();
                let steps = actor.root.join(crate::workspace::STEPS_DIR).join(&s.id);
                while (name.as_ref().is_some_and(|n| !wears(&git, &s.id, n))
                    && at.elapsed() < START_LIMIT)
                    || (!steps.is_dir() && at.elapsed() < STEPS_GRACE)
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Ok(s)
            });
            let mut st = draft.state.lock();
            let actor = Actor {
                agent: started.as_ref().map(|s| s.id.clone()).unwrap_or_default(),
                ..actor
            };
            let report = started
                .as_ref()
                .map(|s| format!("agent {} started by litany prompt pid {}", s.id, s.pid))
                .map_err(Clone::clone);
            actor.report("start", &report);
            let who = (actor.writer.pid, actor.writer.uid, actor.comm.clone());
            actor
                .views
                .started(started.as_ref().ok().map(|s| (s.id.as_str(), who)));
            match started {
                Ok(s) => {
                    st.sent(crate::deposit::Published {
                        name: s.id.clone(),
                        path: actor.root.join(crate::workspace::AGENTS_DIR).join(&s.id),
                        dev: 0,
                        ino: 0,
                    });
                    Ok(())
                }
                Err(e) => {
                    st.failed = Some(e.errno);
                    st.give_up(Gone::Refused { errno: e.errno });
                    Err(act_error(&actor.path, e))
                }
            }
        }))
    }
}

/// Whether agent `id`'s tip in `repo` names it `name` (its `name` file, CONTRACT §2.3).
fn wears(repo: &git2::Repository, id: &str, name: &str) -> bool {
    let Ok(tip) = repo.revparse_single(&format!("refs/heads/agents/{id}:name")) else {
        return false;
    };
    tip.as_blob()
        .is_some_and(|b| String::from_utf8_lossy(b.content()).trim() == name)
}

/// The ids of the agents with a ref in `repo`, read afresh.
fn living_agents(repo: &git2::Repository) -> BTreeSet<String> {
    let prefix = "refs/heads/agents/";
    let Ok(refs) = repo.references_glob(&format!("{prefix}*")) else {
        return BTreeSet::new();
    };
    refs.flatten()
        .filter_map(|r| {
            r.name()
                .and_then(|n| n.strip_prefix(prefix))
                .map(str::to_string)
        })
        .collect()
}
