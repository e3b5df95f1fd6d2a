//! The inode table: FUSE inode numbers for the tree's nodes.
//!
//! A number is tied to a node's [`Identity`], not to its name. A backing file on the
//! workspace's own device is numbered by its backing inode number, so it keeps its number
//! for as long as it exists, whatever it is renamed to and however often the kernel
//! forgets it; a reused inbox name is a new file and so a new number. Everything else
//! (git-derived nodes, drafts, files on another device) gets a number from a range no
//! backing inode uses, kept while the kernel references it. Entries are counted as the
//! kernel counts lookups and dropped when it forgets them, so the table holds only what
//! the kernel still references, plus listing-only entries (see
//! [`InodeTable::peek_or_insert`]).
//!
//! **Bounded by asking the kernel to forget.** A kernel with memory to spare forgets
//! nothing: every file a `grep -r` ever touched stays referenced, and a live workspace
//! keeps adding files, so a table that only follows the kernel grows for the mount's
//! life (the soak's daemon went from 30,000 numbers to 52,000 in ten minutes). Past
//! [`crate::tree::INODES_KEPT`], the files nobody used since the last look (no request on them, none
//! open) are handed back: [`InodeTable::unused_files`] names them by their directory and
//! name, the adapter invalidates those entries, and the kernel, holding nothing else of
//! them, forgets them. Directories stay (a shell's working directory must not lose its
//! name). A file handed back is looked up again when next used, under the same number if
//! it is a backing file (its own inode number), under a new one otherwise.

use parking_lot::Mutex;

use crate::FastMap;
use crate::tree::{Identity, Node};

/// The root's inode number, fixed by the protocol.
pub(crate) const ROOT_INO: u64 = 1;
/// Where numbers that are not backing inode numbers start: above any a file system gives.
pub(crate) const ALLOCATED_BASE: u64 = 1 << 63;

/// One number the kernel references. A slot is five words (six with its key), and a
/// kernel may hold up to [`crate::tree::INODES_KEPT`] and more: the node is shared (a clone of it is a
/// count), and no identity is kept that the number or the node already says.
struct Slot {
    /// Shared with `by_node`'s key, and handed out by [`InodeTable::get`].
    node: Node,
    /// The kernel's count, held in 32 bits so that the slot stays five words: it
    /// stops at the top (four billion lookups never forgotten), and then the slot stays
    /// for the mount's life rather than go while the kernel may still use the number.
    lookups: u32,
    /// A derived number's file's generation (the last one the kernel was told), which
    /// the number alone does not say.
    generation: u32,
    /// The directory the kernel last looked this file up in, when it is a file the
    /// kernel may be asked to forget (0: a directory, or not such a file).
    parent: u64,
    /// Handles open on it now.
    open: u32,
    /// Whether a request used it since the last [`InodeTable::unused_files`].
    used: bool,
}

impl Slot {
    fn new(node: Node, lookups: u32, generation: u32) -> Self {
        Slot {
            node,
            lookups,
            generation,
            parent: 0,
            open: 0,
            used: true,
        }
    }
}

/// A file the kernel may be asked to forget: its entry `name` in directory `parent`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unused {
    pub(crate) ino: u64,
    pub(crate) parent: u64,
    pub(crate) node: Node,
}

struct Inner {
    /// The numbers of the identities that are neither derived (see
    /// [`InodeTable::derived`]) nor the node itself: drafts, and backing files on another
    /// device. A derived number is its own key in `slots`; a virtual identity's number
    /// is its node's, in `by_node`.
    allocated: FastMap<Identity, u64>,
    /// The identity behind each number in `allocated` (its reverse).
    identities: FastMap<u64, Identity>,
    /// The latest allocated number each node resolved to: a virtual identity's number,
    /// and the way from a change to the inode to invalidate. A derived number needs no
    /// entry: it is the backing file's own, found by a `stat` ([`InodeTable::known`]).
    by_node: FastMap<Node, u64>,
    slots: FastMap<u64, Slot>,
    next: u64,
}

impl Inner {
    /// The allocated number `identity` has, if any (derived numbers are not asked here).
    fn allocated(&self, identity: &Identity) -> Option<u64> {
        match identity {
            Identity::Virtual(node) => self.by_node.get(node).copied(),
            _ => self.allocated.get(identity).copied(),
        }
    }
}

pub(crate) struct InodeTable {
    inner: Mutex<Inner>,
    /// The device whose inode numbers are used as they are.
    root_dev: Option<u64>,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new(None)
    }
}

impl InodeTable {
    /// A table numbering backing files on `root_dev` by their own inode numbers.
    pub(crate) fn new(root_dev: Option<u64>) -> Self {
        let mut slots = FastMap::default();
        slots.insert(ROOT_INO, Slot::new(Node::Root, 1, 0));
        Self {
            inner: Mutex::new(Inner {
                allocated: FastMap::default(),
                identities: FastMap::default(),
                by_node: FastMap::from_iter([(Node::Root, ROOT_INO)]),
                slots,
                next: ALLOCATED_BASE,
            }),
            root_dev,
        }
    }

    /// The number `identity` has by construction, if it has one.
    fn derived(&self, identity: &Identity) -> Option<u64> {
        match identity {
            Identity::Backing { dev, ino, .. }
                if Some(*dev) == self.root_dev && *ino != ROOT_INO && *ino < ALLOCATED_BASE =>
            {
                Some(*ino)
            }
            _ => None,
        }
    }
    /// How many numbers are held (the kernel's, and listing-only ones).
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().slots.len()
    }

    /// The number for `identity`, counting one kernel lookup. `node` becomes the path by
    /// which the number is resolved from now on (a renamed backing file moves with it).
    /// `file_in`: the directory it was looked up in, when it is not a directory itself
    /// (such an entry may be handed back, see [`InodeTable::unused_files`]).
    pub(crate) fn lookup(&self, identity: &Identity, node: &Node, file_in: Option<u64>) -> u64 {
        self.insert(identity, node, 1, file_in)
    }

    /// The number for `identity` without counting a lookup: what a plain `readdir`
    /// reports. Such entries live until the kernel looks them up and forgets them.
    pub(crate) fn peek_or_insert(&self, identity: &Identity, node: &Node) -> u64 {
        self.insert(identity, node, 0, None)
    }

    fn insert(&self, identity: &Identity, node: &Node, count: u32, file_in: Option<u64>) -> u64 {
        let derived = self.derived(identity);
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        // A derived number's slot holds its identity: the same number on another device
        // is not the same file (and is numbered from the allocated range).
        let known = derived.or_else(|| inner.allocated(identity));
        if let Some(ino) = known
            && let Some(slot) = inner.slots.get_mut(&ino)
        {
            slot.lookups = slot.lookups.saturating_add(count);
            slot.used = true;
            if count > 0 {
                slot.parent = file_in.unwrap_or(0);
            }
            // A number reused by a later file: from now on it stands for that file.
            if let Identity::Backing { generation, .. } = identity {
                slot.generation = *generation;
            }
            if slot.node != *node {
                let old = std::mem::replace(&mut slot.node, node.clone());
                if derived.is_none() {
                    if inner.by_node.get(&old) == Some(&ino) {
                        inner.by_node.remove(&old);
                    }
                    inner.by_node.insert(node.clone(), ino);
                }
            }
            return ino;
        }
        let ino = match derived {
            Some(ino) => ino,
            None => {
                let ino = inner.next;
                inner.next += 1;
                if !matches!(identity, Identity::Virtual(_)) {
                    inner.allocated.insert(identity.clone(), ino);
                    inner.identities.insert(ino, identity.clone());
                }
                ino
            }
        };
        if derived.is_none() {
            inner.by_node.insert(node.clone(), ino);
        }
        let generation = match identity {
            Identity::Backing { generation, .. } => *generation,
            _ => 0,
        };
        let mut slot = Slot::new(node.clone(), count, generation);
        slot.parent = file_in.unwrap_or(0);
        inner.slots.insert(ino, slot);
        ino
    }

    /// A handle was opened on `ino` (it is not handed back while open).
    pub(crate) fn opened(&self, ino: u64) {
        if let Some(slot) = self.inner.lock().slots.get_mut(&ino) {
            slot.open = slot.open.saturating_add(1);
            slot.used = true;
        }
    }

    /// A handle on `ino` was released.
    pub(crate) fn released(&self, ino: u64) {
        if let Some(slot) = self.inner.lock().slots.get_mut(&ino) {
            slot.open = slot.open.saturating_sub(1);
            slot.used = true;
        }
    }

    /// When more than `kept` numbers are held, the files no request used since the last
    /// call and none holds open, which the kernel may be asked to forget; each number's
    /// use is forgotten, so that the next call names those not used from now on.
    pub(crate) fn unused_files(&self, kept: usize) -> Vec<Unused> {
        let mut inner = self.inner.lock();
        let over = inner.slots.len() > kept;
        let mut out = Vec::new();
        for (ino, slot) in inner.slots.iter_mut() {
            if over && !slot.used && slot.open == 0 && slot.parent != 0 && slot.lookups > 0 {
                out.push(Unused {
                    ino: *ino,
                    parent: slot.parent,
                    node: slot.node.clone(),
                });
            }
            slot.used = false;
        }
        out
    }

    /// The node and identity behind `ino`, if the kernel still references it; counted
    /// as a use of it.
    pub(crate) fn get(&self, ino: u64) -> Option<(Node, Identity)> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let slot = inner.slots.get_mut(&ino)?;
        slot.used = true;
        let identity = match inner.identities.get(&ino) {
            Some(identity) => identity.clone(),
            None if ino >= ALLOCATED_BASE || ino == ROOT_INO => {
                Identity::Virtual(slot.node.clone())
            }
            None => Identity::Backing {
                dev: self.root_dev?,
                ino,
                generation: slot.generation,
            },
        };
        Some((slot.node.clone(), identity))
    }

    /// The allocated number `node` last resolved to, if the kernel may still hold it. A
    /// backing file's derived number is not found here: see [`InodeTable::known`].
    pub(crate) fn ino_of(&self, node: &Node) -> Option<u64> {
        self.inner.lock().by_node.get(node).copied()
    }

    /// The number `identity` has, if the kernel references it now.
    pub(crate) fn known(&self, identity: &Identity) -> Option<u64> {
        let inner = self.inner.lock();
        let ino = self
            .derived(identity)
            .or_else(|| inner.allocated(identity))?;
        inner.slots.contains_key(&ino).then_some(ino)
    }

    /// Every number whose node `pick` picks, with the node.
    pub(crate) fn nodes_where(&self, pick: impl Fn(&Node) -> bool) -> Vec<(u64, Node)> {
        let inner = self.inner.lock();
        inner
            .slots
            .iter()
            .filter(|(_, s)| pick(&s.node))
            .map(|(ino, s)| (*ino, s.node.clone()))
            .collect()
    }

    /// The kernel forgot `n` lookups of `ino`; the entry goes when none remain.
    pub(crate) fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut inner = self.inner.lock();
        let gone = match inner.slots.get_mut(&ino) {
            Some(slot) => {
                if slot.lookups < u32::MAX {
                    slot.lookups = slot
                        .lookups
                        .saturating_sub(u32::try_from(n).unwrap_or(u32::MAX));
                }
                slot.lookups == 0
            }
            None => false,
        };
        if gone && let Some(slot) = inner.slots.remove(&ino) {
            if let Some(identity) = inner.identities.remove(&ino) {
                inner.allocated.remove(&identity);
            }
            if inner.by_node.get(&slot.node) == Some(&ino) {
                inner.by_node.remove(&slot.node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::GitNode;

    #[test]
    fn numbers_follow_identity_not_name() {
        let t = InodeTable::default();
        let a = Identity::Backing {
            dev: 1,
            ino: 10,
            generation: 0,
        };
        let b = Identity::Backing {
            dev: 1,
            ino: 11,
            generation: 0,
        };
        let name = Node::backing("inbox/x/user-001.md");
        let first = t.lookup(&a, &name, None);
        assert_ne!(first, ROOT_INO);
        // Same name, new file: a new number.
        let second = t.lookup(&b, &name, None);
        assert_ne!(first, second);
        // Same file, new name: the same number, resolved through the new name.
        let renamed = Node::backing("inbox/x/user-002.md");
        assert_eq!(t.lookup(&a, &renamed, None), first);
        assert_eq!(t.get(first).map(|g| g.0), Some(renamed.clone()));
        assert_eq!(t.ino_of(&renamed), Some(first));
        assert_eq!(t.ino_of(&name), Some(second));
    }

    #[test]
    fn a_number_a_later_file_reuses_stands_for_that_file_with_its_generation() {
        let t = InodeTable::new(Some(7));
        let old = Identity::Backing {
            dev: 7,
            ino: 4242,
            generation: 1,
        };
        let new = Identity::Backing {
            dev: 7,
            ino: 4242,
            generation: 2,
        };
        let (was, now) = (Node::backing("steps/a/001"), Node::backing("steps/b/001"));
        assert_eq!(t.lookup(&old, &was, None), 4242);
        // The kernel still holds the old file's number when the new one is looked up.
        assert_eq!(t.lookup(&new, &now, None), 4242);
        assert_eq!(t.get(4242), Some((now, new)));
        // Its lookups of both are counted together, and forgotten together.
        t.forget(4242, 1);
        assert!(t.get(4242).is_some());
        t.forget(4242, 1);
        assert!(t.get(4242).is_none());
    }

    #[test]
    fn backing_files_on_the_root_device_keep_their_own_numbers() {
        let t = InodeTable::new(Some(7));
        let a = Identity::Backing {
            dev: 7,
            ino: 4242,
            generation: 0,
        };
        let node = Node::backing("steps/x/001/response.json");
        assert_eq!(t.lookup(&a, &node, None), 4242);
        t.forget(4242, 1);
        assert!(t.get(4242).is_none());
        assert_eq!(
            t.lookup(&a, &node, None),
            4242,
            "forgotten and looked up again: same number"
        );
        assert_eq!(
            t.get(4242).map(|g| g.1),
            Some(a.clone()),
            "derived, not stored"
        );
        let other_dev = Identity::Backing {
            dev: 8,
            ino: 4242,
            generation: 0,
        };
        let other = t.lookup(&other_dev, &node, None);
        assert!(other >= ALLOCATED_BASE);
        assert_eq!(t.get(other).map(|g| g.1), Some(other_dev.clone()));
        t.forget(other, 1);
        assert!(t.get(other).is_none());
        assert_ne!(
            t.lookup(&other_dev, &node, None),
            other,
            "its identity went with it"
        );
        assert!(
            t.lookup(
                &Identity::Virtual(Node::git(GitNode::MarksRoot)),
                &Node::git(GitNode::MarksRoot),
                None
            ) >= ALLOCATED_BASE
        );
    }

    #[test]
    fn a_count_at_its_top_keeps_the_slot() {
        let t = InodeTable::new(Some(7));
        let a = Identity::Backing {
            dev: 7,
            ino: 99,
            generation: 0,
        };
        let ino = t.lookup(&a, &Node::backing("steps/x"), None);
        if let Some(slot) = t.inner.lock().slots.get_mut(&ino) {
            slot.lookups = u32::MAX - 1;
        }
        t.lookup(&a, &Node::backing("steps/x"), None);
        t.lookup(&a, &Node::backing("steps/x"), None);
        t.forget(ino, u64::from(u32::MAX) + 1);
        assert!(
            t.get(ino).is_some(),
            "a count that stopped is never trusted to end"
        );
    }

    #[test]
    fn a_slot_is_five_words() {
        assert_eq!(
            std::mem::size_of::<Slot>(),
            5 * std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn a_virtual_identity_is_its_node_and_is_stored_once() {
        let t = InodeTable::default();
        let node = Node::git(GitNode::Name("Ada".into()));
        let ino = t.lookup(&Identity::Virtual(node.clone()), &node, None);
        assert!(ino >= ALLOCATED_BASE);
        assert_eq!(t.known(&Identity::Virtual(node.clone())), Some(ino));
        assert_eq!(
            t.get(ino),
            Some((node.clone(), Identity::Virtual(node.clone())))
        );
        assert_eq!(
            t.get(ROOT_INO).map(|g| g.1),
            Some(Identity::Virtual(Node::Root))
        );
        {
            let inner = t.inner.lock();
            assert!(inner.allocated.is_empty() && inner.identities.is_empty());
        }
        // A draft's identity is not its node: it is kept, and goes with its number.
        let draft = Node::draft(crate::tree::DraftNode {
            agent: "a".into(),
            id: 3,
            name: "m.md".into(),
        });
        let d = t.lookup(&Identity::Draft(3), &draft, None);
        assert_eq!(t.get(d).map(|g| g.1), Some(Identity::Draft(3)));
        t.forget(d, 1);
        t.forget(ino, 1);
        assert_eq!(t.known(&Identity::Virtual(node.clone())), None);
        assert_eq!(t.known(&Identity::Draft(3)), None);
        let inner = t.inner.lock();
        assert!(inner.allocated.is_empty() && inner.identities.is_empty());
        assert_eq!(
            (inner.by_node.len(), inner.slots.len()),
            (1, 1),
            "the root alone"
        );
    }

    #[test]
    fn forget_drops_entries_and_keeps_the_root() {
        let t = InodeTable::default();
        let a = Identity::Virtual(Node::git(GitNode::MarksRoot));
        let ino = t.lookup(&a, &Node::git(GitNode::MarksRoot), None);
        t.lookup(&a, &Node::git(GitNode::MarksRoot), None);
        t.forget(ino, 1);
        assert!(t.get(ino).is_some());
        t.forget(ino, 1);
        assert!(t.get(ino).is_none());
        assert_ne!(
            t.lookup(&a, &Node::git(GitNode::MarksRoot), None),
            ino,
            "numbers are not reused"
        );
        t.forget(ROOT_INO, 100);
        assert!(t.get(ROOT_INO).is_some());
    }

    #[test]
    fn past_the_bound_the_files_nobody_used_since_the_last_look_are_named() {
        let t = InodeTable::new(Some(7));
        let file = |ino: u64| Identity::Backing {
            dev: 7,
            ino,
            generation: 0,
        };
        let dir = t.lookup(&file(10), &Node::backing("steps/a"), None);
        let kept = t.lookup(&file(11), &Node::backing("steps/a/kept"), Some(dir));
        let open = t.lookup(&file(12), &Node::backing("steps/a/open"), Some(dir));
        let idle = t.lookup(&file(13), &Node::backing("steps/a/idle"), Some(dir));
        t.opened(open);
        // Under the bound nothing is named, and every use so far is forgotten.
        assert_eq!(t.unused_files(100), Vec::new());
        // Used since: a request on one; the directory is never named.
        assert!(t.get(kept).is_some());
        let named = t.unused_files(1);
        assert_eq!(
            named,
            vec![Unused {
                ino: idle,
                parent: dir,
                node: Node::backing("steps/a/idle"),
            }]
        );
        // The next look names what was not used since this one: `kept` now too; `open`
        // once released and left alone.
        t.released(open);
        let mut named: Vec<u64> = t.unused_files(1).iter().map(|u| u.ino).collect();
        named.sort();
        assert_eq!(named, vec![kept, idle]);
        let named: Vec<u64> = t.unused_files(1).iter().map(|u| u.ino).collect();
        assert!(named.contains(&open));
        // A lookup is a use; the kernel forgetting it takes it out.
        t.lookup(&file(13), &Node::backing("steps/a/idle"), Some(dir));
        t.forget(idle, 2);
        assert!(t.unused_files(1).iter().all(|u| u.ino != idle));
    }
}
