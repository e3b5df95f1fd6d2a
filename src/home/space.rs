//! What a mount serves: one workspace's [`Tree`], or a [`Home`] of many.
//!
//! The adapter asks a [`Space`] every question it would ask a tree, with the same
//! answers. On a home, a node under workspace `ws` is [`HomeNode::In`] wrapping the
//! node that workspace's tree knows: each question is unwrapped, put to that tree, and
//! its answer wrapped again (nodes and virtual identities under `ws`, error paths made
//! mount-relative), so a tree never sees another workspace's node and two workspaces'
//! identical paths never share an inode. A backing file's identity (device and inode)
//! and a draft's number are unique across workspaces already, and pass as they are.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Home, WsKey, in_workspace};
use crate::tree::{
    Attr, Child, Closer, Closing, Content, Deferred, ErrorKind, HomeNode, Identity, Node, OpenMode,
    Opened, PendingClose, SHORT_TTL, Tree, TreeError, Writer, Writing,
};

/// One workspace's tree, or a home of many (module docs).
#[derive(Clone)]
pub(crate) enum Space {
    One(Arc<Tree>),
    Home(Arc<Home>),
}

/// Where a node of the space is answered.
enum At<'a> {
    /// By `tree`, as `node`; `ws` is where that tree shows on a home.
    Tree {
        tree: Arc<Tree>,
        ws: Option<&'a WsKey>,
        node: &'a Node,
    },
    /// By the home itself.
    Home(&'a Home),
}

fn wrap_identity(ws: Option<&WsKey>, identity: Identity) -> Identity {
    match (ws, identity) {
        (Some(ws), Identity::Virtual(n)) => Identity::Virtual(in_workspace(ws.clone(), n)),
        (_, other) => other,
    }
}

fn unwrap_identity(identity: &Identity) -> Identity {
    if let Identity::Virtual(Node::Home(h)) = identity
        && let HomeNode::In { node, .. } = &**h
    {
        return Identity::Virtual(node.clone());
    }
    identity.clone()
}

fn wrap_attr(ws: Option<&WsKey>, mut attr: Attr) -> Attr {
    attr.identity = wrap_identity(ws, attr.identity);
    attr
}

fn wrap_node(ws: Option<&WsKey>, node: Node) -> Node {
    match ws {
        Some(ws) => in_workspace(ws.clone(), node),
        None => node,
    }
}

fn wrap_child(ws: Option<&WsKey>, c: Child) -> Child {
    Child {
        name: c.name,
        node: wrap_node(ws, c.node),
        attr: wrap_attr(ws, c.attr),
        ttl: c.ttl,
    }
}

/// A deferred act whose errors name their path under `ws`.
fn wrap_later(ws: Option<&WsKey>, later: Deferred) -> Deferred {
    match ws {
        Some(ws) => {
            let ws = ws.clone();
            later.map_err(move |e| e.under(&ws))
        }
        None => later,
    }
}

fn wrap_err(ws: Option<&WsKey>, e: TreeError) -> TreeError {
    match ws {
        Some(ws) => e.under(ws),
        None => e,
    }
}

/// The part of `buf` from `offset`, at most `size` bytes, into `out`.
fn slice(buf: &[u8], offset: u64, size: u32, out: &mut Vec<u8>) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(buf.len());
    let end = start.saturating_add(size as usize).min(buf.len());
    out.extend_from_slice(&buf[start..end]);
}

impl Space {
    /// Where `node` is answered; `NotFound` for a node of a workspace that has gone.
    fn at<'a>(&'a self, node: &'a Node) -> Result<At<'a>, TreeError> {
        match self {
            Space::One(tree) => Ok(At::Tree {
                tree: tree.clone(),
                ws: None,
                node,
            }),
            Space::Home(home) => match node {
                Node::Home(h) => match &**h {
                    HomeNode::In { ws, node } => Ok(At::Tree {
                        tree: home.tree(ws)?,
                        ws: Some(ws),
                        node,
                    }),
                    HomeNode::Shelf(_) => Ok(At::Home(home)),
                },
                _ => Ok(At::Home(home)),
            },
        }
    }

    /// The node of a workspace's root directory, which the home answers for without
    /// opening the workspace (a listing of the home must not open every workspace).
    fn is_workspace_dir(node: &Node) -> bool {
        matches!(node, Node::Home(h) if matches!(&**h, HomeNode::In { node: Node::Root, .. }))
    }

    /// The directory the mount serves (a workspace, or a home's SOURCE).
    pub(crate) fn root(&self) -> &std::path::Path {
        match self {
            Space::One(tree) => tree.workspace().root(),
            Space::Home(home) => home.root(),
        }
    }

    pub(crate) fn lookup(&self, parent: &Node, name: &OsStr) -> Result<Child, TreeError> {
        match self.at(parent)? {
            At::Tree { tree, ws, node } => tree
                .lookup(node, name)
                .map(|c| wrap_child(ws, c))
                .map_err(|e| wrap_err(ws, e)),
            At::Home(home) => home.lookup(parent, name),
        }
    }

    /// [`Tree::stat`]: the attributes of the node an inode stands for, if it is still
    /// `identity`.
    pub(crate) fn stat(
        &self,
        node: &Node,
        identity: &Identity,
    ) -> Result<(Attr, Duration), TreeError> {
        if let Space::Home(home) = self
            && Self::is_workspace_dir(node)
        {
            return home_stat(home, node, identity);
        }
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree
                .stat(node, &unwrap_identity(identity))
                .map(|(a, ttl)| (wrap_attr(ws, a), ttl))
                .map_err(|e| wrap_err(ws, e)),
            At::Home(home) => home_stat(home, node, identity),
        }
    }

    /// [`Tree::stat_open`].
    pub(crate) fn stat_open(
        &self,
        node: &Node,
        identity: &Identity,
        content: &Content,
    ) -> Result<(Attr, Duration), TreeError> {
        if let Space::Home(home) = self
            && Self::is_workspace_dir(node)
        {
            return home_stat(home, node, identity);
        }
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree
                .stat_open(node, &unwrap_identity(identity), content)
                .map(|(a, ttl)| (wrap_attr(ws, a), ttl))
                .map_err(|e| wrap_err(ws, e)),
            At::Home(home) => home_stat(home, node, identity),
        }
    }

    pub(crate) fn list(&self, node: &Node) -> Result<Vec<Child>, TreeError> {
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree
                .list(node)
                .map(|cs| cs.into_iter().map(|c| wrap_child(ws, c)).collect())
                .map_err(|e| wrap_err(ws, e)),
            At::Home(home) => home.list(node),
        }
    }

    pub(crate) fn open(
        &self,
        node: &Node,
        identity: &Identity,
        mode: OpenMode,
    ) -> Result<Opened, TreeError> {
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree
                .open(node, &unwrap_identity(identity), mode)
                .map_err(|e| wrap_err(ws, e)),
            At::Home(home) => match (node, mode) {
                (Node::View(v), OpenMode::Read) => Ok(Opened {
                    content: home.open_view(*v),
                    direct_io: true,
                    keep_cache: false,
                    no_flush: true,
                    passthrough: false,
                }),
                (Node::View(_), _) => Err(TreeError::read_only(node.path())),
                _ => Err(TreeError::new(node.path(), ErrorKind::IsDir)),
            },
        }
    }

    pub(crate) fn read_into(
        &self,
        node: &Node,
        content: &Content,
        offset: u64,
        size: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), TreeError> {
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree
                .read_into(node, content, offset, size, out)
                .map_err(|e| wrap_err(ws, e)),
            At::Home(home) => {
                out.clear();
                match content {
                    Content::Bytes(b) => slice(b, offset, size, out),
                    Content::Log(r) => {
                        out.extend_from_slice(&home.read_log(node, *r, offset, size)?)
                    }
                    _ => return Err(TreeError::new(node.path(), ErrorKind::IsDir)),
                }
                Ok(())
            }
        }
    }

    pub(crate) fn readlink(&self, node: &Node) -> Result<Vec<u8>, TreeError> {
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree.readlink(node).map_err(|e| wrap_err(ws, e)),
            At::Home(_) => Err(TreeError::new(node.path(), ErrorKind::NotSymlink)),
        }
    }

    pub(crate) fn xattrs(&self, node: &Node) -> Result<Vec<(String, Vec<u8>)>, TreeError> {
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree.xattrs(node).map_err(|e| wrap_err(ws, e)),
            At::Home(_) => Ok(Vec::new()),
        }
    }

    /// Why a change to `node` is refused ([`Tree::refusal`]).
    pub(crate) fn refusal(&self, node: &Node) -> TreeError {
        match self.at(node) {
            Ok(At::Tree { tree, ws, node }) => wrap_err(ws, tree.refusal(node)),
            Ok(At::Home(_)) => TreeError::read_only(node.path()),
            Err(e) => e,
        }
    }

    /// [`Tree::write_start`]: a write done now, or a command left for a worker.
    pub(crate) fn write_start(
        &self,
        node: &Node,
        offset: u64,
        data: &[u8],
        writer: Writer,
    ) -> Writing {
        match self.at(node) {
            Err(e) => Writing::Done(Err(e)),
            Ok(At::Home(_)) => Writing::Done(Err(TreeError::read_only(node.path()))),
            Ok(At::Tree { tree, ws, node }) => match tree.write_start(node, offset, data, writer) {
                Writing::Done(r) => Writing::Done(r.map_err(|e| wrap_err(ws, e))),
                Writing::Later(later, n) => Writing::Later(wrap_later(ws, later), n),
            },
        }
    }

    /// [`Tree::create_as`]: a draft by user `by`.
    pub(crate) fn create(
        &self,
        parent: &Node,
        name: &OsStr,
        by: crate::tree::Owner,
    ) -> Result<(Node, Attr), TreeError> {
        match self.at(parent)? {
            At::Tree { tree, ws, node } => tree
                .create_as(node, name, by)
                .map(|(n, a)| (wrap_node(ws, n), wrap_attr(ws, a)))
                .map_err(|e| wrap_err(ws, e)),
            At::Home(_) => Err(TreeError::read_only(parent.join(name))),
        }
    }

    pub(crate) fn unlink(&self, parent: &Node, name: &OsStr) -> Result<(), TreeError> {
        match self.at(parent)? {
            At::Tree { tree, ws, node } => tree.unlink(node, name).map_err(|e| wrap_err(ws, e)),
            At::Home(_) => Err(TreeError::read_only(parent.join(name))),
        }
    }

    pub(crate) fn rename(
        &self,
        parent: &Node,
        name: &OsStr,
        newparent: &Node,
        newname: &OsStr,
        flags: u32,
    ) -> Result<(), TreeError> {
        match (self.at(parent)?, self.at(newparent)?) {
            (
                At::Tree { tree, ws, node },
                At::Tree {
                    ws: new_ws,
                    node: new_node,
                    ..
                },
            ) if ws == new_ws => tree
                .rename(node, name, new_node, newname, flags)
                .map_err(|e| wrap_err(ws, e)),
            (At::Tree { .. }, At::Tree { .. }) => Err(TreeError::new(
                newparent.join(newname),
                ErrorKind::CrossDevice,
            )),
            _ => Err(TreeError::read_only(parent.join(name))),
        }
    }

    pub(crate) fn set_size(&self, node: &Node, size: u64) -> Result<(), TreeError> {
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree.set_size(node, size).map_err(|e| wrap_err(ws, e)),
            At::Home(_) => Err(TreeError::read_only(node.path())),
        }
    }

    pub(crate) fn set_meta(
        &self,
        node: &Node,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
        perm: Option<u16>,
    ) -> Result<(), TreeError> {
        match self.at(node)? {
            At::Tree { tree, ws, node } => tree
                .set_meta(node, atime, mtime, perm)
                .map_err(|e| wrap_err(ws, e)),
            At::Home(_) => Err(TreeError::read_only(node.path())),
        }
    }

    /// [`Tree::close_start`]: a close decided now, or one waiting for spawned children,
    /// to be carried by [`WaitingClose::poll`].
    pub(crate) fn close_start(
        &self,
        node: &Node,
        content: &Content,
        closer: Closer,
    ) -> SpaceClosing {
        match self.at(node) {
            Err(e) => SpaceClosing::Done(Err(e)),
            Ok(At::Home(_)) => SpaceClosing::Done(Ok(())),
            Ok(At::Tree { tree, ws, node }) => match tree.close_start(node, content, closer) {
                Closing::Done(r) => SpaceClosing::Done(r.map_err(|e| wrap_err(ws, e))),
                Closing::Later(later) => SpaceClosing::Later(wrap_later(ws, later)),
                Closing::Waiting(pending) => SpaceClosing::Waiting(WaitingClose {
                    ws: ws.cloned(),
                    tree,
                    pending,
                }),
            },
        }
    }

    /// [`Tree::release`]. A draft of a workspace that has gone since is released by the
    /// draft itself: nothing is left to send it to.
    pub(crate) fn release(&self, node: &Node, content: &Content) {
        if let Ok(At::Tree { tree, node, .. }) = self.at(node) {
            tree.release(node, content);
        }
    }
}

/// A close of the space, decided or waiting ([`Space::close_start`]).
pub(crate) enum SpaceClosing {
    Done(Result<(), TreeError>),
    /// Decided; carried out by a worker, which answers the close.
    Later(Deferred),
    Waiting(WaitingClose),
}

/// A close waiting for spawned children, with the tree that decides it.
pub(crate) struct WaitingClose {
    tree: Arc<Tree>,
    ws: Option<WsKey>,
    pending: PendingClose,
}

impl WaitingClose {
    /// [`Tree::close_poll`].
    pub(crate) fn poll(&mut self, now: bool) -> Option<Result<(), TreeError>> {
        let ws = self.ws.as_ref();
        self.tree
            .close_poll(&mut self.pending, now)
            .map(|r| r.map_err(|e| wrap_err(ws, e)))
    }
}

fn home_stat(home: &Home, node: &Node, identity: &Identity) -> Result<(Attr, Duration), TreeError> {
    let attr = home.getattr(node)?;
    if attr.identity != *identity {
        return Err(TreeError::not_found(node.path()));
    }
    let ttl = match node {
        Node::View(_) => crate::tree::NO_TTL,
        _ => SHORT_TTL,
    };
    Ok((attr, ttl))
}
