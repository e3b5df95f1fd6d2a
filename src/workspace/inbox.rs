//! The inbox file-name grammar, in one place: what a deposit is called, which names a
//! drain accepts, and how the next sequence number is derived (CONTRACT §3.1, §3.6).
//!
//! Every rule mirrors litany's parser exactly (including Rust's `u32` parse, which
//! accepts `+1`), because the view must show precisely the files a drain would take and
//! the deposit engine must pick precisely the number `litany message` would.

/// The extension of every deposit.
pub const MESSAGE_EXT: &str = "md";
/// Minimum width of the sequence number (`user-001.md`; `user-1000.md` after 999).
pub const SEQ_WIDTH: usize = 3;
/// The sequence number of a sender's first deposit in an empty inbox.
pub const FIRST_SEQ: u32 = 1;
/// The reserved sender of messages that no agent sent.
pub const USER_SENDER: &str = "user";

/// `<sender>-<NNN>.md`, the name litany gives a deposit.
pub fn message_filename(sender: &str, seq: u32) -> String {
    format!("{sender}-{seq:0SEQ_WIDTH$}.{MESSAGE_EXT}")
}

/// The sender of a name the drain accepts as a pending deposit, or `None` for anything
/// it ignores (dotfiles, `.tmp` files, other names). Split at the last hyphen; the tail
/// must parse as a `u32`; the sender must be non-empty and not start with `.`.
pub fn pending_sender(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(MESSAGE_EXT)?.strip_suffix('.')?;
    let (sender, seq) = stem.rsplit_once('-')?;
    seq.parse::<u32>().ok()?;
    (!sender.is_empty() && !sender.starts_with('.')).then_some(sender)
}

/// The sequence number of `name` if it is one of `sender`'s deposits
/// (`<sender>-<u32>.md`), as litany's `next_sequence` reads it.
pub fn sequence_of(name: &str, sender: &str) -> Option<u32> {
    let mid = name
        .strip_prefix(sender)?
        .strip_prefix('-')?
        .strip_suffix(MESSAGE_EXT)?
        .strip_suffix('.')?;
    mid.parse::<u32>().ok()
}

/// The next sequence for `sender` given the names in its inbox: one past the largest of
/// its deposits, or [`FIRST_SEQ`]. `None` when the largest is `u32::MAX` (litany would
/// overflow there; litanyfs refuses instead).
pub fn next_sequence<'a>(names: impl IntoIterator<Item = &'a str>, sender: &str) -> Option<u32> {
    match names
        .into_iter()
        .filter_map(|n| sequence_of(n, sender))
        .max()
    {
        None => Some(FIRST_SEQ),
        Some(max) => max.checked_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_have_a_minimum_width() {
        assert_eq!(message_filename("user", 1), "user-001.md");
        assert_eq!(message_filename("user", 999), "user-999.md");
        assert_eq!(message_filename("user", 1000), "user-1000.md");
    }

    #[test]
    fn pending_names_follow_the_drain() {
        assert_eq!(pending_sender("user-001.md"), Some("user"));
        assert_eq!(pending_sender("user-1.md"), Some("user"));
        assert_eq!(pending_sender("user-+1.md"), Some("user"));
        assert_eq!(pending_sender("p1-abc-001.md"), Some("p1-abc"));
        assert_eq!(
            pending_sender("a-b-20261202T0-0001.md"),
            Some("a-b-20261202T0")
        );
        for ignored in [
            ".user-001.md.tmp",
            ".user-001.md",
            "user-001.md.tmp",
            "-001.md",
            "user001.md",
            "user-abc.md",
            "user-001.txt",
            "user-4294967296.md",
            "user-.md",
            "note",
            "4913",
        ] {
            assert_eq!(pending_sender(ignored), None, "{ignored}");
        }
    }

    #[test]
    fn sequences_are_per_sender() {
        let names = [
            "user-001.md",
            "user-007.md",
            "p1-abc-009.md",
            "user-x.md",
            "p1-002.md",
        ];
        assert_eq!(next_sequence(names, "user"), Some(8));
        assert_eq!(next_sequence(names, "p1"), Some(3));
        assert_eq!(next_sequence(names, "p1-abc"), Some(10));
        assert_eq!(next_sequence(names, "other"), Some(FIRST_SEQ));
        assert_eq!(next_sequence(["u-4294967295.md"], "u"), None);
    }
}
