//! The tree as a user is told it: one table of every path the mount shows, where it
//! comes from and what it holds. `litanyfs --help` ([`help`]), the man page
//! (`crate::manual`) and the README's tree table (`markdown`) are each rendered from
//! [`entries`], so the three cannot drift (tests compare them), and every name in it is
//! the constant the tree itself answers to.
//!
//! Texts are markdown: `code spans` and nothing else; the help and the man page show
//! them as plain text ([`plain`]), never breaking a line inside a code span
//! ([`unbreakable`]), so `tail -f` stays one piece.

use crate::paging::address::{OUTPUT_FILE, TOOLS_DIR};
use crate::views::{ATTENTION, ATTENTION_JSON, EVENTS, EVENTS_NDJSON, STATUS, STATUS_JSON};
use crate::workspace::steps::DRIVER_LOG;
use crate::workspace::{AGENTS_DIR, INBOX_DIR, MARKS_DIR, NAMES_DIR, STEPS_DIR};

use crate::tree::{CTL, LATEST, NEW_DIR, RESPONSE_MD, TRANSCRIPT_MD};

/// What comes before the table, in words.
pub(crate) const INTRO: &str = "The mount root mirrors the workspace root, so every \
    workspace-relative path litany prints (a record path, an inbox file, a continuation \
    address) works verbatim under it.";

/// What a home mount adds: the table's tree once per workspace.
pub(crate) fn home() -> String {
    use crate::home::layout::{REPLAYS_DIR, WORLD_SHELF};
    format!(
        "A home mount (SOURCE a directory of workspaces, such as litany's data root) \
         shows each workspace's tree, as above, at <ws>/ (litany's replays at \
         {REPLAYS_DIR}/<r>/, yog's world at {WORLD_SHELF}/<id>/), and at its root {STATUS}, \
         {STATUS_JSON}, {ATTENTION}, {ATTENTION_JSON}, {EVENTS} and {EVENTS_NDJSON} over \
         every workspace."
    )
}

/// What comes after it.
pub(crate) const OUTRO: &str = "Everything is live. Changes other than messages answer EROFS; \
    a deposited message is immutable (EPERM). Logging follows RUST_LOG (default: info).";

/// One path of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The path, with `<placeholders>` (markdown).
    pub path: String,
    /// Where its content comes from (markdown).
    pub(crate) from: String,
    /// What it shows (markdown).
    pub what: String,
    /// The section of the documentation that says more, relative to the repository.
    pub(crate) more: Option<&'static str>,
}

fn entry(path: String, from: &str, what: String, more: Option<&'static str>) -> Entry {
    Entry {
        path,
        from: from.to_string(),
        what,
        more,
    }
}

/// Every path the mount shows, in the order a reader meets them.
pub fn entries() -> Vec<Entry> {
    let tool = format!("{STEPS_DIR}/.../{TOOLS_DIR}/<tool>");
    vec![
        entry(
            format!("`{STEPS_DIR}/<id>/...`"),
            "the backing files",
            format!(
                "every step record and `{DRIVER_LOG}`, with the bytes, sizes and mtimes on \
                 disk; the harness's `*.tmp` files are hidden"
            ),
            None,
        ),
        entry(
            format!("`{tool}/{OUTPUT_FILE}#<stream>@<offset>`"),
            "the record",
            "exactly the page `litany tool read_tool_output` prints for that address \
             (never listed); its `user.litany.next` attribute names the next page"
                .into(),
            Some("doc/SEMANTICS.md#continuation-addresses"),
        ),
        entry(
            format!("`{tool}/stdout`, `stderr`"),
            "the record",
            "the whole decoded stream, the bytes the pages slice".into(),
            None,
        ),
        entry(
            format!("`{STEPS_DIR}/<id>/{LATEST}`"),
            "the step directories",
            "a symlink to the highest-numbered step directory (`007`), to follow an agent".into(),
            Some("doc/VIEWS.md#latest"),
        ),
        entry(
            format!("`{STEPS_DIR}/<id>/<NNN>/{RESPONSE_MD}`"),
            "`response.json`",
            "the model's answer as text, growing while it streams".into(),
            Some("doc/VIEWS.md#responsemd"),
        ),
        entry(
            format!("`{STEPS_DIR}/<id>/{TRANSCRIPT_MD}`"),
            "git, records",
            "the agent's whole conversation: the entries at its branch tip, each with its \
             time, compactions with their summaries, then where it stands (the step \
             streaming, a tool running, a held call, a wound, mail waiting); `tail -f` \
             follows it"
                .into(),
            Some("doc/VIEWS.md#transcriptmd"),
        ),
        entry(
            format!("`{STEPS_DIR}/<id>/{CTL}`"),
            "litany's verbs",
            "commands for a living agent, one per write (`echo stop > ctl`): `stop`, \
             `nudge`, `interrupt TEXT`, `retarget [CONFIG] [role ROLE]`, `workflow \
             CONFIG|clear`, `delete NAME-OR-ID`, `delete-tree NAME-OR-ID`; the write \
             answers the command's result; reading it shows the agent's status row and \
             the commands (`0600`, the mount owner's)"
                .into(),
            Some("doc/SEMANTICS.md#acting-on-agents-ctl-and-new"),
        ),
        entry(
            format!("`{NEW_DIR}/<Name>`"),
            "`litany prompt`",
            "a goal written into a new file here starts a conversation at its last close \
             (named `<Name>` when litany takes it as a name; an optional first line \
             `config: NAME`); the close returns once the agent exists (`0700`, the mount \
             owner's; none under `--agent`)"
                .into(),
            Some("doc/SEMANTICS.md#acting-on-agents-ctl-and-new"),
        ),
        entry(
            format!("`{INBOX_DIR}/<id>/`"),
            "the backing files",
            "the pending deposits, exactly the names a drain accepts \
             (`<sender>-<u32>.md`, sender not starting with `.`), plus messages being \
             written: a file written here is a message, deposited as `<sender>-<NNN>.md` \
             at its last close"
                .into(),
            Some("doc/SEMANTICS.md#writing-a-message"),
        ),
        entry(
            format!("`{INBOX_DIR}/<Name>/`"),
            "git",
            "the inbox of the living agent that wears the name: a symlink to `<id>`, never \
             listed"
                .into(),
            None,
        ),
        entry(
            format!("`{AGENTS_DIR}/<id>/...`"),
            "git",
            "the committed tree at the tip of `refs/heads/agents/<id>` (`goal.md`, \
             `soul.md`, `name`, `messages/`, work products); works when the worktree is \
             gone"
                .into(),
            None,
        ),
        entry(
            format!("`{MARKS_DIR}/<kind>/<id>`"),
            "git",
            "one file per ref under `refs/litany/` (`refs/lernie/` in a lernie \
             workspace): a blob mark (`cwd`, `held`, `role`) reads as the blob's bytes, any \
             other mark as its 40-hex id and a newline"
                .into(),
            None,
        ),
        entry(
            format!("`{NAMES_DIR}/<Name>`"),
            "git",
            format!(
                "a symlink to `../{AGENTS_DIR}/<id>` for each named living agent; a name two \
                 living agents wear is left out, and the log says so"
            ),
            None,
        ),
        entry(
            format!("`{STATUS}`"),
            "refs, `/proc/locks`, inboxes, steps",
            "a table of every living agent, children under their parent: name, id, state, \
             step, pending, tokens (a tree's on a root, against its budget), last activity, \
             flags, title, and under each what needs a look; a snapshot at each open, for \
             `watch -n1 cat status`"
                .into(),
            Some("doc/VIEWS.md#status-and-statusjson"),
        ),
        entry(
            format!("`{STATUS_JSON}`"),
            "the same",
            "the same rows as a JSON array, for programs, with each agent's and tree's spend \
             and signals"
                .into(),
            None,
        ),
        entry(
            format!("`{ATTENTION}`"),
            "the same",
            "only what needs a look (a held call, a refused, truncated or failed root, a \
             spent budget, a conflict, mail nobody takes, a `notify`), most urgent first, \
             each with what to do; empty when nothing does"
                .into(),
            Some("doc/VIEWS.md#attention-and-attentionjson"),
        ),
        entry(
            format!("`{ATTENTION_JSON}`"),
            "the same",
            "the same as a JSON array".into(),
            None,
        ),
        entry(
            format!("`{EVENTS}`"),
            "the records, then live changes",
            "one line per thing that happened, oldest first, for `less` and `tail -f`".into(),
            Some("doc/VIEWS.md#events-and-eventsndjson"),
        ),
        entry(
            format!("`{EVENTS_NDJSON}`"),
            "the same",
            "the same events, one JSON object per line, for `tail -f events.ndjson | jq`".into(),
            None,
        ),
    ]
}

/// Markdown as plain text: code spans lose their backticks.
pub fn plain(markdown: &str) -> String {
    markdown.replace('`', "")
}

/// What stands for a space inside a code span in [`unbreakable`]: a no-break space.
pub(crate) const NO_BREAK: char = '\u{a0}';

/// [`plain`], with each space inside a code span made a [`NO_BREAK`], so that wrapping
/// ([`wrap`], or a formatter given the page) keeps the span on one line.
pub(crate) fn unbreakable(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    for (i, part) in markdown.split('`').enumerate() {
        if i % 2 == 1 {
            out.extend(part.chars().map(|c| if c == ' ' { NO_BREAK } else { c }));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The README's table: path, where it comes from, what it shows (with a link to more).
#[cfg(test)]
pub(crate) fn markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut t = String::from("| path | from | what it shows |\n|---|---|---|\n");
    for e in entries() {
        let more = e
            .more
            .map(|m| format!(" ([more]({m}))"))
            .unwrap_or_default();
        t.push_str(&format!(
            "| {} | {} | {}{more} |\n",
            cell(&e.path),
            cell(&e.from),
            cell(&e.what)
        ));
    }
    t
}

/// The width `--help` wraps the table's texts to.
pub(crate) const HELP_WIDTH: usize = 80;
/// How far `--help` indents a path, and what it shows.
const HELP_PATH_INDENT: usize = 2;
const HELP_TEXT_INDENT: usize = 6;

/// `text` wrapped at spaces to lines of at most `width` characters after `indent`
/// spaces (a word longer than that has a line to itself); a [`NO_BREAK`] joins two
/// words into one, and is shown as a space.
pub(crate) fn wrap(text: &str, indent: usize, width: usize) -> String {
    let pad = " ".repeat(indent);
    let room = width.saturating_sub(indent).max(1);
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split([' ', '\n']).filter(|w| !w.is_empty()) {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > room {
            out.push_str(&pad);
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&pad);
        out.push_str(&line);
        out.push('\n');
    }
    out.replace(NO_BREAK, " ")
}

/// The width the notes of `--help` (environment, generic options) are wrapped to: the
/// man page indents them by 7 columns within its 78, and an 80-column reader must not see one
/// item reflowed into the next.
pub(crate) const NOTES_WIDTH: usize = 70;

/// One item of a list in the notes: `head` on a line of its own, `text` wrapped under
/// it (see [`NOTES_WIDTH`]).
pub fn item(head: &str, text: &str) -> String {
    format!("  {head}\n{}", wrap(text, HELP_TEXT_INDENT, NOTES_WIDTH))
}

/// The description `litanyfs --help` gives: what litanyfs is, the tree, then the rest.
pub fn help(about: &str) -> String {
    let mut out = format!("{about}\n\n");
    out.push_str(&wrap(INTRO, 0, HELP_WIDTH));
    out.push('\n');
    for e in entries() {
        out.push_str(&wrap(&unbreakable(&e.path), HELP_PATH_INDENT, HELP_WIDTH));
        out.push_str(&wrap(&unbreakable(&e.what), HELP_TEXT_INDENT, HELP_WIDTH));
    }
    out.push('\n');
    out.push_str(&wrap(&home(), 0, HELP_WIDTH));
    out.push('\n');
    out.push_str(&wrap(OUTRO, 0, HELP_WIDTH));
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::TOP_LEVEL;

    #[test]
    fn every_top_level_entry_is_described() {
        let paths: Vec<String> = entries().iter().map(|e| plain(&e.path)).collect();
        for top in TOP_LEVEL {
            assert!(
                paths
                    .iter()
                    .any(|p| p == top || p.starts_with(&format!("{top}/"))),
                "{top} is not in the table"
            );
        }
        for name in [
            LATEST,
            RESPONSE_MD,
            TRANSCRIPT_MD,
            STATUS_JSON,
            EVENTS_NDJSON,
        ] {
            assert!(
                paths.iter().any(|p| p.contains(name)),
                "{name} is not in the table"
            );
        }
    }

    #[test]
    fn help_wraps_each_text_whole_under_its_path() {
        let h = help("About.");
        assert!(h.starts_with("About.\n\nThe mount root mirrors"));
        for line in h.lines() {
            assert!(line.chars().count() <= HELP_WIDTH, "{line:?}");
        }
        for e in entries() {
            let path = format!("  {}\n", plain(&e.path));
            let at = h
                .find(&path)
                .unwrap_or_else(|| panic!("{path:?} not in\n{h}"));
            let after = &h[at + path.len()..];
            let text: Vec<&str> = after
                .lines()
                .take_while(|l| l.starts_with("      "))
                .map(str::trim)
                .collect();
            assert_eq!(text.join(" "), plain(&e.what));
        }
        assert_eq!(wrap("aa bb cc", 1, 6), " aa bb\n cc\n");
        assert_eq!(
            wrap("a-very-long-word b", 2, 6),
            "  a-very-long-word\n  b\n"
        );
        // A code span is never broken.
        assert_eq!(wrap(&unbreakable("x `tail -f` y"), 0, 6), "x\ntail -f\ny\n");
        assert!(!h.contains("tail\n"), "{h}");
    }

    /// The copy of [`markdown`] in README.md sits between these two lines;
    /// `LITANYFS_BLESS=1 cargo test --lib guide` rewrites it.
    const README_START: &str = "<!-- tree: generated by guide::markdown -->\n";
    const README_END: &str = "<!-- /tree -->\n";

    #[test]
    fn the_readme_shows_the_tree_as_defined() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let start = readme
            .find(README_START)
            .expect("README.md has the start marker");
        let body = start + README_START.len();
        let end = body
            + readme[body..]
                .find(README_END)
                .expect("README.md has the end marker");
        let table = markdown();
        if std::env::var_os("LITANYFS_BLESS").is_some() {
            let blessed = format!("{}{table}{}", &readme[..body], &readme[end..]);
            std::fs::write(path, blessed).unwrap();
        } else {
            assert_eq!(
                readme[body..end],
                table,
                "README.md's tree differs from its definition; \
                 `LITANYFS_BLESS=1 cargo test --lib guide` rewrites it"
            );
        }
    }
}
