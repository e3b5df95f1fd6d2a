//! Open handles: what each `open`/`opendir` gave the kernel, until its release.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::tree::{Child, Content};

/// What a file handle number stands for.
pub enum Handle {
    /// An open file, read from its content.
    File(Content),
    /// A directory listing taken at `opendir`, so that offsets stay meaningful across
    /// the several `readdir` calls one listing takes.
    Dir(Arc<Vec<Child>>),
}

#[derive(Default)]
pub struct Handles {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Handle>>>,
}

impl Handles {
    pub fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.open.lock().insert(fh, Arc::new(h));
        fh
    }

    pub fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        self.open.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        self.open.lock().remove(&fh)
    }
}
