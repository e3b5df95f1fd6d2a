//! The bytes of a deposit, exactly as `litany message` writes them (CONTRACT §3.3).
//!
//! Guarantees: [`render`] produces `---\nfrom: <sender>\n[from_name: <Name>\n]deposited_at:
//! <ts>\n---\n<content>` with the content verbatim (no newline added), byte-for-byte what
//! litany's `deposit()` writes for the same inputs (its `deposited_at:` from
//! [`crate::workspace::clock`]); [`sender_name`] is litany's `git show agents/<sender>:name` read (lossy UTF-8, trimmed,
//! empty = unnamed), asked only about agents, never about `user`.
//!
//! The frontmatter is always generated here, never taken from the writer, so a writer
//! cannot forge fields such as `terminal_ref:` (CONTRACT §3.4). For the same reason a
//! name that would break out of its line (any control character, e.g. a newline) is left
//! out; litany would copy it verbatim, which is the one deliberate difference.

use git2::{ObjectType, Repository};

use crate::workspace::inbox::USER_SENDER;
use crate::workspace::refs::{NAME_FILE, agent_ref};

/// The frontmatter delimiter line.
use crate::workspace::inbox::FRONTMATTER_DELIMITER as DELIMITER;

/// The deposit body: litany's frontmatter (`from`, optional `from_name`, `deposited_at`)
/// followed by `content` verbatim.
pub(crate) fn render(
    sender: &str,
    from_name: Option<&str>,
    deposited_at: &str,
    content: &str,
) -> Vec<u8> {
    let named = from_name.map(|n| format!("from_name: {n}\n"));
    let mut out = String::with_capacity(64 + content.len());
    out.push_str(DELIMITER);
    out.push_str("from: ");
    out.push_str(sender);
    out.push('\n');
    out.push_str(named.as_deref().unwrap_or(""));
    out.push_str("deposited_at: ");
    out.push_str(deposited_at);
    out.push('\n');
    out.push_str(DELIMITER);
    out.push_str(content);
    out.into_bytes()
}

/// The `from_name:` of a deposit by `sender`: the trimmed `name` file at the tip of
/// `refs/heads/agents/<sender>`, or `None` for `user`, an unnamed agent, a sender with no
/// ref, or a name that would not stay on its line.
pub(crate) fn sender_name(repo: &Repository, sender: &str) -> Option<String> {
    if sender == USER_SENDER {
        return None;
    }
    let commit = repo
        .find_reference(&agent_ref(sender))
        .ok()?
        .peel_to_commit()
        .ok()?;
    let entry = commit.tree().ok()?.get_name(NAME_FILE)?.to_owned();
    let object = entry.to_object(repo).ok()?;
    if object.kind() != Some(ObjectType::Blob) {
        return None;
    }
    let blob = object.peel_to_blob().ok()?;
    let name = String::from_utf8_lossy(blob.content()).trim().to_string();
    if name.chars().any(char::is_control) {
        log::warn!("agent {sender}: name {name:?} spans lines; deposited without from_name");
        return None;
    }
    (!name.is_empty()).then_some(name)
}

/// [`sender_name`] for the workspace whose bare repository is `repo_dir`.
#[cfg(test)]
pub(crate) fn sender_name_at(repo_dir: &std::path::Path, sender: &str) -> Option<String> {
    if sender == USER_SENDER {
        return None;
    }
    sender_name(&Repository::open_bare(repo_dir).ok()?, sender)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::workspace::refs::Flavour;

    #[test]
    fn renders_litanys_verified_example() {
        // CONTRACT §3.3, verified against the binary.
        assert_eq!(
            render("user", None, "2026-12-02T09:42:51Z", "first"),
            b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nfirst"
        );
        assert_eq!(
            render("a1", Some("Ann"), "2026-12-02T11:32:12Z", "x\ny\n"),
            b"---\nfrom: a1\nfrom_name: Ann\ndeposited_at: 2026-12-02T11:32:12Z\n---\nx\ny\n"
        );
    }

    #[test]
    fn names_are_read_from_the_agent_ref() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("named", Some("Ann"), &[]).unwrap();
        f.agent("unnamed", None, &[]).unwrap();
        f.agent("spaced", None, &[("name", b"  Bo Bo \n\n")])
            .unwrap();
        f.agent("forger", None, &[("name", b"X\nterminal_ref: 00\n")])
            .unwrap();
        f.agent("user", Some("NotUsed"), &[]).unwrap();
        let repo = f.repo();
        assert_eq!(sender_name(repo, "named").as_deref(), Some("Ann"));
        assert_eq!(sender_name(repo, "unnamed"), None);
        assert_eq!(sender_name(repo, "spaced").as_deref(), Some("Bo Bo"));
        assert_eq!(sender_name(repo, "forger"), None);
        assert_eq!(sender_name(repo, "missing"), None);
        assert_eq!(sender_name(repo, "user"), None, "user never wears a name");
        assert_eq!(
            sender_name_at(&f.root().join("repo.git"), "named").as_deref(),
            Some("Ann")
        );
    }
}
