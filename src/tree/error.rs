//! Why the tree refused a request: the mount-relative path it concerns and what was
//! refused. Each [`ErrorKind`] maps to exactly one errno and says in words what was
//! refused, so the adapter answers and logs every failure the same way: one line with
//! the path and the reason.

use crate::deposit::DepositError;
use crate::paging::PageError;
use crate::workspace::refs::GitError;

/// A refusal: what it concerns and why.
#[derive(Debug)]
pub struct TreeError {
    /// The mount-relative path (or, before a path is known, what names the node).
    pub(crate) path: String,
    pub(crate) kind: ErrorKind,
}

/// What was refused, with the errno each kind is answered with.
#[derive(Debug)]
pub(crate) enum ErrorKind {
    /// Nothing by that name in the view (hidden, absent, or gone). ENOENT.
    NotFound,
    /// A path component that is not a directory. ENOTDIR.
    NotDir,
    /// A directory where a file was needed. EISDIR.
    IsDir,
    /// A symlink opened as a file. ELOOP.
    Loop,
    /// `readlink` of something that is not a symlink. EINVAL.
    NotSymlink,
    /// A name no message can have (empty, `.`, `..`, with a `/`). EINVAL.
    BadName,
    /// Rename flags (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`, ...) messages do not take.
    /// EINVAL.
    RenameFlags,
    /// A name longer than [`super::NAME_MAX`]. ENAMETOOLONG.
    NameTooLong,
    /// A rename out of one inbox into another place. EXDEV.
    CrossDevice,
    /// The view is read-only here. EROFS.
    ReadOnly,
    /// A deposited message: immutable. EPERM.
    Immutable,
    /// A name that is taken. EEXIST.
    Exists,
    /// A message by a user `--depositors` does not name, let past the kernel by the
    /// `o+w` those depositors need. EACCES.
    NotDepositor(u32),
    /// Too many messages are being written at once, or they hold too much. ENOSPC.
    NoSpace,
    /// Too many files open through the mount. ENFILE.
    TooManyOpen,
    /// A name two or more living agents wear, where one agent is meant. ENOTUNIQ.
    Ambiguous { name: String, ids: Vec<String> },
    /// Content larger than what is read whole (`size` bytes against `max`). EFBIG.
    TooBig { size: u64, max: u64 },
    /// A deposit was refused or failed; its errno is passed on.
    Deposit(DepositError),
    /// A continuation address that `read_tool_output` would refuse (ENOENT), or a record
    /// that could not be read (EIO); the message is the tool's own.
    Page(PageError),
    /// A backing-tree call failed; its errno is passed on.
    Io(std::io::Error),
    /// Git failed to answer. EIO.
    Git(GitError),
    /// An act through the mount (`ctl`, `new/`) refused or failed; its errno and words
    /// are the act's own ([`crate::control`]).
    Act(crate::control::ActError),
}

impl TreeError {
    pub(crate) fn new(path: impl Into<String>, kind: ErrorKind) -> Self {
        Self {
            path: path.into(),
            kind,
        }
    }

    /// The same refusal, its path made mount-relative for a workspace shown at `ws`.
    pub(crate) fn under(mut self, ws: &str) -> Self {
        self.path = if self.path == "." {
            ws.to_string()
        } else {
            format!("{ws}/{}", self.path)
        };
        self
    }

    pub(crate) fn not_found(path: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::NotFound)
    }

    pub(crate) fn read_only(path: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::ReadOnly)
    }

    /// A backing-tree failure; ENOENT is the ordinary [`ErrorKind::NotFound`].
    pub(crate) fn io(path: impl Into<String>, e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOENT) => Self::not_found(path),
            _ => Self::new(path, ErrorKind::Io(e)),
        }
    }

    pub(crate) fn git(path: impl Into<String>, e: GitError) -> Self {
        Self::new(path, ErrorKind::Git(e))
    }

    pub(crate) fn errno(&self) -> i32 {
        match &self.kind {
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::NotDir => libc::ENOTDIR,
            ErrorKind::IsDir => libc::EISDIR,
            ErrorKind::Loop => libc::ELOOP,
            ErrorKind::NotSymlink | ErrorKind::BadName | ErrorKind::RenameFlags => libc::EINVAL,
            ErrorKind::NameTooLong => libc::ENAMETOOLONG,
            ErrorKind::CrossDevice => libc::EXDEV,
            ErrorKind::ReadOnly => libc::EROFS,
            ErrorKind::Immutable => libc::EPERM,
            ErrorKind::Exists => libc::EEXIST,
            ErrorKind::NotDepositor(_) => libc::EACCES,
            ErrorKind::NoSpace => libc::ENOSPC,
            ErrorKind::TooManyOpen => libc::ENFILE,
            ErrorKind::Ambiguous { .. } => libc::ENOTUNIQ,
            ErrorKind::TooBig { .. } => libc::EFBIG,
            ErrorKind::Deposit(e) => e.errno().unwrap_or(libc::EIO),
            ErrorKind::Page(e) => e.errno(),
            ErrorKind::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            ErrorKind::Git(_) => libc::EIO,
            ErrorKind::Act(e) => e.errno,
        }
    }

    /// Whether this is [`ErrorKind::NotFound`].
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self.kind, ErrorKind::NotFound)
    }

    /// Whether the failure is ordinary traffic (a shell probing for a file that is not
    /// there) rather than something an operator should see.
    pub(crate) fn is_routine(&self) -> bool {
        self.is_not_found()
    }
}

impl std::fmt::Display for TreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.path;
        match &self.kind {
            ErrorKind::NotFound => write!(f, "{p}: no such entry in the view"),
            ErrorKind::NotDir => write!(f, "{p}: not a directory"),
            ErrorKind::IsDir => write!(f, "{p}: is a directory"),
            ErrorKind::Loop => write!(f, "{p}: is a symlink"),
            ErrorKind::NotSymlink => write!(f, "{p}: not a symlink"),
            ErrorKind::BadName => write!(f, "{p}: not a name a message can have"),
            ErrorKind::RenameFlags => write!(
                f,
                "{p}: rename flags (no-replace, exchange, whiteout) do not apply to messages"
            ),
            ErrorKind::NameTooLong => write!(f, "{p}: name longer than {} bytes", super::NAME_MAX),
            ErrorKind::CrossDevice => {
                write!(f, "{p}: a message can only be renamed within its own inbox")
            }
            ErrorKind::ReadOnly => write!(f, "{p}: read-only in this view"),
            ErrorKind::Immutable => write!(
                f,
                "{p}: a deposited message is immutable; to add something, deposit another"
            ),
            ErrorKind::Exists => write!(f, "{p}: exists"),
            ErrorKind::NotDepositor(uid) => write!(
                f,
                "{p}: user {uid} may not deposit here (not one of --depositors)"
            ),
            ErrorKind::NoSpace => write!(
                f,
                "{p}: too many messages being written at once (at most {} of them, holding \
                 {} MiB together)",
                super::drafts::MAX_DRAFTS,
                super::drafts::DRAFT_BYTES >> 20
            ),
            ErrorKind::TooManyOpen => write!(
                f,
                "{p}: {} files are open through the mount already",
                super::MAX_OPEN
            ),
            ErrorKind::Ambiguous { name, ids } => write!(
                f,
                "{p}: the name {name} is worn by {} living agents ({}); use an id",
                ids.len(),
                ids.join(", ")
            ),
            ErrorKind::TooBig { size, max } => write!(
                f,
                "{p}: {size} bytes, more than the {} MiB the view reads whole; read it with git",
                max >> 20
            ),
            ErrorKind::Deposit(e) => write!(f, "{p}: deposit refused: {e}"),
            ErrorKind::Page(e) => write!(f, "{p}: read_tool_output would refuse it: {e}"),
            ErrorKind::Io(e) => write!(f, "{p}: {e}"),
            ErrorKind::Git(e) => write!(f, "{p}: git: {e}"),
            ErrorKind::Act(e) => write!(f, "{p}: {e}"),
        }
    }
}

impl std::error::Error for TreeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_errno_and_names_the_path() {
        let cases = [
            (ErrorKind::NotFound, libc::ENOENT),
            (ErrorKind::NotSymlink, libc::EINVAL),
            (ErrorKind::BadName, libc::EINVAL),
            (ErrorKind::RenameFlags, libc::EINVAL),
            (ErrorKind::NameTooLong, libc::ENAMETOOLONG),
            (ErrorKind::CrossDevice, libc::EXDEV),
            (ErrorKind::ReadOnly, libc::EROFS),
            (ErrorKind::Immutable, libc::EPERM),
            (ErrorKind::NotDepositor(7), libc::EACCES),
            (ErrorKind::TooManyOpen, libc::ENFILE),
            (
                ErrorKind::Ambiguous {
                    name: "Ann".into(),
                    ids: vec!["a".into(), "b".into()],
                },
                libc::ENOTUNIQ,
            ),
            (ErrorKind::TooBig { size: 9, max: 8 }, libc::EFBIG),
        ];
        for (kind, errno) in cases {
            let e = TreeError::new("inbox/a/f", kind);
            assert_eq!(e.errno(), errno, "{e}");
            assert!(e.to_string().starts_with("inbox/a/f: "), "{e}");
        }
        // A bad name no longer reads as "not a symlink".
        let e = TreeError::new("inbox/a/x", ErrorKind::RenameFlags);
        assert!(!e.to_string().contains("symlink"), "{e}");
        assert!(TreeError::io("x", std::io::Error::from_raw_os_error(libc::ENOENT)).is_not_found());
    }
}
