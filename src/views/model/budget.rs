//! The budget an agent's governing workflow sets, found as litany finds it.
//!
//! litany reads `budgets:` from the `workflow.yaml` of one commit
//! (`prompt/resolve/workflow_source.rs`): the nearest `workflow` mark on the agent's
//! descent (its own, else its parent's, and so on up), else the *followed* config commit
//! (`workspace/current_config.rs`): the governing commit is the nearest ancestor of the
//! agent's tip that a `refs/heads/config/*` lineage reaches (`git merge-base` with each
//! head, the nearest of those); the lineages whose history holds it have one distinct
//! tip, and that tip governs, else (none, or diverged) the governing commit itself. The
//! file is parsed with the YAML reader litany uses; only `budgets` is read from it.
//!
//! Each answer is remembered by what it was derived from (the tip and the config heads,
//! the commit), so an idle `status` derives nothing again.

use std::sync::Arc;

use git2::Oid;

use super::{Mark, Scanner};
use crate::FastMap;
use crate::workspace::ids::parent_of;
use crate::workspace::refs::GitEntry;

/// The file a workflow commit holds its policy in.
pub(crate) const WORKFLOW_FILE: &str = "workflow.yaml";
/// The mark kind that pins an agent's (and its descent's) workflow.
pub(crate) const WORKFLOW_MARK: &str = "workflow";

/// Where an agent's workflow came from (said in `status.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkflowFrom {
    /// The `workflow` mark of `holder` (the agent or an ancestor).
    Mark { holder: String },
    /// The tip of the config lineage the agent follows.
    LineageTip,
    /// No single lineage tip (none, or diverged): the governing commit itself.
    Governing,
}

/// What `budgets:` of an agent's workflow sets (at least one limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Budget {
    pub(crate) max_total_tokens: Option<u64>,
    pub(crate) max_wall_seconds: Option<u64>,
    /// The commit whose `workflow.yaml` was read.
    pub(crate) workflow: Oid,
    pub(crate) from: WorkflowFrom,
}

/// `budgets:` as litany's `Budgets` reads it (an omitted limit is unbounded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
struct Budgets {
    #[serde(default)]
    max_total_tokens: Option<u64>,
    #[serde(default)]
    max_wall_seconds: Option<u64>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct WorkflowFile {
    #[serde(default)]
    budgets: Budgets,
}

/// The commit whose workflow governs an agent, and why that one.
type Governs = (Oid, WorkflowFrom);

/// What the scanner remembers of workflows (module docs).
#[derive(Debug, Default)]
pub(super) struct Workflows {
    by_commit: FastMap<Oid, Budgets>,
    /// Agent tip → (the config heads it was derived with, the commit that governs).
    followed: FastMap<Oid, (Arc<[Oid]>, Option<Governs>)>,
}

/// The parsed `budgets:` of a `workflow.yaml`; unbounded when it does not parse (litany
/// then refuses the agent's next step, which `status` shows as its failure).
fn parse(text: &[u8], commit: Oid) -> Budgets {
    match serde_yaml_ng::from_slice::<WorkflowFile>(text) {
        Ok(w) => w.budgets,
        Err(e) => {
            log::info!("status: {commit}:{WORKFLOW_FILE} does not parse ({e}); no budget read");
            Budgets::default()
        }
    }
}

impl Scanner {
    /// The workspace now, with each agent's budget ([`super::Agent::budget`]).
    pub(crate) fn scan_for_status(&mut self) -> super::Model {
        let mut model = self.scan();
        let heads: Arc<[Oid]> = match self.refs.config_heads() {
            Ok(h) => h.into(),
            Err(e) => {
                log::debug!("status: config heads unreadable ({e}); no budgets");
                return model;
            }
        };
        let ids: Vec<(String, Oid)> = model
            .agents
            .iter()
            .map(|(i, a)| (i.clone(), a.tip))
            .collect();
        let mut live = crate::FastSet::default();
        for (id, tip) in ids {
            live.insert(tip);
            let budget = self.budget(&id, tip, &model.marks, &heads);
            if let Some(a) = model.agents.get_mut(&id) {
                a.budget = budget;
            }
        }
        self.workflows.followed.retain(|tip, _| live.contains(tip));
        if self.workflows.by_commit.len() > 1024 {
            self.workflows.by_commit.clear();
        }
        model
    }

    fn budget(
        &mut self,
        id: &str,
        tip: Oid,
        marks: &std::collections::BTreeMap<(String, String), Mark>,
        heads: &Arc<[Oid]>,
    ) -> Option<Arc<Budget>> {
        let mut holder = Some(id);
        let mut marked = None;
        while let Some(h) = holder {
            if let Some(m) = marks.get(&(WORKFLOW_MARK.to_string(), h.to_string())) {
                marked = Some((
                    m.oid,
                    WorkflowFrom::Mark {
                        holder: h.to_string(),
                    },
                ));
                break;
            }
            holder = parent_of(h);
        }
        let (commit, from) = match marked {
            Some(m) => m,
            None => self.followed(tip, heads)?,
        };
        let b = self.budgets_at(commit);
        (b.max_total_tokens.is_some() || b.max_wall_seconds.is_some()).then(|| {
            Arc::new(Budget {
                max_total_tokens: b.max_total_tokens,
                max_wall_seconds: b.max_wall_seconds,
                workflow: commit,
                from,
            })
        })
    }

    /// The config commit agent tip `tip` follows (module docs), remembered by tip.
    fn followed(&mut self, tip: Oid, heads: &Arc<[Oid]>) -> Option<Governs> {
        if let Some((h, f)) = self.workflows.followed.get(&tip)
            && **h == **heads
        {
            return f.clone();
        }
        let f = self.derive_followed(tip, heads);
        self.workflows
            .followed
            .insert(tip, (heads.clone(), f.clone()));
        f
    }

    fn derive_followed(&self, tip: Oid, heads: &[Oid]) -> Option<Governs> {
        let mut governing: Option<Oid> = None;
        for head in heads {
            let Some(base) = self.refs.merge_base(tip, *head) else {
                continue;
            };
            governing = Some(match governing {
                None => base,
                Some(prev) if prev == base => prev,
                Some(prev) if self.refs.is_ancestor(prev, base) => base,
                Some(prev) if self.refs.is_ancestor(base, prev) => prev,
                // Incomparable: litany declines the agent; nothing governs.
                Some(_) => return None,
            });
        }
        let governing = governing?;
        let mut tips: Vec<Oid> = heads
            .iter()
            .copied()
            .filter(|h| self.refs.is_ancestor(governing, *h))
            .collect();
        tips.dedup();
        Some(match tips.as_slice() {
            [one] => (*one, WorkflowFrom::LineageTip),
            _ => (governing, WorkflowFrom::Governing),
        })
    }

    fn budgets_at(&mut self, commit: Oid) -> Budgets {
        if let Some(b) = self.workflows.by_commit.get(&commit) {
            return *b;
        }
        let b = match self.refs.entry_at(commit, &[WORKFLOW_FILE]) {
            Ok(Some(GitEntry::Blob { oid, .. })) => match self.refs.blob(oid) {
                Ok(text) => parse(&text, commit),
                Err(_) => Budgets::default(),
            },
            _ => Budgets::default(),
        };
        self.workflows.by_commit.insert(commit, b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_read_as_litany_reads_them() {
        let oid = Oid::zero();
        let b = parse(
            b"retry:\n  max_attempts: 3\nbudgets:\n  max_total_tokens: 500\n  max_depth: 5\n",
            oid,
        );
        assert_eq!((b.max_total_tokens, b.max_wall_seconds), (Some(500), None));
        let flow = parse(
            b"budgets: {max_total_tokens: 50, max_wall_seconds: 9}\n",
            oid,
        );
        assert_eq!(
            (flow.max_total_tokens, flow.max_wall_seconds),
            (Some(50), Some(9))
        );
        assert_eq!(parse(b"on: {}\n", oid), Budgets::default());
        assert_eq!(parse(b": : :\n\t", oid), Budgets::default());
    }
}
