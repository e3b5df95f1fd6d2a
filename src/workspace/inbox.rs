//! The inbox file-name grammar, in one place: what a deposit is called, which names a
//! drain accepts, and how the next sequence number is derived (CONTRACT §3.1, §3.6).
//!
//! Every rule mirrors litany's parser exactly (including Rust's `u32` parse, which
//! accepts `+1`), because the view must show precisely the files a drain would take and
//! the deposit engine must pick precisely the number `litany message` would.

use std::collections::{BTreeMap, HashMap, HashSet};

/// The extension of every deposit.
pub(crate) const MESSAGE_EXT: &str = "md";
/// Minimum width of the sequence number (`user-001.md`; `user-1000.md` after 999).
pub(crate) const SEQ_WIDTH: usize = 3;
/// The sequence number of a sender's first deposit in an empty inbox.
pub(crate) const FIRST_SEQ: u32 = 1;
/// The reserved sender of messages that no agent sent.
pub const USER_SENDER: &str = "user";

/// The line that opens and closes a deposit's frontmatter (CONTRACT §3.3).
pub(crate) const FRONTMATTER_DELIMITER: &str = "---\n";

/// A message's `---\n<front>\n---\n<body>` as (front, body); `None` when it does not
/// open with the delimiter or never closes it. An empty header (`---\n---\n`) is `""`.
/// The one reading of a frontmatter: the views, the transcript and the live tail take it.
pub(crate) fn split_frontmatter(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix(FRONTMATTER_DELIMITER)?;
    if let Some(body) = rest.strip_prefix(FRONTMATTER_DELIMITER) {
        return Some(("", body));
    }
    let end = rest.find("\n---\n")?;
    Some((&rest[..end], &rest[end + 1 + FRONTMATTER_DELIMITER.len()..]))
}

/// The `key: value` lines of a frontmatter, in order.
pub(crate) fn frontmatter_fields(front: &str) -> Vec<(&str, &str)> {
    front.lines().filter_map(|l| l.split_once(": ")).collect()
}

/// The value of field `key` in `text`'s frontmatter, if it has one.
pub(crate) fn frontmatter_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let (front, _) = split_frontmatter(text)?;
    frontmatter_fields(front)
        .into_iter()
        .find_map(|(k, v)| (k == key).then_some(v))
}

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
    split_sequence(name).and_then(|(s, n)| (s == sender).then_some(n))
}

/// `name` as `(sender, sequence)` when it is `<sender>-<u32>.md`: the one sender for
/// which [`sequence_of`] answers. A `u32` has no hyphen, so that sender is everything
/// before the last one (`p1-abc-009.md` is `p1-abc`'s 9th).
pub(crate) fn split_sequence(name: &str) -> Option<(&str, u32)> {
    let stem = name.strip_suffix(MESSAGE_EXT)?.strip_suffix('.')?;
    let (sender, seq) = stem.rsplit_once('-')?;
    Some((sender, seq.parse::<u32>().ok()?))
}

/// The next sequence for `sender` given the names in its inbox: one past the largest of
/// its deposits, or [`FIRST_SEQ`]. `None` when the largest is `u32::MAX` (litany would
/// overflow there; litanyfs refuses instead).
pub fn next_sequence<'a>(names: impl IntoIterator<Item = &'a str>, sender: &str) -> Option<u32> {
    after(
        names
            .into_iter()
            .filter_map(|n| sequence_of(n, sender))
            .max(),
    )
}

/// The number after a sender's largest, `max` (none yet: [`FIRST_SEQ`]).
fn after(max: Option<u32>) -> Option<u32> {
    match max {
        None => Some(FIRST_SEQ),
        Some(max) => max.checked_add(1),
    }
}

/// The numbered names in an inbox, with each sender's numbers kept in order beside them,
/// so that [`InboxNames::next_sequence`] answers as [`next_sequence`] over every name
/// would without looking at each: an inbox nobody drains may hold thousands. Names no
/// sender's number comes from are not kept.
#[derive(Debug, Default, Clone)]
pub(crate) struct InboxNames {
    /// The names counted, so that an event seen twice counts once.
    names: HashSet<String>,
    /// Per sender, how many of `names` carry each number (`a-1.md` and `a-001.md` are
    /// both its first).
    sequences: HashMap<String, BTreeMap<u32, u32>>,
}

impl InboxNames {
    /// Adds `name`; nothing if it is there already or carries no number.
    pub(crate) fn insert(&mut self, name: &str) {
        let Some((sender, n)) = split_sequence(name) else {
            return;
        };
        if !self.names.insert(name.to_string()) {
            return;
        }
        *self
            .sequences
            .entry(sender.to_string())
            .or_default()
            .entry(n)
            .or_default() += 1;
    }

    /// Removes `name`; nothing if it is not there.
    pub(crate) fn remove(&mut self, name: &str) {
        let Some((sender, n)) = split_sequence(name) else {
            return;
        };
        if !self.names.remove(name) {
            return;
        }
        if let Some(numbers) = self.sequences.get_mut(sender) {
            if let Some(count) = numbers.get_mut(&n) {
                *count -= 1;
                if *count == 0 {
                    numbers.remove(&n);
                }
            }
            if numbers.is_empty() {
                self.sequences.remove(sender);
            }
        }
    }

    /// [`next_sequence`] over these names.
    pub(crate) fn next_sequence(&self, sender: &str) -> Option<u32> {
        after(
            self.sequences
                .get(sender)
                .and_then(|n| n.last_key_value())
                .map(|(max, _)| *max),
        )
    }
}

impl<S: AsRef<str>> FromIterator<S> for InboxNames {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        let mut out = InboxNames::default();
        for name in names {
            out.insert(name.as_ref());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_splits_at_the_closing_delimiter() {
        assert_eq!(
            frontmatter_field("---\nfrom: a1\ndeposited_at: x\n---\nbody", "deposited_at"),
            Some("x")
        );
        assert_eq!(
            frontmatter_field("---\n---\ndeposited_at: x\n", "deposited_at"),
            None
        );
        assert_eq!(
            frontmatter_field("---\ndeposited_at: x\n", "deposited_at"),
            None
        );
        assert_eq!(
            split_frontmatter("---\nfrom: user\n---\nhi\n---\nthere"),
            Some(("from: user", "hi\n---\nthere"))
        );
        assert_eq!(split_frontmatter("---\n---\n"), Some(("", "")));
        assert_eq!(split_frontmatter("no front"), None);
    }

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

    #[test]
    fn the_kept_names_number_as_the_whole_list_does() {
        // Names that look alike to the grammar: padded and unpadded numbers, `+`,
        // hyphenated senders, a sender that is another's prefix, the largest u32, and
        // names that are not deposits at all.
        let pool = [
            "user-001.md",
            "user-1.md",
            "user-+1.md",
            "user-007.md",
            "user-x.md",
            "user-.md",
            "user-0.md",
            "p1-002.md",
            "p1-abc-009.md",
            "p1-abc-9.md",
            "p1-abc-010.md",
            "-3.md",
            "u-4294967295.md",
            "u-4294967294.md",
            ".user-004.md",
            "user-005.md.tmp",
            "user-006",
            "a.md-1.md",
            "user-1000.md",
        ];
        let senders = ["user", "p1", "p1-abc", "u", "", "a.md", "other"];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut kept = InboxNames::default();
        let mut all: HashSet<&str> = HashSet::new();
        for step in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let name = pool[(seed % pool.len() as u64) as usize];
            // Inserts and removes repeat on purpose: a name seen twice counts once.
            if (seed >> 32).is_multiple_of(3) {
                kept.remove(name);
                all.remove(name);
            } else {
                kept.insert(name);
                all.insert(name);
            }
            for sender in senders {
                assert_eq!(
                    kept.next_sequence(sender),
                    next_sequence(all.iter().copied(), sender),
                    "{sender} after step {step}: {all:?}"
                );
            }
        }
        let listed: InboxNames = pool.iter().collect();
        for sender in senders {
            assert_eq!(
                listed.next_sequence(sender),
                next_sequence(pool, sender),
                "{sender}"
            );
        }
    }
}
