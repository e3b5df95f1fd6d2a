//! `litanyfs demo`: a sample workspace as the real harness (litany 0.0.15) leaves one,
//! mounted, and a tour of what to try. It needs nothing but this binary, so the README's
//! first command works on a fresh machine.
//!
//! The sample is a few minutes of a healthy workspace, dated from the moment it is built:
//! - BoulderThunder, a root prompted by the user, ran `seq 1 3000` (litany cut its output
//!   in the transcript, with the continuation address), dispatched a child, and answered;
//!   its newest step is done and its `response.md` has words;
//! - PeachHollow, that child, counted the output into a work product and returned: its
//!   result waits in BoulderThunder's inbox (pending mail from an agent);
//! - CopperLantern, another root, had its `rm -rf` call held by the tool control.
//!
//! Every record has the shape litany writes (CONTRACT §3-§6, checked against the real
//! harness in `tests/demo.rs`): commits `dispatch: worker [<id>]` and `transcript NNN:
//! <origin> [<id>]` at their times, step records with `meta.json`, the envelope and
//! truncation marker litany's bound writes, a result deposit with `epitaph:` and
//! `terminal_ref:`, a `returned` mark, a `held` mark, empty `driver.log`s.
//!
//! One [`Sample`] is one workspace: [`build`] writes it, `tour` walks it. A home of
//! several workspaces is several samples (their ids apart by [`Sample::new`]'s `seed`).

use std::path::{Path, PathBuf};

use git2::Oid;
use serde::Serialize;
use serde_json::{Value, json};

use crate::fixture::{CONFIG_BRANCH, Fixture, Result};
use crate::workspace::clock::format_utc;
use crate::workspace::refs::{Flavour, NAME_FILE, agent_ref};
use crate::workspace::steps::DRIVER_LOG;

/// The model every step of the sample calls, as `providers.yaml` names it.
const MODEL: &str = "claude-sonnet-5";
/// litany's shipped `tool_output` bound (CONTRACT §5.1): head and tail bytes.
pub(crate) const HEAD_BYTES: usize = 2048;
pub(crate) const TAIL_BYTES: usize = 2048;

/// An agent of the sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agent {
    pub(crate) id: String,
    pub(crate) name: &'static str,
}

/// One sample workspace: who is in it and when it happened.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it was built (seconds since the epoch): everything happened minutes before.
    pub(crate) now: i64,
    /// BoulderThunder: the root the tour follows.
    pub(crate) root: Agent,
    /// PeachHollow: its child, returned.
    pub(crate) child: Agent,
    /// CopperLantern: a root whose tool call is held.
    pub(crate) held: Agent,
}

/// The compact UTC time an id starts with (CONTRACT §2.2).
fn id_time(t: i64) -> String {
    format_utc(t)
        .replace(['-', ':'], "")
        .trim_end_matches('Z')
        .to_string()
        + "Z"
}

/// Tool-use ids, as the provider mints them.
const SEQ_TOOL: &str = "toolu_01SeqCt3000kQ4xWb7Lm2Hn9";
const DISPATCH_TOOL: &str = "toolu_01DspPeach5vT8yRq3Zc6Jw1";
const COUNT_TOOL: &str = "toolu_01WcCount7pN2sK9dF4gB8xE";
const HELD_TOOL: &str = "toolu_01RmRel4sE6hY1uA3oV7iQ5t";

/// How long before [`Sample::now`] each thing happened, in seconds.
const ROOT_BORN: i64 = 300;
const CHILD_BORN: i64 = 290;
const CHILD_RETURNED: i64 = 40;
const HELD_BORN: i64 = 180;

impl Sample {
    /// The sample as of `now`; `seed` sets the ids' random halves apart, so that two
    /// samples (two workspaces of one home) never share an id.
    pub fn new(now: i64, seed: u32) -> Self {
        // The random half is the id's nanoseconds, `{:08x}`, below 1e9 (CONTRACT §2.2).
        let short = |base: u32| format!("{:08x}", base.wrapping_add(seed) % 1_000_000_000);
        let root = format!("{}-{}", id_time(now - ROOT_BORN), short(0x0122_ccc2));
        let child = format!(
            "{root}-{}-{}",
            id_time(now - CHILD_BORN),
            short(0x1a2b_3c4d)
        );
        let held = format!("{}-{}", id_time(now - HELD_BORN), short(0x2f00_d00d));
        Sample {
            now,
            root: Agent {
                id: root,
                name: "BoulderThunder",
            },
            child: Agent {
                id: child,
                name: "PeachHollow",
            },
            held: Agent {
                id: held,
                name: "CopperLantern",
            },
        }
    }

    /// The sample as of this moment.
    pub fn now(seed: u32) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Self::new(now, seed)
    }

    /// The name of the child's result in the root's inbox.
    pub(crate) fn result_file(&self) -> String {
        format!("{}-001.md", self.child.id)
    }
}

/// `seq 1 3000`'s output: 13,893 bytes, 3,000 lines.
fn seq_output() -> String {
    (1..=3000).map(|n| format!("{n}\n")).collect()
}

/// litany's bounded projection of one stream (`tool/bound.rs`): the first
/// [`HEAD_BYTES`], a newline if the head did not end in one, the marker line with the
/// continuation address of `record`, then the last [`TAIL_BYTES`]; the stream itself
/// when it is not longer than both.
pub(crate) fn bound(stream: &str, label: &str, record: &str) -> String {
    let bytes = stream.as_bytes();
    if bytes.len() <= HEAD_BYTES + TAIL_BYTES {
        return stream.to_string();
    }
    let lines =
        bytes.iter().filter(|b| **b == b'\n').count() + usize::from(!bytes.ends_with(b"\n"));
    let mut out = Vec::new();
    out.extend_from_slice(&bytes[..HEAD_BYTES]);
    if !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(
        format!(
            "[... {label} truncated: {} bytes / {lines} lines total; showing the first \
             {HEAD_BYTES} and last {TAIL_BYTES} bytes; full record: {record}; read the cut \
             middle with read_tool_output, address {record}#{label}@{HEAD_BYTES} ...]\n",
            bytes.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&bytes[bytes.len() - TAIL_BYTES..]);
    // The cuts fall between ASCII digits here; any other stream would be cut as bytes.
    String::from_utf8_lossy(&out).into_owned()
}

/// What the model sees of a tool's run (litany's `tool/envelope.rs`): the exit code,
/// stdout, then stderr under its marker if there is any, each stream bounded.
pub fn envelope(exit_code: i32, stdout: &str, stderr: &str, record: &str) -> String {
    let mut out = format!("Exit code: {exit_code}\n");
    out.push_str(&bound(stdout, "stdout", record));
    if !stderr.is_empty() {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("--- stderr ---\n");
        out.push_str(&bound(stderr, "stderr", record));
    }
    out
}

/// A committed tool entry (`messages/NNN-tool.json`): one `tool_result` carrying `text`
/// (the [`envelope`]), compact, in litany's field order.
pub fn tool_entry(tool_use_id: &str, text: &str) -> Vec<u8> {
    serde_json::to_vec(&[tool_result(tool_use_id, text)]).unwrap_or_default()
}

fn tool_result(tool_use_id: &str, text: &str) -> Block {
    Block::ToolResult {
        tool_use_id: tool_use_id.into(),
        content: vec![Block::Text { text: text.into() }],
        is_error: false,
    }
}

/// A content block of a turn, in litany's field order (`type` first).
#[derive(Serialize, Clone)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: Vec<Block>,
        is_error: bool,
    },
}

fn text(t: &str) -> Block {
    Block::Text { text: t.into() }
}

fn tool_use(id: &str, name: &str, input: Value) -> Block {
    Block::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

/// A model turn's token counts.
#[derive(Serialize, Clone, Copy)]
struct Usage {
    input_tokens: u64,
    output_tokens: u64,
}

/// A committed model entry: `{"content":[...],"usage":{...}}`.
#[derive(Serialize)]
struct ModelEntry<'a> {
    content: &'a [Block],
    usage: Usage,
}

/// `meta.json`, in litany's field order.
#[derive(Serialize)]
struct Meta<'a> {
    commit: String,
    config_commit: String,
    workflow_commit: String,
    provider: &'a str,
    dropped_orphans: Vec<String>,
    started_at: String,
    ended_at: String,
}

/// A tool's `input.json`.
#[derive(Serialize)]
struct ToolInput<'a> {
    id: &'a str,
    name: &'a str,
    input: &'a Value,
}

/// A tool's `output.json`.
#[derive(Serialize)]
struct ToolOutput<'a> {
    stdout: &'a str,
    stderr: &'a str,
    exit_code: i32,
    started_at: String,
    ended_at: String,
}

/// The `response.json` of one attempt: the brazen events of `blocks`, streamed as
/// the adapter streams them, then usage, the finish reason and the end.
fn response(blocks: &[Block], usage: Usage, finish: &str, msg_id: &str) -> Vec<u8> {
    let mut lines = vec![json!({"type": "message_start", "v": 1, "id": msg_id,
        "model": MODEL, "role": "assistant"})];
    for (i, b) in blocks.iter().enumerate() {
        match b {
            Block::Text { text } => {
                lines.push(json!({"type": "content_start", "index": i, "kind": {"text": {}}}));
                // Streamed a few words at a time.
                let words: Vec<&str> = text.split_inclusive(' ').collect();
                for chunk in words.chunks(4) {
                    lines.push(json!({"type": "content_delta", "index": i,
                        "delta": {"text_delta": chunk.concat()}}));
                }
            }
            Block::ToolUse { id, name, input } => {
                lines.push(json!({"type": "content_start", "index": i,
                    "kind": {"tool_use": {"id": id, "name": name}}}));
                lines.push(json!({"type": "content_delta", "index": i,
                    "delta": {"json_delta": input.to_string()}}));
            }
            Block::ToolResult { .. } => continue,
        }
        lines.push(json!({"type": "content_stop", "index": i}));
    }
    lines.push(json!({"type": "usage", "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens}));
    lines.push(json!({"type": "finish", "reason": finish}));
    lines.push(json!({"type": "end"}));
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// A deposit as litany writes it (CONTRACT §3.3), with the result fields for a child's
/// result.
fn deposit(
    from: &str,
    from_name: Option<&str>,
    at: i64,
    result: Option<Oid>,
    body: &str,
) -> String {
    let mut out = format!("---\nfrom: {from}\n");
    if let Some(n) = from_name {
        out += &format!("from_name: {n}\n");
    }
    out += &format!("deposited_at: {}\n", format_utc(at));
    if let Some(tip) = result {
        out += &format!("epitaph: final-response\nterminal_ref: {tip}\n");
    }
    out + "---\n" + body
}

/// One agent's branch and records, written as they happen.
struct Writer<'a> {
    f: &'a Fixture,
    id: String,
    config: Oid,
    /// The branch's files at its tip.
    files: Vec<(String, Vec<u8>)>,
    tip: Option<Oid>,
    /// The next transcript number.
    seq: u32,
    /// The conversation so far, as the next request carries it: (role, blocks).
    history: Vec<(&'static str, Vec<Block>)>,
    system: String,
    /// Every path written, with its time, for the mtimes set at the end.
    written: Vec<(PathBuf, i64)>,
}

impl<'a> Writer<'a> {
    /// A new branch for `agent`: its dispatch commit on top of `parent` (a child's
    /// branch starts at its parent's tip, with its files), at `at`.
    fn dispatch(
        f: &'a Fixture,
        config: Oid,
        agent: &Agent,
        goal: &str,
        parent: Option<&Writer<'_>>,
        at: i64,
    ) -> Result<Self> {
        let mut w = Writer {
            f,
            id: agent.id.clone(),
            config,
            files: parent.map(|p| p.files.clone()).unwrap_or_default(),
            tip: parent.and_then(|p| p.tip).or(Some(config)),
            seq: parent.map_or(1, |p| p.seq),
            history: parent.map(|p| p.history.clone()).unwrap_or_default(),
            system: format!(
                "<goal>\n{goal}\n</goal>\n\nYour name is {}.\n\n# Worker\n\nYou run inside a \
                 git-backed agent harness. Your goal is at `goal.md` at the root of this \
                 branch.\n",
                agent.name
            ),
            written: Vec::new(),
        };
        w.put("goal.md", goal.as_bytes());
        w.put(
            "soul.md",
            b"# Worker\n\nYou run inside a git-backed agent harness.\n",
        );
        w.put(NAME_FILE, format!("{}\n", agent.name).as_bytes());
        w.commit(&format!("dispatch: worker [{}]", agent.id), at)?;
        std::fs::create_dir_all(f.inbox(&agent.id))?;
        let log = f.root().join("steps").join(&agent.id).join(DRIVER_LOG);
        std::fs::create_dir_all(log.parent().unwrap_or(f.root()))?;
        std::fs::write(&log, b"")?;
        w.written.push((log, at));
        Ok(w)
    }

    fn put(&mut self, path: &str, bytes: &[u8]) {
        self.files.retain(|(p, _)| p != path);
        self.files.push((path.to_string(), bytes.to_vec()));
    }

    fn commit(&mut self, subject: &str, at: i64) -> Result<Oid> {
        let files: Vec<(&str, &[u8])> = self
            .files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let tree = self.f.tree(&files)?;
        let tip = self
            .f
            .commit_on(&agent_ref(&self.id), self.tip, tree, subject, at)?;
        self.tip = Some(tip);
        Ok(tip)
    }

    /// Commits transcript entry `origin` (`user`, a sender's id, `tool`, the model) as
    /// the next `messages/NNN-<origin>.<ext>`, with `extra` files (a tool's work).
    fn entry(&mut self, origin: &str, ext: &str, bytes: &[u8], at: i64) -> Result<Oid> {
        let name = format!("messages/{:03}-{origin}.{ext}", self.seq);
        self.put(&name, bytes);
        let tip = self.commit(
            &format!("transcript {:03}: {origin} [{}]", self.seq, self.id),
            at,
        )?;
        self.seq += 1;
        Ok(tip)
    }

    /// A message delivered from the inbox: its whole file, as the drain moves it.
    fn delivered(&mut self, sender: &str, file: &str, at: i64) -> Result<()> {
        self.entry(sender, "md", file.as_bytes(), at)?;
        self.history.push(("user", vec![text(file)]));
        Ok(())
    }

    fn write(&mut self, rel: &str, bytes: &[u8], at: i64) -> Result<()> {
        let path = self.f.root().join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, bytes)?;
        self.written.push((path, at));
        Ok(())
    }

    /// Step `n` from `start` to `end`: the request the history makes, the model's turn
    /// (`blocks`), `meta.json`; then the model entry is committed at `end`.
    fn step(
        &mut self,
        n: u32,
        blocks: &[Block],
        usage: Usage,
        (start, end): (i64, i64),
    ) -> Result<String> {
        let dir = format!("steps/{}/{n:03}", self.id);
        let request = self.request();
        self.write(
            &format!("{dir}/request.json"),
            serde_json::to_string_pretty(&request)?.as_bytes(),
            start,
        )?;
        let finish = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
            "tool_use"
        } else {
            "stop"
        };
        let msg_id = format!("msg_01{}{n:03}", &self.id[self.id.len() - 8..]);
        self.write(
            &format!("{dir}/response.json"),
            &response(blocks, usage, finish, &msg_id),
            end,
        )?;
        self.write(&format!("{dir}/stderr.log"), b"", start)?;
        let config = self.config.to_string();
        let meta = Meta {
            commit: self.tip.map(|t| t.to_string()).unwrap_or_default(),
            config_commit: config.clone(),
            workflow_commit: config,
            provider: "anthropic",
            dropped_orphans: Vec::new(),
            started_at: format_utc(start),
            ended_at: format_utc(end),
        };
        self.write(
            &format!("{dir}/meta.json"),
            serde_json::to_string_pretty(&meta)?.as_bytes(),
            end,
        )?;
        let entry = ModelEntry {
            content: blocks,
            usage,
        };
        self.entry(MODEL, "json", &serde_json::to_vec(&entry)?, end)?;
        self.history.push(("assistant", blocks.to_vec()));
        Ok(dir)
    }

    /// Tool `tool` of step `dir` ran from `start` to `end`: its records, and its result
    /// committed (with `work`, files it left in the worktree) at `end`.
    #[allow(clippy::too_many_arguments)]
    fn tool(
        &mut self,
        dir: &str,
        tool: &str,
        name: &str,
        input: &Value,
        stdout: &str,
        (start, end): (i64, i64),
        work: &[(&str, &[u8])],
    ) -> Result<()> {
        let tdir = format!("{dir}/tools/{tool}");
        let record = format!("{tdir}/output.json");
        let given = ToolInput {
            id: tool,
            name,
            input,
        };
        self.write(
            &format!("{tdir}/input.json"),
            serde_json::to_string_pretty(&given)?.as_bytes(),
            start,
        )?;
        let output = ToolOutput {
            stdout,
            stderr: "",
            exit_code: 0,
            started_at: format_utc(start),
            ended_at: format_utc(end),
        };
        self.write(
            &record,
            serde_json::to_string_pretty(&output)?.as_bytes(),
            end,
        )?;
        for (path, bytes) in work {
            self.put(path, bytes);
        }
        let shown = envelope(0, stdout, "", &record);
        let result = tool_result(tool, &shown);
        self.entry("tool", "json", &tool_entry(tool, &shown), end)?;
        match self.history.last_mut() {
            Some(("tool", blocks)) => blocks.push(result),
            _ => self.history.push(("tool", vec![result])),
        }
        Ok(())
    }

    /// The canonical request of the next step (pretty, keys sorted, as litany writes
    /// it through `serde_json::Value`).
    fn request(&self) -> Value {
        let messages: Vec<Value> = self
            .history
            .iter()
            .map(|(role, blocks)| json!({"role": role, "content": blocks}))
            .collect();
        let tool = |name: &str, description: &str, props: Value| {
            json!({"name": name, "description": description,
                "input_schema": {"type": "object", "properties": props}})
        };
        json!({
            "cache_key": self.id,
            "image": null,
            "max_tokens": 4096,
            "messages": messages,
            "model": MODEL,
            "output": null,
            "parallel_tool_calls": null,
            "reasoning": null,
            "service_tier": null,
            "stop": [],
            "stream": null,
            "system": [{"text": self.system}],
            "temperature": null,
            "tool_choice": {"type": "auto"},
            "tools": [
                tool("bash", "Run a shell command.", json!({"command": {"type": "string"}})),
                tool("dispatch", "Start a subagent with a goal.",
                    json!({"role": {"type": "string"}, "goal": {"type": "string"},
                        "name": {"type": "string"}})),
            ],
            "top_p": null,
        })
    }
}

/// Sets the modification time of `path` (a file or a directory) to `at`.
fn set_mtime(path: &Path, at: i64) -> std::io::Result<()> {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at.max(0) as u64);
    std::fs::File::open(path)?.set_modified(t)
}

/// Writes `sample` as a workspace at `ws` (which must not exist, or be empty).
pub fn build(ws: &Path, sample: &Sample) -> Result<()> {
    let f = Fixture::create(ws, Flavour::Litany)?;
    let config = f
        .repo()
        .refname_to_id(&format!("refs/heads/{CONFIG_BRANCH}"))?;
    let t = |ago: i64| sample.now - ago;
    let (r, c, h) = (&sample.root, &sample.child, &sample.held);

    // BoulderThunder: prompted by the user; runs `seq 1 3000`, whose output litany cuts.
    let goal = "Count from 1 to 3000 with seq, tell me how long the output is, and have a \
                helper write the numbers up.";
    let mut root = Writer::dispatch(&f, config, r, goal, None, t(ROOT_BORN))?;
    let first = deposit("user", None, t(ROOT_BORN), None, goal);
    root.delivered("user", &first, t(ROOT_BORN))?;
    let seq_input = json!({"command": "seq 1 3000"});
    let step = root.step(
        1,
        &[
            text("I'll count with seq and measure what it prints."),
            tool_use(SEQ_TOOL, "bash", seq_input.clone()),
        ],
        Usage {
            input_tokens: 1840,
            output_tokens: 46,
        },
        (t(ROOT_BORN - 1), t(ROOT_BORN - 4)),
    )?;
    let seq = seq_output();
    root.tool(
        &step,
        SEQ_TOOL,
        "bash",
        &seq_input,
        &seq,
        (t(ROOT_BORN - 4), t(ROOT_BORN - 5)),
        &[],
    )?;

    // It dispatches PeachHollow, whose branch starts at its tip.
    let child_goal = "Count the lines and bytes `seq 1 3000` prints and write them up in \
                      counts.txt.";
    let dispatch_input = json!({"role": "worker", "goal": child_goal, "name": c.name});
    let step = root.step(
        2,
        &[
            text(
                "seq printed 3000 lines, 13893 bytes; litany showed me the first and last \
                 2048 bytes and kept the middle at its continuation address. I'll have a \
                 helper write the numbers up.",
            ),
            tool_use(DISPATCH_TOOL, "dispatch", dispatch_input.clone()),
        ],
        Usage {
            input_tokens: 3510,
            output_tokens: 88,
        },
        (t(ROOT_BORN - 6), t(CHILD_BORN + 1)),
    )?;
    let mut child = Writer::dispatch(&f, config, c, child_goal, Some(&root), t(CHILD_BORN))?;
    let handle = json!({"status": "in_progress", "handle": c.id}).to_string();
    root.tool(
        &step,
        DISPATCH_TOOL,
        "dispatch",
        &dispatch_input,
        &handle,
        (t(CHILD_BORN + 1), t(CHILD_BORN)),
        &[],
    )?;
    root.step(
        3,
        &[text(
            "PeachHollow is writing the counts up in counts.txt. In short: `seq 1 3000` \
             prints 3000 lines and 13893 bytes. I'll pass on its write-up when it returns.",
        )],
        Usage {
            input_tokens: 3702,
            output_tokens: 41,
        },
        (t(CHILD_BORN - 1), t(CHILD_BORN - 4)),
    )?;

    // PeachHollow: its dispatch message, delivered; a count; its answer, returned.
    let brief = deposit(&r.id, Some(r.name), t(CHILD_BORN), None, child_goal);
    child.delivered(&r.id, &brief, t(CHILD_BORN - 2))?;
    let count_input = json!({"command": "seq 1 3000 | wc -lc > counts.txt && cat counts.txt"});
    let counts = "   3000   13893\n";
    let step = child.step(
        1,
        &[tool_use(COUNT_TOOL, "bash", count_input.clone())],
        Usage {
            input_tokens: 3890,
            output_tokens: 37,
        },
        (t(CHILD_BORN - 3), t(CHILD_RETURNED + 30)),
    )?;
    child.tool(
        &step,
        COUNT_TOOL,
        "bash",
        &count_input,
        counts,
        (t(CHILD_RETURNED + 30), t(CHILD_RETURNED + 29)),
        &[("counts.txt", counts.as_bytes())],
    )?;
    let answer = "counts.txt holds it: `seq 1 3000` prints 3000 lines and 13893 bytes \
                  (9 one-digit numbers, 90 two-digit, 900 three-digit and 2001 four-digit, \
                  each with its newline).";
    child.step(
        2,
        &[text(answer)],
        Usage {
            input_tokens: 3968,
            output_tokens: 52,
        },
        (t(CHILD_RETURNED + 28), t(CHILD_RETURNED)),
    )?;
    // Its result waits in BoulderThunder's inbox, and the returned mark says so.
    let terminal = child.tip.ok_or("the child has no tip")?;
    let result = deposit(
        &c.id,
        Some(c.name),
        t(CHILD_RETURNED),
        Some(terminal),
        answer,
    );
    let inbox = f.inbox_file(&r.id, &sample.result_file(), result.as_bytes())?;
    root.written.push((inbox, t(CHILD_RETURNED)));
    f.commit_mark("returned", &c.id, terminal)?;

    // CopperLantern: its `rm -rf` held by the tool control.
    let goal = "Tidy the build directory and cut a release build.";
    let mut held = Writer::dispatch(&f, config, h, goal, None, t(HELD_BORN))?;
    let first = deposit("user", None, t(HELD_BORN), None, goal);
    held.delivered("user", &first, t(HELD_BORN))?;
    let rm = json!({"command": "rm -rf build/ && make release"});
    held.step(
        1,
        &[
            text("I'll clear the old build first, then build the release."),
            tool_use(HELD_TOOL, "bash", rm),
        ],
        Usage {
            input_tokens: 1702,
            output_tokens: 39,
        },
        (t(HELD_BORN - 1), t(HELD_BORN - 3)),
    )?;
    let hold = json!({"tool_use_id": HELD_TOOL, "tool": "bash",
        "reason": "rm -rf needs an operator's approval"});
    // litany writes the hold compact, keys in this order (CONTRACT §6).
    let hold = format!(
        "{{\"tool_use_id\":{},\"tool\":{},\"reason\":{}}}",
        hold["tool_use_id"], hold["tool"], hold["reason"]
    );
    f.blob_mark("held", &h.id, hold.as_bytes())?;
    // A mark's time is its ref file's (loose, as litany's `git update-ref` leaves it).
    let mark = |kind: &str, id: &str| f.root().join("repo.git/refs/litany").join(kind).join(id);
    held.written.push((mark("held", &h.id), t(HELD_BORN - 3)));
    held.written
        .push((mark("returned", &c.id), t(CHILD_RETURNED)));

    // The times on disk are the times things happened, directories last (each takes
    // the time of the newest thing in it).
    let mut written: Vec<(PathBuf, i64)> = [root, child, held]
        .into_iter()
        .flat_map(|w| w.written)
        .collect();
    let mut dirs: std::collections::BTreeMap<PathBuf, i64> = Default::default();
    for (path, at) in &written {
        let mut p = path.parent();
        let records = [f.root().join("steps"), f.root().join("inbox")];
        while let Some(d) = p.filter(|d| records.iter().any(|r| d.starts_with(r))) {
            let e = dirs.entry(d.to_path_buf()).or_insert(*at);
            *e = (*e).max(*at);
            p = d.parent();
        }
    }
    written.extend(dirs);
    for (path, at) in written {
        set_mtime(&path, at)?;
    }
    Ok(())
}

mod tour;

pub use tour::{HOME_WORKSPACES, Stop, demo_dir, tour, tour_stops, tour_vars};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_shaped_as_litany_mints_them_and_apart_by_seed() {
        let s = Sample::new(1_796_204_571, 0); // 2026-12-02T09:42:51Z
        assert_eq!(s.root.id, "20261202T093751Z-0122ccc2");
        assert!(s.child.id.starts_with(&format!("{}-20261202T", s.root.id)));
        assert_eq!(
            crate::workspace::ids::parent_of(&s.child.id),
            Some(s.root.id.as_str())
        );
        let other = Sample::new(1_796_204_571, 7);
        assert_ne!(other.root.id, s.root.id);
        for id in [&s.root.id, &s.child.id, &s.held.id] {
            for seg in id.split('-').skip(1).step_by(2) {
                assert_eq!(seg.len(), 8);
                assert!(u32::from_str_radix(seg, 16).unwrap() < 1_000_000_000);
            }
        }
    }

    #[test]
    fn the_bound_is_litanys() {
        // The marker CONTRACT §5.1 quotes from a real run of `seq 1 3000`.
        let record = "steps/20261202T094226Z-0122ccc2/001/tools/toolu_fake1/output.json";
        let cut = bound(&seq_output(), "stdout", record);
        let marker = "[... stdout truncated: 13893 bytes / 3000 lines total; showing the \
                      first 2048 and last 2048 bytes; full record: steps/20261202T094226Z-\
                      0122ccc2/001/tools/toolu_fake1/output.json; read the cut middle with \
                      read_tool_output, address steps/20261202T094226Z-0122ccc2/001/tools/\
                      toolu_fake1/output.json#stdout@2048 ...]\n";
        assert!(cut.contains(marker), "{cut}");
        assert!(cut.starts_with("1\n2\n3\n"));
        assert!(cut.ends_with("2999\n3000\n"));
        assert_eq!(bound("short\n", "stdout", record), "short\n");
        assert_eq!(envelope(0, "hi\n", "", record), "Exit code: 0\nhi\n");
        assert_eq!(
            envelope(1, "out", "err\n", record),
            "Exit code: 1\nout\n--- stderr ---\nerr\n"
        );
    }

    #[test]
    fn a_demo_dir_is_private_or_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let made = demo_dir(None).unwrap();
        let st = std::fs::metadata(&made).unwrap();
        assert_eq!(st.mode() & 0o777, 0o700);
        std::fs::remove_dir(&made).unwrap();
        let t = tempfile::tempdir().unwrap();
        let new = t.path().join("a/b");
        assert_eq!(demo_dir(Some(&new)).unwrap(), new);
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o777, 0o700);
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = demo_dir(Some(&open)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&new, &link).unwrap();
        assert!(
            demo_dir(Some(&link)).is_err(),
            "a symlink is not a directory of ours"
        );
    }
}
