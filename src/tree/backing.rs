//! Backing nodes: the files and directories under `steps/` and `inbox/`, shown as they
//! are on disk, less what the view hides.
//!
//! Guarantees: every backing path is read beneath the workspace root without following
//! a symlink ([`Backing`](crate::workspace::backing::Backing)); the harness's `*.tmp`
//! files under `steps/` are never shown; under `inbox/` only what a drain would accept
//! is shown (`<sender>-<u32>.md` files in agent directories), plus the messages being
//! written through the mount; and under `--agent ID` no path reaches another agent's step
//! records or pending deposits.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use super::node::{Backed, Place};
use super::{Attr, Child, Content, ErrorKind, Identity, Kind, Node, Tree};
use super::{TreeError, system_time};
use crate::workspace::backing::Stat;
use crate::workspace::{inbox, steps};

impl Tree {
    /// Whether the confinement lets `place` be seen: under `steps/` only the agent's own
    /// directory, under `inbox/` only its own pending deposits (the other inboxes are
    /// listed, so that it can write to them, but show nothing).
    pub(super) fn may_see(&self, place: &Place) -> bool {
        let Some(me) = &self.confined else {
            return true;
        };
        match place {
            Place::StepsRoot | Place::InboxRoot | Place::Inbox { .. } => true,
            Place::InboxEntry { agent } | Place::Steps { agent } => {
                agent.as_deref() == Some(me.as_str())
            }
            // A descendant's directory shows its `ctl` alone (`acts`).
            Place::AgentSteps { agent } => agent == me || crate::control::is_descendant(agent, me),
            Place::Step { agent, .. } => agent == me,
            Place::ToolDir(r) | Place::Output(r) => r.agent() == me,
            Place::InboxDeep => false,
        }
    }

    pub(super) fn backing_getattr(&self, node: &Node, b: &Backed) -> Result<Attr, TreeError> {
        let place = b.place();
        if !self.may_see(&place) {
            return Err(TreeError::not_found(node.path()));
        }
        let st = self
            .backing
            .lstat(&b.rel())
            .map_err(|e| TreeError::io(node.path(), e))?;
        if !shows(b, &place, &st) {
            return Err(TreeError::not_found(node.path()));
        }
        Ok(self.backing_node_attr(&place, &st))
    }

    /// The attributes of the backing node at `place`: those of its `stat`, with an inbox
    /// directory writable when the mount takes deposits.
    fn backing_node_attr(&self, place: &Place, st: &Stat) -> Attr {
        let mut attr = self.backing_attr(st);
        if let Place::AgentSteps { agent } = place
            && let Some(at) = self.agents_changed.lock().get(*agent)
        {
            attr.mtime = attr.mtime.max(*at);
        }
        if attr.kind == Kind::Dir && self.deposits.is_some() && matches!(place, Place::InboxRoot) {
            attr.perm = self.modes.on_the_way(attr.perm);
        }
        if attr.kind == Kind::Dir
            && let Place::Inbox { agent: Some(agent) } = place
        {
            if self.deposits.is_some() {
                attr.perm = self.modes.inbox(st);
            }
            // Drafts come and go without touching the backing directory.
            if let Some(at) = self.drafts.changed_at(agent) {
                attr.mtime = attr.mtime.max(at);
            }
        }
        attr
    }

    /// The attributes of a backing file from its `stat`.
    pub(crate) fn backing_attr(&self, st: &Stat) -> Attr {
        let kind = if st.is_dir() {
            Kind::Dir
        } else if st.is_symlink() {
            Kind::Symlink
        } else {
            Kind::File
        };
        let (perm, owner) = self.modes.backing(kind, st);
        Attr {
            kind,
            size: st.size,
            perm,
            owner,
            nlink: st.nlink.min(u32::MAX as u64) as u32,
            mtime: system_time(st.mtime),
            ctime: system_time(st.ctime),
            atime: system_time(st.atime),
            identity: Identity::Backing {
                dev: st.dev,
                ino: st.ino,
                generation: st.generation(),
            },
        }
    }

    /// The node `name` is in backing directory `b`: a capture's page or stream in a tool
    /// directory, a message being written in an inbox, or another backing node.
    pub(super) fn backing_child(
        &self,
        parent: &Node,
        b: &Backed,
        name: &OsStr,
    ) -> Result<Node, TreeError> {
        let place = b.place();
        if let Place::ToolDir(record) = &place
            && let Some(node) = super::capture::child(parent, record, name)?
        {
            return Ok(node);
        }
        if let Place::Inbox { agent: Some(agent) } = place
            && let Some(node) = self.draft_child(b, agent, name)
        {
            return Ok(node);
        }
        if place == Place::InboxRoot
            && let Some(text) = name.to_str()
            && self.backing.lstat(&b.rel().join(name)).is_err()
            && self.is_inbox_name(text)
        {
            return Ok(Node::git(super::GitNode::InboxName(text.to_string())));
        }
        if let Some(node) = self.ctl_child(&place, name)
            && self.backing.lstat(&b.rel().join(name)).is_err()
        {
            return Ok(node);
        }
        if let Some(view) = super::records::child(b, &place, name)
            && self.backing.lstat(&b.rel().join(name)).is_err()
        {
            // A record of the same name on disk, should one appear, wins.
            return Ok(Node::record(view));
        }
        Ok(Node::Backing(b.join(name)))
    }

    /// The listing of backing directory `b`, with the directory it was read from (still
    /// open, so that [`Tree::list`] watches the subdirectories as its entries).
    pub(super) fn backing_list(
        &self,
        node: &Node,
        b: &Backed,
    ) -> Result<(Vec<Child>, OwnedFd), TreeError> {
        let (dir, entries) = self
            .backing
            .list_open(&b.rel())
            .map_err(|e| TreeError::io(node.path(), e))?;
        // Each child's place is parsed once, for the filter and its attributes.
        let mut out: Vec<Child> = entries
            .into_iter()
            .filter_map(|(name, st)| {
                let child = b.join(&name);
                let place = child.place();
                if !shows(&child, &place, &st) || !self.may_see(&place) {
                    return None;
                }
                let attr = self.backing_node_attr(&place, &st);
                Some(Child::new(name, Node::Backing(child), attr))
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        let place = b.place();
        if let Place::ToolDir(record) = &place
            && out
                .iter()
                .any(|c| c.name == crate::paging::address::OUTPUT_FILE)
        {
            self.push_streams(&mut out, record, &dir);
        }
        if let Place::Inbox { agent: Some(agent) } = place {
            self.push_drafts(&mut out, agent);
        }
        self.push_record_views(&mut out, b, &place, &dir);
        self.push_ctl(&mut out, &place);
        Ok((out, dir))
    }

    /// Opens a backing file for reading. The open's own `fstat` decides what it is (one
    /// look at the disk, not a `lstat` before it): only a regular file the view shows.
    pub(super) fn backing_open(&self, node: &Node, b: &Backed) -> Result<Content, TreeError> {
        let place = b.place();
        if !self.may_see(&place) {
            return Err(TreeError::not_found(node.path()));
        }
        let (f, st) = self
            .backing
            .open_file(&b.rel())
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EISDIR) => TreeError::new(node.path(), ErrorKind::IsDir),
                _ => TreeError::io(node.path(), e),
            })?;
        if !shows(b, &place, &st) {
            return Err(TreeError::not_found(node.path()));
        }
        Ok(Content::File(f))
    }
}

/// Whether backing entry `b`, at `place`, is part of the view.
fn shows(b: &Backed, place: &Place, st: &Stat) -> bool {
    let name = b.file_name();
    match place {
        Place::StepsRoot | Place::InboxRoot => true,
        Place::AgentSteps { .. }
        | Place::Step { .. }
        | Place::Steps { .. }
        | Place::ToolDir(_)
        | Place::Output(_) => !steps::is_harness_temp(name.as_bytes()),
        Place::Inbox { .. } => st.is_dir() && !name.as_bytes().starts_with(b"."),
        Place::InboxEntry { .. } => {
            st.is_file() && name.to_str().and_then(inbox::pending_sender).is_some()
        }
        Place::InboxDeep => false,
    }
}
