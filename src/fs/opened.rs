//! Carrying out an open the tree decided: the kernel's open flags, a handle for the
//! content, and passthrough when the tree allows it and the kernel offers it.

use fuser::{FileHandle, FopenFlags, INodeNo, ReplyOpen};
use std::sync::atomic::Ordering;

use super::handles::Io;
use super::{State, refuse};
use crate::tree::{Content, Opened};

/// The kernel's open flags for what the tree decided.
pub(super) fn open_flags(o: &Opened) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if o.direct_io {
        f |= FopenFlags::FOPEN_DIRECT_IO;
    }
    if o.keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if o.no_flush {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    f
}

impl State {
    /// Carries out an open the tree decided: a handle for its content, and passthrough
    /// when the tree allows it and the kernel offers it.
    pub(super) fn reply_opened(&self, ino: INodeNo, opened: Opened, reply: ReplyOpen) {
        let flags = open_flags(&opened);
        let io = match &opened.content {
            Content::File(f) => {
                let wanted = opened.passthrough && self.passthrough.load(Ordering::Relaxed);
                Some(self.handles.io(ino.0, wanted, || {
                    reply
                        .open_backing(f)
                        .map_err(|e| {
                            log::warn!(
                                "{}: passthrough refused ({e}); serving reads",
                                self.path(ino)
                            )
                        })
                        .ok()
                }))
            }
            _ => None,
        };
        match self.open_handle(ino, opened.content, io.clone()) {
            Ok(fh) => match io.as_deref().and_then(Io::backing_id) {
                // The kernel reads the backing file itself: its pages are the file's.
                Some(id) => reply.opened_passthrough(
                    FileHandle(fh),
                    flags - FopenFlags::FOPEN_KEEP_CACHE,
                    id,
                ),
                None => reply.opened(FileHandle(fh), flags),
            },
            Err(e) => reply.error(refuse("open", &e)),
        }
    }
}
