//! `status` and `status.json`: one row per living agent, gathered from a [`Model`] and
//! rendered twice from the same rows.
//!
//! Guarantees: both renderings come from one [`Row`] per agent, so they always agree;
//! children follow their parent (the id minus its last two hyphen tokens), indented in
//! the text; a bad record or a deposit nobody consumes is a note under its agent's row,
//! never an error on the whole file. Under `--agent ID` the rows of other agents carry
//! only what git already shows (name, marks, title, the commit time); their state is
//! `-` unless a `held` mark says `held`, and their pending count is ID's own deposits.

use serde_json::{Value, json};

use super::model::{Held, Model, StepState};
use crate::deposit::format_utc;
use crate::workspace::ids::parent_of;
use crate::workspace::{INBOX_DIR, STEPS_DIR};

/// A deposit waiting longer than this is noted: a result nobody consumes (CONTRACT §9.7).
pub const STALE_PENDING_SECS: i64 = 3600;
/// The mark kinds the text's flags column shows (`status.json` lists every kind).
pub const FLAG_KINDS: [&str; 7] = [
    "notify",
    "abandoned",
    "conflicted",
    "budget-exhausted",
    "returned",
    "retarget",
    "workflow",
];
/// The `held` mark kind.
pub const HELD_KIND: &str = "held";
/// The text's header.
/// The first column's header on a home mount.
const WORKSPACE_HEADER: &str = "WORKSPACE";
const HEADER: [&str; 8] = [
    "NAME", "ID", "STATE", "STEP", "PENDING", "ACTIVITY", "FLAGS", "TITLE",
];
/// Indentation per generation in the name column, and before a note.
const INDENT: &str = "  ";
const NOTE: &str = "    ! ";
/// What the text shows for nothing.
const NONE: &str = "-";

/// One agent's facts, as both renderings show them.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The workspace it lives in, on a home mount (its mount-relative directory); the
    /// renderings then add a `WORKSPACE` column and a `workspace` field.
    pub workspace: Option<std::sync::Arc<str>>,
    pub id: String,
    pub name: Option<String>,
    pub parent: Option<String>,
    /// Generations below the nearest living ancestor that is a root of the listing.
    pub depth: usize,
    /// `running`, `held`, `pending`, `idle`, or `-` (not visible in this view).
    pub state: &'static str,
    pub step: Option<(String, StepState)>,
    pub pending: usize,
    pub marks: Vec<String>,
    pub held: Option<Held>,
    pub last_activity: Option<i64>,
    pub title: Option<String>,
    /// Bad records and stale deposits, one line each.
    pub notes: Vec<String>,
}

/// The rows of `model`, parents before their children, as `confined` may see them.
pub fn rows(model: &Model, confined: Option<&str>, now: i64) -> Vec<Row> {
    // Roots of the listing: agents whose parent is not living; then depth-first.
    let mut out = Vec::new();
    let ids: Vec<&String> = model.agents.keys().collect();
    fn living_parent<'a>(model: &Model, id: &'a str) -> Option<&'a str> {
        parent_of(id).filter(|p| model.agents.contains_key(*p))
    }
    let mut stack: Vec<(&String, usize)> = ids
        .iter()
        .rev()
        .filter(|id| living_parent(model, id).is_none())
        .map(|id| (*id, 0))
        .collect();
    while let Some((id, depth)) = stack.pop() {
        out.push(row(model, id, depth, confined, now));
        let children = ids
            .iter()
            .rev()
            .filter(|c| living_parent(model, c) == Some(id.as_str()));
        stack.extend(children.map(|c| (*c, depth + 1)));
    }
    out
}

fn row(model: &Model, id: &str, depth: usize, confined: Option<&str>, now: i64) -> Row {
    let a = &model.agents[id];
    let mine = confined.is_none_or(|me| me == id);
    let mut marks: Vec<String> = model.marks_of(id).map(|(k, _)| k.to_string()).collect();
    marks.sort();
    let held = model
        .marks_of(id)
        .find(|(k, _)| *k == HELD_KIND)
        .and_then(|(_, m)| m.value.as_deref().and_then(Held::parse));
    let visible_pending: Vec<_> = a
        .pending
        .iter()
        .filter(|(_, p)| mine || confined == Some(p.sender.as_str()))
        .collect();
    let state = if mine && a.running {
        "running"
    } else if held.is_some() {
        HELD_KIND
    } else if !mine {
        NONE
    } else if !a.pending.is_empty() {
        "pending"
    } else {
        "idle"
    };
    let step = a
        .latest
        .as_ref()
        .filter(|_| mine)
        .map(|s| (s.dir.clone(), s.state(true, a.running)));
    let mut notes = Vec::new();
    if let Some(h) = &held {
        notes.push(format!("held {}: {}", h.tool, h.reason));
    }
    for ((file, _), p) in &visible_pending {
        let age = now - p.deposited_at.unwrap_or(p.mtime);
        if age > STALE_PENDING_SECS {
            notes.push(format!(
                "{INBOX_DIR}/{id}/{file} from {} has waited {}h",
                p.sender,
                age / 3600
            ));
        }
    }
    if let (true, Some(s)) = (mine, &a.latest) {
        let dir = format!("{STEPS_DIR}/{id}/{}", s.dir);
        if let super::model::Meta::Bad(why) = &s.meta {
            notes.push(format!("{dir}/meta.json: {why}"));
        }
        for (t, tool) in &s.tools {
            if let (Err(why), true) = (&tool.input, tool.output.is_some()) {
                notes.push(format!("{dir}/tools/{t}: {why}"));
            }
            if let Some(Err(why)) = &tool.output {
                notes.push(format!("{dir}/tools/{t}: {why}"));
            }
        }
        for odd in &s.odd_tools {
            notes.push(format!("{dir}/tools/{odd}: the tool id is not UTF-8"));
        }
    }
    Row {
        workspace: None,
        id: id.to_string(),
        name: a.name.clone(),
        parent: parent_of(id).map(str::to_string),
        depth,
        state,
        step,
        pending: visible_pending.len(),
        marks,
        held,
        last_activity: a.last_activity,
        title: a.title.clone(),
        notes,
    }
}

/// The text table: a header, then one line per row (and its notes).
pub fn text(rows: &[Row]) -> String {
    table(rows, rows.iter().any(|r| r.workspace.is_some()))
}

/// [`text`] of a home mount's root: a `WORKSPACE` column first, even with no rows.
pub fn text_of_home(rows: &[Row]) -> String {
    table(rows, true)
}

fn table(rows: &[Row], home: bool) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let flags: Vec<&str> = FLAG_KINDS
                .iter()
                .copied()
                .filter(|k| r.marks.iter().any(|m| m == k))
                .collect();
            let ws = home.then(|| r.workspace.as_deref().unwrap_or(NONE).to_string());
            ws.into_iter()
                .chain([
                    format!(
                        "{}{}",
                        INDENT.repeat(r.depth),
                        r.name.as_deref().unwrap_or(NONE)
                    ),
                    r.id.clone(),
                    r.state.to_string(),
                    r.step
                        .as_ref()
                        .map_or(NONE.into(), |(n, s)| format!("{n}:{}", s.as_str())),
                    r.pending.to_string(),
                    r.last_activity.map_or(NONE.into(), format_utc),
                    if flags.is_empty() {
                        NONE.into()
                    } else {
                        flags.join(",")
                    },
                    r.title
                        .as_deref()
                        .map_or(NONE.into(), |t| t.replace(['\n', '\r'], " ")),
                ])
                .collect()
        })
        .collect();
    let header: Vec<&str> = home
        .then_some(WORKSPACE_HEADER)
        .into_iter()
        .chain(HEADER)
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for c in &cells {
        for (w, cell) in widths.iter_mut().zip(c.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cols: &[&str]| -> String {
        let mut l = String::new();
        for (i, (cell, w)) in cols.iter().zip(&widths).enumerate() {
            l.push_str(cell);
            if i + 1 != cols.len() {
                l.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        l.truncate(l.trim_end().len());
        l.push('\n');
        l
    };
    let mut out = line(&header);
    for (r, c) in rows.iter().zip(&cells) {
        let cols: Vec<&str> = c.iter().map(String::as_str).collect();
        out.push_str(&line(&cols));
        for n in &r.notes {
            out.push_str(NOTE);
            out.push_str(&n.replace(['\n', '\r'], " "));
            out.push('\n');
        }
    }
    out
}

/// `status.json`: an array of one object per row, and a newline.
pub fn json(rows: &[Row]) -> String {
    let v: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut v = json!({
                "id": r.id,
                "name": r.name,
                "parent": r.parent,
                "state": r.state,
                "step": r.step.as_ref().map(|(n, _)| n),
                "step_state": r.step.as_ref().map(|(_, s)| s.as_str()),
                "pending": r.pending,
                "marks": r.marks,
                "held": r.held,
                "last_activity": r.last_activity.map(format_utc),
                "title": r.title,
                "notes": r.notes,
            });
            if let (Some(ws), Some(o)) = (&r.workspace, v.as_object_mut()) {
                o.insert("workspace".into(), Value::from(&**ws));
            }
            v
        })
        .collect();
    let mut out = serde_json::to_string_pretty(&Value::Array(v)).unwrap_or_else(|_| "[]".into());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::views::model::Scanner;
    use crate::workspace::refs::Flavour;

    const NOW: i64 = 1_796_204_571 + 2 * 3600;

    fn workspace() -> (tempfile::TempDir, Fixture) {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1-a", Some("Alpha"), &[("title", b"Fix the build\n")])
            .unwrap();
        f.agent("r1-a-c1-x", None, &[]).unwrap();
        f.agent("r2-b", Some("Beta"), &[]).unwrap();
        f.blob_mark(
            "held",
            "r2-b",
            br#"{"tool_use_id":"t","tool":"bash","reason":"ask first"}"#,
        )
        .unwrap();
        f.commit_mark("notify", "r1-a", f.agent_tip("r1-a").unwrap())
            .unwrap();
        f.blob_mark("cwd", "r1-a", b"/tmp").unwrap();
        f.step("r1-a", 1, &[("meta.json", b"{}"), ("response.json", b"")])
            .unwrap();
        f.step("r1-a", 2, &[("response.json", b"")]).unwrap();
        f.step("r1-a-c1-x", 1, &[("meta.json", b"{oops")]).unwrap();
        f.inbox_file(
            "r1-a-c1-x",
            "user-001.md",
            b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nhi",
        )
        .unwrap();
        f.inbox_file(
            "r2-b",
            "r1-a-003.md",
            b"---\nfrom: r1-a\ndeposited_at: 2026-12-02T10:42:51Z\n---\nhi",
        )
        .unwrap();
        (t, f)
    }

    #[test]
    fn rows_follow_the_tree_and_the_state_rules() {
        let (_t, f) = workspace();
        let m = Scanner::new(f.root()).unwrap().scan();
        let rows = rows(&m, None, NOW);
        let ids: Vec<(&str, usize)> = rows.iter().map(|r| (r.id.as_str(), r.depth)).collect();
        assert_eq!(ids, vec![("r1-a", 0), ("r1-a-c1-x", 1), ("r2-b", 0)]);
        let [a, c, b] = [&rows[0], &rows[1], &rows[2]];
        assert_eq!(a.state, "idle");
        assert_eq!(a.step, Some(("002".into(), StepState::Failed)));
        assert_eq!(a.marks, vec!["cwd", "notify"]);
        assert_eq!(c.state, "pending");
        assert_eq!(c.parent.as_deref(), Some("r1-a"));
        assert_eq!(c.step, Some(("001".into(), StepState::Done)));
        assert!(
            c.notes.iter().any(|n| n.contains("meta.json")),
            "{:?}",
            c.notes
        );
        assert!(
            c.notes.iter().any(|n| n.contains("has waited 2h")),
            "{:?}",
            c.notes
        );
        assert_eq!(b.state, "held");
        assert_eq!(b.held.as_ref().unwrap().reason, "ask first");
        assert_eq!(b.pending, 1);
        assert!(
            b.notes.iter().all(|n| !n.contains("waited")),
            "{:?}",
            b.notes
        );

        let t = text(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAME"));
        assert!(lines[1].starts_with("Alpha "), "{t}");
        assert!(
            lines[1].contains(" 002:failed ") && lines[1].contains(" notify "),
            "{t}"
        );
        assert!(lines[1].ends_with("Fix the build"), "{t}");
        assert!(lines[2].starts_with("  - "), "{t}");
        assert!(t.contains("    ! held bash: ask first\n"), "{t}");
        // Every row's columns line up with the header's.
        let col = lines[0].find("STATE").unwrap();
        assert_eq!(&lines[1][col..col + 4], "idle");

        let v: Value = serde_json::from_str(&json(&rows)).unwrap();
        assert_eq!(v[0]["id"], "r1-a");
        assert_eq!(v[0]["step"], "002");
        assert_eq!(v[0]["step_state"], "failed");
        assert_eq!(v[0]["marks"], json!(["cwd", "notify"]));
        assert_eq!(v[1]["parent"], "r1-a");
        assert_eq!(v[2]["held"]["tool"], "bash");
        assert_eq!(v[2]["state"], "held");
        assert_eq!(v[0]["held"], Value::Null);
    }

    #[test]
    fn a_confined_view_shows_others_only_what_git_shows() {
        let (_t, f) = workspace();
        let m = Scanner::new(f.root()).unwrap().scan();
        let rows = rows(&m, Some("r1-a"), NOW);
        let c = rows.iter().find(|r| r.id == "r1-a-c1-x").unwrap();
        assert_eq!((c.state, c.step.clone(), c.pending), (NONE, None, 0));
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        let b = rows.iter().find(|r| r.id == "r2-b").unwrap();
        assert_eq!(b.state, "held", "a held mark is in git");
        assert_eq!(b.pending, 1, "r1-a's own deposit to Beta");
        let a = rows.iter().find(|r| r.id == "r1-a").unwrap();
        assert_eq!(a.step, Some(("002".into(), StepState::Failed)));
    }
}
