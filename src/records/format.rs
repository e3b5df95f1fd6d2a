//! The markdown shapes of `response.md` and `transcript.md`: one function per shape, so
//! that the two records cannot drift apart and the module docs ([`super`]) describe what
//! is written here.
//!
//! Every shape is a *section*: one header line, then for sections with a body a blank
//! line, the body and a newline, then a blank line. A body is written verbatim (text and
//! thinking) or inside a fence longer than any run of backticks in it (tool input), so a
//! reader can always find where a body ends. Header lines never hold a raw control
//! character: values that come from a model or a provider go through [`inline`].

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

/// Where a record's blocks sit: `#` for an attempt or entry, one more `#` for its blocks.
const HASHES: &str = "######";

/// Depth of a block header in `response.md`: one below its attempt.
pub(super) const RESPONSE_BLOCK: usize = 2;
/// Depth of a transcript entry's header, and of every section after the entries.
pub(super) const ENTRY: usize = 2;
/// Depth of a block header in a transcript entry: one below the entry.
pub(super) const ENTRY_BLOCK: usize = 3;

/// The separator between the parts of a header line.
pub(super) const SEP: &str = " · ";

/// Ends a body and separates it from the next section.
pub(super) const BODY_END: &[u8] = b"\n\n";

/// The usage counters in the order brazen's `Usage` declares them; others follow by name.
const USAGE_ORDER: [&str; 7] = [
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "input_total_tokens",
    "thinking_tokens",
    "context_window",
];

/// A provider's usage counters as (name, value), in the order they were first seen.
pub(super) type Usage = Vec<(String, Value)>;

/// Sets counter `name` to `value`, the last report winning (litany's `UsageReport`).
pub(super) fn fold_usage(usage: &mut Usage, name: &str, value: Value) {
    match usage.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = value,
        None => usage.push((name.to_string(), value)),
    }
}

/// `s` on one line: control characters are written as Rust escapes (`\n`, `\u{7}`).
pub(super) fn inline(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes `<#…#> <title>\n\n`: the header line of a section and the blank line after it.
fn header(out: &mut Vec<u8>, depth: usize, title: &str) {
    out.extend_from_slice(&HASHES.as_bytes()[..depth.clamp(1, HASHES.len())]);
    out.push(b' ');
    out.extend_from_slice(title.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// `# attempt <n>[ · id <id>][ · model <model>][ · v <v>]` at `depth`. The schema version
/// is shown only when it is not the handshake's `1`.
pub(super) fn attempt(
    out: &mut Vec<u8>,
    depth: usize,
    n: u32,
    id: Option<&str>,
    model: Option<&str>,
    v: u8,
) {
    let mut title = format!("attempt {n}");
    if let Some(id) = id {
        let _ = write!(title, "{SEP}id {}", inline(id));
    }
    if let Some(model) = model {
        let _ = write!(title, "{SEP}model {}", inline(model));
    }
    if v != 1 {
        let _ = write!(title, "{SEP}v {v}");
    }
    header(out, depth, &title);
}

/// The two block kinds whose text streams verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prose {
    Text,
    Thinking,
}

impl Prose {
    pub(super) fn label(self) -> &'static str {
        match self {
            Prose::Text => "text",
            Prose::Thinking => "thinking",
        }
    }
}

/// `## text` or `## thinking`; `## text (continued)` after a note cut into the block.
pub(super) fn prose(out: &mut Vec<u8>, depth: usize, kind: Prose, continued: bool) {
    let title = if continued {
        format!("{} (continued)", kind.label())
    } else {
        kind.label().to_string()
    };
    header(out, depth, &title);
}

/// A whole prose block: its header, the text verbatim and [`BODY_END`].
pub(super) fn prose_block(out: &mut Vec<u8>, depth: usize, kind: Prose, text: &str) {
    prose(out, depth, kind, false);
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(BODY_END);
}

/// `## <label> <name> (<id>)`, e.g. `## tool_use bash (toolu_1)`.
pub(super) fn call(out: &mut Vec<u8>, depth: usize, label: &str, name: &str, id: &str) {
    header(
        out,
        depth,
        &format!("{label} {} ({})", inline(name), inline(id)),
    );
}

/// The body of a tool call: for `bash` with only a `command`, the command in a `sh`
/// fence; otherwise the input as pretty JSON in a `json` fence.
pub(super) fn call_input(out: &mut Vec<u8>, name: &str, input: &Value) {
    if let Some(command) = crate::workspace::steps::command_as_typed(name, input) {
        fenced(out, "sh", command);
    } else {
        fenced(out, "json", &pretty(input));
    }
}

/// Pretty JSON, two spaces a level (what `serde_json::to_string_pretty` writes).
pub(super) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// The shortest fence (at least three backticks) that no run of backticks in `body`
/// closes.
pub(super) fn fence_for(body: &str) -> String {
    let (mut longest, mut run) = (0, 0);
    for b in body.bytes() {
        run = if b == b'`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

/// A fenced body: the opening fence with its info string, `body`, a newline, the closing
/// fence, and [`BODY_END`].
pub(super) fn fenced(out: &mut Vec<u8>, info: &str, body: &str) {
    let fence = fence_for(body);
    out.extend_from_slice(fence.as_bytes());
    out.extend_from_slice(info.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(body.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(fence.as_bytes());
    out.extend_from_slice(BODY_END);
}

/// `## <label>`: a block the record names but does not spell out (its body, if any, is
/// written by the caller).
pub(super) fn named(out: &mut Vec<u8>, depth: usize, label: &str) {
    header(out, depth, &inline(label));
}

/// ` · usage a=1 b=2`, or nothing for no counters.
fn usage_clause(usage: &[(String, Value)]) -> String {
    if usage.is_empty() {
        return String::new();
    }
    let rank = |name: &str| {
        USAGE_ORDER
            .iter()
            .position(|n| *n == name)
            .unwrap_or(USAGE_ORDER.len())
    };
    let mut sorted: Vec<&(String, Value)> = usage.iter().collect();
    sorted.sort_by(|a, b| (rank(&a.0), &a.0).cmp(&(rank(&b.0), &b.0)));
    let mut clause = format!("{SEP}usage");
    for (name, value) in sorted {
        let _ = write!(clause, " {}={}", inline(name), inline(&value.to_string()));
    }
    clause
}

/// `## finish <reason>[ · usage a=1 b=2]`: how an attempt ended.
pub(super) fn finish(out: &mut Vec<u8>, depth: usize, reason: Option<&str>, usage: &Usage) {
    let reason = reason.map_or(Cow::Borrowed("(none)"), inline);
    header(
        out,
        depth,
        &format!("finish {reason}{}", usage_clause(usage)),
    );
}

/// `### usage a=1 b=2`: a committed model entry's usage report.
pub(super) fn usage(out: &mut Vec<u8>, depth: usize, usage: &Usage) {
    if !usage.is_empty() {
        let clause = usage_clause(usage);
        header(out, depth, clause.trim_start_matches(SEP));
    }
}

/// `## error <kind>: <message>[ · retry after <n>s]`.
pub(super) fn error(
    out: &mut Vec<u8>,
    depth: usize,
    kind: &str,
    message: &str,
    retry_after: Option<u32>,
) {
    let mut title = format!("error {}: {}", inline(kind), inline(message));
    if let Some(secs) = retry_after {
        let _ = write!(title, "{SEP}retry after {secs}s");
    }
    header(out, depth, &title);
}

/// `## half stream: attempt <n> has no end event`.
pub(super) fn half_stream(out: &mut Vec<u8>, depth: usize, attempt: u32) {
    header(
        out,
        depth,
        &format!("half stream: attempt {attempt} has no end event"),
    );
}

/// How much of a line a note quotes.
const EXCERPT_CHARS: usize = 80;

/// `## line <n> does not parse: <reason> · "<excerpt>"`.
pub(super) fn unparsed(out: &mut Vec<u8>, depth: usize, line: u64, reason: &str, raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    let mut excerpt: String = text.chars().take(EXCERPT_CHARS).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    header(
        out,
        depth,
        &format!(
            "line {line} does not parse: {}{SEP}{excerpt:?}",
            inline(reason)
        ),
    );
}

/// `## line <n>: <len> bytes, longer than the <max> MiB a line is read; not shown`.
pub(super) fn too_long(out: &mut Vec<u8>, depth: usize, line: u64, len: u64, max: usize) {
    header(
        out,
        depth,
        &format!(
            "line {line}: {len} bytes, longer than the {} MiB a line is read; not shown",
            max >> 20
        ),
    );
}

/// `## line <n>: <what> outside a matching block, ignored`.
pub(super) fn ignored(out: &mut Vec<u8>, depth: usize, line: u64, what: &str) {
    header(
        out,
        depth,
        &format!(
            "line {line}: {} outside a matching block, ignored",
            inline(what)
        ),
    );
}

/// `## tool input does not parse: <reason>`, followed by the joined input in a `text`
/// fence.
pub(super) fn bad_input(out: &mut Vec<u8>, depth: usize, reason: &str, joined: &str) {
    header(
        out,
        depth,
        &format!("tool input does not parse: {}", inline(reason)),
    );
    fenced(out, "text", joined);
}

/// `## <NNN> <origin> · <time>[ · key: value]…[ · <name> (<id>)]…`: a transcript entry,
/// with the frontmatter fields of a message and the calls a tool entry answers. `time` is
/// the commit's time, or a live entry's state ([`TIME_WIDTH`] wide, see [`live_state`]),
/// or `None` for `time unknown`.
pub(super) fn entry(
    out: &mut Vec<u8>,
    number: &str,
    origin: &str,
    time: Option<&str>,
    fields: &[(&str, &str)],
    calls: &[(&str, &str)],
) {
    let mut title = format!(
        "{} {}{SEP}{}",
        inline(number),
        inline(origin),
        time.unwrap_or("time unknown")
    );
    for (key, value) in fields {
        let _ = write!(title, "{SEP}{}: {}", inline(key), inline(value));
    }
    for (name, id) in calls {
        let _ = write!(title, "{SEP}{} ({})", inline(name), inline(id));
    }
    header(out, ENTRY, &title);
}

/// The width of an entry's time, `YYYY-MM-DDTHH:MM:SSZ`, and so of the state a live entry
/// shows in its place: when the entry is committed the time overwrites the state and no
/// byte of the transcript moves.
pub(crate) const TIME_WIDTH: usize = 20;

/// The state of a model entry streaming now (`response.json` being written).
pub(crate) const STREAMING: &str = "streaming, in flight";
/// The state of a model entry whose step failed: it will never be committed.
pub(crate) const CUT: &str = "cut, never committed";
/// The state of a deposit that the next drain delivers as this entry.
pub(crate) const WAITING: &str = "waiting in the inbox";

/// The state of a tool entry whose tool runs now: `running since HH:MMZ` (UTC), from the
/// seconds since the epoch its `input.json` was written.
pub(crate) fn running_since(secs: i64) -> String {
    let day = secs.rem_euclid(86_400);
    format!("running since {:02}:{:02}Z", day / 3600, day % 3600 / 60)
}

/// `state` as a live entry shows it: exactly [`TIME_WIDTH`] bytes, cut or padded with
/// spaces (every state above is that wide already).
pub(super) fn live_state(state: &str) -> String {
    let mut s: String = state.chars().take(TIME_WIDTH).collect();
    while s.len() > TIME_WIDTH {
        s.pop();
    }
    while s.len() < TIME_WIDTH {
        s.push(' ');
    }
    s
}

/// `## compacted <first> to <last>` (`## compacted <n>` for one, `## compacted` when the
/// numbers are not known): where a compaction took entries out.
pub(super) fn compacted(out: &mut Vec<u8>, numbers: Option<(u32, u32)>) {
    let title = match numbers {
        Some((a, b)) if a == b => format!("compacted {a:03}"),
        Some((a, b)) => format!("compacted {a:03} to {b:03}"),
        None => "compacted".to_string(),
    };
    header(out, ENTRY, &title);
}

/// `### <path>` and a summary's text, verbatim.
pub(super) fn summary(out: &mut Vec<u8>, path: &str, text: &[u8]) {
    header(out, ENTRY_BLOCK, &inline(path));
    out.extend_from_slice(&String::from_utf8_lossy(text).into_owned().into_bytes());
    out.extend_from_slice(BODY_END);
}

/// `## <what> · <detail>…`: a section of where the conversation stands that is no entry
/// (`held`, `wound`, `waiting` for a deposit whose number is not known yet).
pub(super) fn live_section(out: &mut Vec<u8>, what: &str, details: &[&str]) {
    let mut title = what.to_string();
    for d in details {
        let _ = write!(title, "{SEP}{}", inline(d));
    }
    header(out, ENTRY, &title);
}

/// A paragraph of prose in a section's body, and [`BODY_END`].
pub(super) fn paragraph(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(BODY_END);
}

/// `### tool_result <id>[ · error]`.
pub(super) fn tool_result(out: &mut Vec<u8>, depth: usize, id: &str, is_error: bool) {
    let flag = if is_error {
        format!("{SEP}error")
    } else {
        String::new()
    };
    header(out, depth, &format!("tool_result {}{flag}", inline(id)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn fences_outgrow_the_body() {
        assert_eq!(fence_for("plain"), "```");
        assert_eq!(fence_for("a ``` b"), "````");
        assert_eq!(fence_for("`````"), "``````");
    }

    #[test]
    fn headers_stay_on_one_line() {
        assert_eq!(inline("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(
            text(|o| call(o, 2, "tool_use", "ba\nsh", "id\r")),
            "## tool_use ba\\nsh (id\\r)\n\n"
        );
        assert_eq!(
            text(|o| error(o, 2, "transport", "reset\n", Some(3))),
            "## error transport: reset\\n · retry after 3s\n\n"
        );
    }

    #[test]
    fn usage_is_in_brazen_order() {
        let mut u = Usage::new();
        fold_usage(&mut u, "zeta", Value::from(9));
        fold_usage(&mut u, "output_tokens", Value::from(2));
        fold_usage(&mut u, "input_tokens", Value::from(1));
        fold_usage(&mut u, "output_tokens", Value::from(3));
        assert_eq!(
            text(|o| finish(o, 2, Some("stop"), &u)),
            "## finish stop · usage input_tokens=1 output_tokens=3 zeta=9\n\n"
        );
        assert_eq!(
            text(|o| usage(o, 3, &u)),
            "### usage input_tokens=1 output_tokens=3 zeta=9\n\n"
        );
        assert_eq!(text(|o| usage(o, 3, &Usage::new())), "");
        assert_eq!(
            text(|o| finish(o, 2, None, &Usage::new())),
            "## finish (none)\n\n"
        );
    }

    #[test]
    fn bash_is_a_command_line_and_the_rest_is_json() {
        let bash = serde_json::json!({"command": "ls\n"});
        assert_eq!(
            text(|o| call_input(o, "bash", &bash)),
            "```sh\nls\n\n```\n\n"
        );
        let other = serde_json::json!({"command": "ls", "timeout": 1});
        assert_eq!(
            text(|o| call_input(o, "bash", &other)),
            "```json\n{\n  \"command\": \"ls\",\n  \"timeout\": 1\n}\n```\n\n"
        );
    }

    #[test]
    fn live_states_are_as_wide_as_a_time() {
        let time = crate::workspace::clock::format_utc(1_796_000_000);
        assert_eq!(time.len(), TIME_WIDTH);
        for state in [STREAMING, CUT, WAITING, &running_since(1_796_000_000)] {
            assert_eq!(state.len(), TIME_WIDTH, "{state:?}");
            assert_eq!(live_state(state), state);
        }
        assert_eq!(
            running_since(3600 * 9 + 42 * 60 + 59),
            "running since 09:42Z"
        );
        assert_eq!(live_state("short").len(), TIME_WIDTH);
        assert_eq!(live_state("é".repeat(30).as_str()).len(), TIME_WIDTH);
    }

    #[test]
    fn unparsed_lines_quote_an_excerpt() {
        let long = "x".repeat(100);
        let got = text(|o| unparsed(o, 2, 7, "expected value", long.as_bytes()));
        assert!(got.starts_with("## line 7 does not parse: expected value · \"xxx"));
        assert!(got.ends_with("x…\"\n\n"), "{got}");
    }
}
