//! Why a deposit was refused or failed, and the errno each reason becomes.
//!
//! Every variant names one distinct cause so the FUSE side can answer `write(2)`,
//! `flush(2)`/`close(2)` with a precise errno (see [`DepositError::errno`]) and log the
//! rest. [`DepositError::Empty`] is the one "error" that is not a failure: a file closed
//! with no content deposits nothing, and the close succeeds.

use std::io;
use std::path::PathBuf;

/// Why [`super::Depositor::deposit`] (or one of its parts) did not publish a message.
#[derive(Debug)]
pub enum DepositError {
    /// The content is empty: there is nothing to deposit. Not a failure for `close(2)`.
    Empty,
    /// The content is larger than the configured limit (`EFBIG`).
    TooLarge { len: u64, max: u64 },
    /// The content is not UTF-8 (`EILSEQ`); the drain would choke on it forever.
    NotUtf8 { valid_up_to: usize },
    /// The sender is not `user` and not shaped like an agent id (`EINVAL`).
    BadSender(String),
    /// The sender is shaped like an id but no agent ref answers to it (`EINVAL`).
    UnknownSender(String),
    /// The recipient is not a single path component (`EINVAL`).
    BadRecipient(String),
    /// The recipient has no `refs/heads/agents/<id>` (`ENOENT`).
    UnknownRecipient(String),
    /// The sender's sequence is at `u32::MAX` in this inbox (`EOVERFLOW`).
    SequenceExhausted { sender: String },
    /// Every attempt to claim a free `<sender>-<NNN>.md` lost a race (`EAGAIN`).
    Contended { attempts: u32 },
    /// Reading the refs failed (`EIO`).
    Git { op: String, source: git2::Error },
    /// A filesystem operation failed; its own errno is passed on.
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl DepositError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn git(op: impl Into<String>, source: git2::Error) -> Self {
        Self::Git {
            op: op.into(),
            source,
        }
    }

    /// The errno to answer the file operation with; `None` for [`Self::Empty`], which
    /// the caller treats as success (nothing was deposited, nothing went wrong).
    pub(crate) fn errno(&self) -> Option<i32> {
        Some(match self {
            Self::Empty => return None,
            Self::TooLarge { .. } => libc::EFBIG,
            Self::NotUtf8 { .. } => libc::EILSEQ,
            Self::BadSender(_) | Self::UnknownSender(_) | Self::BadRecipient(_) => libc::EINVAL,
            Self::UnknownRecipient(_) => libc::ENOENT,
            Self::SequenceExhausted { .. } => libc::EOVERFLOW,
            Self::Contended { .. } => libc::EAGAIN,
            Self::Git { .. } => libc::EIO,
            Self::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        })
    }
}

impl std::fmt::Display for DepositError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => write!(f, "nothing to deposit (empty content)"),
            Self::TooLarge { len, max } => {
                write!(f, "message of {len} bytes exceeds the {max}-byte limit")
            }
            Self::NotUtf8 { valid_up_to } => {
                write!(f, "message is not UTF-8 (first bad byte at {valid_up_to})")
            }
            Self::BadSender(s) => write!(f, "sender {s:?} is neither `user` nor an agent id"),
            Self::UnknownSender(s) => write!(f, "sender {s:?} has no agent ref"),
            Self::BadRecipient(s) => write!(f, "recipient {s:?} is not one path component"),
            Self::UnknownRecipient(s) => write!(f, "recipient {s:?} has no agent ref"),
            Self::SequenceExhausted { sender } => {
                write!(f, "sender {sender:?} has exhausted its sequence numbers")
            }
            Self::Contended { attempts } => {
                write!(f, "no free message name after {attempts} attempts")
            }
            Self::Git { op, source } => write!(f, "{op}: {}", source.message()),
            Self::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for DepositError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Git { source, .. } => Some(source),
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<crate::workspace::refs::GitError> for DepositError {
    fn from(e: crate::workspace::refs::GitError) -> Self {
        Self::git(e.op, e.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_are_distinct_per_cause() {
        assert_eq!(DepositError::Empty.errno(), None);
        let cases = [
            (DepositError::TooLarge { len: 2, max: 1 }, libc::EFBIG),
            (DepositError::NotUtf8 { valid_up_to: 0 }, libc::EILSEQ),
            (DepositError::BadSender("a/b".into()), libc::EINVAL),
            (DepositError::UnknownSender("x".into()), libc::EINVAL),
            (DepositError::BadRecipient("..".into()), libc::EINVAL),
            (DepositError::UnknownRecipient("x".into()), libc::ENOENT),
            (
                DepositError::io("open", "/x", io::Error::from_raw_os_error(libc::EACCES)),
                libc::EACCES,
            ),
            (
                DepositError::io("open", "/x", io::Error::other("no errno")),
                libc::EIO,
            ),
        ];
        for (e, errno) in cases {
            assert_eq!(e.errno(), Some(errno), "{e}");
        }
    }
}
