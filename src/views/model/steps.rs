//! An agent's steps as the model holds them: the list of its numbered step directories,
//! and its latest step read (its `meta.json`, the tail of its `response.json`, and each
//! tool record's `input.json` and `output.json`), each remembered while its stats stand.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{Scanner, StatKey, key};
use crate::workspace::STEPS_DIR;
use crate::workspace::backing::{Backing, Stat};
use crate::workspace::clock::parse_utc;
use crate::workspace::steps::{
    INPUT_FILE, META_FILE, OUTPUT_FILE, RESPONSE_FILE, STDERR_FILE, TOOLS_DIR, step_dir_name,
    step_number,
};

/// An agent's numbered step directories: number → name on disk. Shared between the
/// scanner's cache and every model made from it while `steps/<id>` is unchanged (a large
/// workspace has tens of thousands of steps, and a model is copied at each look).
pub(crate) type StepList = Arc<BTreeMap<u64, StepName>>;

/// A step directory's name, kept only when it is not the one litany gives its number
/// ([`step_dir_name`]; `7` for `007` is one such): nearly every step's name is the
/// number, and a large workspace's lists hold tens of thousands of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct StepName(pub(super) Option<Box<str>>);

impl StepName {
    /// Step `n`'s directory, named `name` on disk.
    pub(crate) fn of(n: u64, name: String) -> Self {
        if name == step_dir_name(n) {
            StepName(None)
        } else {
            StepName(Some(name.into_boxed_str()))
        }
    }

    /// The name on disk of step `n`'s directory.
    pub(crate) fn get(&self, n: u64) -> std::borrow::Cow<'_, str> {
        match &self.0 {
            Some(name) => std::borrow::Cow::Borrowed(name),
            None => std::borrow::Cow::Owned(step_dir_name(n)),
        }
    }
}

/// One step directory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub(crate) number: u64,
    /// Its name on disk (`007`).
    pub(crate) dir: String,
    pub(crate) meta: Meta,
    /// How its call ended and what it cost, read once the step is done.
    pub(crate) finish: Option<Finish>,
    pub(crate) has_response: bool,
    /// `response.json`'s and `stderr.log`'s (inode, size) when listed.
    pub(crate) response: Option<(u64, u64)>,
    pub(crate) stderr: Option<(u64, u64)>,
    /// Seconds: the mtime of the directory or of its `response.json`, the newer.
    pub(crate) mtime: i64,
    pub(crate) tools: BTreeMap<String, Tool>,
    /// Tool directory names that are not UTF-8, lossily.
    pub(crate) odd_tools: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Meta {
    Missing,
    Done {
        started: Option<i64>,
        ended: Option<i64>,
        /// The provider row the call went through (`provider`; older records lack it).
        provider: Option<String>,
    },
    /// It exists and does not parse: why.
    Bad(String),
}

/// How a finished step's call ended (its last attempt) and what it cost (every attempt,
/// by litany's rule: [`super::spend`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Finish {
    pub(crate) reason: Option<String>,
    pub(crate) output_tokens: Option<u64>,
    pub(crate) tokens: u64,
}

/// A step's state as `status` and the events name it (issue 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepState {
    /// No `meta.json` yet and an executor holds the lock.
    InFlight,
    /// `meta.json` written.
    Done,
    /// No `meta.json` and nobody holds the lock (or a later step exists).
    Failed,
}

impl StepState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StepState::InFlight => "in-flight",
            StepState::Done => "done",
            StepState::Failed => "failed",
        }
    }
}

impl Step {
    /// Its wall seconds as litany counts them ([`super::spend::wall`]).
    pub(crate) fn wall_seconds(&self) -> u64 {
        match self.meta {
            Meta::Done { started, ended, .. } => super::spend::wall(started, ended),
            _ => 0,
        }
    }

    /// Its state, given whether it is its agent's highest step and whether the agent's
    /// lock is held.
    pub(crate) fn state(&self, latest: bool, running: bool) -> StepState {
        match self.meta {
            Meta::Done { .. } | Meta::Bad(_) => StepState::Done,
            Meta::Missing if latest && running => StepState::InFlight,
            Meta::Missing => StepState::Failed,
        }
    }
}

/// One tool record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tool {
    /// From `input.json`: the tool's name and a one-line summary of its input; `Err`
    /// with why when it is missing or does not parse.
    pub(crate) input: Result<(String, String), String>,
    /// Seconds: `input.json`'s mtime.
    pub(crate) input_mtime: Option<i64>,
    pub(crate) output: Option<Result<Output, String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Output {
    pub(crate) exit_code: i64,
    pub(crate) stdout_bytes: u64,
    pub(crate) stderr_bytes: u64,
    pub(crate) started: Option<i64>,
    pub(crate) ended: Option<i64>,
}

impl Scanner {
    /// What must stand for an agent's latest step to be taken as last read without
    /// listing it: `steps/<id>` unchanged (no step came or went); and (the caller checks)
    /// no executor then or now, and every tool finished. Records change only under an
    /// executor, which holds the lock, so an idle agent costs two `stat`s a scan (its
    /// steps and its inbox); a writer that takes no lock is seen at the next full scan.
    pub(super) fn settle_keys(&self, id: &str) -> Vec<StatKey> {
        // `steps/<id>` was just stated by the listing of the steps.
        vec![self.steps.get(id).map(|(k, _)| *k).unwrap_or_default()]
    }

    /// The numbered step directories of agent `id`, whose `steps/<id>` has stat `st`.
    pub(super) fn step_list_at(&mut self, id: &str, st: Option<Stat>) -> StepList {
        let rel = Path::new(STEPS_DIR).join(id);
        let Some(st) = st else {
            self.steps.remove(id);
            return StepList::default();
        };
        if let Some((k, list)) = self.steps.get(id)
            && *k == key(&st)
        {
            return list.clone();
        }
        let list: StepList = self
            .backing
            .list(&rel)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, st)| st.is_dir())
            .filter_map(|(n, _)| {
                let n = n.into_string().ok()?;
                let number = step_number(n.as_bytes())?;
                Some((number, StepName::of(number, n)))
            })
            .collect::<BTreeMap<_, _>>()
            .into();
        self.steps.insert(id.to_string(), (key(&st), list.clone()));
        list
    }

    /// Step `dir` (number `n`) of agent `id`, from the cache while its stats stand.
    pub(crate) fn step(&mut self, id: &str, n: u64, dir: &str) -> Step {
        let rel = Path::new(STEPS_DIR).join(id).join(dir);
        let entries = self.backing.list(&rel).unwrap_or_default();
        let stat_of = |name: &str| entries.iter().find(|(e, _)| e == name).map(|(_, s)| *s);
        let tools_st = stat_of(TOOLS_DIR).filter(Stat::is_dir);
        let mut keys: Vec<StatKey> = entries.iter().map(|(_, s)| key(s)).collect();
        if let Ok(d) = self.backing.lstat(&rel) {
            keys.push(key(&d));
        }
        // Listing the tools is cheap and each tool is cached on its own; the step's own
        // files are read again only when a stat in the step directory moved.
        let cached = self
            .step_cache
            .get(&rel)
            .filter(|(k, _)| *k == keys)
            .map(|(_, s)| s.clone());
        if let Some(s) = &cached
            && tools_st.is_none()
        {
            return s.clone();
        }
        let file_id = |st: Option<Stat>| st.filter(Stat::is_file).map(|st| (st.ino, st.size));
        let response = file_id(stat_of(RESPONSE_FILE));
        let stderr = file_id(stat_of(STDERR_FILE));
        let (meta, finish, mtime) = match cached {
            Some(s) => (s.meta, s.finish, s.mtime),
            None => {
                let dir_mtime = self.backing.lstat(&rel).map(|s| s.mtime.0).unwrap_or(0);
                let meta = match stat_of(META_FILE) {
                    None => Meta::Missing,
                    // litany writes it with `fs::write` (create and truncate, then one
                    // write): an empty one is being written, and one whose writer died
                    // there says no more than none (the soak saw one reported bad).
                    Some(st) if st.size == 0 => Meta::Missing,
                    Some(_) => read_meta(&self.backing, &rel.join(META_FILE)),
                };
                let done = !matches!(meta, Meta::Missing);
                let finish = match (done, response) {
                    (true, Some(_)) => {
                        let cost = self.ledger.lock().step(&self.backing, id, n, dir, &meta);
                        Some(Finish {
                            reason: cost.finish.as_deref().map(str::to_string),
                            output_tokens: cost.output_tokens,
                            tokens: cost.tokens.total(),
                        })
                    }
                    _ => None,
                };
                let mtime = dir_mtime.max(stat_of(RESPONSE_FILE).map_or(0, |r| r.mtime.0));
                (meta, finish, mtime)
            }
        };
        let mut tools = BTreeMap::new();
        let mut odd_tools = Vec::new();
        if tools_st.is_some() {
            let tdir = rel.join(TOOLS_DIR);
            for (name, st) in self.backing.list(&tdir).unwrap_or_default() {
                if !st.is_dir() {
                    continue;
                }
                match name.into_string() {
                    Ok(t) => {
                        let tool = self.tool(&tdir.join(&t));
                        tools.insert(t, tool);
                    }
                    Err(o) => odd_tools.push(lossy(o)),
                }
            }
        }
        let step = Step {
            number: n,
            dir: dir.to_string(),
            meta,
            finish,
            has_response: response.is_some(),
            response,
            stderr,
            mtime,
            tools,
            odd_tools,
        };
        if self.caching {
            self.grown |= self.step_cache.insert(rel, (keys, step.clone())).is_none();
        }
        step
    }

    fn tool(&mut self, rel: &Path) -> Tool {
        let entries = self.backing.list(rel).unwrap_or_default();
        let keys: Vec<StatKey> = entries.iter().map(|(_, s)| key(s)).collect();
        if let Some((k, t)) = self.tool_cache.get(rel)
            && *k == keys
        {
            return t.clone();
        }
        let stat_of = |name: &str| entries.iter().find(|(e, _)| e == name).map(|(_, s)| *s);
        let input_st = stat_of(INPUT_FILE);
        let input = match input_st {
            None => Err(format!("no {INPUT_FILE}")),
            Some(_) => read_input(&self.backing, &rel.join(INPUT_FILE)),
        };
        let output =
            stat_of(OUTPUT_FILE).map(|_| read_output(&self.backing, &rel.join(OUTPUT_FILE)));
        let tool = Tool {
            input,
            input_mtime: input_st.map(|s| s.mtime.0),
            output,
        };
        if self.caching {
            self.grown |= self
                .tool_cache
                .insert(rel.to_path_buf(), (keys, tool.clone()))
                .is_none();
        }
        tool
    }
}

fn lossy(o: OsString) -> String {
    o.to_string_lossy().into_owned()
}

fn read_small(backing: &Backing, rel: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let (f, _) = backing.open_file(rel).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take(limit)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    Ok(buf)
}

pub(super) fn read_meta(backing: &Backing, rel: &Path) -> Meta {
    let bytes = match read_small(backing, rel, META_READ_BYTES) {
        Ok(b) => b,
        Err(e) => return Meta::Bad(e),
    };
    match MetaRecord::parse(&bytes) {
        Ok(m) => Meta::Done {
            started: m.started,
            ended: m.ended,
            provider: m.provider,
        },
        Err(e) => Meta::Bad(e),
    }
}

/// How much of a `meta.json` is read.
pub(crate) const META_READ_BYTES: u64 = 1 << 20;

/// The fields of a step's `meta.json` (CONTRACT §4.1) the views read: the one parser of
/// that record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct MetaRecord {
    /// `started_at` and `ended_at`, in seconds since the epoch.
    pub(crate) started: Option<i64>,
    pub(crate) ended: Option<i64>,
    /// The provider row the call went through (`provider`; older records lack it).
    pub(crate) provider: Option<String>,
    /// `commit`: the branch tip the step started from (its entry's commit is a child).
    pub(crate) commit: Option<String>,
    /// `workflow_commit`: the config commit whose `workflow.yaml` governed the step.
    pub(crate) workflow_commit: Option<String>,
}

impl MetaRecord {
    /// A `meta.json`'s fields, or why it is no such record.
    pub(crate) fn parse(bytes: &[u8]) -> Result<MetaRecord, String> {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(v) if v.is_object() => {
                let s = |k: &str| v.get(k).and_then(Value::as_str);
                Ok(MetaRecord {
                    started: s("started_at").and_then(parse_utc),
                    ended: s("ended_at").and_then(parse_utc),
                    provider: s("provider").map(str::to_string),
                    commit: s("commit").map(str::to_string),
                    workflow_commit: s("workflow_commit").map(str::to_string),
                })
            }
            Ok(_) => Err("not a JSON object".into()),
            Err(e) => Err(format!("does not parse: {e}")),
        }
    }
}

/// A tool's name and a summary of its input: a `bash` command as typed, anything else
/// as compact JSON.
fn read_input(backing: &Backing, rel: &Path) -> Result<(String, String), String> {
    let bytes = read_small(backing, rel, 1 << 20)?;
    let v: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{INPUT_FILE} does not parse: {e}"))?;
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{INPUT_FILE} has no name"))?
        .to_string();
    let input = v.get("input").cloned().unwrap_or(Value::Null);
    let summary = match crate::workspace::steps::command_as_typed(&name, &input) {
        Some(cmd) => cmd.to_string(),
        None => input.to_string(),
    };
    Ok((name, crate::views::event::summary(&summary)))
}

/// A tool's `output.json`, read by the one parse that pages it too
/// ([`crate::paging::scan`]): streamed, so a capture of any size costs a pass and no
/// more memory than its index.
fn read_output(backing: &Backing, rel: &Path) -> Result<Output, String> {
    let (f, _) = backing.open_file(rel).map_err(|e| e.to_string())?;
    let r = crate::paging::scan::scan(&f, u64::MAX)
        .map_err(|_| format!("{OUTPUT_FILE} does not parse"))?;
    Ok(Output {
        exit_code: i64::from(r.exit_code),
        stdout_bytes: r.stdout.len,
        stderr_bytes: r.stderr.len,
        started: r.started_at.as_deref().and_then(parse_utc),
        ended: r.ended_at.as_deref().and_then(parse_utc),
    })
}
