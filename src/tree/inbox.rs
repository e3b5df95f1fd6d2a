//! The inbox write path: creating, writing, closing, renaming and removing messages in
//! `inbox/<id>/`, over the [`Drafts`](super::drafts::Drafts) that hold them until they
//! are deposited.
//!
//! Guarantees: nothing reaches the real inbox before a message is closed, and then it is
//! deposited whole by the [`Depositor`](crate::deposit::Depositor), once; a message of
//! which any write was refused is never sent; a deposited message is immutable (`EPERM`);
//! everything outside `inbox/<id>/` is read-only (`EROFS`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::SystemTime;

use super::drafts::{self, Draft, DraftError, DraftState, Gone, Refused, Verdict};
use super::node::{Backed, DraftNode};
use super::{Attr, Child, Content, DRAFT_PERM, Deposits, ErrorKind, FILE_PERM, Identity, Kind};
use super::{Closer, NAME_MAX, Node, Tree, TreeError};
use crate::deposit::DepositError;

/// The error a refused write to a draft answers, at the write and at every close after.
fn refused_error(node: &Node, why: Refused) -> TreeError {
    let kind = match why {
        Refused::TooLarge { len, max } => ErrorKind::Deposit(DepositError::TooLarge { len, max }),
        Refused::NoSpace => ErrorKind::NoSpace,
    };
    TreeError::new(node.path(), kind)
}

impl Tree {
    pub(super) fn draft_attr(&self, node: &Node, d: &DraftNode) -> Result<Attr, TreeError> {
        let draft = self.draft(node, d)?;
        let st = draft.state.lock();
        Ok(Attr {
            kind: Kind::File,
            size: st.buf.len() as u64,
            perm: if st.closed() { FILE_PERM } else { st.perm },
            nlink: 1,
            mtime: st.mtime,
            ctime: st.ctime,
            atime: st.atime,
            identity: Identity::Draft(d.id),
        })
    }

    /// The draft `name` names in `agent`'s inbox, if any: a deposited draft's alias never
    /// hides a real deposit of the same name.
    pub(super) fn draft_child(&self, inbox: &Backed, agent: &str, name: &OsStr) -> Option<Node> {
        let d = self.drafts.get(agent, name)?;
        if !d.listed() && self.backing.lstat(&inbox.rel().join(name)).is_ok() {
            return None;
        }
        Some(Node::Draft(DraftNode {
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
            let node = Node::Draft(DraftNode {
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
        let agent = parent.inbox_agent().ok_or_else(refuse)?;
        let deposits = self.deposits.as_ref().ok_or_else(refuse)?;
        Ok((deposits, agent))
    }

    /// Creates a draft `name` in inbox directory `parent`: a message to be deposited when
    /// its writer closes it (or private scratch, for a dot-prefixed name).
    pub fn create(&self, parent: &Node, name: &OsStr) -> Result<(Node, Attr), TreeError> {
        let (deposits, agent) = self.deposits_for(parent, name)?;
        let path = parent.join(name);
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
        if !drafts::is_private(name) {
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
        let node = Node::Draft(DraftNode {
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
    pub fn open_write(&self, node: &Node, truncate: bool, by: u32) -> Result<Content, TreeError> {
        let d = self.draft_of(node)?;
        {
            let mut st = d.state.lock();
            if st.closed() {
                if !truncate {
                    return Err(TreeError::new(node.path(), ErrorKind::Immutable));
                }
                self.drafts.reused(&mut st);
                st.dirty = false;
                st.mtime = SystemTime::now();
                self.opened_by(&mut st, by);
                drop(st);
                self.drafts.touch(&d.agent);
                return Ok(Content::Draft(d));
            }
            self.opened_by(&mut st, by);
            if truncate {
                // Emptied: whatever was refused before is gone with it.
                st.refused = None;
            }
            if truncate && !st.buf.is_empty() {
                self.drafts
                    .resize(&mut st, 0)
                    .map_err(|_| TreeError::new(node.path(), ErrorKind::NoSpace))?;
                st.dirty = true;
                st.mtime = SystemTime::now();
            }
        }
        Ok(Content::Draft(d))
    }

    /// The thread group of thread `tid`, as the draft `st` knows it.
    fn group(&self, st: &mut DraftState, tid: u32) -> u32 {
        st.hands
            .group(tid, |t| self.witness.as_ref().map_or(t, |w| w.tgid(t)))
    }

    fn opened_by(&self, st: &mut DraftState, tid: u32) {
        let g = self.group(st, tid);
        st.hands.held(g);
    }

    /// Writes `data` at `offset` into a draft for thread `tid`; refuses past the size
    /// limit (EFBIG).
    pub fn write(
        &self,
        node: &Node,
        offset: u64,
        data: &[u8],
        tid: u32,
    ) -> Result<usize, TreeError> {
        let d = self.draft_of(node)?;
        let mut st = d.state.lock();
        if st.closed() {
            return Err(TreeError::new(node.path(), ErrorKind::Immutable));
        }
        let g = self.group(&mut st, tid);
        st.hands.wrote(g);
        st.hands.held(g);
        let end = offset.saturating_add(data.len() as u64);
        if let Err(e) = self.check_len(node, end) {
            if let ErrorKind::Deposit(DepositError::TooLarge { len, max }) = e.kind {
                st.refused = Some(Refused::TooLarge { len, max });
            }
            return Err(e);
        }
        let (start, end) = (offset as usize, end as usize);
        if st.buf.len() < end && self.drafts.resize(&mut st, end).is_err() {
            st.refused = Some(Refused::NoSpace);
            return Err(refused_error(node, Refused::NoSpace));
        }
        st.buf[start..end].copy_from_slice(data);
        st.dirty = true;
        st.mtime = SystemTime::now();
        st.ctime = st.mtime;
        Ok(data.len())
    }

    /// A `close(2)` of a draft by `closer`, or (`None`) the release of its last handle.
    /// The last close sends it (see [`drafts::verdict`]) and hears how that went; earlier
    /// closes of duplicates answer at once and send nothing; a message whose writer was
    /// killed is dropped. An empty or private draft is never sent.
    pub fn flush(&self, node: &Node, closer: Option<Closer>) -> Result<(), TreeError> {
        let Node::Draft(_) = node else {
            return Ok(());
        };
        let d = self.draft_of(node)?;
        if d.is_private() {
            return Ok(());
        }
        let Some(deposits) = self.deposits.as_ref() else {
            return Err(TreeError::read_only(node.path()));
        };
        let verdict = match closer {
            None => Verdict::Send,
            Some(closer) => {
                let (writers, mut candidates) = {
                    let st = d.state.lock();
                    if !st.pending() {
                        return Ok(());
                    }
                    (st.hands.writers.clone(), st.hands.holders.clone())
                };
                // Looked at without the draft locked: the witness reads `/proc`.
                let task = self.witness.as_ref().and_then(|w| w.task(closer.tid));
                match drafts::verdict(task.as_ref(), &writers, &[]) {
                    Verdict::Send => {
                        let exiting = task.filter(|t| t.exit.is_some()).map(|t| t.tgid);
                        if let Some(t) = task {
                            candidates.push(t.tgid);
                        }
                        let holders = self
                            .witness
                            .as_ref()
                            .map_or_else(Vec::new, |w| w.holders(closer.ino, &candidates, exiting));
                        let mut st = d.state.lock();
                        for &h in &holders {
                            st.hands.held(h);
                        }
                        if let Some(t) = task {
                            st.hands.held(t.tgid);
                        }
                        drafts::verdict(task.as_ref(), &writers, &holders)
                    }
                    v => v,
                }
            }
        };
        // The draft stays locked across the deposit, so two closes of one message can
        // never deposit it twice.
        let mut st = d.state.lock();
        if !st.pending() {
            return Ok(());
        }
        match verdict {
            Verdict::Wait => st
                .refused
                .map_or(Ok(()), |why| Err(refused_error(node, why))),
            Verdict::Drop { pid, signal } => {
                log::warn!(
                    "{}: not sent: process {pid}, which wrote to it, was killed by signal \
                     {signal} while holding it",
                    node.path()
                );
                self.give_up(&d, &mut st, Gone::Killed { pid, signal });
                Ok(())
            }
            Verdict::Send => {
                if let Some(why) = st.refused {
                    // Part of a message is not the message: it goes, unsent.
                    log::warn!(
                        "{}: not sent: a write to it was refused, so it held only part of \
                         the message",
                        node.path()
                    );
                    self.give_up(&d, &mut st, Gone::Cut(why));
                    return Err(refused_error(node, why));
                }
                if !st.dirty || st.buf.is_empty() {
                    return Ok(());
                }
                let sent = self.send(node, &d, &mut st, deposits);
                drop(st);
                self.drafts.shed_aliases();
                sent
            }
        }
    }

    /// Draft `d` (its state `st`, locked) will never be sent: out of the listing, its
    /// content freed; its name resolvable for the alias grace.
    fn give_up(&self, d: &Draft, st: &mut DraftState, why: Gone) {
        st.gone = Some(why);
        st.dirty = false;
        // Shrinking always succeeds.
        let _ = self.drafts.resize(st, 0);
        st.last_used = std::time::Instant::now();
        self.drafts.touch(&d.agent);
    }

    /// Deposits draft `d` (its state `st`, locked) into the real inbox.
    fn send(
        &self,
        node: &Node,
        d: &Draft,
        st: &mut DraftState,
        deposits: &Deposits,
    ) -> Result<(), TreeError> {
        st.dirty = false;
        self.views.depositing(&d.agent);
        let result = deposits
            .depositor
            .deposit(&d.agent, &deposits.sender, &st.buf);
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
                    st.buf.len(),
                    done.wake
                );
                st.deposited = Some(done.published);
                st.last_used = std::time::Instant::now();
                self.drafts.deposited(st);
                self.drafts.touch(&d.agent);
                Ok(())
            }
            Err(DepositError::Empty) => Ok(()),
            Err(e) => Err(TreeError::new(node.path(), ErrorKind::Deposit(e))),
        }
    }

    /// The last handle on a draft closed: whatever no close decided is decided now
    /// (errors can only be logged). The alias grace runs from the deposit (or a later
    /// change of times or mode), not from reads, so a reader cannot keep an alias alive.
    pub fn release(&self, node: &Node) {
        if let Err(e) = self.flush(node, None) {
            log::warn!("{e} (at release; the writer was not told)");
        }
    }

    /// `truncate`/`ftruncate` of a draft.
    pub fn set_size(&self, node: &Node, size: u64) -> Result<(), TreeError> {
        let d = self.draft_of(node)?;
        let mut st = d.state.lock();
        if st.closed() {
            return Err(TreeError::new(node.path(), ErrorKind::Immutable));
        }
        self.check_len(node, size)?;
        if st.buf.len() as u64 != size {
            self.drafts
                .resize(&mut st, size as usize)
                .map_err(|_| TreeError::new(node.path(), ErrorKind::NoSpace))?;
            if size == 0 {
                st.refused = None;
            }
            st.dirty = true;
            st.mtime = SystemTime::now();
        }
        Ok(())
    }

    /// Times and mode of a draft (kept in memory; a deposit's real file is not touched).
    pub fn set_meta(
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
            st.perm = p & 0o7777;
        }
        st.ctime = SystemTime::now();
        st.last_used = std::time::Instant::now();
        Ok(())
    }

    /// Removes draft `name` from inbox directory `parent`. A deposit already made stays.
    pub fn unlink(&self, parent: &Node, name: &OsStr) -> Result<(), TreeError> {
        let (_, agent) = self.deposits_for(parent, name)?;
        if self.drafts.remove(agent, name).is_some() {
            return Ok(());
        }
        Err(self.refusal(&self.existing(parent, name)?))
    }

    /// Renames a draft within one inbox. A private draft renamed to a public name is
    /// deposited then (editors that save through a temp file and a rename). `flags`
    /// (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`, ...) do not apply to messages.
    pub fn rename(
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
        if newparent.inbox_agent() != Some(agent) {
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
            d.state.lock().dirty = true;
            let node = Node::Draft(DraftNode {
                agent: agent.to_string(),
                id: d.id,
                name: newname.to_os_string(),
            });
            self.flush(&node, None)?;
        }
        Ok(())
    }
}
