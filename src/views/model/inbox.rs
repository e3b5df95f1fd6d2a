//! An agent's inbox as the model holds it: the deposits the drain would accept, each
//! with its sender, its mtime and the `deposited_at:` of its frontmatter.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use super::{Scanner, key, ns};
use crate::workspace::INBOX_DIR;
use crate::workspace::backing::Stat;
use crate::workspace::clock::parse_utc;
use crate::workspace::inbox::pending_sender;

/// How much of a deposit is read for its frontmatter.
const DEPOSIT_HEAD_BYTES: usize = 1024;

/// An inbox's pending deposits, by (file name, mtime in ns).
pub(crate) type Inbox = BTreeMap<(String, i128), Pending>;

/// A pending deposit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) sender: String,
    /// Seconds since the epoch.
    pub(crate) mtime: i64,
    /// Its inode: with its name, what a deposit through the mount is known by.
    pub(crate) ino: u64,
    /// Its `deposited_at:`, in seconds, when the frontmatter has one.
    pub(crate) deposited_at: Option<i64>,
}

impl Scanner {
    pub(super) fn pending(&mut self, id: &str, st: Option<Stat>) -> Inbox {
        let rel = Path::new(INBOX_DIR).join(id);
        let Some(st) = st else {
            self.inboxes.remove(id);
            return BTreeMap::new();
        };
        if let Some((k, p)) = self.inboxes.get(id)
            && *k == key(&st)
        {
            return p.clone();
        }
        let old = self.inboxes.remove(id).map(|(_, p)| p).unwrap_or_default();
        let mut out = BTreeMap::new();
        for (name, fst) in self.backing.list(&rel).unwrap_or_default() {
            let Ok(name) = name.into_string() else {
                continue;
            };
            let Some(sender) = pending_sender(&name) else {
                continue;
            };
            if !fst.is_file() {
                continue;
            }
            let k = (name.clone(), ns(fst.mtime));
            let p = match old.get(&k) {
                Some(p) => p.clone(),
                None => Pending {
                    sender: sender.to_string(),
                    mtime: fst.mtime.0,
                    ino: fst.ino,
                    deposited_at: self.deposited_at(&rel.join(&name)),
                },
            };
            out.insert(k, p);
        }
        self.inboxes.insert(id.to_string(), (key(&st), out.clone()));
        out
    }

    fn deposited_at(&self, rel: &Path) -> Option<i64> {
        let (f, _) = self.backing.open_file(rel).ok()?;
        let mut head = Vec::with_capacity(DEPOSIT_HEAD_BYTES);
        f.take(DEPOSIT_HEAD_BYTES as u64)
            .read_to_end(&mut head)
            .ok()?;
        deposited_at(&String::from_utf8_lossy(&head))
    }
}

/// The `deposited_at:` of a deposit's frontmatter, in seconds.
pub(crate) fn deposited_at(text: &str) -> Option<i64> {
    crate::workspace::inbox::frontmatter_field(text, "deposited_at")
        .and_then(|v| parse_utc(v.trim()))
}
