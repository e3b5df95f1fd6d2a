//! What `transcript.md`'s live tail is made from ([`crate::records::live`]): the facts of
//! where an agent stands, read from its newest step directory, its inbox and its marks
//! at the moment of a `stat` or a read.
//!
//! The rules, each from litany's own order of writes (CONTRACT §4.1, litany's
//! `dispatch/advance/hop.rs`):
//! - The newest step's model entry is **not committed** while its `staging.json` exists
//!   (litany renames it into the worktree as the entry) or while the branch tip is still
//!   the `commit` its `meta.json` names (the entry's commit is that tip's child): the
//!   second covers the instant between the rename and the commit.
//! - An agent is **live** while some process holds the `FLOCK` on its `inbox/<id>`
//!   (read from `/proc/locks`, never probed, CONTRACT §3.7).
//! - The step **failed** when it has no `meta.json` and nobody holds the agent: the model
//!   call ended in an error, a `length` finish, a half stream, or a stop.
//! - A **running** tool has an `input.json` and no `output.json` under the newest step's
//!   `tools/`, while the agent is live and its model entry committed (litany runs the
//!   calls one at a time, in order).
//! - **Waiting** deposits are the names the drain accepts, in its order: by mtime, then
//!   name (CONTRACT §3.6).
//!
//! Nothing here holds a descriptor on an `inbox/<id>` directory past one listing, and
//! nothing is written.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use git2::Oid;

use super::{Tree, TreeError};
use crate::paging::CaptureKey;
use crate::records::live::{Facts, HeldFacts, ModelFacts, WOUND_LOG_LINES, WoundFacts, last_lines};
use crate::views::model::{Held, META_READ_BYTES, MetaRecord, held_flocks};
use crate::views::status::HELD_KIND;
use crate::workspace::backing::Stat;
use crate::workspace::inbox::pending_sender;
use crate::workspace::refs::MESSAGES_DIR;
use crate::workspace::refs::{GitEntry, Snapshot};
use crate::workspace::steps::{
    DRIVER_LOG, INPUT_FILE, META_FILE, OUTPUT_FILE, REQUEST_FILE, RESPONSE_FILE, STAGING_FILE,
    STDERR_FILE, TOOLS_DIR,
};
use crate::workspace::{AGENTS_DIR, INBOX_DIR, STEPS_DIR};

/// How much of the end of a log is read for its last lines.
const LOG_TAIL_BYTES: u64 = 16 << 10;
/// The marks litany's stock workflow sets at the branch tip when `litany stop` ends a
/// step (its `branch_stopped` binding; only a stop's epitaph fires that event).
const STOP_MARKS: [&str; 2] = ["abandoned", "notify"];
/// The governing workflow's file in a config commit.
const WORKFLOW_FILE: &str = "workflow.yaml";

/// The names of a listed directory, with their stats.
type Listing = Vec<(OsString, Stat)>;

fn stat_of<'a>(listing: &'a Listing, name: &str) -> Option<&'a Stat> {
    listing.iter().find(|(n, _)| n == name).map(|(_, s)| s)
}

impl Tree {
    /// The facts of where `agent`, whose branch tip is `tip`, stands now, and the newest
    /// modification time among them (seconds), for the file's mtime.
    pub(super) fn live_facts(
        &self,
        agent: &str,
        tip: Oid,
        snap: &Snapshot,
    ) -> Result<(Facts, i64), TreeError> {
        let mut facts = Facts::default();
        let mut newest = 0i64;
        let inbox = Path::new(INBOX_DIR).join(agent);
        let inbox_st = self.backing.lstat(&inbox).ok().filter(Stat::is_dir);
        let live = inbox_st.is_some_and(|st| crate::locks::is_held(&held_flocks(), st.dev, st.ino));
        let mut waiting = if inbox_st.is_some() {
            self.waiting(&inbox, &mut newest)
        } else {
            Vec::new()
        };
        if let Some(value) = snap
            .marks
            .get(HELD_KIND)
            .and_then(|m| m.get(agent))
            .and_then(|oid| self.refs.blob(*oid).ok())
            .and_then(|b| Held::parse(&String::from_utf8_lossy(&b)))
        {
            facts.held = Some(HeldFacts {
                tool_use_id: value.tool_use_id,
                tool: value.tool,
                reason: value.reason,
                control: None,
                advance: format!("litany advance {} {agent}", self.ws.root().display()),
            });
        }
        let Some((step, _)) = self.latest_step(agent)? else {
            facts.waiting = waiting.into_iter().map(|(_, n, b)| (n, b)).collect();
            return Ok((facts, newest));
        };
        let dir = Path::new(STEPS_DIR).join(agent).join(&step);
        let listing = self.backing.list(&dir).unwrap_or_default();
        for (_, st) in &listing {
            newest = newest.max(st.mtime.0);
        }
        let meta = stat_of(&listing, META_FILE).and_then(|_| self.meta(&dir.join(META_FILE)));
        let has_meta = stat_of(&listing, META_FILE).is_some();
        if let (Some(held), Some(m)) = (&mut facts.held, &meta) {
            held.control = m
                .workflow_commit
                .as_deref()
                .and_then(|c| self.tool_control(c));
        }
        let tip_hex = tip.to_string();
        let uncommitted = stat_of(&listing, STAGING_FILE).is_some()
            || !has_meta
            || meta
                .as_ref()
                .is_some_and(|m| m.commit.as_deref() == Some(&tip_hex));
        if uncommitted && stat_of(&listing, REQUEST_FILE).is_some() {
            let origin = self
                .request_model(&dir.join(REQUEST_FILE))
                .unwrap_or_else(|| "model".to_string());
            let response = if stat_of(&listing, RESPONSE_FILE).is_some() {
                self.backing
                    .open_file(&dir.join(RESPONSE_FILE))
                    .ok()
                    .map(|(f, st)| (f, CaptureKey::from_stat(&st)))
            } else {
                None
            };
            facts.model = Some(ModelFacts {
                step: step.clone(),
                origin,
                response,
                live,
                closed: has_meta || !live,
            });
        }
        if uncommitted && !live {
            let why = match (stat_of(&listing, REQUEST_FILE), &facts.model) {
                (None, _) => Some(format!(
                    "no {REQUEST_FILE}: the step never called the model"
                )),
                (Some(_), Some(ModelFacts { response: None, .. })) => {
                    Some(format!("no {RESPONSE_FILE}: the model call never started"))
                }
                _ if has_meta => {
                    Some("the model call ended, but its entry was never committed".to_string())
                }
                _ => None,
            };
            let stopped_mark = STOP_MARKS
                .iter()
                .find(|kind| snap.marks.get(**kind).and_then(|m| m.get(agent)) == Some(&tip))
                .map(|kind| kind.to_string());
            facts.wound = Some(WoundFacts {
                log: self.wound_log(agent, &dir),
                unsure: has_meta,
                step,
                why,
                stopped_mark,
            });
        } else if !uncommitted && live && facts.held.is_none() {
            facts.running = self.running_tool(&dir.join(TOOLS_DIR));
        }
        if live && facts.model.is_none() && facts.running.is_none() && facts.held.is_none() {
            let written = self.written(agent, tip, &dir.join(TOOLS_DIR));
            // The inbox was listed before the worktree: a delivery renamed in between is
            // in both listings, one file (one inode). It is shown once, as written.
            waiting.retain(|(ino, _, _)| !written.iter().any(|(i, ..)| i == ino));
            facts.written = written.into_iter().map(|(_, n, b, s)| (n, b, s)).collect();
        }
        facts.waiting = waiting.into_iter().map(|(_, n, b)| (n, b)).collect();
        Ok((facts, newest))
    }

    /// The entries litany has written into `agent`'s worktree and not committed at
    /// `tip`: a delivery renamed there, a tool's result written there, each committed an
    /// instant later. Looked for only while an executor is between a model call and a
    /// tool (the only moments these exist), since it lists the whole transcript. Each
    /// with its inode number first.
    fn written(
        &self,
        agent: &str,
        tip: Oid,
        tools: &Path,
    ) -> Vec<(u64, String, Vec<u8>, Option<i64>)> {
        let Ok(committed) = self.records.transcript_rendering(&self.refs, tip) else {
            return Vec::new();
        };
        let max = committed.max_seq();
        let messages = Path::new(AGENTS_DIR).join(agent).join(MESSAGES_DIR);
        let mut found: Vec<(u32, String, u64)> = self
            .backing
            .list(&messages)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, st)| st.is_file())
            .filter_map(|(name, st)| {
                let name = name.into_string().ok()?;
                let n: u32 = name.split('-').next()?.parse().ok()?;
                (n > max).then_some((n, name, st.ino))
            })
            .collect();
        found.sort();
        found
            .into_iter()
            .filter_map(|(_, name, ino)| {
                let (mut f, _) = self.backing.open_file(&messages.join(&name)).ok()?;
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).ok()?;
                // A result: when the tool it answers started, from its record.
                let since = serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|v| v.get(0)?.get("tool_use_id")?.as_str().map(str::to_string))
                    .and_then(|id| self.backing.lstat(&tools.join(id).join(INPUT_FILE)).ok())
                    .map(|st| st.mtime.0);
                Some((ino, name, bytes, since))
            })
            .collect()
    }

    /// The deposits of `inbox` the drain accepts, in its order, with their inode numbers
    /// and bytes.
    fn waiting(&self, inbox: &Path, newest: &mut i64) -> Vec<(u64, String, Vec<u8>)> {
        let mut pending: Vec<((i64, i64), String, u64)> = self
            .backing
            .list(inbox)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, st)| st.is_file())
            .filter_map(|(name, st)| {
                let name = name.into_string().ok()?;
                pending_sender(&name)?;
                Some((st.mtime, name, st.ino))
            })
            .collect();
        pending.sort();
        pending
            .into_iter()
            .filter_map(|(mtime, name, ino)| {
                let (mut f, _) = self.backing.open_file(&inbox.join(&name)).ok()?;
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).ok()?;
                *newest = (*newest).max(mtime.0);
                Some((ino, name, bytes))
            })
            .collect()
    }

    fn meta(&self, rel: &Path) -> Option<MetaRecord> {
        let (f, _) = self.backing.open_file(rel).ok()?;
        let mut bytes = Vec::new();
        f.take(META_READ_BYTES).read_to_end(&mut bytes).ok()?;
        MetaRecord::parse(&bytes).ok()
    }

    /// The model a step's `request.json` names: what litany names its entry after.
    fn request_model(&self, rel: &Path) -> Option<String> {
        let (f, st) = self.backing.open_file(rel).ok()?;
        self.records
            .request_model(&f, CaptureKey::from_stat(&st))
            .ok()
            .flatten()
    }

    /// The `tool_control` command of the `workflow.yaml` at config commit `commit`.
    fn tool_control(&self, commit: &str) -> Option<String> {
        let oid = Oid::from_str(commit).ok()?;
        let Ok(Some(GitEntry::Blob { oid, .. })) = self.refs.entry_at(oid, &[WORKFLOW_FILE]) else {
            return None;
        };
        tool_control_command(&String::from_utf8_lossy(&self.refs.blob(oid).ok()?))
    }

    /// The tool of `tools` that runs now: an `input.json` and no `output.json`, the
    /// newest if there were several; with when its `input.json` was written.
    fn running_tool(&self, tools: &Path) -> Option<(String, i64)> {
        self.backing
            .list(tools)
            .ok()?
            .into_iter()
            .filter(|(_, st)| st.is_dir())
            .filter_map(|(name, _)| {
                let name = name.into_string().ok()?;
                let listing = self.backing.list(&tools.join(&name)).ok()?;
                let input = stat_of(&listing, INPUT_FILE)?;
                stat_of(&listing, OUTPUT_FILE)
                    .is_none()
                    .then_some((input.mtime, name))
            })
            .max()
            .map(|(mtime, name)| (name, mtime.0))
    }

    /// The last lines of a failed step's `stderr.log`, else of the agent's `driver.log`:
    /// (workspace-relative path, lines).
    fn wound_log(&self, agent: &str, step_dir: &Path) -> Option<(String, String)> {
        let logs: [PathBuf; 2] = [
            step_dir.join(STDERR_FILE),
            Path::new(STEPS_DIR).join(agent).join(DRIVER_LOG),
        ];
        logs.into_iter().find_map(|rel| {
            let (f, st) = self.backing.open_file(&rel).ok()?;
            let from = st.size.saturating_sub(LOG_TAIL_BYTES);
            let mut buf = vec![0u8; (st.size - from) as usize];
            let n = f.read_at(&mut buf, from).ok()?;
            buf.truncate(n);
            let text = String::from_utf8_lossy(&buf);
            let lines = last_lines(&text, WOUND_LOG_LINES);
            (!lines.trim().is_empty()).then(|| (rel.display().to_string(), lines.to_string()))
        })
    }
}

/// The `command:` of a `workflow.yaml`'s top-level `tool_control:` block (litany's
/// `config/tool_control.rs`): a line scan, enough for the one scalar this needs.
fn tool_control_command(yaml: &str) -> Option<String> {
    let mut inside = false;
    for line in yaml.lines() {
        let content = line.split(" #").next().unwrap_or(line);
        if content.trim().is_empty() {
            continue;
        }
        if !line.starts_with([' ', '\t']) {
            inside = content.trim_end() == "tool_control:";
            continue;
        }
        if inside && let Some(v) = content.trim().strip_prefix("command:") {
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
            return (!v.is_empty()).then(|| v.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_control_command_of_a_workflow() {
        let y = "version: 2\ntool_control:\n  # the gate\n  command: /usr/bin/gate  # here\nbudgets:\n  command: no\n";
        assert_eq!(tool_control_command(y).as_deref(), Some("/usr/bin/gate"));
        assert_eq!(
            tool_control_command("tool_control:\n  command: \"a b\"\n").as_deref(),
            Some("a b")
        );
        assert_eq!(tool_control_command("other:\n  command: x\n"), None);
        assert_eq!(tool_control_command(""), None);
    }
}
