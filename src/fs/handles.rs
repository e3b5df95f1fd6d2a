//! Open handles: what each `open`/`opendir` gave the kernel, until its release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use fuser::BackingId;
use parking_lot::Mutex;

use crate::tree::{Content, MAX_OPEN};

/// What a file handle number stands for: an open file, read from its content.
pub struct Handle {
    pub content: Content,
    /// Keeps the kernel's reference to the backing file alive while the handle is open
    /// (it is only held, never read).
    pub _passthrough: Option<Arc<BackingId>>,
}

#[derive(Default)]
pub struct Handles {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Handle>>>,
    /// One kernel backing id per inode at a time, shared by every handle open on it.
    backing_ids: Mutex<HashMap<u64, Weak<BackingId>>>,
}

impl Handles {
    /// A new handle number for `h`; `None` when [`MAX_OPEN`] are open already.
    pub fn insert(&self, h: Handle) -> Option<u64> {
        let mut open = self.open.lock();
        if open.len() >= MAX_OPEN {
            return None;
        }
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        open.insert(fh, Arc::new(h));
        Some(fh)
    }

    pub fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        self.open.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        self.open.lock().remove(&fh)
    }

    /// The backing id open for `ino`, or a new one from `make`.
    pub fn backing_id(
        &self,
        ino: u64,
        make: impl FnOnce() -> std::io::Result<BackingId>,
    ) -> std::io::Result<Arc<BackingId>> {
        let mut ids = self.backing_ids.lock();
        if let Some(id) = ids.get(&ino).and_then(Weak::upgrade) {
            return Ok(id);
        }
        let id = Arc::new(make()?);
        ids.insert(ino, Arc::downgrade(&id));
        ids.retain(|_, w| w.strong_count() > 0);
        Ok(id)
    }
}
