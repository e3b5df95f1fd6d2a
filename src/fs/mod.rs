//! The FUSE adapter: the only module that knows about `fuser`.
//!
//! Each handler turns a request into a question for the [`Tree`], and its answer into a
//! reply: inode numbers come from the [`InodeTable`], open files and listings live in
//! [`Handles`], and every refusal is answered with the tree's errno and logged once with
//! the path and the reason. A handler that panicked would take the mount down with it,
//! so each runs under [`State::guarded`], which turns a panic into EIO and a log line
//! (and logs a handler slower than [`SLOW_REQUEST`]).

mod acts;
mod handles;
mod inodes;
mod invalidate;
mod listings;
mod opened;

use opened::open_flags;

pub(crate) use inodes::ROOT_INO;
pub(crate) use invalidate::Invalidator;

use std::ffi::OsStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::home::{Space, SpaceClosing, WaitingClose};
use crate::tree::{
    Attr, Child, Closer, Content, ErrorKind, Identity, Kind, Node, OpenMode, SHORT_TTL, SPAWN_POLL,
    Tree, TreeError, Writer, Writing,
};
use handles::{Handle, Handles, Io};
use inodes::InodeTable;
use listings::{Listings, Reader};

/// One entry of a directory reply.
enum Entry<'a> {
    Dot(&'static str),
    Child(&'a Child),
}

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
pub(crate) struct State {
    /// What the mount serves: one workspace's tree, or a home of many.
    space: Space,
    inodes: InodeTable,
    handles: Handles,
    /// Listings being read, by reader (see [`State::listing`]).
    listings: Listings,
    passthrough: AtomicBool,
    /// Closes waiting for spawned children now ([`State::wait_for_spawns`]).
    spawn_waits: Arc<AtomicUsize>,
    uid: u32,
    gid: u32,
}

/// The adapter; a clone is another handle on the same state.
#[derive(Clone)]
pub(crate) struct Fs {
    state: Arc<State>,
}

impl std::ops::Deref for Fs {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

pub use crate::SLOW_REQUEST;
/// What a slow handler's log line says before its milliseconds (the soak reads them).
pub const SLOW_LOG_MARK: &str = ": slow: answered in ";

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

/// The directory `parent` when entry `c` is one the kernel may be asked to forget: a
/// file the tree can name again ([`Node::entry_name`]), not a directory.
fn forgettable(parent: u64, c: &Child) -> Option<u64> {
    (c.attr.kind != Kind::Dir && c.node.entry_name().is_some()).then_some(parent)
}

/// Answers a close with how it went.
fn answer_close(reply: ReplyEmpty, r: Result<(), TreeError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(refuse("close", &e)),
    }
}

/// The most closes waiting for spawned children at once, each on a thread of its own
/// ([`State::wait_for_spawns`]).
pub(crate) const MAX_SPAWN_WAITS: usize = 64;

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    }
}

impl Fs {
    pub(crate) fn new(space: Space) -> Self {
        let root_dev = std::fs::metadata(space.root()).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.dev()
        });
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Self {
            state: Arc::new(State {
                space,
                inodes: InodeTable::new(root_dev),
                handles: Handles::default(),
                listings: Listings::default(),
                passthrough: AtomicBool::new(false),
                spawn_waits: Arc::new(AtomicUsize::new(0)),
                uid,
                gid,
            }),
        }
    }

    /// What the daemon holds for the kernel, for [`crate::mount`]'s census line.
    pub(crate) fn census(&self) -> String {
        format!(
            "{} inode numbers, {} open handles",
            self.inodes.len(),
            self.handles.len()
        )
    }

    /// Workspace `ws` of a home has gone: the kernel forgets its entry and every inode
    /// under it, so nothing is served from its cache (on a thread of its own: an
    /// invalidation sent from a request handler can deadlock against the kernel).
    pub(crate) fn forget_workspace(&self, ws: crate::home::WsKey, notifier: fuser::Notifier) {
        let state = self.state.clone();
        let run = move || {
            let mine = |n: &Node| {
                matches!(n, Node::Home(h) if matches!(&**h,
                    crate::tree::HomeNode::In { ws: w, .. } if *w == ws))
            };
            for (ino, _) in state.inodes.nodes_where(mine) {
                let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
            }
            let (parent, name) = match ws.rsplit_once('/') {
                Some((shelf, name)) => (
                    state
                        .inodes
                        .ino_of(&Node::Home(Arc::new(crate::tree::HomeNode::Shelf(
                            crate::home::layout::shelf_name(shelf),
                        )))),
                    name,
                ),
                None => (Some(ROOT_INO), &*ws),
            };
            if let Some(p) = parent {
                let _ = notifier.inval_entry(INodeNo(p), OsStr::new(name));
                let _ = notifier.inval_inode(INodeNo(p), 0, 0);
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("invalidate-gone".into())
            .spawn(run)
        {
            log::warn!("no thread to invalidate a workspace that has gone ({e})");
        }
    }

    /// The part that turns changes on disk in `tree` into kernel invalidations; start it
    /// with the session's notifier once the session exists. `ws`: where the tree shows on
    /// a home mount.
    pub(crate) fn invalidator(
        &self,
        tree: Arc<Tree>,
        ws: Option<crate::home::WsKey>,
    ) -> Invalidator {
        Invalidator {
            state: self.state.clone(),
            tree,
            ws,
        }
    }
}

impl State {
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
            uid: a.owner.map_or(self.uid, |(uid, _)| uid),
            gid: a.owner.map_or(self.gid, |(_, gid)| gid),
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The node `ino` stands for, and what it was when the kernel learnt it.
    fn node(&self, ino: INodeNo) -> Result<(Node, Identity), TreeError> {
        self.inodes
            .get(ino.0)
            .ok_or_else(|| TreeError::not_found(format!("inode {}", ino.0)))
    }

    /// Runs a handler for a request on `ino`, answering EIO (through the dropped reply)
    /// if it panics, and logging it with its path if it took [`SLOW_REQUEST`] or more.
    fn guarded(&self, op: &str, ino: INodeNo, f: impl FnOnce()) {
        let at = Instant::now();
        crate::busy::served(at);
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            log::error!("{op} {}: handler panicked; answered EIO", self.path(ino));
        }
        let took = at.elapsed();
        if took >= SLOW_REQUEST {
            log::warn!(
                "{op} {}{SLOW_LOG_MARK}{} ms",
                self.path(ino),
                took.as_millis()
            );
        }
    }

    /// The mount-relative path of `ino`, for log lines.
    fn path(&self, ino: INodeNo) -> String {
        self.node(ino).map(|(n, _)| n.path()).unwrap_or_default()
    }

    /// The mount-relative path of `name` in directory `parent`, for log lines.
    fn path_of(&self, parent: INodeNo, name: &OsStr) -> String {
        match self.inodes.get(parent.0) {
            Some((node, _)) => node.join(name),
            None => name.to_string_lossy().into_owned(),
        }
    }

    fn read_only(&self, op: &str, path: String) -> Errno {
        refuse(op, &TreeError::read_only(path))
    }

    /// A handle for `content`; `ENFILE` past [`crate::tree::MAX_OPEN`].
    fn open_handle(
        &self,
        ino: INodeNo,
        content: Content,
        io: Option<Arc<Io>>,
    ) -> Result<u64, TreeError> {
        let fh = self
            .handles
            .insert(Handle { content, _io: io })
            .ok_or_else(|| TreeError::new(self.path(ino), ErrorKind::TooManyOpen))?;
        self.inodes.opened(ino.0);
        Ok(fh)
    }

    /// Carries a close that waits for spawned children ([`crate::tree::Closing::Waiting`]) on a thread
    /// of its own, which answers it: the wait is the closing writer's, and no request
    /// thread sleeps through it. Past [`MAX_SPAWN_WAITS`] of them at once, or without a
    /// thread, the close is decided now with what it sees (the last close then sends).
    fn wait_for_spawns(&self, mut p: WaitingClose, reply: ReplyEmpty) {
        let started = self
            .spawn_waits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_SPAWN_WAITS).then_some(n + 1)
            })
            .is_ok();
        if !started {
            log::debug!("{MAX_SPAWN_WAITS} closes wait for spawns already; deciding this one now");
            return answer_close(reply, p.poll(true).unwrap_or(Ok(())));
        }
        let count = self.spawn_waits.clone();
        let waiting = Arc::new(parking_lot::Mutex::new(Some((p, reply))));
        let theirs = waiting.clone();
        let spawned = std::thread::Builder::new()
            .name("litanyfs-close".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if let Some((mut p, reply)) = theirs.lock().take() {
                    let r = loop {
                        std::thread::sleep(SPAWN_POLL);
                        if let Some(r) = p.poll(false) {
                            break r;
                        }
                    };
                    answer_close(reply, r);
                }
                count.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.spawn_waits.fetch_sub(1, Ordering::AcqRel);
            log::warn!("no thread for a close waiting for spawns ({e}); deciding it now");
            if let Some((mut p, reply)) = waiting.lock().take() {
                answer_close(reply, p.poll(true).unwrap_or(Ok(())));
            }
        }
    }

    /// The listing a `readdir` at `offset` continues: taken afresh at offset 0 and kept
    /// for the calls that follow, until the end of the directory is read.
    fn listing(&self, reader: Reader, offset: u64) -> Result<Arc<Vec<Child>>, TreeError> {
        if offset != 0
            && let Some(children) = self.listings.get(reader)
        {
            return Ok(children);
        }
        let (node, _) = self.node(INodeNo(reader.0))?;
        let children = Arc::new(self.space.list(&node)?);
        self.listings.keep(reader, children.clone());
        Ok(children)
    }

    /// Feeds one `readdir` reply from `offset` on: `add(next_offset, entry)` returns true
    /// once the reply is full. Offsets: 1 is ".", 2 is "..", 3 + i is the i-th child.
    fn fill(
        &self,
        reader: Reader,
        offset: u64,
        mut add: impl FnMut(u64, Entry<'_>) -> bool,
    ) -> Result<(), TreeError> {
        let children = self.listing(reader, offset)?;
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
            self.listings.done(reader);
        }
        Ok(())
    }
}

impl Filesystem for Fs {
    /// The session ended; fuser unmounts the mount point next, by path. If another mount
    /// is there now (ours was detached and one made since), end here so that it stays.
    fn destroy(&mut self) {
        crate::process::exit_if_replaced();
    }

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
            "{}",
            crate::kernel::granted(
                config,
                WANTED.into_iter().chain([InitFlags::FUSE_PASSTHROUGH])
            )
        );
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
        self.guarded("lookup", parent, || {
            match self
                .node(parent)
                .and_then(|(p, _)| self.space.lookup(&p, name))
            {
                Ok(c) => {
                    let ino =
                        self.inodes
                            .lookup(&c.attr.identity, &c.node, forgettable(parent.0, &c));
                    let generation = Generation(c.attr.identity.generation());
                    reply.entry(&c.ttl, &self.fuse_attr(ino, &c.attr), generation);
                }
                Err(e) => reply.error(refuse("lookup", &e)),
            }
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.guarded("getattr", ino, || {
            let answer = self.node(ino).and_then(|(node, identity)| {
                match fh.and_then(|fh| self.handles.get(fh.0)) {
                    Some(h) => self.space.stat_open(&node, &identity, &h.content),
                    None => self.space.stat(&node, &identity),
                }
            });
            match answer {
                Ok((attr, ttl)) => reply.attr(&ttl, &self.fuse_attr(ino.0, &attr)),
                Err(e) => reply.error(refuse("getattr", &e)),
            }
        })
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.guarded("readlink", ino, || {
            match self.node(ino).and_then(|(n, _)| self.space.readlink(&n)) {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(refuse("readlink", &e)),
            }
        })
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let by = req.pid();
        self.guarded("open", ino, || {
            let truncate = flags.0 & libc::O_TRUNC != 0;
            let mode = if flags.acc_mode() != OpenAccMode::O_RDONLY || truncate {
                OpenMode::Write { truncate, by }
            } else {
                OpenMode::Read
            };
            let opened = self
                .node(ino)
                .and_then(|(node, identity)| self.space.open(&node, &identity, mode));
            match opened {
                Ok(opened) => self.reply_opened(ino, opened, reply),
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
        self.guarded("read", ino, || {
            let Some(h) = self.handles.get(fh.0) else {
                return reply.error(Errno::EBADF);
            };
            READ_BUFFER.with_borrow_mut(|buf| {
                let read = self.node(ino).and_then(|(node, _)| {
                    self.space.read_into(&node, &h.content, offset, size, buf)
                });
                match read {
                    Ok(()) => reply.data(buf),
                    Err(e) => reply.error(refuse("read", &e)),
                }
                if buf.capacity() > READ_BUFFER_KEPT {
                    *buf = Vec::new();
                }
            })
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
        self.guarded("release", ino, || {
            if let Some(h) = self.handles.remove(fh.0) {
                self.inodes.released(ino.0);
                if let Ok((node, _)) = self.node(ino) {
                    self.space.release(&node, &h.content);
                }
            }
            reply.ok();
        })
    }

    /// Each `close(2)`: the last close of a draft's writers deposits it now, so that it
    /// hears whether that worked.
    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let pid = req.pid();
        self.guarded("flush", ino, || {
            let Some(h) = self.handles.get(fh.0) else {
                return reply.error(Errno::EBADF);
            };
            let closer = Closer {
                tid: pid,
                ino: ino.0,
            };
            let closing = match self.node(ino) {
                Ok((n, _)) => self.space.close_start(&n, &h.content, closer),
                Err(e) => SpaceClosing::Done(Err(e)),
            };
            drop(h);
            match closing {
                SpaceClosing::Done(r) => answer_close(reply, r),
                SpaceClosing::Later(later) => {
                    acts::answer_close_later(later, self.path(ino), reply)
                }
                SpaceClosing::Waiting(p) => self.wait_for_spawns(p, reply),
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
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.guarded("readdir", ino, || {
            let reader = (ino.0, req.pid());
            let filled = self.fill(reader, offset, |next, entry| match entry {
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
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.guarded("readdirplus", ino, || {
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
                    identity: Identity::Virtual(Node::Root),
                    owner: None,
                },
            );
            let reader = (ino.0, req.pid());
            let filled = self.fill(reader, offset, |next, entry| match entry {
                Entry::Dot(name) => {
                    reply.add(ino, next, name, &SHORT_TTL, &dot_attr, Generation(0))
                }
                Entry::Child(c) => {
                    // Counted as a lookup up front (the entry normally reaches the kernel,
                    // which then counts one); taken back if the reply had no room for it.
                    let child =
                        self.inodes
                            .lookup(&c.attr.identity, &c.node, forgettable(ino.0, c));
                    let attr = self.fuse_attr(child, &c.attr);
                    let generation = Generation(c.attr.identity.generation());
                    let full = reply.add(INodeNo(child), next, &c.name, &c.ttl, &attr, generation);
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
        self.guarded("statfs", INodeNo(ROOT_INO), || {
            let root = self.space.root();
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
        self.guarded("access", ino, || {
            let answer = self.node(ino).and_then(|(node, identity)| {
                let (attr, _) = self.space.stat(&node, &identity)?;
                Ok((node, attr))
            });
            match answer {
                Ok((node, a)) if mask.contains(AccessFlags::W_OK) && a.perm & 0o200 == 0 => {
                    reply.error(refuse("access for writing", &self.space.refusal(&node)))
                }
                Ok(_) => reply.ok(),
                Err(e) => reply.error(refuse("access", &e)),
            }
        })
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.guarded("getxattr", ino, || {
            let attrs = match self.node(ino).and_then(|(n, _)| self.space.xattrs(&n)) {
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
        self.guarded("listxattr", ino, || {
            let attrs = match self.node(ino).and_then(|(n, _)| self.space.xattrs(&n)) {
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

    // Everything below changes the tree. Only messages in `inbox/<id>/` change (the tree
    // decides what refuses and with which errno); the rest answers EROFS and logs the
    // path it refused.

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
        self.guarded("setattr", ino, || {
            let time = |t: Option<TimeOrNow>| {
                t.map(|t| match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                })
            };
            // Only a draft changes; owners are not kept (a message has no owner to keep).
            let done = self.node(ino).and_then(|(node, identity)| {
                if let Some(size) = size {
                    self.space.set_size(&node, size)?;
                }
                if mode.is_some() || atime.is_some() || mtime.is_some() {
                    self.space
                        .set_meta(&node, time(atime), time(mtime), mode.map(|m| m as u16))?;
                }
                if size.is_none() && mode.is_none() && atime.is_none() && mtime.is_none() {
                    // chown: accepted on a draft, refused elsewhere.
                    self.space.set_meta(&node, None, None, None)?;
                }
                self.space.stat(&node, &identity)
            });
            match done {
                Ok((attr, _)) => reply.attr(&SHORT_TTL, &self.fuse_attr(ino.0, &attr)),
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
        self.guarded("unlink", parent, || {
            match self
                .node(parent)
                .and_then(|(p, _)| self.space.unlink(&p, name))
            {
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
        self.guarded("rename", parent, || {
            let done = self.node(parent).and_then(|(p, _)| {
                let (np, _) = self.node(newparent)?;
                self.space.rename(&p, name, &np, newname, flags.bits())
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
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let by = req.pid();
        let owner = Some((req.uid(), req.gid()));
        self.guarded("create", parent, || {
            let made = self.node(parent).and_then(|(p, _)| {
                let (node, attr) = self.space.create(&p, name, owner)?;
                let mode = OpenMode::Write {
                    truncate: false,
                    by,
                };
                let opened = self.space.open(&node, &attr.identity, mode)?;
                Ok((node, attr, opened))
            });
            let (node, attr, opened) = match made {
                Ok(m) => m,
                Err(e) => return reply.error(refuse("create", &e)),
            };
            let ino = self.inodes.lookup(&attr.identity, &node, None);
            let flags = open_flags(&opened);
            match self.open_handle(INodeNo(ino), opened.content, None) {
                Ok(fh) => reply.created(
                    &SHORT_TTL,
                    &self.fuse_attr(ino, &attr),
                    Generation(attr.identity.generation()),
                    FileHandle(fh),
                    flags,
                ),
                Err(e) => {
                    self.inodes.forget(ino, 1);
                    reply.error(refuse("create", &e))
                }
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
        let writer = Writer {
            pid: req.pid(),
            uid: req.uid(),
        };
        self.guarded("write", ino, || {
            let writing = match self.node(ino) {
                Ok((n, _)) => self.space.write_start(&n, offset, data, writer),
                Err(e) => Writing::Done(Err(e)),
            };
            match writing {
                Writing::Done(Ok(n)) => reply.written(n as u32),
                Writing::Done(Err(e)) => reply.error(refuse("write", &e)),
                Writing::Later(later, n) => acts::answer_write(later, self.path(ino), n, reply),
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
            Ok((Node::Draft(_), _)) => reply.error(Errno::from_i32(libc::ENOTSUP)),
            Ok((node, _)) => reply.error(self.read_only("setxattr", node.path())),
            Err(e) => reply.error(refuse("setxattr", &e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.read_only("removexattr", self.path(ino)));
    }
}

thread_local! {
    /// Each request thread's buffer for the reads it answers, kept between them: a fresh
    /// one of a MiB costs 256 page faults (the mmap threshold maps it on its own), about
    /// as long as serving the read.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The largest read buffer a thread keeps: the kernel's largest read (256 pages).
const READ_BUFFER_KEPT: usize = 1 << 20;

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
