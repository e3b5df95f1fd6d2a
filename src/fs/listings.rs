//! Listings being read: a directory's children, taken at the `readdir` at offset 0 and
//! kept for the calls that continue it, by reader (directories have no handles, see
//! `opendir`, so a listing is kept per directory and reading thread).
//!
//! Bounded in count ([`MAX_LISTINGS`]) and in the entries held together
//! ([`MAX_LISTED_ENTRIES`]): a partial reader of a huge directory (a `readdir` that never
//! reads to the end) would otherwise keep its whole listing, and a thousand of them a
//! thousand. Past either bound the listings taken longest ago give way; a reader whose
//! listing went gets a fresh one at its next call.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::tree::Child;

/// The most listings kept at once.
pub(crate) const MAX_LISTINGS: usize = 1024;
/// The most entries the kept listings hold together (about 200 bytes each); a single
/// listing larger than this is still kept, alone.
pub(crate) const MAX_LISTED_ENTRIES: usize = 128 * 1024;

/// Whose listing a `readdir` continues: the directory's inode and the reading thread.
pub(crate) type Reader = (u64, u32);

#[derive(Default)]
pub(crate) struct Listings {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    by_reader: HashMap<Reader, (u64, Arc<Vec<Child>>)>,
    /// Entries of all listings kept.
    entries: usize,
    /// The age stamp of the next listing kept.
    next: u64,
}

impl Listings {
    /// The listing `reader` is reading, if it is still kept.
    pub(crate) fn get(&self, reader: Reader) -> Option<Arc<Vec<Child>>> {
        self.kept
            .lock()
            .by_reader
            .get(&reader)
            .map(|(_, l)| l.clone())
    }

    /// Keeps `listing` for `reader`, letting the oldest others go to stay within the
    /// bounds.
    pub(crate) fn keep(&self, reader: Reader, listing: Arc<Vec<Child>>) {
        let mut k = self.kept.lock();
        k.remove(reader);
        while !k.by_reader.is_empty()
            && (k.by_reader.len() >= MAX_LISTINGS || k.entries + listing.len() > MAX_LISTED_ENTRIES)
        {
            let oldest = k
                .by_reader
                .iter()
                .min_by_key(|(_, (age, _))| *age)
                .map(|(r, _)| *r);
            match oldest {
                Some(r) => k.remove(r),
                None => break,
            }
        }
        let age = k.next;
        k.next += 1;
        k.entries += listing.len();
        k.by_reader.insert(reader, (age, listing));
    }

    /// `reader` read its listing to the end.
    pub(crate) fn done(&self, reader: Reader) {
        self.kept.lock().remove(reader);
    }

    /// Listings and entries kept now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let k = self.kept.lock();
        (k.by_reader.len(), k.entries)
    }
}

impl Kept {
    fn remove(&mut self, reader: Reader) {
        if let Some((_, l)) = self.by_reader.remove(&reader) {
            self.entries -= l.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{Attr, Identity, Kind, Node};
    use std::time::SystemTime;

    fn listing(n: usize) -> Arc<Vec<Child>> {
        let attr = Attr {
            kind: Kind::File,
            size: 0,
            perm: 0o444,
            nlink: 1,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            atime: SystemTime::UNIX_EPOCH,
            identity: Identity::Virtual(Node::Root),
            owner: None,
        };
        Arc::new(
            (0..n)
                .map(|i| Child::new(format!("f{i}"), Node::Root, attr.clone()))
                .collect(),
        )
    }

    #[test]
    fn partial_readers_of_huge_directories_hold_a_bounded_total() {
        let l = Listings::default();
        // A thousand readers each stopping partway through a 10,000-entry directory.
        for pid in 0..1000 {
            l.keep((7, pid), listing(10_000));
            let (count, entries) = l.held();
            assert!(
                entries <= MAX_LISTED_ENTRIES,
                "{entries} entries in {count}"
            );
        }
        // The newest are kept, the oldest went (and get a fresh one when they go on).
        assert!(l.get((7, 999)).is_some());
        assert!(l.get((7, 0)).is_none());
        assert_eq!(l.held().1, MAX_LISTED_ENTRIES / 10_000 * 10_000);
        // One larger than the whole budget is kept alone; reading to the end frees it.
        l.keep((8, 1), listing(MAX_LISTED_ENTRIES + 1));
        assert_eq!(l.held(), (1, MAX_LISTED_ENTRIES + 1));
        l.done((8, 1));
        assert_eq!(l.held(), (0, 0));
        // Small listings are bounded in number.
        for pid in 0..(MAX_LISTINGS as u32 + 10) {
            l.keep((9, pid), listing(1));
        }
        assert_eq!(l.held(), (MAX_LISTINGS, MAX_LISTINGS));
        // A reader starting over replaces its own listing.
        l.keep((9, 5000), listing(3));
        l.keep((9, 5000), listing(2));
        assert_eq!(l.get((9, 5000)).map(|x| x.len()), Some(2));
    }
}
