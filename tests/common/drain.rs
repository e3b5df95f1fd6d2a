//! The drain's rule (CONTRACT §3.6, litany's `pending` / `sender_of`), written here for
//! the tests apart from the crate's own (`litanyfs::workspace::inbox`), so that what a
//! test expects an inbox to list never comes from the function the mount filters with.
//!
//! A deposit is named `<sender>-<seq>.md`: the part before `.md` split at its last
//! hyphen, the tail a `u32`, the sender non-empty and not starting with a dot.

/// The sender of the deposit named `name`, if the drain would take it.
pub fn sender(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".md")?;
    let (sender, seq) = stem.rsplit_once('-')?;
    seq.parse::<u32>().ok()?;
    (!sender.is_empty() && !sender.starts_with('.')).then_some(sender)
}

/// Whether the drain would take a file named `name`.
pub fn accepts(name: &str) -> bool {
    sender(name).is_some()
}

/// The sequence number of `name` if it is one of `sender`'s deposits.
pub fn seq_of(name: &str, sender: &str) -> Option<u32> {
    name.strip_prefix(sender)?
        .strip_prefix('-')?
        .strip_suffix(".md")?
        .parse()
        .ok()
}
