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
    /// Keeps the inode's io mode (and for passthrough the kernel's reference to the
    /// backing file) while the handle is open; only held, never read.
    pub _io: Option<Io>,
}

/// How the kernel reads an inode that is open: straight from the backing file, or
/// through the daemon and the page cache. The kernel holds every open of an inode to
/// the mode of the opens already there (an open asking the other mode fails with `EIO`,
/// see `fuse_file_io_open`), so the mode of the first open stands until the last one
/// is released, whatever the tree would choose for a later open (a record that grew
/// past [`crate::tree::PASSTHROUGH_BYTES`] while held, or shrank below it).
#[derive(Clone)]
pub enum Io {
    Passthrough(Arc<BackingId>),
    Cached(Arc<CachedIo>),
}

/// The token that cached opens of one inode share.
pub struct CachedIo;

/// An inode's io mode, alive while some handle holds its [`Io`].
enum Mode {
    Passthrough(Weak<BackingId>),
    Cached(Weak<CachedIo>),
}

impl Mode {
    fn upgrade(&self) -> Option<Io> {
        match self {
            Mode::Passthrough(w) => w.upgrade().map(Io::Passthrough),
            Mode::Cached(w) => w.upgrade().map(Io::Cached),
        }
    }

    fn alive(&self) -> bool {
        match self {
            Mode::Passthrough(w) => w.strong_count() > 0,
            Mode::Cached(w) => w.strong_count() > 0,
        }
    }

    fn of(io: &Io) -> Mode {
        match io {
            Io::Passthrough(id) => Mode::Passthrough(Arc::downgrade(id)),
            Io::Cached(c) => Mode::Cached(Arc::downgrade(c)),
        }
    }
}

#[derive(Default)]
pub struct Handles {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Handle>>>,
    /// The io mode of each inode open for its backing file.
    modes: Mutex<HashMap<u64, Mode>>,
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

    /// The io mode for a new open of `ino`'s backing file: the mode of the opens held on
    /// it, or else passthrough through a backing id from `make` when `passthrough` asks
    /// for it and `make` gives one, or else cached.
    pub fn io(&self, ino: u64, passthrough: bool, make: impl FnOnce() -> Option<BackingId>) -> Io {
        let mut modes = self.modes.lock();
        if let Some(io) = modes.get(&ino).and_then(Mode::upgrade) {
            return io;
        }
        let io = match passthrough.then(make).flatten() {
            Some(id) => Io::Passthrough(Arc::new(id)),
            None => Io::Cached(Arc::new(CachedIo)),
        };
        modes.insert(ino, Mode::of(&io));
        modes.retain(|_, m| m.alive());
        io
    }
}
