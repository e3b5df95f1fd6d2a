//! `status`, `status.json`, `attention` and `attention.json`: one row per living agent,
//! gathered from a [`Model`] and rendered from the same rows.
//!
//! Guarantees: every rendering comes from one [`Row`] per agent, so they always agree;
//! children follow their parent (the id minus its last two hyphen tokens), indented in
//! the text; a signal ([`super::signal`]), a bad record or a deposit nobody consumes is a
//! `!` line under its agent's row, never an error on the whole file; `attention` is the
//! rows' signals alone, most urgent first. Spend ([`super::model::spend`]) is shown for
//! an agent and for its tree (it and every `<id>-*`), and the budget its workflow sets
//! against its litany tree (the first two hyphen tokens of its id, as litany's budget
//! check counts). Under `--agent ID` the rows of other agents carry only what git
//! already shows (name, marks, the signals of marks, title, the commit time); their
//! state is `-` unless a `held` mark says `held`, their pending count is ID's own
//! deposits, and no row shows another agent's spend (nor a tree's, nor a budget's
//! spent, which would sum it).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::model::{Budget, Held, Mark, Model, Spend, StepState, WorkflowFrom};
use super::prices::{Cost, Prices};
use super::signal::{Signal, visible};
use crate::workspace::clock::format_utc;
use crate::workspace::ids::parent_of;
use crate::workspace::{INBOX_DIR, STEPS_DIR};

/// A deposit waiting longer than this is noted: a result nobody consumes (CONTRACT §9.7).
pub(crate) const STALE_PENDING_SECS: i64 = 3600;
/// The mark kinds the text's flags column shows (`status.json` lists every kind).
pub(crate) const FLAG_KINDS: [&str; 7] = [
    "notify",
    "abandoned",
    "conflicted",
    "budget-exhausted",
    "returned",
    "retarget",
    "workflow",
];
/// The `held` mark kind.
pub(crate) const HELD_KIND: &str = "held";
/// The first column's header on a home mount.
const WORKSPACE_HEADER: &str = "WORKSPACE";
/// The text's columns (`COST` only with prices).
const HEADER: [&str; 10] = [
    "NAME", "ID", "STATE", "STEP", "PENDING", "TOKENS", "COST", "ACTIVITY", "FLAGS", "TITLE",
];
const COST_COLUMN: usize = 6;
/// Indentation per generation in the name column, and before a note.
const INDENT: &str = "  ";
const NOTE: &str = "    ! ";
/// What the text shows for nothing.
const NONE: &str = "-";

/// One agent's facts, as both renderings show them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// The workspace it lives in, on a home mount (its mount-relative directory); the
    /// renderings then add a `WORKSPACE` column and a `workspace` field.
    pub(crate) workspace: Option<std::sync::Arc<str>>,
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) parent: Option<String>,
    /// Generations below the nearest living ancestor that is a root of the listing.
    pub(crate) depth: usize,
    /// `running`, `held`, `pending`, `idle`, or `-` (not visible in this view).
    pub(crate) state: &'static str,
    pub(crate) step: Option<(String, StepState)>,
    pub(crate) pending: usize,
    pub(crate) marks: Vec<String>,
    pub(crate) held: Option<Held>,
    pub(crate) last_activity: Option<i64>,
    pub(crate) title: Option<String>,
    /// Bad records and stale deposits, one line each.
    pub(crate) notes: Vec<String>,
    /// What needs a look, most urgent first (paths workspace-relative).
    pub(crate) signals: Vec<Signal>,
    /// What its own steps cost; `None` when they are not this view's to see.
    pub(crate) spend: Option<Figures>,
    /// What its tree's steps cost (it and every `<id>-*`).
    pub(crate) tree: Option<Figures>,
    /// The budget its workflow sets, when it sets one.
    pub(crate) budget: Option<BudgetRow>,
}

/// What some steps cost, as the views show it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Figures {
    pub(crate) tokens: u64,
    pub(crate) wall_seconds: u64,
    pub(crate) steps: u64,
    /// With prices only.
    pub(crate) cost: Option<Cost>,
}

impl Figures {
    pub(crate) fn of(s: &Spend, prices: Option<&Prices>) -> Figures {
        let cost = prices.map(|p| {
            let mut c = Cost::default();
            for (payer, t) in &s.by_payer {
                c.add(&p.cost(payer, t));
            }
            c
        });
        Figures {
            tokens: s.tokens,
            wall_seconds: s.wall_seconds,
            steps: s.steps,
            cost,
        }
    }

    pub(crate) fn add(&mut self, o: &Figures) {
        self.tokens = self.tokens.saturating_add(o.tokens);
        self.wall_seconds = self.wall_seconds.saturating_add(o.wall_seconds);
        self.steps = self.steps.saturating_add(o.steps);
        if let Some(oc) = &o.cost {
            self.cost.get_or_insert_with(Cost::default).add(oc);
        }
    }

    fn json(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("tokens".into(), self.tokens.into());
        m.insert("wall_seconds".into(), self.wall_seconds.into());
        m.insert("steps".into(), self.steps.into());
        if let Some(c) = &self.cost {
            m.insert("cost_usd".into(), usd(c.usd));
            m.insert("unpriced_tokens".into(), c.unpriced_tokens.into());
        }
        m
    }
}

/// Dollars rounded to the millionth, as JSON.
fn usd(v: f64) -> Value {
    serde_json::Number::from_f64((v * 1e6).round() / 1e6).map_or(Value::Null, Value::Number)
}

/// A budget and what its tree spent of it (`spent`: `None` when that is not this view's
/// to see).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BudgetRow {
    pub(crate) max_total_tokens: Option<u64>,
    pub(crate) spent: Option<u64>,
    pub(crate) max_wall_seconds: Option<u64>,
    pub(crate) wall_spent: Option<u64>,
    /// The litany tree the budget counts (the first two hyphen tokens of the id).
    pub(crate) root: String,
    /// The commit whose `workflow.yaml` was read, and why that one.
    pub(crate) workflow: String,
    pub(crate) from: String,
}

/// The root of an agent's tree as litany's budget check takes it
/// (`prompt/budget/mod.rs` `root_of`): the id up to its second hyphen.
pub(crate) fn litany_root(id: &str) -> &str {
    match id.match_indices('-').nth(1) {
        Some((at, _)) => &id[..at],
        None => id,
    }
}

/// Every tree's figures: for each agent's, added to it and to each prefix of its id that
/// ends before a hyphen (so `tree["a-b"]` sums `a-b` and every `a-b-*`).
fn trees(own: &BTreeMap<&str, Figures>) -> crate::FastMap<String, Figures> {
    let mut out: crate::FastMap<String, Figures> = crate::FastMap::default();
    for (id, f) in own {
        out.entry(id.to_string()).or_default().add(f);
        for (at, _) in id.match_indices('-') {
            out.entry(id[..at].to_string()).or_default().add(f);
        }
    }
    out
}

/// The rows of `model`, parents before their children, as `confined` may see them,
/// priced with `prices` when given.
pub(crate) fn rows(
    model: &Model,
    confined: Option<&str>,
    now: i64,
    prices: Option<&Prices>,
) -> Vec<Row> {
    let own: BTreeMap<&str, Figures> = model
        .agents
        .iter()
        .filter(|(id, _)| confined.is_none_or(|me| me == id.as_str()))
        .map(|(id, a)| (id.as_str(), Figures::of(&a.account.spend, prices)))
        .collect();
    let trees = confined.is_none().then(|| trees(&own));
    // Each agent's marks, found once: a row's own lookup over all the marks made the
    // listing quadratic in agents (a soak's 270-agent workspace took 15 ms at rest).
    let mut marks: crate::FastMap<&str, Vec<(&str, &Mark)>> = crate::FastMap::default();
    for ((kind, who), m) in &model.marks {
        marks
            .entry(who.as_str())
            .or_default()
            .push((kind.as_str(), m));
    }
    let costs = Costs {
        own: &own,
        trees: trees.as_ref(),
        marks: &marks,
    };
    // Roots of the listing: agents whose parent is not living; then depth-first, each
    // agent's children in id order (found once, likewise).
    let mut roots: Vec<&String> = Vec::new();
    let mut children: crate::FastMap<&str, Vec<&String>> = crate::FastMap::default();
    for id in model.agents.keys() {
        match parent_of(id).filter(|p| model.agents.contains_key(*p)) {
            Some(p) => children.entry(p).or_default().push(id),
            None => roots.push(id),
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<(&String, usize)> = roots.iter().rev().map(|id| (*id, 0)).collect();
    while let Some((id, depth)) = stack.pop() {
        out.push(row(model, id, depth, confined, now, &costs));
        if let Some(kids) = children.get(id.as_str()) {
            stack.extend(kids.iter().rev().map(|c| (*c, depth + 1)));
        }
    }
    out
}

/// The figures rows are made with.
struct Costs<'a> {
    own: &'a BTreeMap<&'a str, Figures>,
    /// `None` under `--agent`.
    trees: Option<&'a crate::FastMap<String, Figures>>,
    /// Each agent's marks, by kind.
    marks: &'a crate::FastMap<&'a str, Vec<(&'a str, &'a Mark)>>,
}

fn budget_row(id: &str, b: &Budget, costs: &Costs) -> BudgetRow {
    let root = litany_root(id);
    let spent = costs
        .trees
        .map(|t| t.get(root).cloned().unwrap_or_default());
    BudgetRow {
        max_total_tokens: b.max_total_tokens,
        spent: spent.as_ref().map(|f| f.tokens),
        max_wall_seconds: b.max_wall_seconds,
        wall_spent: spent.as_ref().map(|f| f.wall_seconds),
        root: root.to_string(),
        workflow: b.workflow.to_string(),
        from: match &b.from {
            WorkflowFrom::Mark { holder } => format!("marks/workflow/{holder}"),
            WorkflowFrom::LineageTip => "config lineage tip".into(),
            WorkflowFrom::Governing => "governing config commit".into(),
        },
    }
}

fn row(
    model: &Model,
    id: &str,
    depth: usize,
    confined: Option<&str>,
    now: i64,
    costs: &Costs,
) -> Row {
    let a = &model.agents[id];
    let mine = confined.is_none_or(|me| me == id);
    let own_marks = costs.marks.get(id).map(Vec::as_slice).unwrap_or_default();
    let mut marks: Vec<String> = own_marks.iter().map(|(k, _)| k.to_string()).collect();
    marks.sort();
    let held = own_marks
        .iter()
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
    let signals: Vec<Signal> = a
        .signals
        .as_ref()
        .map(|s| {
            s.iter()
                .filter(|s| visible(s.kind, id, confined))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
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
    let budget = a.budget.as_ref().map(|b| budget_row(id, b, costs));
    // The token budget shows in the TOKENS cell; a wall budget has no column, so the
    // tree's root says how much of it is spent.
    if let Some(b) = &budget
        && b.root == id
        && let (Some(max), Some(spent)) = (b.max_wall_seconds, b.wall_spent)
    {
        notes.push(format!(
            "wall budget of the tree: {} of {} spent ({} workflow)",
            duration(spent),
            duration(max),
            b.workflow
        ));
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
        signals,
        spend: costs.own.get(id).cloned(),
        tree: costs.trees.map(|t| t.get(id).cloned().unwrap_or_default()),
        budget,
    }
}

/// `n` tokens in a few characters: `850`, `12.3k`, `123k`, `1.2M`.
pub fn compact(n: u64) -> String {
    if n < 1000 {
        return n.to_string();
    }
    let mut v = n as f64;
    for unit in ["k", "M", "G", "T"] {
        v /= 1000.0;
        if v < 99.95 {
            let s = format!("{v:.1}");
            return format!("{}{unit}", s.strip_suffix(".0").unwrap_or(&s));
        }
        if v < 999.5 {
            return format!("{v:.0}{unit}");
        }
    }
    format!("{v:.0}P")
}

/// A duration in seconds as `45s`, `12m05s`, `3h02m` or `2d04h`.
pub(crate) fn duration(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A cost as `$1.23`, `$1.23+?` when some tokens had no price, `?` when none had.
fn money(c: &Cost, tokens: u64) -> String {
    match (c.unpriced_tokens, tokens) {
        (_, 0) => "$0.00".into(),
        (u, t) if u >= t => "?".into(),
        (0, _) => format!("${:.2}", c.usd),
        _ => format!("${:.2}+?", c.usd),
    }
}

/// What a row's `TOKENS` and `COST` show: its tree's on a root of the listing, else its
/// own; with a token budget, the tree's spend against it.
fn shown(r: &Row) -> Option<&Figures> {
    if r.depth == 0 {
        r.tree.as_ref().or(r.spend.as_ref())
    } else {
        r.spend.as_ref()
    }
}

fn tokens_cell(r: &Row) -> String {
    if r.depth == 0
        && let Some(b) = &r.budget
        && let (Some(max), Some(spent)) = (b.max_total_tokens, b.spent)
    {
        return format!("{}/{}", compact(spent), compact(max));
    }
    shown(r).map_or(NONE.into(), |f| compact(f.tokens))
}

/// The total of every row's own figures, and the line that says it.
fn total_line(rows: &[Row], scope: &str) -> String {
    let mut total = Figures::default();
    for r in rows {
        if let Some(f) = &r.spend {
            total.add(f);
        }
    }
    let mut line = format!(
        "{scope}: {} tokens, {} wall, {} steps",
        compact(total.tokens),
        duration(total.wall_seconds),
        total.steps
    );
    if let Some(c) = &total.cost {
        line.push_str(&format!(", ${:.2}", c.usd));
        if c.unpriced_tokens > 0 {
            line.push_str(&format!(
                " and {} tokens unpriced",
                compact(c.unpriced_tokens)
            ));
        }
    }
    line.push('\n');
    line
}

/// The text table: the workspace's total, a header, then one line per row (and its
/// `!` lines).
pub(crate) fn text(rows: &[Row]) -> String {
    table(rows, rows.iter().any(|r| r.workspace.is_some()))
}

/// [`text`] of a home mount's root: a `WORKSPACE` column first, even with no rows.
pub(crate) fn text_of_home(rows: &[Row]) -> String {
    table(rows, true)
}

fn table(rows: &[Row], home: bool) -> String {
    let priced = rows
        .iter()
        .any(|r| r.spend.as_ref().is_some_and(|f| f.cost.is_some()));
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
                    tokens_cell(r),
                    shown(r)
                        .and_then(|f| f.cost.as_ref().map(|c| money(c, f.tokens)))
                        .unwrap_or_else(|| NONE.into()),
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
                .enumerate()
                .filter(|(i, _)| priced || *i != COST_COLUMN + usize::from(home))
                .map(|(_, c)| c)
                .collect()
        })
        .collect();
    let header: Vec<&str> = home
        .then_some(WORKSPACE_HEADER)
        .into_iter()
        .chain(
            HEADER
                .iter()
                .enumerate()
                .filter(|(i, _)| priced || *i != COST_COLUMN)
                .map(|(_, h)| *h),
        )
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
    let mut out = total_line(rows, if home { "home" } else { "workspace" });
    out.push_str(&line(&header));
    for (r, c) in rows.iter().zip(&cells) {
        let cols: Vec<&str> = c.iter().map(String::as_str).collect();
        out.push_str(&line(&cols));
        for s in &r.signals {
            out.push_str(NOTE);
            out.push_str(
                &format!("{}: {} ({})", s.kind.as_str(), s.says, s.path).replace(['\n', '\r'], " "),
            );
            out.push('\n');
        }
        for n in &r.notes {
            out.push_str(NOTE);
            out.push_str(&n.replace(['\n', '\r'], " "));
            out.push('\n');
        }
    }
    out
}

/// `status.json`: an array of one object per row, and a newline.
pub(crate) fn json(rows: &[Row]) -> String {
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
                "signals": r.signals.iter().map(|s| json!({
                    "kind": s.kind.as_str(),
                    "says": s.says,
                    "path": s.path,
                })).collect::<Vec<Value>>(),
            });
            if let Some(o) = v.as_object_mut() {
                let own = r.spend.as_ref().map(Figures::json).unwrap_or_default();
                for k in ["tokens", "wall_seconds", "steps"] {
                    o.insert(k.into(), own.get(k).cloned().unwrap_or(Value::Null));
                }
                for k in ["cost_usd", "unpriced_tokens"] {
                    if let Some(v) = own.get(k) {
                        o.insert(k.into(), v.clone());
                    }
                }
                o.insert(
                    "tree".into(),
                    r.tree
                        .as_ref()
                        .map_or(Value::Null, |t| Value::Object(t.json())),
                );
                o.insert(
                    "budget".into(),
                    r.budget.as_ref().map_or(Value::Null, budget_json),
                );
                if let Some(ws) = &r.workspace {
                    o.insert("workspace".into(), Value::from(&**ws));
                }
            }
            v
        })
        .collect();
    let mut out = serde_json::to_string_pretty(&Value::Array(v)).unwrap_or_else(|_| "[]".into());
    out.push('\n');
    out
}

fn budget_json(b: &BudgetRow) -> Value {
    let left = |max: Option<u64>, spent: Option<u64>| match (max, spent) {
        (Some(m), Some(s)) => Value::from(m.saturating_sub(s)),
        _ => Value::Null,
    };
    let mut v = json!({
        "max_total_tokens": b.max_total_tokens,
        "spent": b.spent,
        "left": left(b.max_total_tokens, b.spent),
        "tree": b.root,
        "workflow": b.workflow,
        "workflow_from": b.from,
    });
    if let (Some(max), Some(o)) = (b.max_wall_seconds, v.as_object_mut()) {
        o.insert("max_wall_seconds".into(), max.into());
        o.insert("wall_seconds".into(), b.wall_spent.into());
        o.insert("wall_left".into(), left(Some(max), b.wall_spent));
    }
    v
}

/// One line of `attention`: a raised signal and whose it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attention {
    pub(crate) workspace: Option<Arc<str>>,
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) signal: Signal,
}

/// The signals of `rows`, most urgent first (then in the rows' order).
pub(crate) fn attention(rows: &[Row]) -> Vec<Attention> {
    let mut out: Vec<(usize, Attention)> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.signals.iter().map(move |s| {
                (
                    i,
                    Attention {
                        workspace: r.workspace.clone(),
                        id: r.id.clone(),
                        name: r.name.clone(),
                        signal: s.clone(),
                    },
                )
            })
        })
        .collect();
    out.sort_by_key(|(i, a)| (a.signal.kind, *i));
    out.into_iter().map(|(_, a)| a).collect()
}

/// `attention`: one line per signal, most urgent first, with a header; empty when
/// nothing needs a look.
pub(crate) fn attention_text(list: &[Attention]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let home = list.iter().any(|a| a.workspace.is_some());
    let cells: Vec<Vec<String>> = list
        .iter()
        .map(|a| {
            let ws = home.then(|| a.workspace.as_deref().unwrap_or(NONE).to_string());
            ws.into_iter()
                .chain([
                    a.signal.kind.as_str().to_string(),
                    a.name.clone().unwrap_or_else(|| NONE.into()),
                    a.id.clone(),
                    a.signal.path.clone(),
                    a.signal.says.replace(['\n', '\r'], " "),
                ])
                .collect()
        })
        .collect();
    let header: Vec<String> = home
        .then_some(WORKSPACE_HEADER)
        .into_iter()
        .chain(["SIGNAL", "NAME", "ID", "PATH", "SAYS"])
        .map(str::to_string)
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for c in &cells {
        for (w, cell) in widths.iter_mut().zip(c) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for c in std::iter::once(&header).chain(&cells) {
        let mut l = String::new();
        for (i, (cell, w)) in c.iter().zip(&widths).enumerate() {
            l.push_str(cell);
            if i + 1 != c.len() {
                l.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    }
    out
}

/// `attention.json`: an array of `{workspace?, kind, id, name, says, path}`, most urgent
/// first.
pub(crate) fn attention_json(list: &[Attention]) -> String {
    let v: Vec<Value> = list
        .iter()
        .map(|a| {
            let mut v = json!({
                "kind": a.signal.kind.as_str(),
                "id": a.id,
                "name": a.name,
                "says": a.signal.says,
                "path": a.signal.path,
            });
            if let (Some(ws), Some(o)) = (&a.workspace, v.as_object_mut()) {
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
mod tests;
