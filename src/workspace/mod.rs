//! The workspace model: what a litany (or lernie) workspace is on disk, as plain Rust.
//!
//! Guarantees: a [`Workspace`] exists only for a directory that passes litany's own guard
//! (`<dir>/repo.git` is a directory, CONTRACT §1.3); every path into it is derived here from
//! named layout constants; ids are opaque single components taken from the refs, never
//! from a listing. Nothing in this module knows about FUSE.

pub(crate) mod backing;
pub(crate) mod clock;
pub(crate) mod handles;
pub mod ids;
pub mod inbox;
pub mod refs;
pub(crate) mod shared_path;
pub(crate) mod steps;

use std::io;
use std::path::{Path, PathBuf};

/// The bare repository every workspace holds; its presence is what makes a workspace.
pub(crate) const REPO_DIR: &str = "repo.git";
/// Per-agent step records (not in git).
pub(crate) const STEPS_DIR: &str = "steps";
/// Per-agent inboxes; each `inbox/<id>` directory is also the executor's lock.
pub(crate) const INBOX_DIR: &str = "inbox";
/// Per-agent worktrees; litanyfs reads agent content from git instead (CONTRACT §1.2).
pub(crate) const AGENTS_DIR: &str = "agents";
/// The mount's view of the marks (`marks/<kind>/<id>`, CONTRACT §6): a name of the
/// workspace as the mount shows it, which the tree lists and the events name paths in.
pub(crate) const MARKS_DIR: &str = "marks";
/// The mount's view of the agents' names (`names/<Name>`, a symlink per named agent).
pub(crate) const NAMES_DIR: &str = "names";

/// Why a directory could not be opened as a workspace.
#[derive(Debug)]
pub enum WorkspaceError {
    /// `<dir>/repo.git` is not a directory: litany's `NotAWorkspace`.
    NotAWorkspace(PathBuf),
    /// The directory itself could not be read.
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAWorkspace(p) => {
                write!(f, "{} is not a workspace (no {REPO_DIR})", p.display())
            }
            Self::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for WorkspaceError {}

/// A workspace root that passed the guard, with its paths derived from the layout.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens `dir` as a workspace. The root is made absolute so that every derived path
    /// (and every `litany advance <ws>` launched from it) names the same place.
    pub fn open(dir: &Path) -> Result<Self, WorkspaceError> {
        let root = std::fs::canonicalize(dir).map_err(|e| WorkspaceError::Io(dir.into(), e))?;
        match std::fs::metadata(root.join(REPO_DIR)) {
            Ok(m) if m.is_dir() => Ok(Self { root }),
            _ => Err(WorkspaceError::NotAWorkspace(dir.into())),
        }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn repo_dir(&self) -> PathBuf {
        self.root.join(REPO_DIR)
    }

    #[cfg(test)]
    pub(crate) fn inbox_dir(&self) -> PathBuf {
        self.root.join(INBOX_DIR)
    }

    /// `inbox/<id>`: the agent's inbox, which is also its executor-lock home.
    #[cfg(test)]
    pub(crate) fn agent_inbox(&self, id: &str) -> PathBuf {
        self.inbox_dir().join(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_accepts_only_a_dir_with_repo_git() {
        let t = tempfile::tempdir().unwrap();
        let err = Workspace::open(t.path()).unwrap_err();
        assert!(err.to_string().contains("is not a workspace (no repo.git)"));
        std::fs::write(t.path().join(REPO_DIR), b"").unwrap();
        assert!(matches!(
            Workspace::open(t.path()),
            Err(WorkspaceError::NotAWorkspace(_))
        ));
        std::fs::remove_file(t.path().join(REPO_DIR)).unwrap();
        std::fs::create_dir(t.path().join(REPO_DIR)).unwrap();
        let ws = Workspace::open(t.path()).unwrap();
        assert!(ws.root().is_absolute());
        assert_eq!(ws.agent_inbox("a"), ws.root().join("inbox/a"));
    }
}
