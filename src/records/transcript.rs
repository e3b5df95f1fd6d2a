//! `transcript.md`: the committed transcript at a branch tip, entry by entry.
//!
//! The entries are what litany's assembler reads (`messages/` in the tip's tree, ordered
//! by the `u32` before the first `-` of the name, other names left out), read from git,
//! never from the worktree. Each entry is timed by the author time of the newest commit
//! on the tip's first-parent line whose subject is `transcript <NNN>: …`: author, because
//! a compaction's replay keeps it while it rewrites the committer. An entry no such
//! commit names (one a compaction base carried over) shows `time unknown`.
//!
//! A rendering remembers its entries (name and blob). A new tip whose first-parent line
//! reaches a rendered tip, and whose entries begin with that tip's entries, is rendered
//! as that rendering plus its new entries; anything else is rendered afresh.
//!
//! Bounded: a rendering holds at most [`MAX_TRANSCRIPT_BYTES`]. Past it the oldest
//! entries are left out, and a line at the top says how many; an entry whose blob is
//! larger than git content is read whole ([`MAX_BLOB_BYTES`]), or whose rendering alone
//! would pass the bound, shows as a line naming its size. Entries are timed from at most
//! [`MAX_HISTORY_COMMITS`](crate::workspace::refs::MAX_HISTORY_COMMITS) commits.

use std::collections::HashMap;
use std::sync::Arc;

use git2::Oid;
use serde_json::Value;

use super::format::{self, Prose, Usage};
use crate::workspace::refs::{GitEntry, GitError, MAX_BLOB_BYTES, Refs};

// A delivered message keeps its deposit's extension; every other entry is JSON.
use crate::workspace::inbox::MESSAGE_EXT;
pub(super) use crate::workspace::refs::MESSAGES_DIR;
use crate::workspace::refs::subject;
/// The frontmatter delimiter line of a message.
const DELIMITER: &str = "---\n";

/// Depth of a block header in `transcript.md`: one below its entry.
const BLOCK: usize = 3;

/// The most bytes one rendered `transcript.md` holds (module docs).
pub const MAX_TRANSCRIPT_BYTES: usize = 16 << 20;

/// A rendered transcript and the entries it shows.
#[derive(Debug)]
pub(super) struct Transcript {
    pub(super) bytes: Arc<Vec<u8>>,
    /// (file name, blob), in the order rendered.
    entries: Vec<(String, Oid)>,
    /// How many of the oldest entries were left out to keep within the bound.
    omitted: usize,
}

impl Transcript {
    /// Bytes this rendering holds.
    pub(super) fn cost(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.bytes.capacity()
            + self
                .entries
                .iter()
                .map(|(n, _)| n.capacity() + std::mem::size_of::<(String, Oid)>())
                .sum::<usize>()
    }

    /// The transcript at `tip`, extending one of `cached` when `tip` only added entries
    /// to it. Returns the rendering and the tip it extended.
    pub(super) fn render(
        refs: &Refs,
        tip: Oid,
        cached: &HashMap<Oid, Arc<Transcript>>,
    ) -> Result<(Transcript, Option<Oid>), GitError> {
        let entries = list(refs, tip)?;
        let (log, reached) = refs.first_parent_log(tip, &mut |id| cached.contains_key(&id))?;
        if let Some(base_tip) = reached
            && let Some(base) = cached.get(&base_tip)
            && base.omitted == 0
            && entries.starts_with(&base.entries)
        {
            let times = times(&log);
            let mut added = Vec::new();
            for (name, oid) in &entries[base.entries.len()..] {
                added.push(bounded_entry(refs, name, *oid, &times)?);
            }
            let len = base.bytes.len() + added.iter().map(Vec::len).sum::<usize>();
            if len <= MAX_TRANSCRIPT_BYTES {
                let mut bytes = Vec::with_capacity(len);
                bytes.extend_from_slice(&base.bytes);
                added.iter().for_each(|e| bytes.extend_from_slice(e));
                let t = Transcript {
                    bytes: Arc::new(bytes),
                    entries,
                    omitted: 0,
                };
                return Ok((t, Some(base_tip)));
            }
        }
        let log = if reached.is_some() {
            refs.first_parent_log(tip, &mut |_| false)?.0
        } else {
            log
        };
        Ok((afresh(refs, entries, &times(&log))?, None))
    }
}

/// The transcript of `entries` rendered from nothing: the newest entries that fit in
/// [`MAX_TRANSCRIPT_BYTES`], after a line saying how many older ones were left out.
fn afresh(
    refs: &Refs,
    entries: Vec<(String, Oid)>,
    times: &HashMap<String, String>,
) -> Result<Transcript, GitError> {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut len = 0;
    for (name, oid) in entries.iter().rev() {
        let rendered = bounded_entry(refs, name, *oid, times)?;
        if len + rendered.len() > MAX_TRANSCRIPT_BYTES {
            break;
        }
        len += rendered.len();
        kept.push(rendered);
    }
    let omitted = entries.len() - kept.len();
    let mut bytes = Vec::with_capacity(len + 256);
    if omitted > 0 {
        format::named(
            &mut bytes,
            2,
            &format!(
                "{omitted} earlier entries left out: the transcript shows its last {} MiB \
                 (every entry is in {MESSAGES_DIR}/ at the branch tip)",
                MAX_TRANSCRIPT_BYTES >> 20
            ),
        );
    }
    kept.iter().rev().for_each(|e| bytes.extend_from_slice(e));
    Ok(Transcript {
        bytes: Arc::new(bytes),
        entries,
        omitted,
    })
}

/// Entry `name` (blob `oid`) rendered on its own, or, when its blob is too large to read
/// whole or its rendering would pass [`MAX_TRANSCRIPT_BYTES`] alone, a line naming it.
fn bounded_entry(
    refs: &Refs,
    name: &str,
    oid: Oid,
    times: &HashMap<String, String>,
) -> Result<Vec<u8>, GitError> {
    let (_, size) = refs.header(oid)?;
    let mut out = Vec::new();
    if size <= MAX_BLOB_BYTES {
        entry(refs, name, oid, times, &mut out)?;
        if out.len() <= MAX_TRANSCRIPT_BYTES {
            return Ok(out);
        }
        out.clear();
    }
    let (number, rest) = name.split_once('-').unwrap_or((name, ""));
    let origin = rest.rsplit_once('.').map_or(rest, |(o, _)| o);
    format::entry(
        &mut out,
        number,
        origin,
        times.get(number).map(String::as_str),
        &[],
    );
    format::named(
        &mut out,
        BLOCK,
        &format!(
            "entry of {size} bytes, too large to show here: {MESSAGES_DIR}/{name} at the branch tip"
        ),
    );
    Ok(out)
}

/// litany's `seq_of`: the `u32` before the first `-` of an entry's name.
pub(super) fn seq_of(name: &str) -> Option<u32> {
    name.split('-').next()?.parse().ok()
}

/// The transcript entries at `tip`, in litany's order.
fn list(refs: &Refs, tip: Oid) -> Result<Vec<(String, Oid)>, GitError> {
    let Some(GitEntry::Tree(tree)) = refs.entry_at(tip, &[MESSAGES_DIR])? else {
        return Ok(Vec::new());
    };
    let mut entries: Vec<(u32, String, Oid)> = refs
        .list_tree(tree)?
        .into_iter()
        .filter_map(|(name, e)| match e {
            GitEntry::Blob { oid, .. } => Some((seq_of(&name)?, name, oid)),
            _ => None,
        })
        .collect();
    entries.sort();
    Ok(entries.into_iter().map(|(_, n, o)| (n, o)).collect())
}

/// Entry number (as written in the subject) → author time, newest commit first.
fn times(log: &[crate::workspace::refs::LogEntry]) -> HashMap<String, String> {
    let mut times = HashMap::new();
    for c in log {
        if let Some((number, _)) = subject::transcript(&c.summary) {
            times
                .entry(number.to_string())
                .or_insert_with(|| crate::deposit::render::format_utc(c.author_time));
        }
    }
    times
}

/// Renders entry `name` (blob `oid`).
fn entry(
    refs: &Refs,
    name: &str,
    oid: Oid,
    times: &HashMap<String, String>,
    out: &mut Vec<u8>,
) -> Result<(), GitError> {
    let bytes = refs.blob(oid)?;
    let (number, rest) = name.split_once('-').unwrap_or((name, ""));
    let (origin, ext) = rest.rsplit_once('.').unwrap_or((rest, ""));
    let time = times.get(number).map(String::as_str);
    if ext == MESSAGE_EXT {
        message(number, origin, time, &bytes, out);
    } else {
        model_or_tool(number, origin, time, &bytes, out);
    }
    Ok(())
}

/// A delivered message: its frontmatter fields in the header, its body verbatim.
fn message(number: &str, origin: &str, time: Option<&str>, bytes: &[u8], out: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(bytes);
    let (fields, body) = match split_frontmatter(&text) {
        Some((front, body)) => (
            front
                .lines()
                .filter_map(|l| l.split_once(": "))
                .collect::<Vec<_>>(),
            body,
        ),
        None => (Vec::new(), &*text),
    };
    format::entry(out, number, origin, time, &fields);
    out.extend_from_slice(body.as_bytes());
    out.extend_from_slice(format::BODY_END);
}

/// `---\n<front>\n---\n<body>` → (front, body).
fn split_frontmatter(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix(DELIMITER)?;
    if let Some(body) = rest.strip_prefix(DELIMITER) {
        return Some(("", body));
    }
    let end = rest.find("\n---\n")?;
    Some((&rest[..end], &rest[end + 1 + DELIMITER.len()..]))
}

/// A model or tool entry: `{"content":[…],"usage":{…}}` or a bare block array.
fn model_or_tool(number: &str, origin: &str, time: Option<&str>, bytes: &[u8], out: &mut Vec<u8>) {
    format::entry(out, number, origin, time, &[]);
    let value = match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => v,
        Err(e) => {
            format::named(out, BLOCK, &format!("entry does not parse: {e}"));
            format::fenced(out, "text", &String::from_utf8_lossy(bytes));
            return;
        }
    };
    let (blocks, usage) = match &value {
        Value::Array(blocks) => (blocks.as_slice(), None),
        Value::Object(o) => (
            o.get("content")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice),
            o.get("usage").and_then(Value::as_object),
        ),
        _ => (&[][..], None),
    };
    for b in blocks {
        block(b, out);
    }
    if let Some(usage) = usage {
        let usage: Usage = usage.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        format::usage(out, BLOCK, &usage);
    }
}

/// The `type` of a content block; a bare string is text.
fn block(b: &Value, out: &mut Vec<u8>) {
    if let Value::String(text) = b {
        format::prose_block(out, BLOCK, Prose::Text, text);
        return;
    }
    let str_at = |k: &str| b[k].as_str().unwrap_or_default();
    match str_at("type") {
        "text" => format::prose_block(out, BLOCK, Prose::Text, str_at("text")),
        "thinking" => format::prose_block(out, BLOCK, Prose::Thinking, str_at("text")),
        label @ ("tool_use" | "server_tool_use") => {
            format::call(out, BLOCK, label, str_at("name"), str_at("id"));
            format::call_input(out, str_at("name"), &b["input"]);
        }
        "tool_result" => {
            format::tool_result(
                out,
                BLOCK,
                str_at("tool_use_id"),
                b["is_error"].as_bool().unwrap_or(false),
            );
            let items = match &b["content"] {
                Value::Array(items) => items.iter().collect::<Vec<_>>(),
                Value::Null => Vec::new(),
                one => vec![one],
            };
            for item in items {
                match item {
                    Value::String(text) => result_text(text, out),
                    v if v["type"] == "text" => result_text(v["text"].as_str().unwrap_or(""), out),
                    v => format::fenced(out, "json", &format::pretty(v)),
                }
            }
        }
        "redacted_thinking" => format::named(
            out,
            BLOCK,
            &format!("redacted_thinking ({} bytes)", str_at("data").len()),
        ),
        "image" | "document" => {
            let source = &b["source"];
            let media = source["media_type"].as_str().or(source["url"].as_str());
            format::named(
                out,
                BLOCK,
                &format!("{} {}", str_at("type"), media.unwrap_or("")),
            );
        }
        other => {
            format::named(out, BLOCK, if other.is_empty() { "block" } else { other });
            format::fenced(out, "json", &format::pretty(b));
        }
    }
}

/// A tool result's text, verbatim: what the model read.
fn result_text(text: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(format::BODY_END);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_numbers_are_litanys() {
        assert_eq!(seq_of("001-user.md"), Some(1));
        assert_eq!(seq_of("1000-tool.json"), Some(1000));
        assert_eq!(seq_of("+5-x.json"), Some(5));
        assert_eq!(seq_of("007.md"), None);
        assert_eq!(seq_of("x-user.md"), None);
    }

    #[test]
    fn frontmatter_splits_at_the_closing_delimiter() {
        assert_eq!(
            split_frontmatter("---\nfrom: user\n---\nhi\n---\nthere"),
            Some(("from: user", "hi\n---\nthere"))
        );
        assert_eq!(split_frontmatter("---\n---\n"), Some(("", "")));
        assert_eq!(split_frontmatter("no front"), None);
    }

    fn render(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_message_shows_its_fields_and_its_body() {
        let got = render(|o| {
            message(
                "006",
                "b",
                Some("2026-01-01T00:00:00Z"),
                b"---\nfrom: b\nfrom_name: Beta\ndeposited_at: 2026-01-01T00:00:00Z\n---\nping\n",
                o,
            )
        });
        assert_eq!(
            got,
            "## 006 b · 2026-01-01T00:00:00Z · from: b · from_name: Beta · \
             deposited_at: 2026-01-01T00:00:00Z\n\nping\n\n\n"
        );
    }

    #[test]
    fn model_and_tool_entries() {
        let model = br#"{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"bash","input":{"command":"ls"}},{"type":"thinking","text":"hm","signature":null}],"usage":{"output_tokens":2,"input_tokens":1}}"#;
        assert_eq!(
            render(|o| model_or_tool("002", "m", None, model, o)),
            "## 002 m · time unknown\n\n### text\n\nhi\n\n### tool_use bash (t1)\n\n\
             ```sh\nls\n```\n\n### thinking\n\nhm\n\n\
             ### usage input_tokens=1 output_tokens=2\n\n"
        );
        let tool = br#"[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"Exit code: 0\n"}],"is_error":true}]"#;
        assert_eq!(
            render(|o| model_or_tool("003", "tool", Some("T"), tool, o)),
            "## 003 tool · T\n\n### tool_result t1 · error\n\nExit code: 0\n\n\n"
        );
        assert!(
            render(|o| model_or_tool("004", "x", None, b"{oops", o))
                .starts_with("## 004 x · time unknown\n\n### entry does not parse: ")
        );
    }
}
