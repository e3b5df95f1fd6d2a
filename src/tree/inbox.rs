//! The inbox write path: creating, writing, closing, renaming and removing messages in
//! `inbox/<id>/`, over the [`Drafts`](super::drafts::Drafts) that hold them until they
//! are deposited.
//!
//! Guarantees: nothing reaches the real inbox before a message is closed, and then it is
//! deposited whole by the [`Depositor`](crate::deposit::Depositor), once; a message of
//! which any write was refused is never sent; a write that would make a message not UTF-8
//! is refused at that write (`EILSEQ`), where a shell's redirection reports it; a message
//! refused, cut or closed empty leaves the listing at its last close and is a
//! `message-refused` event; a deposited message is immutable (`EPERM`); everything
//! outside `inbox/<id>/` is read-only (`EROFS`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

use super::drafts::{self, Draft, DraftError, DraftOpen, DraftState, Gone, Refused, Verdict};
use super::node::{Backed, DraftNode};
use super::{Attr, Child, Content, DRAFT_PERM, Deposits, ErrorKind, FILE_PERM, Identity, Kind};
use super::{Closer, NAME_MAX, Node, Tree, TreeError};
use crate::deposit::DepositError;
use crate::witness::{Exit, Holder, Task};

/// A thread inside a close of a draft, for as long as the guard lives (it may outlive
/// the request thread that started the close: see [`PendingClose`]).
struct ClosingGuard {
    closing: Arc<Mutex<crate::FastSet<u32>>>,
    tid: u32,
}

impl Drop for ClosingGuard {
    fn drop(&mut self) {
        self.closing.lock().remove(&self.tid);
    }
}

/// How a close of a draft went, or that it is waiting for children being spawned.
pub(crate) enum Closing {
    Done(Result<(), TreeError>),
    /// Only children between their `fork` and their `exec` hold it: the close waits up to
    /// [`SPAWN_GRACE`] for their execs to drop it ([`Tree::close_poll`]), so that the
    /// writer's close returns once the message is sent. The wait is the writer's: the
    /// adapter carries it on a thread of its own, never on a shared request thread.
    Waiting(PendingClose),
    /// Decided, and what it decided is carried out off the request thread (a start from
    /// `new/`, which waits for `litany prompt`): the adapter hands it to a worker
    /// ([`crate::control::pool`]), which answers the close with its result.
    Later(super::acts::Deferred),
}

impl Closing {
    /// The close's result, carrying out a [`Closing::Later`] here (on a thread that may
    /// wait: a close's own, never a shared request thread).
    fn finish(self) -> Result<(), TreeError> {
        match self {
            Closing::Done(r) => r,
            Closing::Later(later) => later.run(),
            Closing::Waiting(_) => Ok(()),
        }
    }
}

/// How a write went ([`Tree::write_start`]).
pub(crate) enum Writing {
    Done(Result<usize, TreeError>),
    /// A command to carry out on a worker; the write answers this many bytes when it
    /// succeeds.
    Later(super::acts::Deferred, usize),
}

/// A close waiting for spawned children to drop the draft (see [`Closing::Waiting`]).
pub(crate) struct PendingClose {
    node: Node,
    draft: Arc<Draft>,
    closer: Closer,
    candidates: Vec<u32>,
    skip: Option<u32>,
    task: Option<Task>,
    writer_groups: Vec<u32>,
    started: std::time::Instant,
    _closing: ClosingGuard,
}

/// What one look at a draft's holders found.
enum Look {
    /// Holders that settle it (or none): the close decides now.
    Settled(Vec<Holder>),
    /// Only passing holders: children being spawned.
    Spawning(Vec<Holder>),
}

/// How long a close waits for children between `fork` and `exec` to drop the message
/// they hold close-on-exec (see [`Tree::close_poll`]), and how often it looks.
pub(crate) const SPAWN_GRACE: std::time::Duration = std::time::Duration::from_millis(200);
pub(crate) const SPAWN_POLL: std::time::Duration = std::time::Duration::from_micros(500);

/// The error a refused write to a draft answers, at the write and at every close after.
fn refused_error(node: &Node, why: Refused) -> TreeError {
    TreeError::new(node.path(), refused_kind(why))
}

fn refused_kind(why: Refused) -> ErrorKind {
    match why {
        Refused::TooLarge { len, max } => ErrorKind::Deposit(DepositError::TooLarge { len, max }),
        Refused::NotUtf8 { at } => ErrorKind::Deposit(DepositError::NotUtf8 {
            valid_up_to: at as usize,
        }),
        Refused::NoSpace => ErrorKind::NoSpace,
    }
}

/// What a `message-refused` event says of a draft given up as `why`: one word, and the
/// reason in words (`detail`, the deposit's own error, for one refused at its close).
fn refusal_words(why: Gone, detail: Option<&DepositError>) -> (&'static str, String) {
    let deposit_word = |e: &DepositError| match e {
        DepositError::TooLarge { .. } => "too-large",
        DepositError::NotUtf8 { .. } => "not-utf8",
        DepositError::BadSender(_) | DepositError::UnknownSender(_) => "bad-sender",
        DepositError::BadRecipient(_) | DepositError::UnknownRecipient(_) => "no-recipient",
        _ => "failed",
    };
    match (why, detail) {
        (Gone::Empty, _) => ("empty", "closed with nothing written".to_string()),
        (Gone::Cut(r), _) => match refused_kind(r) {
            ErrorKind::Deposit(e) => (deposit_word(&e), e.to_string()),
            _ => (
                "no-space",
                format!(
                    "the messages being written held {} MiB together",
                    drafts::DRAFT_BYTES >> 20
                ),
            ),
        },
        (_, Some(e)) => (deposit_word(e), e.to_string()),
        (Gone::Refused { errno }, None) => (
            "failed",
            std::io::Error::from_raw_os_error(errno).to_string(),
        ),
        (Gone::Killed { .. }, None) => ("killed", String::new()),
    }
}

impl Tree {
    pub(super) fn draft_attr(&self, node: &Node, d: &DraftNode) -> Result<Attr, TreeError> {
        let draft = self.draft(node, d)?;
        let st = draft.state.lock();
        Ok(Attr {
            kind: Kind::File,
            size: st.buf().len() as u64,
            // A sent message's alias stays its writer's, read-only.
            perm: if st.closed() {
                st.perm & FILE_PERM
            } else {
                st.perm
            },
            nlink: 1,
            mtime: st.mtime,
            ctime: st.ctime,
            atime: st.atime,
            identity: Identity::Draft(d.id),
            owner: st.owner,
        })
    }

    /// The draft `name` names in `agent`'s inbox, if any: a deposited draft's alias never
    /// hides a real deposit of the same name.
    pub(super) fn draft_child(&self, inbox: &Backed, agent: &str, name: &OsStr) -> Option<Node> {
        let d = self.drafts.get(agent, name)?;
        if !d.listed() && self.backing.lstat(&inbox.rel().join(name)).is_ok() {
            return None;
        }
        Some(Node::draft(DraftNode {
            agent: d.agent.clone(),
            id: d.id,
            name: name.to_os_string(),
        }))
    }

    /// Adds the messages being written in `agent`'s inbox to its listing.
    pub(super) fn push_drafts(&self, out: &mut Vec<Child>, agent: &str) {
        for d in self.drafts.listed(agent) {
            let name = d.name();
            if out.iter().any(|c| c.name == name) {
                continue;
            }
            let node = Node::draft(DraftNode {
                agent: agent.to_string(),
                id: d.id,
                name: name.clone(),
            });
            if let Ok(attr) = self.getattr(&node) {
                out.push(Child::new(name, node, attr));
            }
        }
    }

    pub(super) fn draft(&self, node: &Node, d: &DraftNode) -> Result<Arc<Draft>, TreeError> {
        self.drafts
            .by_id(d.id)
            .ok_or_else(|| TreeError::not_found(node.path()))
    }

    /// The draft `node` is, or why a change to it is refused.
    fn draft_of(&self, node: &Node) -> Result<Arc<Draft>, TreeError> {
        match node {
            Node::Draft(d) => self.draft(node, d),
            _ => Err(self.refusal(node)),
        }
    }

    fn deposits_for<'a>(
        &'a self,
        parent: &'a Node,
        name: &OsStr,
    ) -> Result<(&'a Deposits, &'a str), TreeError> {
        let refuse = || TreeError::read_only(parent.join(name));
        let agent = self.drafts_key(parent).ok_or_else(refuse)?;
        if agent == super::acts::NEW_DRAFTS {
            self.may_start(parent, name)?;
        }
        let deposits = self.deposits.as_ref().ok_or_else(refuse)?;
        Ok((deposits, agent))
    }

    /// [`Tree::create_as`] with no user named.
    #[cfg(test)]
    pub(crate) fn create(&self, parent: &Node, name: &OsStr) -> Result<(Node, Attr), TreeError> {
        self.create_as(parent, name, None)
    }

    /// Creates a draft `name` in inbox directory `parent`: a message to be deposited when
    /// its writer closes it (or private scratch, for a dot-prefixed name). User `by` (uid,
    /// gid) owns the draft; refused (`EACCES`) to a user `--depositors` did not name ([`super::Modes::may_deposit`]).
    pub(crate) fn create_as(
        &self,
        parent: &Node,
        name: &OsStr,
        by: super::Owner,
    ) -> Result<(Node, Attr), TreeError> {
        let (deposits, agent) = self.deposits_for(parent, name)?;
        let path = parent.join(name);
        if let (Some((uid, _)), Node::Backing(b)) = (by, parent) {
            let owner = self.backing.lstat(&b.rel()).map_or(u32::MAX, |st| st.uid);
            if !self.modes.may_deposit(uid, owner) {
                return Err(TreeError::new(path, ErrorKind::NotDepositor(uid)));
            }
        }
        if !super::is_single_name(name) {
            return Err(TreeError::new(path, ErrorKind::BadName));
        }
        if name.as_bytes().len() > NAME_MAX {
            return Err(TreeError::new(path, ErrorKind::NameTooLong));
        }
        if let Node::Backing(b) = parent
            && self.getattr(&Node::Backing(b.join(name))).is_ok()
        {
            return Err(TreeError::new(path, ErrorKind::Exists));
        }
        if !drafts::is_private(name) && agent != super::acts::NEW_DRAFTS {
            deposits
                .depositor
                .check_recipient(agent)
                .map_err(|e| TreeError::new(path.clone(), ErrorKind::Deposit(e)))?;
        }
        let d = self
            .drafts
            .create(agent, name, DRAFT_PERM)
            .map_err(|e| match e {
                DraftError::Exists => TreeError::new(path.clone(), ErrorKind::Exists),
                DraftError::Full => TreeError::new(path.clone(), ErrorKind::NoSpace),
            })?;
        d.state.lock().owner = by;
        let node = Node::draft(DraftNode {
            agent: agent.to_string(),
            id: d.id,
            name: name.to_os_string(),
        });
        let attr = self.getattr(&node)?;
        Ok((node, attr))
    }

    /// Whether a message of `len` bytes is within `--max-message-bytes`: the one check
    /// of that limit, by the deposit engine that enforces it.
    fn check_len(&self, node: &Node, len: u64) -> Result<(), TreeError> {
        self.check_goal_len(node, len)?;
        match &self.deposits {
            Some(d) => d
                .depositor
                .check_len(len)
                .map_err(|e| TreeError::new(node.path(), ErrorKind::Deposit(e))),
            None => Err(TreeError::read_only(node.path())),
        }
    }

    /// Opens `node` for writing, for thread `by`: only a draft can be. A deposited
    /// draft's alias opened with `O_TRUNC` starts a new message under the same name
    /// (`echo a > f; echo b > f` sends two); any other write to it is refused, as a
    /// message is immutable.
    pub(crate) fn open_write(
        &self,
        node: &Node,
        truncate: bool,
        by: u32,
    ) -> Result<Content, TreeError> {
        let d = self.draft_of(node)?;
        {
            let mut st = d.state.lock();
            if st.closed() {
                if !truncate && !st.closed_empty() {
                    return Err(TreeError::new(node.path(), ErrorKind::Immutable));
                }
                st.reuse();
                self.opened_by(&mut st, by);
                drop(st);
                self.drafts.touch(&d.agent);
            } else {
                if truncate {
                    st.truncate(0).map_err(|why| refused_error(node, why))?;
                }
                self.opened_by(&mut st, by);
            }
        }
        Ok(Content::Draft(DraftOpen {
            draft: d,
            writable: true,
        }))
    }

    fn opened_by(&self, st: &mut DraftState, tid: u32) {
        st.hands.held(tid);
        st.opened_writable();
    }

    /// [`Tree::close_start`] and its wait, at once.
    #[cfg(test)]
    pub(crate) fn close(
        &self,
        node: &Node,
        content: &Content,
        closer: Closer,
    ) -> Result<(), TreeError> {
        self.wait_out(self.close_start(node, content, closer))
    }

    /// A `close(2)` of `content`, opened from `node`, by `closer`, up to a wait for spawned
    /// children, which it returns to be carried by [`Tree::close_poll`] (on the closer's
    /// account, not a request thread's). Only a writable description's close decides a
    /// draft (see [`Tree::flush_start`]): a reader's close (`cat`, `grep -r`, an editor's
    /// preview) answers at once and decides nothing.
    pub(crate) fn close_start(&self, node: &Node, content: &Content, closer: Closer) -> Closing {
        match content {
            Content::Draft(DraftOpen {
                writable: false, ..
            }) => Closing::Done(Ok(())),
            _ => self.flush_start(node, Some(closer)),
        }
    }

    /// A waiting close, carried here to its end.
    fn wait_out(&self, closing: Closing) -> Result<(), TreeError> {
        match closing {
            Closing::Done(r) => r,
            Closing::Later(later) => later.run(),
            Closing::Waiting(mut p) => loop {
                std::thread::sleep(SPAWN_POLL);
                if let Some(r) = self.close_poll(&mut p, false) {
                    return r;
                }
            },
        }
    }

    /// A write by `writer`: a command to `ctl`, left for a worker to carry out
    /// ([`Writing::Later`]), or a write into a draft, done now.
    pub(crate) fn write_start(
        &self,
        node: &Node,
        offset: u64,
        data: &[u8],
        writer: super::Writer,
    ) -> Writing {
        match node {
            Node::Act(_) => match self.write_act(node, data, writer) {
                Ok(later) => Writing::Later(later, data.len()),
                Err(e) => Writing::Done(Err(e)),
            },
            _ => Writing::Done(self.write(node, offset, data, writer.pid)),
        }
    }

    /// Writes `data` at `offset` into a draft for thread `tid`; refuses past the size
    /// limit (`EFBIG`), and a write that would make a message not UTF-8 (`EILSEQ`).
    pub(crate) fn write(
        &self,
        node: &Node,
        offset: u64,
        data: &[u8],
        tid: u32,
    ) -> Result<usize, TreeError> {
        let d = self.draft_of(node)?;
        let text = !d.is_private();
        // Read before the draft is locked (the witness reads `/proc`): safe, as `tid` is
        // waiting for this very write (see `Witness::start_time`).
        let start = self.witness.as_ref().and_then(|w| w.start_time(tid));
        let mut st = d.state.lock();
        if st.closed() {
            return Err(TreeError::new(node.path(), ErrorKind::Immutable));
        }
        st.hands.wrote(tid, start);
        st.hands.held(tid);
        let end = offset.saturating_add(data.len() as u64);
        if let Err(e) = self.check_len(node, end) {
            if let ErrorKind::Deposit(DepositError::TooLarge { len, max }) = e.kind {
                st.refuse(Refused::TooLarge { len, max });
            }
            return Err(e);
        }
        let written = if text {
            st.write_text(offset as usize, data)
        } else {
            st.write(offset as usize, data)
        };
        written.map_err(|why| refused_error(node, why))?;
        Ok(data.len())
    }

    /// [`Tree::flush_start`] and its wait, at once.
    #[cfg(test)]
    pub(crate) fn flush(&self, node: &Node, closer: Option<Closer>) -> Result<(), TreeError> {
        self.wait_out(self.flush_start(node, closer))
    }

    /// A `close(2)` of a draft by `closer`, or (`None`) the release of its last handle, up
    /// to a wait for spawned children, which it returns. The last close sends it (see
    /// [`drafts::verdict`]) and hears how that went; earlier closes of duplicates answer at
    /// once and send nothing; a message whose writer was killed is dropped. An empty or
    /// private draft is never sent.
    fn flush_start(&self, node: &Node, closer: Option<Closer>) -> Closing {
        let Node::Draft(_) = node else {
            return Closing::Done(Ok(()));
        };
        let d = match self.draft_of(node) {
            Ok(d) => d,
            Err(e) => return Closing::Done(Err(e)),
        };
        if d.is_private() {
            return Closing::Done(Ok(()));
        }
        let verdict = match closer {
            None => Verdict::Send,
            Some(closer) => {
                let closing = self.closing(closer.tid);
                let (writers, mut candidates) = {
                    let st = d.state.lock();
                    if !st.pending() {
                        return Closing::Done(Ok(()));
                    }
                    (st.hands.writers.clone(), st.hands.holders.clone())
                };
                // Looked at without the draft locked: the witness reads `/proc`.
                let task = self.witness.as_ref().and_then(|w| w.task(closer.tid));
                let exiting = task.and_then(|t| t.exit);
                // Which processes wrote matters only when the closer was killed, and then
                // only whether the closer's is one: a writer counts as of the closer's
                // group only if the thread that answers to its id there is the one that
                // wrote (same start time), not a later one given a dead writer's id.
                let writer_groups: Vec<u32> = match (exiting, &self.witness) {
                    (Some(e), Some(w)) if matches!(e.how, Exit::Signal(_)) => writers
                        .iter()
                        .filter_map(|wr| {
                            if wr.tid == closer.tid {
                                return wr.is(e.start).then_some(e.tgid);
                            }
                            let group = w.tgid(wr.tid);
                            // Safe to read: a thread of the exiting closer's group.
                            (group != e.tgid || wr.is(w.start_time(wr.tid))).then_some(group)
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                if let Some((pid, signal)) = drafts::killed(task.as_ref(), &writer_groups) {
                    Verdict::Drop { pid, signal }
                } else {
                    candidates.push(closer.tid);
                    let skip = exiting.map(|_| closer.tid);
                    let pending = PendingClose {
                        node: node.clone(),
                        draft: d,
                        closer,
                        candidates,
                        skip,
                        task,
                        writer_groups,
                        started: std::time::Instant::now(),
                        _closing: closing,
                    };
                    return match self.look(&pending) {
                        Look::Settled(holders) => self.close_with(&pending, &holders),
                        Look::Spawning(_) => Closing::Waiting(pending),
                    };
                }
            }
        };
        self.decide(node, &d, verdict)
    }

    /// Looks again at a waiting close: `None` while only spawned children hold the draft
    /// and [`SPAWN_GRACE`] has not passed (or `now` asks to decide at once), else how it
    /// went.
    pub(crate) fn close_poll(
        &self,
        p: &mut PendingClose,
        now: bool,
    ) -> Option<Result<(), TreeError>> {
        if !p.draft.state.lock().pending() {
            // Sent (or refused) by another close while this one waited.
            return Some(match p.draft.state.lock().failed {
                Some(errno) => Err(TreeError::io(
                    p.node.path(),
                    std::io::Error::from_raw_os_error(errno),
                )),
                None => Ok(()),
            });
        }
        match self.look(p) {
            Look::Spawning(_) if !now && p.started.elapsed() < SPAWN_GRACE => None,
            Look::Settled(holders) | Look::Spawning(holders) => {
                Some(self.close_with(p, &holders).finish())
            }
        }
    }

    /// The end of a close whose other holders are `holders`: the verdict, and what it
    /// decides.
    fn close_with(&self, p: &PendingClose, holders: &[Holder]) -> Closing {
        if !holders.is_empty() {
            log::debug!(
                "{}: close by {}: still held by {holders:?}; the last close sends it",
                p.node.path(),
                p.closer.tid
            );
        }
        let pids: Vec<u32> = holders.iter().map(|h| h.pid).collect();
        let verdict = {
            let mut st = p.draft.state.lock();
            for &pid in &pids {
                st.hands.held(pid);
            }
            st.hands.held(p.closer.tid);
            drafts::verdict(p.task.as_ref(), &p.writer_groups, &pids)
        };
        self.decide(&p.node, &p.draft, verdict)
    }

    /// Carries out `verdict` on draft `d`.
    fn decide(&self, node: &Node, d: &Arc<Draft>, verdict: Verdict) -> Closing {
        match self.decide_now(node, d, verdict) {
            Ok(Some(later)) => Closing::Later(later),
            Ok(None) => Closing::Done(Ok(())),
            Err(e) => Closing::Done(Err(e)),
        }
    }

    /// [`Tree::decide`]: what is left to do off the request thread, if anything.
    fn decide_now(
        &self,
        node: &Node,
        d: &Arc<Draft>,
        verdict: Verdict,
    ) -> Result<Option<super::acts::Deferred>, TreeError> {
        let Some(deposits) = self.deposits.as_ref() else {
            return Err(TreeError::read_only(node.path()));
        };
        // The draft stays locked across the deposit, so two closes of one message can
        // never deposit it twice.
        let mut st = d.state.lock();
        if !st.pending() {
            return Ok(None);
        }
        match verdict {
            Verdict::Wait => st
                .refused()
                .map_or(Ok(None), |why| Err(refused_error(node, why))),
            Verdict::Drop { pid, signal } => {
                log::warn!(
                    "{}: not sent: process {pid}, which wrote to it, was killed by signal \
                     {signal} while holding it",
                    node.path()
                );
                self.give_up(d, &mut st, Gone::Killed { pid, signal }, None);
                Ok(None)
            }
            Verdict::Send => {
                if let Some(why) = st.refused() {
                    // Part of a message is not the message: it goes, unsent.
                    log::warn!(
                        "{}: not sent: a write to it was refused, so it held only part of \
                         the message",
                        node.path()
                    );
                    self.give_up(d, &mut st, Gone::Cut(why), None);
                    return Err(refused_error(node, why));
                }
                if st.buf().is_empty() {
                    log::info!("{}: not sent: closed with nothing written", node.path());
                    self.give_up(d, &mut st, Gone::Empty, None);
                    return Ok(None);
                }
                if !st.dirty() {
                    return Ok(None);
                }
                if d.agent == super::acts::NEW_DRAFTS {
                    return self.start_later(node, d, &mut st).map(Some);
                }
                let sent = self.send(node, d, &mut st, deposits);
                drop(st);
                self.drafts.shed_aliases();
                sent.map(|()| None)
            }
        }
    }

    /// Who else holds the draft of waiting close `p` (its candidates: the tasks known to
    /// have held it, the closer last), and whether they are only passing ones: a child
    /// between its `fork` and its `exec` (another thread's `posix_spawn`) holds it
    /// close-on-exec for a moment, then its exec closes it, and that close is the last
    /// one and sends it. Waiting for that keeps the promise that the writer's close
    /// returns once the message is sent.
    fn look(&self, p: &PendingClose) -> Look {
        let Some(w) = self.witness.as_ref() else {
            return Look::Settled(Vec::new());
        };
        let (closer, candidates) = (p.closer, &p.candidates);
        // A holder settles it (the close waits for the last close, not for a spawn) unless
        // it is closing files right now (an exec closing what it inherited: its exec
        // has already cleared the close-on-exec flags of what it is about to close), or
        // is new and holds it close-on-exec (a child not yet at its exec).
        let settles = |h: &Holder| {
            let transient =
                self.is_closing(h.pid) || (h.close_on_exec && !candidates.contains(&h.pid));
            !transient || h.pid == closer.tid
        };
        let holders = w.holders(closer.ino, candidates, p.skip, settles);
        if !holders.is_empty() && !holders.iter().any(settles) {
            Look::Spawning(holders)
        } else {
            Look::Settled(holders)
        }
    }

    /// Marks thread `tid` as inside a close until the guard drops.
    fn closing(&self, tid: u32) -> ClosingGuard {
        self.closing.lock().insert(tid);
        ClosingGuard {
            closing: self.closing.clone(),
            tid,
        }
    }

    fn is_closing(&self, tid: u32) -> bool {
        self.closing.lock().contains(&tid)
    }

    /// Draft `d` (its state `st`, locked) will never be sent: out of the listing, its
    /// content freed; its name resolvable for the alias grace. A killed writer's message
    /// is a `message-dropped` event, any other a `message-refused` one, with the reason
    /// (`detail`: the deposit's own error, for one refused at its close).
    pub(super) fn give_up(
        &self,
        d: &Draft,
        st: &mut DraftState,
        why: Gone,
        detail: Option<&DepositError>,
    ) {
        st.give_up(why);
        self.drafts.touch(&d.agent);
        let name = d.name();
        let name = name.to_string_lossy();
        if d.agent == super::acts::NEW_DRAFTS {
            let (word, reason) = match why {
                Gone::Killed { pid, signal } => (
                    "killed",
                    format!("process {pid}, which wrote it, was killed by signal {signal}"),
                ),
                _ => refusal_words(why, detail),
            };
            let writer = super::Writer {
                pid: st.hands.writers.last().map_or(0, |w| w.tid),
                uid: st.owner.map_or(u32::MAX, |(uid, _)| uid),
            };
            return self.goal_given_up(&name, writer, word, &reason);
        }
        match why {
            Gone::Killed { pid, signal } => {
                self.views
                    .dropped(&d.agent, &name, "killed", Some((pid, signal)))
            }
            _ => {
                let (word, reason) = refusal_words(why, detail);
                self.views.refused(&d.agent, &name, word, &reason);
            }
        }
    }

    /// Deposits draft `d` (its state `st`, locked) into the real inbox.
    fn send(
        &self,
        node: &Node,
        d: &Draft,
        st: &mut DraftState,
        deposits: &Deposits,
    ) -> Result<(), TreeError> {
        st.attempting();
        self.views.depositing(&d.agent);
        let result = deposits
            .depositor
            .deposit(&d.agent, &deposits.sender, st.buf());
        let published = result
            .as_ref()
            .ok()
            .map(|done| (done.published.name.as_str(), done.published.ino));
        self.views.deposited(&d.agent, &deposits.sender, published);
        match result {
            Ok(done) => {
                log::info!(
                    "{}: deposited as {} ({} bytes, wake: {:?})",
                    node.path(),
                    done.published.path.display(),
                    st.buf().len(),
                    done.wake
                );
                st.sent(done.published);
                self.drafts.touch(&d.agent);
                Ok(())
            }
            Err(DepositError::Empty) => Ok(()),
            Err(e) => {
                // Refused whole: it goes, unlisted, and the closer hears why.
                let errno = e.errno().unwrap_or(libc::EIO);
                st.failed = Some(errno);
                self.give_up(d, st, Gone::Refused { errno }, Some(&e));
                Err(TreeError::new(node.path(), ErrorKind::Deposit(e)))
            }
        }
    }

    /// An open file description of `content`, opened from `node`, was released. When it
    /// was a draft's last writable one, whatever no close decided is decided now (errors
    /// can only be logged). A reader's release decides nothing, and the alias grace runs
    /// from the deposit (or a later change of times or mode), not from reads, so a reader
    /// cannot keep an alias alive either.
    pub(crate) fn release(&self, node: &Node, content: &Content) {
        let Content::Draft(DraftOpen {
            draft,
            writable: true,
        }) = content
        else {
            return;
        };
        if !draft.state.lock().released_writable() {
            return;
        }
        // Not on this request thread: a start from `new/` waits for `litany prompt`.
        let closing = match self.flush_start(node, None) {
            Closing::Later(later) => {
                let path = node.path();
                later.run_elsewhere(path.clone(), move |r| {
                    if let Err(e) = r {
                        log::warn!("{e} (at release; the writer was not told)");
                    } else {
                        log::debug!("{path}: decided at release");
                    }
                });
                return;
            }
            other => self.wait_out(other),
        };
        match closing {
            // Sent and its alias already forgotten: nothing was left to decide.
            Err(e) if matches!(e.kind, ErrorKind::NotFound) => {}
            Err(e) => log::warn!("{e} (at release; the writer was not told)"),
            Ok(()) => {}
        }
    }

    /// `truncate`/`ftruncate` of a draft (and of `ctl`, which a shell's `>` truncates:
    /// nothing to do).
    pub(crate) fn set_size(&self, node: &Node, size: u64) -> Result<(), TreeError> {
        if let Node::Act(a) = node
            && matches!(**a, super::ActNode::Ctl { .. })
            && !self.policy().read_only
        {
            return Ok(());
        }
        let d = self.draft_of(node)?;
        let mut st = d.state.lock();
        if st.closed() {
            return Err(TreeError::new(node.path(), ErrorKind::Immutable));
        }
        self.check_len(node, size)?;
        st.truncate(size as usize)
            .map_err(|why| refused_error(node, why))
    }

    /// Times and mode of a draft (kept in memory; a deposit's real file is not touched).
    pub(crate) fn set_meta(
        &self,
        node: &Node,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
        perm: Option<u16>,
    ) -> Result<(), TreeError> {
        let d = self.draft_of(node)?;
        let mut st = d.state.lock();
        if let Some(t) = atime {
            st.atime = t;
        }
        if let Some(t) = mtime {
            st.mtime = t;
        }
        if let Some(p) = perm {
            // Never more than DRAFT_PERM: chmod and `cp -p` may narrow a draft's mode,
            // not open it to others.
            st.perm = p & DRAFT_PERM;
        }
        st.ctime = SystemTime::now();
        st.last_used = std::time::Instant::now();
        Ok(())
    }

    /// Removes draft `name` from inbox directory `parent`. A deposit already made stays.
    pub(crate) fn unlink(&self, parent: &Node, name: &OsStr) -> Result<(), TreeError> {
        let (_, agent) = self.deposits_for(parent, name)?;
        if self.drafts.remove(agent, name).is_some() {
            return Ok(());
        }
        Err(self.refusal(&self.existing(parent, name)?))
    }

    /// Renames a draft within one inbox. A private draft renamed to a public name is
    /// deposited then (editors that save through a temp file and a rename). `flags`
    /// (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`, ...) do not apply to messages.
    pub(crate) fn rename(
        &self,
        parent: &Node,
        name: &OsStr,
        newparent: &Node,
        newname: &OsStr,
        flags: u32,
    ) -> Result<(), TreeError> {
        if flags != 0 {
            return Err(TreeError::new(parent.join(name), ErrorKind::RenameFlags));
        }
        let (_, agent) = self.deposits_for(parent, name)?;
        let Some(d) = self.drafts.get(agent, name) else {
            return Err(self.refusal(&self.existing(parent, name)?));
        };
        if self.drafts_key(newparent) != Some(agent) {
            return Err(TreeError::new(
                newparent.join(newname),
                ErrorKind::CrossDevice,
            ));
        }
        if let Node::Backing(b) = newparent
            && self.getattr(&Node::Backing(b.join(newname))).is_ok()
        {
            return Err(TreeError::new(
                newparent.join(newname),
                ErrorKind::Immutable,
            ));
        }
        self.drafts.rename(agent, name, newname);
        if drafts::is_private(name) && !drafts::is_private(newname) {
            d.state.lock().touch_content();
            let node = Node::draft(DraftNode {
                agent: agent.to_string(),
                id: d.id,
                name: newname.to_os_string(),
            });
            // A start from `new/` is carried out on a worker; the rename does not wait.
            match self.flush_start(&node, None) {
                Closing::Later(later) => later.run_elsewhere(node.path(), |r| {
                    if let Err(e) = r {
                        log::warn!("{e} (at a rename; the renamer was not told)");
                    }
                }),
                other => self.wait_out(other)?,
            }
        }
        Ok(())
    }
}
