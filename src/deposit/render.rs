//! The bytes of a deposit, exactly as `litany message` writes them (CONTRACT §3.3).
//!
//! Guarantees: [`render`] produces `---\nfrom: <sender>\n[from_name: <Name>\n]deposited_at:
//! <ts>\n---\n<content>` with the content verbatim (no newline added), byte-for-byte what
//! litany's `deposit()` writes for the same inputs; [`now_utc`] is litany's clock format
//! (`%Y-%m-%dT%H:%M:%SZ`, UTC, second precision), computed by plain calendar arithmetic;
//! [`sender_name`] is litany's `git show agents/<sender>:name` read (lossy UTF-8, trimmed,
//! empty = unnamed), asked only about agents, never about `user`.
//!
//! The frontmatter is always generated here, never taken from the writer, so a writer
//! cannot forge fields such as `terminal_ref:` (CONTRACT §3.4). For the same reason a
//! name that would break out of its line (any control character, e.g. a newline) is left
//! out; litany would copy it verbatim, which is the one deliberate difference.

use std::time::{SystemTime, UNIX_EPOCH};

use git2::{ObjectType, Repository};

use crate::workspace::inbox::USER_SENDER;
use crate::workspace::refs::{NAME_FILE, agent_ref};

/// The frontmatter delimiter line.
const DELIMITER: &str = "---\n";

/// The deposit body: litany's frontmatter (`from`, optional `from_name`, `deposited_at`)
/// followed by `content` verbatim.
pub fn render(sender: &str, from_name: Option<&str>, deposited_at: &str, content: &str) -> Vec<u8> {
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

/// Now, in litany's clock format: `YYYY-MM-DDTHH:MM:SSZ` (UTC). A clock before the epoch
/// reads as the epoch.
pub fn now_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    format_utc(secs)
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC). Years
/// outside 0..=9999 are printed with as many digits as they need, as chrono does.
pub fn format_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The `from_name:` of a deposit by `sender`: the trimmed `name` file at the tip of
/// `refs/heads/agents/<sender>`, or `None` for `user`, an unnamed agent, a sender with no
/// ref, or a name that would not stay on its line.
pub fn sender_name(repo: &Repository, sender: &str) -> Option<String> {
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
pub fn sender_name_at(repo_dir: &std::path::Path, sender: &str) -> Option<String> {
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
    fn formats_utc_like_chrono() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_796_204_571), "2026-12-02T09:42:51Z");
        assert_eq!(format_utc(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(format_utc(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(format_utc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_utc(253_402_300_799), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn clock_matches_the_system_date() {
        // One sample of the clock, formatted by us and by date(1).
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let date = String::from_utf8(out.stdout).unwrap();
        assert_eq!(format_utc(secs as i64), date.trim());
        // now_utc() reads that clock: it lies between two samples of it taken around
        // it (the format sorts as the time does).
        let sample = || {
            let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            format_utc(d.as_secs() as i64)
        };
        let before = sample();
        let now = now_utc();
        let after = sample();
        assert!(before <= now && now <= after, "{before} {now} {after}");
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
