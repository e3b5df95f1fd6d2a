//! The FUSE adapter: the only module that knows about `fuser`.
//!
//! Each handler turns a request into a question for the [`Tree`], and its answer into a
//! reply: inode numbers come from the [`InodeTable`], open files and listings live in
//! [`Handles`], and every refusal is answered with the tree's errno and logged once with
//! the path and the reason. A handler that panicked would take the mount down with it,
//! so each runs under [`guarded`], which turns a panic into EIO and a log line.

mod handles;
mod inodes;

pub use inodes::ROOT_INO;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, Notifier, OpenAccMode, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::tree::{Area, Attr, Child, Content, Kind, Node, Tree, TreeError};
use crate::watch::{Change, Watcher};
use crate::workspace::backing;
use handles::{Handle, Handles};
use inodes::InodeTable;

/// How long the kernel may trust a name or attributes under a watched backing directory:
/// long, because every change there is invalidated as it happens (see [`Invalidator`]).
pub const WATCHED_TTL: Duration = Duration::from_secs(3600);
/// How long it may trust everything else (git-derived nodes, the top level, directories
/// that could not be watched): short, so that changes show within a second.
pub const SHORT_TTL: Duration = Duration::from_millis(250);

/// How read-only opens of anything but a draft are answered: their close has nothing to
/// tell the daemon, so the kernel skips the `FLUSH` round trip (`grep -r`, `cat` and
/// `find -exec` pay one request per file instead of two).
const READ_ONLY: FopenFlags = FopenFlags::FOPEN_NOFLUSH;

/// How long the invalidation thread rests after applying a batch of changes.
const INVALIDATION_PAUSE: Duration = Duration::from_millis(2);

/// One entry of a directory reply.
enum Entry<'a> {
    Dot(&'static str),
    Child(&'a Child),
}

/// The most listings kept between the `readdir` calls that read them; past it they are
/// dropped (a reader mid-listing then gets a fresh one).
const MAX_LISTINGS: usize = 1024;

/// Kernel features asked for at `init`, each taken only if the kernel offers it.
const WANTED: [InitFlags; 4] = [
    // O_TRUNC arrives with the open, so that `> f` on a message just sent can start a
    // new one rather than being an open for writing (refused) followed by a truncate.
    InitFlags::FUSE_ATOMIC_O_TRUNC,
    // Listings carry attributes, so `ls -l` and `find` need no lookup per entry.
    InitFlags::FUSE_DO_READDIRPLUS,
    // A changed mtime or size drops cached pages: `tail -f` sees appended bytes.
    InitFlags::FUSE_AUTO_INVAL_DATA,
    // Lookups in one directory need not wait for each other.
    InitFlags::FUSE_PARALLEL_DIROPS,
];

/// The adapter's state, shared by the request threads and the [`Invalidator`].
pub struct State {
    tree: Arc<Tree>,
    inodes: InodeTable,
    handles: Handles,
    watcher: Option<Watcher>,
    /// Listings being read, by directory inode (see [`State::listing`]).
    listings: Mutex<HashMap<u64, Arc<Vec<Child>>>>,
    passthrough: AtomicBool,
    uid: u32,
    gid: u32,
}

pub struct Fs {
    state: Arc<State>,
}

impl std::ops::Deref for Fs {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

/// Runs a handler, answering EIO (through the dropped reply) if it panics.
fn guarded(op: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        log::error!("{op}: handler panicked; answered EIO");
    }
}

fn errno(e: &TreeError) -> Errno {
    Errno::from_i32(e.errno())
}

/// Logs a refusal once, at a level that fits it, and gives the errno to answer.
fn refuse(op: &str, e: &TreeError) -> Errno {
    if e.is_routine() {
        log::debug!("{op} {e}");
    } else {
        log::warn!("{op} {e} (errno {})", e.errno());
    }
    errno(e)
}

/// The refusal of an open past [`handles::MAX_OPEN`].
fn too_many_open(ino: INodeNo) -> TreeError {
    let e = std::io::Error::from_raw_os_error(libc::ENFILE);
    TreeError::Io(
        format!(
            "inode {}: {} files open through the mount",
            ino.0,
            handles::MAX_OPEN
        ),
        e,
    )
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    }
}

impl Fs {
    pub fn new(tree: Arc<Tree>) -> Self {
        let root_dev = tree.backing().lstat(Path::new("")).ok().map(|st| st.dev);
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let watcher = match Watcher::new(&tree.workspace().repo_dir()) {
            Ok(w) => {
                tree.refs().set_watched(true);
                Some(w)
            }
            Err(e) => {
                log::warn!("inotify unavailable ({e}); everything is re-read at short intervals");
                None
            }
        };
        Self {
            state: Arc::new(State {
                tree,
                inodes: InodeTable::new(root_dev),
                handles: Handles::default(),
                watcher,
                listings: Mutex::new(HashMap::new()),
                passthrough: AtomicBool::new(false),
                uid,
                gid,
            }),
        }
    }

    /// The part that turns changes on disk into kernel invalidations; start it with the
    /// session's notifier once the session exists.
    pub fn invalidator(&self) -> Invalidator {
        Invalidator {
            state: self.state.clone(),
        }
    }
}

impl State {
    /// Watches backing directory `node` before anything in it is answered.
    fn watch(&self, node: &Node) {
        if let (Node::Backing(rel), Some(w)) = (node, &self.watcher) {
            w.watch_backing(self.tree.backing(), rel);
        }
    }

    fn watched(&self, rel: &Path) -> bool {
        self.watcher.as_ref().is_some_and(|w| w.is_watched(rel))
    }

    /// How long the kernel may keep `node`'s name and attributes: long only when every
    /// change to them is reported, i.e. its directory (and, for a directory, itself) is
    /// watched.
    fn ttl(&self, node: &Node, attr: &Attr) -> Duration {
        let Node::Backing(rel) = node else {
            return SHORT_TTL;
        };
        // An inbox directory's listing also changes with drafts, which no watch reports;
        // its mtime says so, and the kernel must ask for it often.
        if attr.kind == Kind::Dir && Area::of(rel) == Area::Inbox {
            return SHORT_TTL;
        }
        let parent_watched = rel.parent().is_some_and(|p| self.watched(p));
        if parent_watched && (attr.kind != Kind::Dir || self.watched(rel)) {
            WATCHED_TTL
        } else {
            SHORT_TTL
        }
    }

    fn fuse_attr(&self, ino: u64, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            crtime: a.mtime,
            kind: file_type(a.kind),
            perm: a.perm,
            nlink: a.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn node(&self, ino: INodeNo) -> Result<Node, TreeError> {
        self.inodes
            .get(ino.0)
            .map(|(node, _)| node)
            .ok_or_else(|| TreeError::NotFound(format!("inode {}", ino.0)))
    }

    /// The attributes of `ino` now; `NotFound` when its path names something else.
    fn attr(&self, ino: INodeNo) -> Result<Attr, TreeError> {
        let (node, identity) = self
            .inodes
            .get(ino.0)
            .ok_or_else(|| TreeError::NotFound(format!("inode {}", ino.0)))?;
        let attr = self.tree.getattr(&node)?;
        if attr.identity != identity {
            return Err(TreeError::NotFound(node.path()));
        }
        Ok(attr)
    }

    /// The mount-relative path of `name` in directory `parent`, for log lines.
    fn path_of(&self, parent: INodeNo, name: &OsStr) -> String {
        match self.inodes.get(parent.0) {
            Some((node, _)) => node.join(name),
            None => name.to_string_lossy().into_owned(),
        }
    }

    fn read_only(&self, op: &str, path: String) -> Errno {
        refuse(op, &TreeError::ReadOnly(path))
    }

    fn list(&self, ino: INodeNo) -> Result<Arc<Vec<Child>>, TreeError> {
        let node = self.node(ino)?;
        self.watch(&node);
        let children = self.tree.list(&node)?;
        // Subdirectories are watched now, so that their entries (which carry them to the
        // kernel with readdirplus) may be cached for long: a walk then needs no lookups.
        for c in children.iter().filter(|c| c.attr.kind == Kind::Dir) {
            self.watch(&c.node);
        }
        Ok(Arc::new(children))
    }

    /// The listing a `readdir` at `offset` continues: taken afresh at offset 0 and kept
    /// for the calls that follow, until the end of the directory is read. Directories
    /// have no handles (see `opendir`), so listings are kept by inode.
    fn listing(&self, ino: INodeNo, offset: u64) -> Result<Arc<Vec<Child>>, TreeError> {
        if offset != 0
            && let Some(children) = self.listings.lock().get(&ino.0)
        {
            return Ok(children.clone());
        }
        let children = self.list(ino)?;
        let mut listings = self.listings.lock();
        if listings.len() >= MAX_LISTINGS {
            listings.clear();
        }
        listings.insert(ino.0, children.clone());
        Ok(children)
    }

    /// The listing of `ino` was read to its end.
    fn listed(&self, ino: INodeNo) {
        self.listings.lock().remove(&ino.0);
    }

    /// Feeds one `readdir` reply from `offset` on: `add(next_offset, entry)` returns true
    /// once the reply is full. Offsets: 1 is ".", 2 is "..", 3 + i is the i-th child.
    fn fill(
        &self,
        ino: INodeNo,
        offset: u64,
        mut add: impl FnMut(u64, Entry<'_>) -> bool,
    ) -> Result<(), TreeError> {
        let children = self.listing(ino, offset)?;
        let end = 2 + children.len() as u64;
        let mut next = offset;
        while next < end {
            let entry = match next {
                0 => Entry::Dot("."),
                1 => Entry::Dot(".."),
                n => Entry::Child(&children[(n - 2) as usize]),
            };
            if add(next + 1, entry) {
                break;
            }
            next += 1;
        }
        // The kernel reads on until a call returns nothing: that call ends the listing.
        if offset >= end {
            self.listed(ino);
        }
        Ok(())
    }
}

impl Filesystem for Fs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        for flag in WANTED {
            if let Err(missing) = config.add_capabilities(flag) {
                log::info!("kernel does not offer {missing:?}; going without");
            }
        }
        // Passthrough lets the kernel read plain records straight from the backing file.
        // The mount stacks on one filesystem, so a depth of 2 covers a backing tree that
        // is itself stacked once (overlayfs).
        let passthrough = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(2).is_ok();
        self.passthrough.store(passthrough, Ordering::Relaxed);
        log::info!(
            "record reads: {}",
            if passthrough {
                "kernel passthrough"
            } else {
                "served by the daemon (no passthrough in this kernel)"
            }
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guarded("lookup", || {
            let found = self.node(parent).and_then(|p| {
                self.watch(&p);
                self.tree.lookup(&p, name)
            });
            match found {
                Ok((node, attr)) => {
                    if attr.kind == Kind::Dir {
                        self.watch(&node);
                    }
                    let ino = self.inodes.lookup(&attr.identity, &node);
                    let ttl = self.ttl(&node, &attr);
                    reply.entry(&ttl, &self.fuse_attr(ino, &attr), Generation(0));
                }
                Err(e) => reply.error(refuse("lookup", &e)),
            }
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        guarded("getattr", || {
            // An open backing file answers for itself: `tail -f` polls fstat on its fd,
            // and a file renamed away under an open fd is still that file.
            if let Some(h) = fh.and_then(|fh| self.handles.get(fh.0))
                && let Handle {
                    content: Content::File(f),
                    ..
                } = &*h
            {
                match backing::fstat(f) {
                    Ok(st) => {
                        let attr = self.tree.backing_attr(&st);
                        let ttl = self
                            .node(ino)
                            .map(|n| self.ttl(&n, &attr))
                            .unwrap_or(SHORT_TTL);
                        return reply.attr(&ttl, &self.fuse_attr(ino.0, &attr));
                    }
                    Err(e) => {
                        let path = self.node(ino).map(|n| n.path()).unwrap_or_default();
                        return reply.error(refuse("getattr", &TreeError::io(path, e)));
                    }
                }
            }
            match self.attr(ino) {
                Ok(attr) => {
                    let ttl = self
                        .node(ino)
                        .map(|n| self.ttl(&n, &attr))
                        .unwrap_or(SHORT_TTL);
                    reply.attr(&ttl, &self.fuse_attr(ino.0, &attr))
                }
                Err(e) => reply.error(refuse("getattr", &e)),
            }
        })
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guarded("readlink", || {
            match self.node(ino).and_then(|n| self.tree.readlink(&n)) {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(refuse("readlink", &e)),
            }
        })
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        guarded("open", || {
            let node = match self.node(ino) {
                Ok(n) => n,
                Err(e) => return reply.error(refuse("open", &e)),
            };
            if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                return match self.tree.open_write(&node, flags.0 & libc::O_TRUNC != 0) {
                    Ok(content) => {
                        let Some(fh) = self.handles.insert(Handle {
                            content,
                            _passthrough: None,
                        }) else {
                            return reply.error(refuse("open", &too_many_open(ino)));
                        };
                        reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
                    }
                    Err(e) => reply.error(refuse("open for writing", &e)),
                };
            }
            match self.tree.open(&node) {
                Ok(Content::File(f)) => {
                    // A path that now names another file must not serve it through this
                    // inode: the kernel looks the name up again once its entry expires.
                    let attr = match backing::fstat(&f) {
                        Ok(st) => self.tree.backing_attr(&st),
                        Err(e) => {
                            return reply.error(refuse("open", &TreeError::io(node.path(), e)));
                        }
                    };
                    if Some(&attr.identity) != self.inodes.get(ino.0).map(|(_, id)| id).as_ref() {
                        return reply.error(refuse("open", &TreeError::NotFound(node.path())));
                    }
                    // Pages of a watched record stay cached across opens: every change
                    // to it is invalidated as it happens.
                    let keep = if self.ttl(&node, &attr) == WATCHED_TTL {
                        READ_ONLY | FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        READ_ONLY
                    };
                    let id = if self.passthrough.load(Ordering::Relaxed) {
                        match self.handles.backing_id(ino.0, || reply.open_backing(&f)) {
                            Ok(id) => Some(id),
                            Err(e) => {
                                log::warn!(
                                    "{}: passthrough refused ({e}); serving reads",
                                    node.path()
                                );
                                None
                            }
                        }
                    } else {
                        None
                    };
                    let Some(fh) = self.handles.insert(Handle {
                        content: Content::File(f),
                        _passthrough: id.clone(),
                    }) else {
                        return reply.error(refuse("open", &too_many_open(ino)));
                    };
                    match id {
                        Some(id) => reply.opened_passthrough(FileHandle(fh), READ_ONLY, &id),
                        None => reply.opened(FileHandle(fh), keep),
                    }
                }
                Ok(content) => {
                    // A draft changes under its own writes; never serve it from the cache.
                    // Its every close is told to the tree (only the writer's deposits).
                    let flags = match content {
                        Content::Draft(_) => FopenFlags::FOPEN_DIRECT_IO,
                        _ => READ_ONLY,
                    };
                    let Some(fh) = self.handles.insert(Handle {
                        content,
                        _passthrough: None,
                    }) else {
                        return reply.error(refuse("open", &too_many_open(ino)));
                    };
                    reply.opened(FileHandle(fh), flags);
                }
                Err(e) => reply.error(refuse("open", &e)),
            }
        })
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guarded("read", || {
            let Some(h) = self.handles.get(fh.0) else {
                return reply.error(Errno::EBADF);
            };
            match &h.content {
                Content::File(f) => {
                    let mut buf = vec![0u8; size as usize];
                    let mut filled = 0;
                    while filled < buf.len() {
                        match f.read_at(&mut buf[filled..], offset + filled as u64) {
                            Ok(0) => break,
                            Ok(n) => filled += n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                let path = self.node(ino).map(|n| n.path()).unwrap_or_default();
                                return reply.error(refuse("read", &TreeError::io(path, e)));
                            }
                        }
                    }
                    reply.data(&buf[..filled]);
                }
                Content::Bytes(b) => {
                    let start = (offset as usize).min(b.len());
                    let end = start.saturating_add(size as usize).min(b.len());
                    reply.data(&b[start..end]);
                }
                Content::Draft(d) => {
                    let st = d.state.lock();
                    let start = (offset as usize).min(st.buf.len());
                    let end = start.saturating_add(size as usize).min(st.buf.len());
                    reply.data(&st.buf[start..end]);
                }
                stream @ Content::Stream { .. } => {
                    match self.tree.read_stream(stream, offset, u64::from(size)) {
                        Ok(bytes) => reply.data(&bytes),
                        Err(e) => {
                            let path = self.node(ino).map(|n| n.path()).unwrap_or_default();
                            reply.error(refuse("read", &TreeError::Page(path, e)))
                        }
                    }
                }
            }
        })
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guarded("release", || {
            if let Some(h) = self.handles.remove(fh.0)
                && let Handle {
                    content: Content::Draft(_),
                    ..
                } = &*h
                && let Ok(node) = self.node(ino)
            {
                self.tree.release(&node);
            }
            reply.ok();
        })
    }

    /// Each `close(2)`: a draft with unsaved bytes is deposited now, so that the writer's
    /// `close` hears whether it worked.
    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let pid = req.pid();
        guarded("flush", || {
            match self.node(ino).and_then(|n| self.tree.flush(&n, Some(pid))) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(refuse("close", &e)),
            }
        })
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _d: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    /// Directories need no open: answering ENOSYS once makes the kernel skip `opendir`
    /// and `releasedir` from then on, and keep every listing in its cache
    /// (`FOPEN_CACHE_DIR`) until the directory's mtime changes or it is invalidated. Every
    /// directory here changes its mtime with its listing (see the tree), and watched ones
    /// are also invalidated as changes happen.
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guarded("readdir", || {
            let filled = self.fill(ino, offset, |next, entry| match entry {
                Entry::Dot(name) => reply.add(ino, next, FileType::Directory, name),
                Entry::Child(c) => {
                    let child = self.inodes.peek_or_insert(&c.attr.identity, &c.node);
                    reply.add(INodeNo(child), next, file_type(c.attr.kind), &c.name)
                }
            });
            match filled {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(refuse("readdir", &e)),
            }
        })
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        guarded("readdirplus", || {
            // The kernel skips "." and ".." in a readdirplus reply (it links neither, and
            // counts no lookup for them), so their attributes are never read: a
            // placeholder saves a stat per call.
            let dot_attr = self.fuse_attr(
                ino.0,
                &Attr {
                    kind: Kind::Dir,
                    size: 0,
                    perm: crate::tree::DIR_PERM,
                    nlink: 2,
                    mtime: SystemTime::UNIX_EPOCH,
                    ctime: SystemTime::UNIX_EPOCH,
                    atime: SystemTime::UNIX_EPOCH,
                    identity: crate::tree::Identity::Virtual(Box::new(Node::Root)),
                },
            );
            let filled = self.fill(ino, offset, |next, entry| match entry {
                Entry::Dot(name) => {
                    reply.add(ino, next, name, &SHORT_TTL, &dot_attr, Generation(0))
                }
                Entry::Child(c) => {
                    // Counted as a lookup up front (the entry normally reaches the kernel,
                    // which then counts one); taken back if the reply had no room for it.
                    let child = self.inodes.lookup(&c.attr.identity, &c.node);
                    let attr = self.fuse_attr(child, &c.attr);
                    // A size not known yet must be asked for at the first stat.
                    let ttl = if c.size_known {
                        self.ttl(&c.node, &c.attr)
                    } else {
                        Duration::ZERO
                    };
                    let full = reply.add(INodeNo(child), next, &c.name, &ttl, &attr, Generation(0));
                    if full {
                        self.inodes.forget(child, 1);
                    }
                    full
                }
            });
            match filled {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(refuse("readdirplus", &e)),
            }
        })
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guarded("statfs", || {
            let root = self.tree.workspace().root();
            match statvfs(root) {
                Ok(s) => reply.statfs(
                    s.f_blocks,
                    s.f_bfree,
                    s.f_bavail,
                    s.f_files,
                    s.f_ffree,
                    s.f_bsize as u32,
                    255,
                    s.f_frsize as u32,
                ),
                Err(e) => reply.error(refuse("statfs", &TreeError::io(".", e))),
            }
        })
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        guarded("access", || match self.attr(ino) {
            Ok(a) if mask.contains(AccessFlags::W_OK) && a.perm & 0o200 == 0 => {
                let e = self
                    .node(ino)
                    .map(|n| self.tree.refusal(&n))
                    .unwrap_or_else(|e| e);
                reply.error(refuse("access for writing", &e))
            }
            Ok(_) => reply.ok(),
            Err(e) => reply.error(refuse("access", &e)),
        })
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guarded("getxattr", || {
            let attrs = match self.node(ino).and_then(|n| self.tree.xattrs(&n)) {
                Ok(a) => a,
                Err(e) => return reply.error(refuse("getxattr", &e)),
            };
            match attrs.iter().find(|(k, _)| OsStr::new(k) == name) {
                None => reply.error(Errno::NO_XATTR),
                Some((_, v)) if size == 0 => reply.size(v.len() as u32),
                Some((_, v)) if v.len() > size as usize => reply.error(Errno::ERANGE),
                Some((_, v)) => reply.data(v),
            }
        })
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guarded("listxattr", || {
            let attrs = match self.node(ino).and_then(|n| self.tree.xattrs(&n)) {
                Ok(a) => a,
                Err(e) => return reply.error(refuse("listxattr", &e)),
            };
            let mut names = Vec::new();
            for (k, _) in &attrs {
                names.extend_from_slice(k.as_bytes());
                names.push(0);
            }
            if size == 0 {
                reply.size(names.len() as u32);
            } else if names.len() > size as usize {
                reply.error(Errno::ERANGE);
            } else {
                reply.data(&names);
            }
        })
    }

    // Everything below changes the tree, which is read-only: each answers EROFS and
    // logs the path it refused.

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guarded("setattr", || {
            let time = |t: Option<TimeOrNow>| {
                t.map(|t| match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                })
            };
            // Only a draft changes; owners are not kept (a message has no owner to keep).
            let done = self.node(ino).and_then(|node| {
                if let Some(size) = size {
                    self.tree.set_size(&node, size)?;
                }
                if mode.is_some() || atime.is_some() || mtime.is_some() {
                    self.tree
                        .set_meta(&node, time(atime), time(mtime), mode.map(|m| m as u16))?;
                }
                if size.is_none() && mode.is_none() && atime.is_none() && mtime.is_none() {
                    // chown: accepted on a draft, refused elsewhere.
                    self.tree.set_meta(&node, None, None, None)?;
                }
                self.attr(ino)
            });
            match done {
                Ok(attr) => reply.attr(&SHORT_TTL, &self.fuse_attr(ino.0, &attr)),
                Err(e) => reply.error(refuse("setattr", &e)),
            }
        })
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.read_only("mknod", self.path_of(parent, name)));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.read_only("mkdir", self.path_of(parent, name)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("unlink", || {
            match self.node(parent).and_then(|p| self.tree.unlink(&p, name)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(refuse("unlink", &e)),
            }
        })
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.read_only("rmdir", self.path_of(parent, name)));
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(self.read_only("symlink", self.path_of(parent, link_name)));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        guarded("rename", || {
            if flags.bits() != 0 {
                // RENAME_EXCHANGE/NOREPLACE/WHITEOUT: not for messages.
                let e = TreeError::Invalid(self.path_of(parent, name));
                return reply.error(refuse("rename", &e));
            }
            let done = self.node(parent).and_then(|p| {
                let np = self.node(newparent)?;
                self.tree.rename(&p, name, &np, newname)
            });
            match done {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(refuse("rename", &e)),
            }
        })
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(self.read_only("link", self.path_of(newparent, newname)));
    }

    /// Creating a file in `inbox/<id>/` starts a message (see [`crate::tree::drafts`]).
    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        guarded("create", || {
            let made = self
                .node(parent)
                .and_then(|p| self.tree.create(&p, name))
                .and_then(|(node, attr)| {
                    let content = self.tree.open_write(&node, false)?;
                    Ok((node, attr, content))
                });
            match made {
                Ok((node, attr, content)) => {
                    let ino = self.inodes.lookup(&attr.identity, &node);
                    let Some(fh) = self.handles.insert(Handle {
                        content,
                        _passthrough: None,
                    }) else {
                        self.inodes.forget(ino, 1);
                        return reply.error(refuse("create", &too_many_open(INodeNo(ino))));
                    };
                    let fattr = self.fuse_attr(ino, &attr);
                    reply.created(
                        &SHORT_TTL,
                        &fattr,
                        Generation(0),
                        FileHandle(fh),
                        FopenFlags::FOPEN_DIRECT_IO,
                    );
                }
                Err(e) => reply.error(refuse("create", &e)),
            }
        })
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let pid = req.pid();
        guarded("write", || {
            match self
                .node(ino)
                .and_then(|n| self.tree.write(&n, offset, data, pid))
            {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(refuse("write", &e)),
            }
        })
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self.node(ino) {
            // A message carries no attributes; saying so (rather than EROFS) lets
            // `cp -p` fall back to plain permissions.
            Ok(Node::Draft { .. }) => reply.error(Errno::from_i32(libc::ENOTSUP)),
            Ok(node) => reply.error(self.read_only("setxattr", node.path())),
            Err(e) => reply.error(refuse("setxattr", &e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        let path = self.node(ino).map(|n| n.path()).unwrap_or_default();
        reply.error(self.read_only("removexattr", path));
    }
}

fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: valid NUL-terminated path and a writable statvfs buffer.
    if unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs succeeded and filled `s`.
    Ok(unsafe { s.assume_init() })
}

/// Turns the watcher's changes into kernel invalidations, on a thread of its own: an
/// invalidation sent from inside a request handler can deadlock against the kernel.
pub struct Invalidator {
    state: Arc<State>,
}

impl Invalidator {
    pub fn spawn(self, notifier: Notifier) {
        if self.state.watcher.is_none() {
            return;
        }
        let started = std::thread::Builder::new()
            .name("invalidate".into())
            .spawn(move || self.run(notifier));
        if let Err(e) = started {
            log::error!("could not start the invalidation thread: {e}");
        }
    }

    fn run(self, notifier: Notifier) {
        let Some(watcher) = self.state.watcher.as_ref() else {
            return;
        };
        loop {
            let changes = match watcher.read_changes() {
                Ok(c) => c,
                Err(e) => {
                    log::error!("inotify read failed ({e}); invalidation stops");
                    return;
                }
            };
            for change in changes {
                self.apply(&notifier, change);
            }
            // A burst of changes (a harness streaming a record, a run of deposits) then
            // wakes this thread once per pause rather than once per event; a lone change
            // is still applied at once.
            std::thread::sleep(INVALIDATION_PAUSE);
        }
    }

    fn apply(&self, n: &Notifier, change: Change) {
        let inodes = &self.state.inodes;
        // ENOENT from the kernel only means it had nothing cached; other failures mean the
        // session is going away.
        let quiet = |r: std::io::Result<()>| {
            if let Err(e) = r
                && e.raw_os_error() != Some(libc::ENOENT)
            {
                log::debug!("invalidation: {e}");
            }
        };
        match change {
            Change::Entry { dir, name, renamed } => {
                let dir_node = Node::Backing(dir.clone());
                if renamed && let Some(d) = inodes.ino_of(&dir_node) {
                    quiet(n.inval_entry(INodeNo(d), &name));
                    quiet(n.inval_inode(INodeNo(d), 0, 0));
                }
                if let Some(c) = inodes.ino_of(&Node::Backing(dir.join(&name))) {
                    quiet(n.inval_inode(INodeNo(c), 0, 0));
                }
            }
            Change::Gone(dir) => {
                if let Some(d) = inodes.ino_of(&Node::Backing(dir.clone())) {
                    quiet(n.inval_inode(INodeNo(d), 0, 0));
                }
                if let (Some(parent), Some(name)) = (dir.parent(), dir.file_name())
                    && let Some(p) = inodes.ino_of(&Node::Backing(parent.to_path_buf()))
                {
                    quiet(n.inval_entry(INodeNo(p), name));
                }
            }
            Change::Refs => self.state.tree.refs().invalidate(),
            Change::Overflow => {
                log::warn!("inotify queue overflowed; invalidating every cached record");
                self.state.tree.refs().invalidate();
                for (ino, node) in inodes.backing_nodes() {
                    quiet(n.inval_inode(INodeNo(ino), 0, 0));
                    if let Node::Backing(rel) = &node
                        && let (Some(parent), Some(name)) = (rel.parent(), rel.file_name())
                        && let Some(p) = inodes.ino_of(&Node::Backing(parent.to_path_buf()))
                    {
                        quiet(n.inval_entry(INodeNo(p), name));
                    }
                }
            }
        }
    }
}
