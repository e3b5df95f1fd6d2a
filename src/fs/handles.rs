//! Open handles: what each `open`/`opendir` gave the kernel, until its release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use fuser::BackingId;
use parking_lot::Mutex;

use crate::tree::{Content, MAX_OPEN};

/// What a file handle number stands for: an open file, read from its content.
pub(crate) struct Handle {
    pub(crate) content: Content,
    /// Keeps the inode's io mode (and for passthrough the kernel's reference to the
    /// backing file) while the handle is open; only held, never read.
    pub(crate) _io: Option<Arc<Io>>,
}

/// How the kernel reads an inode that is open: straight from the backing file, or
/// through the daemon and the page cache. The kernel holds every open of an inode to
/// the mode of the opens already there (an open asking the other mode fails with `EIO`,
/// see `fuse_file_io_open`), so the mode of the first open stands until the last one
/// is released, whatever the tree would choose for a later open (a record that grew
/// past [`crate::tree::PASSTHROUGH_BYTES`] while held, or shrank below it). Every
/// handle open on an inode shares one `Arc<Io>`.
pub(crate) enum Io {
    Passthrough(BackingId),
    Cached,
}

impl Io {
    pub(crate) fn backing_id(&self) -> Option<&BackingId> {
        match self {
            Io::Passthrough(id) => Some(id),
            Io::Cached => None,
        }
    }
}

/// The io mode of each inode open for its backing file, alive while a handle holds it.
#[derive(Default)]
struct Modes {
    by_ino: HashMap<u64, Weak<Io>>,
    /// How many entries were left by the last sweep of the dead ones: the next sweep
    /// waits until the map has doubled, so that sweeping costs each open O(1).
    swept: usize,
}

#[derive(Default)]
pub(crate) struct Handles {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Handle>>>,
    modes: Mutex<Modes>,
}

impl Handles {
    /// A new handle number for `h`; `None` when [`MAX_OPEN`] are open already.
    pub(crate) fn insert(&self, h: Handle) -> Option<u64> {
        let mut open = self.open.lock();
        if open.len() >= MAX_OPEN {
            return None;
        }
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        open.insert(fh, Arc::new(h));
        Some(fh)
    }

    /// How many are open.
    pub(crate) fn len(&self) -> usize {
        self.open.lock().len()
    }

    pub(crate) fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        self.open.lock().get(&fh).cloned()
    }

    pub(crate) fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        self.open.lock().remove(&fh)
    }

    /// The io mode for a new open of `ino`'s backing file: the mode of the opens held on
    /// it, or else passthrough through a backing id from `make` when `passthrough` asks
    /// for it and `make` gives one, or else cached.
    pub(crate) fn io(
        &self,
        ino: u64,
        passthrough: bool,
        make: impl FnOnce() -> Option<BackingId>,
    ) -> Arc<Io> {
        let mut modes = self.modes.lock();
        if let Some(io) = modes.by_ino.get(&ino).and_then(Weak::upgrade) {
            return io;
        }
        let io = Arc::new(match passthrough.then(make).flatten() {
            Some(id) => Io::Passthrough(id),
            None => Io::Cached,
        });
        modes.by_ino.insert(ino, Arc::downgrade(&io));
        if modes.by_ino.len() > 2 * modes.swept.max(32) {
            modes.by_ino.retain(|_, w| w.strong_count() > 0);
            modes.swept = modes.by_ino.len();
        }
        io
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_takes_the_mode_held_on_its_inode_and_a_fresh_one_after_the_last_release() {
        let h = Handles::default();
        let held = h.io(7, false, || None);
        assert!(held.backing_id().is_none());
        // Held cached: an open that would pass through is cached too, and never asks.
        let again = h.io(7, true, || panic!("a backing file asked for while cached"));
        assert!(Arc::ptr_eq(&held, &again));
        drop((held, again));
        let mut asked = false;
        let fresh = h.io(7, true, || {
            asked = true;
            None
        });
        assert!(asked, "the tree's choice applies once nothing is held");
        assert!(fresh.backing_id().is_none());
    }

    #[test]
    fn dead_modes_are_swept_as_the_map_grows() {
        let h = Handles::default();
        let kept = h.io(0, false, || None);
        for ino in 1..1000 {
            h.io(ino, false, || None);
        }
        let modes = h.modes.lock();
        assert!(modes.by_ino.len() <= 65, "{}", modes.by_ino.len());
        assert!(modes.by_ino.get(&0).is_some_and(|w| w.strong_count() > 0));
        drop(kept);
    }
}
