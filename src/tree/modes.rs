//! What a node's mode and owner show, and who besides the kernel's checks may deposit:
//! the one home of that policy.
//!
//! Under `--allow-other` the kernel enforces the modes shown (`default_permissions`), so
//! they must never grant more than the workspace does. By default ([`Modes::masked`]):
//! - a backing node (and what is derived from one record: pages, streams,
//!   `response.md`) shows the view's permission bits ([`Kind::perm`]: read-only) masked
//!   by the backing file's own mode, and the backing file's owner and group;
//! - a node derived from git or from the whole workspace (`agents/`, `marks/`, `names/`,
//!   `transcript.md`, `status`, the mount root) shows the view's bits masked by the
//!   workspace root's and `repo.git`'s modes, and the root's owner and group;
//! - a draft is its writer's: `0600`, owned by whoever created it.
//!
//! So a `0700` workspace of `0600` files shows `0500` directories and `0400` files,
//! its owner's, and another local user can read nothing. `--view-modes` shows the
//! view's fixed modes instead (records `0444`, directories `0555`, owned by the
//! daemon's user), for a shared setup that means every local user to read the view.
//!
//! `--depositors UID[:UID...]` lets those users write messages though the workspace
//! does not: the mount root and `inbox/` show `o+x`, each inbox directory `o+wx` and the
//! sticky bit (a depositor renames and removes only its own drafts), and the tree
//! refuses a `create` by any other user the `o+w` would let through ([`Modes::may_deposit`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{INBOX_DIR_PERM, Kind};
use crate::workspace::backing::Stat;

/// Who a node shows as its owner and group; `None` is the daemon's own user.
pub(crate) type Owner = Option<(u32, u32)>;

/// The bits `--depositors` adds to an inbox directory: sticky, and `o+wx`.
pub(crate) const DEPOSIT_DIR_BITS: u16 = 0o1003;
/// The bit it adds to the directories on the way to the inboxes: `o+x`.
pub(crate) const DEPOSIT_PATH_BITS: u16 = 0o001;

/// The mode and owner policy of one mount.
#[derive(Debug)]
pub(crate) struct Modes {
    /// `--view-modes`: the view's own bits, owned by the daemon's user.
    fixed: bool,
    /// `--depositors`: the users that may deposit whatever the workspace grants.
    depositors: Vec<u32>,
    /// The daemon's own user.
    uid: u32,
    /// The permission bits of the workspace root and `repo.git`, together.
    ws_mode: AtomicU32,
    /// The root's owner (high half) and group (low half).
    ws_owner: AtomicU64,
}

impl Default for Modes {
    fn default() -> Self {
        Self::masked()
    }
}

impl Modes {
    /// The default: what the workspace grants (module docs).
    pub(crate) fn masked() -> Self {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        Modes {
            fixed: false,
            depositors: Vec::new(),
            uid,
            ws_mode: AtomicU32::new(0o777),
            ws_owner: AtomicU64::new(u64::MAX),
        }
    }

    /// `--view-modes`: the view's fixed modes, owned by the daemon's user.
    pub(crate) fn fixed() -> Self {
        Modes {
            fixed: true,
            ..Self::masked()
        }
    }

    /// `--depositors`: `uids` may write messages into every inbox.
    pub(crate) fn with_depositors(mut self, uids: &[u32]) -> Self {
        self.depositors = uids.to_vec();
        self
    }

    /// Takes the workspace's grant from the `stat` of its root and of `repo.git`.
    pub(crate) fn learn_workspace(&self, root: &Stat, repo: Option<&Stat>) {
        let mode = root.mode & repo.map_or(0o7777, |r| r.mode) & 0o777;
        self.ws_mode.store(mode, Ordering::Relaxed);
        self.ws_owner.store(
            (u64::from(root.uid) << 32) | u64::from(root.gid),
            Ordering::Relaxed,
        );
    }

    /// The workspace root's owner, once learnt.
    fn ws_owner(&self) -> Owner {
        match self.ws_owner.load(Ordering::Relaxed) {
            u64::MAX => None,
            both => Some(((both >> 32) as u32, both as u32)),
        }
    }

    /// The bits and owner of a backing node of `kind` with `stat` `st`, or of a node
    /// derived from that one file.
    pub(crate) fn backing(&self, kind: Kind, st: &Stat) -> (u16, Owner) {
        if self.fixed {
            return (kind.perm(), None);
        }
        (
            kind.perm() & (st.mode & 0o777) as u16,
            Some((st.uid, st.gid)),
        )
    }

    /// The bits and owner of a node of `kind` derived from git or the whole workspace.
    pub(crate) fn derived(&self, kind: Kind) -> (u16, Owner) {
        if self.fixed {
            return (kind.perm(), None);
        }
        let mask = self.ws_mode.load(Ordering::Relaxed) as u16;
        (kind.perm() & mask, self.ws_owner())
    }

    /// `perm` with what `--depositors` adds to a directory on the way to the inboxes.
    pub(crate) fn on_the_way(&self, perm: u16) -> u16 {
        if self.depositors.is_empty() {
            perm
        } else {
            perm | DEPOSIT_PATH_BITS
        }
    }

    /// The bits of an inbox directory (`st`) that takes deposits: [`INBOX_DIR_PERM`]
    /// (masked by its own mode), with what `--depositors` adds.
    pub(crate) fn inbox(&self, st: &Stat) -> u16 {
        let perm = if self.fixed {
            INBOX_DIR_PERM
        } else {
            INBOX_DIR_PERM & (st.mode & 0o777) as u16
        };
        if self.depositors.is_empty() {
            perm
        } else {
            perm | DEPOSIT_DIR_BITS
        }
    }

    /// Whether user `uid` may create a message in an inbox directory owned by `owner`:
    /// always, unless `--depositors` opened the inboxes to others (the `o+w` it adds
    /// lets every user past the kernel's check); then only root, the daemon's user, the
    /// directory's owner and the depositors.
    pub(crate) fn may_deposit(&self, uid: u32, owner: u32) -> bool {
        self.depositors.is_empty()
            || uid == 0
            || uid == self.uid
            || uid == owner
            || self.depositors.contains(&uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mode: u32, uid: u32, gid: u32) -> Stat {
        Stat {
            dev: 1,
            ino: 2,
            mode,
            uid,
            gid,
            nlink: 1,
            size: 0,
            mtime: (0, 0),
            ctime: (0, 0),
            atime: (0, 0),
            born: None,
        }
    }

    #[test]
    fn a_node_never_shows_more_than_its_file_or_workspace_grants() {
        let m = Modes::masked();
        let file = stat(libc::S_IFREG | 0o600, 1000, 100);
        let dir = stat(libc::S_IFDIR | 0o700, 1000, 100);
        assert_eq!(m.backing(Kind::File, &file), (0o400, Some((1000, 100))));
        assert_eq!(m.backing(Kind::Dir, &dir), (0o500, Some((1000, 100))));
        // Group-readable records stay group-readable, never writable.
        let shared = stat(libc::S_IFREG | 0o664, 1000, 100);
        assert_eq!(m.backing(Kind::File, &shared).0, 0o444);
        // Virtual nodes take the root's and repo.git's bits together, and the root's owner.
        m.learn_workspace(&dir, Some(&stat(libc::S_IFDIR | 0o755, 0, 0)));
        assert_eq!(m.derived(Kind::File), (0o400, Some((1000, 100))));
        assert_eq!(m.derived(Kind::Dir), (0o500, Some((1000, 100))));
        m.learn_workspace(&stat(libc::S_IFDIR | 0o755, 7, 8), None);
        assert_eq!(m.derived(Kind::File), (0o444, Some((7, 8))));
        // --view-modes: the view's own bits, the daemon's user.
        let f = Modes::fixed();
        assert_eq!(f.backing(Kind::File, &file), (0o444, None));
        assert_eq!(f.derived(Kind::Dir), (0o555, None));
    }

    #[test]
    fn depositors_open_the_inboxes_and_only_to_themselves() {
        let m = Modes::masked();
        let inbox = stat(libc::S_IFDIR | 0o700, 1000, 100);
        assert_eq!((m.inbox(&inbox), m.on_the_way(0o500)), (0o700, 0o500));
        assert_eq!(m.inbox(&stat(libc::S_IFDIR | 0o777, 1, 1)), 0o755);
        assert_eq!(Modes::fixed().inbox(&inbox), 0o755);
        assert!(
            m.may_deposit(4242, 1000),
            "no depositors: the kernel decides"
        );
        let m = Modes::masked().with_depositors(&[1001, 1002]);
        assert_eq!(m.inbox(&inbox), 0o1703);
        assert_eq!(m.on_the_way(0o500), 0o501);
        for uid in [0, 1000, 1001, 1002, m.uid] {
            assert!(m.may_deposit(uid, 1000), "{uid}");
        }
        assert!(!m.may_deposit(4242, 1000));
    }
}
