//! The invalidation thread: the watcher's changes on disk, turned into the kernel's
//! invalidations of the entries and inodes it holds, so that a change in the workspace
//! shows through the mount at once. It runs apart from the request handlers, and only
//! asks the shared [`State`] which number the kernel knows a node by. Here too: the
//! upkeep's request that the kernel forget files nobody uses ([`State::hand_back`]).

use std::sync::Arc;
use std::time::Duration;

use fuser::{INodeNo, Notifier};

use super::State;
use crate::home::{WsKey, in_workspace};
use crate::tree::{Backed, HomeNode, Identity, Node, Tree};
use crate::watch::Change;

/// How long the invalidation thread rests after applying a batch of changes.
const INVALIDATION_PAUSE: Duration = Duration::from_millis(2);

/// Turns the watcher's changes into kernel invalidations, on a thread of its own: an
/// invalidation sent from inside a request handler can deadlock against the kernel.
/// One per tree: a single mount's, or each workspace's of a home as it is opened.
pub(crate) struct Invalidator {
    pub(super) state: Arc<State>,
    pub(super) tree: Arc<Tree>,
    /// Where the tree shows on a home mount: the kernel knows its nodes under it.
    pub(super) ws: Option<WsKey>,
}

/// An invalidation's failure, logged at debug: ENOENT from the kernel only means it had
/// nothing cached; other failures mean the session is going away.
fn quiet(r: std::io::Result<()>) {
    if let Err(e) = r
        && e.raw_os_error() != Some(libc::ENOENT)
    {
        log::debug!("invalidation: {e}");
    }
}

impl Invalidator {
    pub(crate) fn spawn(self, notifier: Notifier) {
        if self.tree.watcher().is_none() {
            return;
        }
        // Every refs change is told to the events follower from here on.
        self.tree.views().refs_watched();
        let started = std::thread::Builder::new()
            .name("invalidate".into())
            .spawn(move || self.run(notifier));
        if let Err(e) = started {
            log::error!("could not start the invalidation thread: {e}");
        }
    }

    fn run(self, notifier: Notifier) {
        let Some(watcher) = self.tree.watcher() else {
            return;
        };
        loop {
            let changes = match watcher.read_changes() {
                Ok(c) => c,
                Err(_) if watcher.is_closed() => {
                    // The tree was closed (a home's idle workspace): nothing watches it
                    // any more, so nothing the kernel holds of it may be trusted for long.
                    self.forget_all(&notifier);
                    self.tree.views().refs_unwatched();
                    log::debug!("{}: tree closed; its invalidation ends", self.name());
                    return;
                }
                Err(e) => {
                    log::error!("inotify read failed ({e}); invalidation stops");
                    return;
                }
            };
            for change in changes {
                self.apply(&notifier, change);
            }
            // The events follower looks now rather than at its next tick.
            self.tree.views().poke();
            // A burst of changes (a harness streaming a record, a run of deposits) then
            // wakes this thread once per pause rather than once per event; a lone change
            // is still applied at once.
            std::thread::sleep(INVALIDATION_PAUSE);
        }
    }

    /// `node` of this tree as the kernel knows it.
    fn shown(&self, node: &Node) -> Node {
        match &self.ws {
            Some(ws) => in_workspace(ws.clone(), node.clone()),
            None => node.clone(),
        }
    }

    /// The node of this tree a node the kernel knows stands for, if it is one of its.
    fn own(&self, node: &Node) -> Option<Node> {
        match (&self.ws, node) {
            (None, n) => Some(n.clone()),
            (Some(ws), Node::Home(h)) => match &**h {
                HomeNode::In { ws: w, node } if w == ws => Some(node.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The number the kernel knows `node` by, if any: a backing node's is found from the
    /// file's identity now (a `stat`), any other's from the table's record of its path.
    fn ino_of(&self, node: &Node) -> Option<u64> {
        let inodes = &self.state.inodes;
        if let Node::Backing(b) = node
            && let Ok(st) = self.tree.backing().lstat(&b.rel())
            && let Some(ino) = inodes.known(&Identity::Backing {
                dev: st.dev,
                ino: st.ino,
                generation: st.generation(),
            })
        {
            return Some(ino);
        }
        inodes.ino_of(&self.shown(node))
    }

    /// What the invalidations name this tree by in the log.
    fn name(&self) -> &str {
        self.ws.as_deref().unwrap_or("the workspace")
    }

    /// Every inode and entry of this tree the kernel holds is dropped from its cache.
    fn forget_all(&self, n: &Notifier) {
        let inodes = &self.state.inodes;
        // Each directory's number is looked up (a `stat`) once, not once per entry.
        let mut parents: crate::FastMap<Backed, Option<u64>> = crate::FastMap::default();
        for (ino, shown) in inodes.nodes_where(|n| self.own(n).is_some()) {
            quiet(n.inval_inode(INodeNo(ino), 0, 0));
            if let Some(Node::Backing(b)) = self.own(&shown)
                && let Some(parent) = b.parent()
                && let Some(p) = *parents
                    .entry(parent.clone())
                    .or_insert_with(|| self.ino_of(&Node::Backing(parent)))
            {
                quiet(n.inval_entry(INodeNo(p), b.file_name()));
            }
        }
    }

    fn apply(&self, n: &Notifier, change: Change) {
        match change {
            Change::Entry { dir, name, renamed } => {
                let dir_node = Node::backing(dir.clone());
                if renamed && let Some(d) = self.ino_of(&dir_node) {
                    quiet(n.inval_entry(INodeNo(d), &name));
                    quiet(n.inval_inode(INodeNo(d), 0, 0));
                }
                if let Some(c) = self.ino_of(&Node::backing(dir.join(&name))) {
                    quiet(n.inval_inode(INodeNo(c), 0, 0));
                }
                // A view rendered from that entry (response.md) changes with it.
                if let Some(view) = crate::tree::derived_from(&dir, &name)
                    && let Some(v) = self.ino_of(&view)
                {
                    quiet(n.inval_inode(INodeNo(v), 0, 0));
                }
            }
            Change::Gone(dir) => {
                if let Some(d) = self.ino_of(&Node::backing(dir.clone())) {
                    quiet(n.inval_inode(INodeNo(d), 0, 0));
                }
                if let (Some(parent), Some(name)) = (dir.parent(), dir.file_name())
                    && let Some(p) = self.ino_of(&Node::backing(parent))
                {
                    quiet(n.inval_entry(INodeNo(p), name));
                }
            }
            Change::Refs => {
                self.tree.views().refs_moved();
                for node in self.tree.refs_changed() {
                    if let Some(i) = self.ino_of(&node) {
                        quiet(n.inval_inode(INodeNo(i), 0, 0));
                    }
                }
            }
            Change::Overflow => {
                log::warn!("inotify queue overflowed; invalidating every cached record");
                self.tree.refs().invalidate();
                self.tree.views().refs_moved();
                self.forget_all(n);
            }
        }
    }
}

impl State {
    /// Asks the kernel to forget the files nobody used since the last time, once the
    /// table holds more than [`crate::tree::INODES_KEPT`] numbers (see [`super::inodes`]): the
    /// daemon's upkeep calls it. How many entries it invalidated.
    pub(crate) fn hand_back(&self, notifier: &fuser::Notifier) -> usize {
        let unused = self.inodes.unused_files(crate::tree::INODES_KEPT);
        let mut sent = 0;
        for u in &unused {
            let Some(name) = u.node.entry_name() else {
                continue;
            };
            match notifier.inval_entry(INodeNo(u.parent), name) {
                Ok(()) => sent += 1,
                // The kernel had already let go of it.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    log::debug!("handing back {}: {e}", u.node.path());
                    break;
                }
            }
        }
        if sent > 0 {
            log::debug!(
                "asked the kernel to forget {sent} files nobody used ({} numbers held)",
                self.inodes.len()
            );
        }
        sent
    }
}
