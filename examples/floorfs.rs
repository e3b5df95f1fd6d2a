//! The FUSE floor: the least any FUSE server can cost on this machine, as an anchor for
//! `scripts/bench` (`cargo run --release --example floorfs <dir> <mountpoint>`).
//!
//! It reads `<dir>` into memory once and serves that copy with the kernel configuration
//! litanyfs uses (readdirplus, no `opendir`, long TTLs, the same thread count), doing no
//! work per request beyond the reply. Files created in it accept writes that are thrown
//! away, so a deposit's sequence of requests (lookup, create, ioctl, write, flush,
//! release) can be timed too. A page name (`output.json#stdout@N`) is a page: a 4 KiB file
//! answered from a buffer of zeros, opened as litanyfs opens a page, whose
//! `user.litany.next` names the page after it ([`FLOOR_STREAM_BYTES`] long in all), so a
//! page's requests (lookup, open, ioctl, read, release) and a whole `next` chain can be
//! timed too. A walk, a deposit or a page through it costs only the FUSE round trips;
//! litanyfs's own share is the difference.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyWrite,
    ReplyXattr, Request, Session, WriteFlags,
};
use litanyfs::paging::{PageName, Stream};
use litanyfs::tree::XATTR_NEXT;
use parking_lot::Mutex;

const TTL: Duration = Duration::from_secs(3600);
/// What litanyfs trusts a page's entry for (`tree::SHORT_TTL`).
const PAGE_TTL: Duration = litanyfs::tree::SHORT_TTL;
/// A page's bytes, as litanyfs pages (`paging::PAGE_BYTES`).
const PAGE: usize = litanyfs::paging::PAGE_BYTES as usize;
static ZEROS: [u8; PAGE] = [0; PAGE];
/// The length of the stream the floor's pages slice: the bench's 50 MiB capture.
const FLOOR_STREAM_BYTES: u64 = 50 << 20;
/// Page inodes are this plus the page's offset.
const PAGE_INO: u64 = 1 << 48;

struct Entry {
    name: OsString,
    dir: bool,
    size: u64,
    mtime: SystemTime,
    children: Vec<u64>,
}

struct Floor {
    nodes: Vec<Entry>,
    created: Mutex<u64>,
}

impl Floor {
    fn load(root: &Path) -> std::io::Result<Self> {
        let mut nodes = vec![Entry {
            name: OsString::from("/"),
            dir: true,
            size: 0,
            mtime: UNIX_EPOCH,
            children: Vec::new(),
        }];
        let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
        while let Some((dir, at)) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let md = e.metadata()?;
                let idx = nodes.len();
                nodes.push(Entry {
                    name: e.file_name(),
                    dir: md.is_dir(),
                    size: md.size(),
                    mtime: md.modified()?,
                    children: Vec::new(),
                });
                nodes[at].children.push(idx as u64);
                if md.is_dir() {
                    stack.push((e.path(), idx));
                }
            }
        }
        Ok(Floor {
            nodes,
            created: Mutex::new(0),
        })
    }

    /// Inode numbers are indexes + 1 (the root is 1).
    fn entry(&self, ino: INodeNo) -> Option<&Entry> {
        self.nodes.get((ino.0 as usize).checked_sub(1)?)
    }

    fn attr(&self, ino: u64, e: &Entry) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: e.size,
            blocks: e.size.div_ceil(512),
            atime: e.mtime,
            mtime: e.mtime,
            ctime: e.mtime,
            crtime: e.mtime,
            kind: if e.dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: if e.dir { 0o755 } else { 0o644 },
            nlink: if e.dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The page named `name` (`output.json#stdout@<offset>`, litanyfs's grammar), as an
    /// inode number.
    fn page_ino(name: &OsStr) -> Option<u64> {
        let page = PageName::parse(name.to_str()?)?;
        (page.stream == Stream::Stdout && page.offset < FLOOR_STREAM_BYTES)
            .then_some(PAGE_INO + page.offset)
    }

    fn page_attr(&self, ino: u64) -> FileAttr {
        let mut a = self.scratch(ino);
        a.size = PAGE as u64;
        a.blocks = 8;
        a
    }

    /// A file created by a writer: not listed, never stored.
    fn scratch(&self, ino: u64) -> FileAttr {
        let e = Entry {
            name: OsString::new(),
            dir: false,
            size: 0,
            mtime: UNIX_EPOCH,
            children: Vec::new(),
        };
        self.attr(ino, &e)
    }
}

impl Filesystem for Floor {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(p) = self.entry(parent) else {
            return reply.error(Errno::ENOENT);
        };
        match p
            .children
            .iter()
            .find(|&&c| self.nodes[c as usize].name == name)
        {
            Some(&c) => reply.entry(
                &TTL,
                &self.attr(c + 1, &self.nodes[c as usize]),
                Generation(0),
            ),
            None => match Self::page_ino(name) {
                Some(ino) => reply.entry(&PAGE_TTL, &self.page_attr(ino), Generation(0)),
                None => reply.error(Errno::ENOENT),
            },
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_NOFLUSH);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let from = (offset as usize).min(PAGE);
        reply.data(&ZEROS[from..(from + size as usize).min(PAGE)]);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let next = ino.0.checked_sub(PAGE_INO).map(|o| o + PAGE as u64);
        let value = match next {
            Some(offset) if name == XATTR_NEXT && offset < FLOOR_STREAM_BYTES => PageName {
                stream: Stream::Stdout,
                offset,
            }
            .to_string(),
            _ => return reply.error(Errno::ENODATA),
        };
        if size == 0 {
            reply.size(value.len() as u32);
        } else if (size as usize) < value.len() {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(value.as_bytes());
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.entry(ino) {
            Some(e) => reply.attr(&TTL, &self.attr(ino.0, e)),
            None if ino.0 >= PAGE_INO => reply.attr(&PAGE_TTL, &self.page_attr(ino.0)),
            None => reply.attr(&Duration::ZERO, &self.scratch(ino.0)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(d) = self.entry(ino) else {
            return reply.error(Errno::ENOENT);
        };
        for (i, &c) in d.children.iter().enumerate().skip(offset as usize) {
            let e = &self.nodes[c as usize];
            if reply.add(
                INodeNo(c + 1),
                i as u64 + 1,
                &e.name,
                &TTL,
                &self.attr(c + 1, e),
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut n = self.created.lock();
        *n += 1;
        let ino = self.nodes.len() as u64 + *n;
        reply.created(
            &Duration::ZERO,
            &self.scratch(ino),
            Generation(0),
            FileHandle(ino),
            FopenFlags::FOPEN_DIRECT_IO,
        );
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [dir, mnt] = args.as_slice() else {
        return Err("usage: floorfs <dir> <mountpoint>".into());
    };
    let fs = Floor::load(dir)?;
    eprintln!("floorfs: {} nodes from {}", fs.nodes.len(), dir.display());
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("floorfs".into())];
    config.n_threads = Some(litanyfs::mount::DEFAULT_THREADS);
    config.clone_fd = true;
    Session::new(fs, mnt, &config)?.run()?;
    Ok(())
}
