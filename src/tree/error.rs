//! Why the tree refused a request: each variant carries the mount-relative path and maps
//! to exactly one errno, so that the adapter answers and logs every failure the same way.

use crate::deposit::DepositError;
use crate::paging::PageError;
use crate::workspace::refs::GitError;

#[derive(Debug)]
pub enum TreeError {
    /// Nothing by that name in the view (hidden, absent, or gone). ENOENT.
    NotFound(String),
    /// A path component that is not a directory. ENOTDIR.
    NotDir(String),
    /// A directory where a file was needed. EISDIR.
    IsDir(String),
    /// A symlink opened as a file. ELOOP.
    Loop(String),
    /// A request that makes no sense for this node (readlink of a file). EINVAL.
    Invalid(String),
    /// The view is read-only here. EROFS.
    ReadOnly(String),
    /// A deposited message: immutable. EPERM.
    Immutable(String),
    /// A name that is taken. EEXIST.
    Exists(String),
    /// Too many messages are being written at once. ENOSPC.
    NoSpace(String),
    /// A deposit was refused or failed; its errno is passed on.
    Deposit(String, DepositError),
    /// A continuation address that `read_tool_output` would refuse (ENOENT), or a record
    /// that could not be read (EIO); the message is the tool's own.
    Page(String, PageError),
    /// A backing-tree call failed; its errno is passed on.
    Io(String, std::io::Error),
    /// Git failed to answer. EIO.
    Git(String, GitError),
}

impl TreeError {
    pub fn io(path: impl Into<String>, e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOENT) => Self::NotFound(path.into()),
            _ => Self::Io(path.into(), e),
        }
    }

    pub fn git(path: impl Into<String>, e: GitError) -> Self {
        Self::Git(path.into(), e)
    }

    pub fn errno(&self) -> i32 {
        match self {
            Self::NotFound(_) => libc::ENOENT,
            Self::NotDir(_) => libc::ENOTDIR,
            Self::IsDir(_) => libc::EISDIR,
            Self::Loop(_) => libc::ELOOP,
            Self::Invalid(_) => libc::EINVAL,
            Self::ReadOnly(_) => libc::EROFS,
            Self::Immutable(_) => libc::EPERM,
            Self::Exists(_) => libc::EEXIST,
            Self::NoSpace(_) => libc::ENOSPC,
            Self::Deposit(_, e) => e.errno().unwrap_or(libc::EIO),
            Self::Page(_, e) => e.errno(),
            Self::Io(_, e) => e.raw_os_error().unwrap_or(libc::EIO),
            Self::Git(..) => libc::EIO,
        }
    }

    pub fn path(&self) -> &str {
        match self {
            Self::NotFound(p)
            | Self::NotDir(p)
            | Self::IsDir(p)
            | Self::Loop(p)
            | Self::Invalid(p)
            | Self::ReadOnly(p)
            | Self::Immutable(p)
            | Self::Exists(p)
            | Self::NoSpace(p)
            | Self::Deposit(p, _)
            | Self::Page(p, _)
            | Self::Io(p, _)
            | Self::Git(p, _) => p,
        }
    }

    /// Whether the failure is ordinary traffic (a shell probing for a file that is not
    /// there) rather than something an operator should see.
    pub fn is_routine(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }
}

impl std::fmt::Display for TreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound(p) => write!(f, "{p}: no such entry in the view"),
            Self::NotDir(p) => write!(f, "{p}: not a directory"),
            Self::IsDir(p) => write!(f, "{p}: is a directory"),
            Self::Loop(p) => write!(f, "{p}: is a symlink"),
            Self::Invalid(p) => write!(f, "{p}: not a symlink"),
            Self::ReadOnly(p) => write!(f, "{p}: read-only in this view"),
            Self::Immutable(p) => write!(
                f,
                "{p}: a deposited message is immutable; to add something, deposit another"
            ),
            Self::Exists(p) => write!(f, "{p}: exists"),
            Self::NoSpace(p) => write!(
                f,
                "{p}: too many messages being written at once (at most {} of them, holding \
                 {} MiB together)",
                super::drafts::MAX_DRAFTS,
                super::drafts::DRAFT_BYTES >> 20
            ),
            Self::Deposit(p, e) => write!(f, "{p}: deposit refused: {e}"),
            Self::Page(p, e) => write!(f, "{p}: read_tool_output would refuse it: {e}"),
            Self::Io(p, e) => write!(f, "{p}: {e}"),
            Self::Git(p, e) => write!(f, "{p}: git: {e}"),
        }
    }
}

impl std::error::Error for TreeError {}
