//! What may be deposited, by whom, to whom — checked before anything touches the inbox.
//!
//! `litany message` validates only the recipient (CONTRACT §3.4); the sender is trusted
//! and the content is whatever argv could carry. litanyfs writes natively, so it checks
//! all three itself: the content is non-empty, within a size limit and UTF-8 (a non-UTF-8
//! file blocks the inbox forever, §3.5); the sender is `user` or an existing agent id that
//! is one clean path component (no `/`, no leading `.`, no NUL, no whitespace or control
//! characters: it becomes both a file name and a frontmatter line); the recipient is one
//! path component with an agent ref. Each failure is its own [`DepositError`] variant.

use git2::{ErrorCode, Repository};

use super::DepositError;
use crate::workspace::ids::is_component;
use crate::workspace::inbox::USER_SENDER;
use crate::workspace::refs::agent_ref;

/// The default largest message litanyfs deposits: 1 MiB of content.
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Checks a message's length alone, so a writer can be refused (`EFBIG`) as soon as a
/// `write(2)` would carry the file past `max`.
pub(crate) fn check_len(len: u64, max: usize) -> Result<(), DepositError> {
    let max = max as u64;
    if len > max {
        return Err(DepositError::TooLarge { len, max });
    }
    Ok(())
}

/// The content as text, if it is depositable: within `max` bytes, non-empty, UTF-8.
pub(crate) fn check_content(content: &[u8], max: usize) -> Result<&str, DepositError> {
    check_len(content.len() as u64, max)?;
    if content.is_empty() {
        return Err(DepositError::Empty);
    }
    std::str::from_utf8(content).map_err(|e| DepositError::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })
}

/// True when `sender` has the shape of a sender: `user`, or one path component that does
/// not start with `.` and holds no whitespace or control characters. (The drain ignores
/// dotted senders; a newline would forge frontmatter.)
pub fn sender_shape_ok(sender: &str) -> bool {
    sender == USER_SENDER
        || (is_component(sender)
            && !sender.starts_with('.')
            && !sender.chars().any(|c| c.is_whitespace() || c.is_control()))
}

/// `user`, or an agent id with a ref.
pub(crate) fn check_sender(repo: &Repository, sender: &str) -> Result<(), DepositError> {
    if !sender_shape_ok(sender) {
        return Err(DepositError::BadSender(sender.to_string()));
    }
    if sender == USER_SENDER || agent_exists(repo, sender)? {
        Ok(())
    } else {
        Err(DepositError::UnknownSender(sender.to_string()))
    }
}

/// One path component with a ref (litany's `require_agent_id` then `require_agent`).
pub(crate) fn check_recipient(repo: &Repository, id: &str) -> Result<(), DepositError> {
    if !is_component(id) {
        return Err(DepositError::BadRecipient(id.to_string()));
    }
    if agent_exists(repo, id)? {
        Ok(())
    } else {
        Err(DepositError::UnknownRecipient(id.to_string()))
    }
}

/// Whether `refs/heads/agents/<id>` exists. A name git refuses as a ref is no agent.
pub(crate) fn agent_exists(repo: &Repository, id: &str) -> Result<bool, DepositError> {
    let refname = agent_ref(id);
    match repo.find_reference(&refname) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::InvalidSpec) => Ok(false),
        Err(e) => Err(DepositError::git(format!("read {refname}"), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::workspace::refs::Flavour;

    #[test]
    fn content_rules() {
        assert_eq!(check_content(b"hi", 2).unwrap(), "hi");
        assert!(matches!(check_content(b"", 2), Err(DepositError::Empty)));
        assert!(matches!(
            check_content(b"abc", 2),
            Err(DepositError::TooLarge { len: 3, max: 2 })
        ));
        assert!(matches!(
            check_content(b"ok\xff", 10),
            Err(DepositError::NotUtf8 { valid_up_to: 2 })
        ));
        assert!(check_len(DEFAULT_MAX_MESSAGE_BYTES as u64, DEFAULT_MAX_MESSAGE_BYTES).is_ok());
        assert!(check_len(1 + (1 << 20), DEFAULT_MAX_MESSAGE_BYTES).is_err());
    }

    #[test]
    fn sender_and_recipient_rules() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("20260101-a1", Some("Ann"), &[]).unwrap();
        let repo = f.repo();
        check_sender(repo, "user").unwrap();
        check_sender(repo, "20260101-a1").unwrap();
        for bad in [
            "", ".", "..", ".hidden", "a/b", "a\\b", "a\0b", "a b", "a\nb", "a\tb", "a\u{85}b",
            "a\x1bb",
        ] {
            assert!(
                matches!(check_sender(repo, bad), Err(DepositError::BadSender(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            check_sender(repo, "20260101-zz"),
            Err(DepositError::UnknownSender(_))
        ));
        check_recipient(repo, "20260101-a1").unwrap();
        assert!(matches!(
            check_recipient(repo, "../x"),
            Err(DepositError::BadRecipient(_))
        ));
        for missing in ["user", "nobody", "a b", "x..y", "x.lock"] {
            assert!(
                matches!(
                    check_recipient(repo, missing),
                    Err(DepositError::UnknownRecipient(_))
                ),
                "{missing:?}"
            );
        }
    }
}
