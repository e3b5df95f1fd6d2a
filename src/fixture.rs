//! Builds workspaces the way the harness lays them out, through git2 and plain files:
//! agents with names, marks of both kinds, step records and inbox deposits, in litany or
//! lernie flavour. `litanyfs demo` uses it for the sample workspace and the tests use it
//! for their fixtures, so both exercise the same layout.

use std::error::Error;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository, Signature};

use crate::workspace::refs::{Flavour, NAME_FILE, agent_ref};
use crate::workspace::steps::step_dir_name;
use crate::workspace::{INBOX_DIR, REPO_DIR, STEPS_DIR};

pub(crate) type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The branch `litany new` creates first; a workspace has no `main`.
pub(crate) const CONFIG_BRANCH: &str = "config/default";

pub struct Fixture {
    root: PathBuf,
    repo: Repository,
    flavour: Flavour,
}

impl Fixture {
    /// Creates `root` (which may exist, empty) with a bare `repo.git` and a first config
    /// commit.
    pub fn create(root: &Path, flavour: Flavour) -> Result<Self> {
        std::fs::create_dir_all(root)?;
        let mut opts = git2::RepositoryInitOptions::new();
        opts.bare(true).initial_head(CONFIG_BRANCH);
        let repo = Repository::init_opts(root.join(REPO_DIR), &opts)?;
        let f = Self {
            root: root.canonicalize()?,
            repo,
            flavour,
        };
        let tree = f.tree(&[("version", b"2\n")])?;
        f.commit(
            &format!("refs/heads/{CONFIG_BRANCH}"),
            tree,
            "config: init [config/default]",
        )?;
        Ok(f)
    }

    /// The workspace at `root`, made before (by [`Fixture::create`] or the harness).
    #[cfg(test)]
    pub(crate) fn open(root: &Path, flavour: Flavour) -> Result<Self> {
        Ok(Self {
            root: root.canonicalize()?,
            repo: Repository::open_bare(root.join(REPO_DIR))?,
            flavour,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn repo(&self) -> &Repository {
        &self.repo
    }

    fn signature(&self) -> Result<Signature<'static>> {
        Ok(Signature::now("litany", "litany@localhost")?)
    }

    /// A tree holding `files` (paths may contain `/`).
    pub fn tree(&self, files: &[(&str, &[u8])]) -> Result<Oid> {
        let mut idx = git2::Index::new()?;
        for (path, bytes) in files {
            let oid = self.repo.blob(bytes)?;
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                file_size: bytes.len() as u32,
                id: oid,
                flags: path.len().min(0xfff) as u16,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            idx.add(&entry)?;
        }
        Ok(idx.write_tree_to(&self.repo)?)
    }

    /// Commits `tree` on `refname`, on top of its current tip if it has one.
    pub fn commit(&self, refname: &str, tree: Oid, message: &str) -> Result<Oid> {
        self.commit_as(refname, tree, message, self.signature()?)
    }

    /// [`Fixture::commit`] with the commit time `secs` (since the epoch, UTC), for tests
    /// that check a time shown: they can expect a literal, not the clock at the moment.
    #[cfg(test)]
    pub(crate) fn commit_at(
        &self,
        refname: &str,
        tree: Oid,
        message: &str,
        secs: i64,
    ) -> Result<Oid> {
        let sig = Signature::new("litany", "litany@localhost", &git2::Time::new(secs, 0))?;
        self.commit_as(refname, tree, message, sig)
    }

    fn commit_as(
        &self,
        refname: &str,
        tree: Oid,
        message: &str,
        sig: Signature<'_>,
    ) -> Result<Oid> {
        let tree = self.repo.find_tree(tree)?;
        let parent = self
            .repo
            .find_reference(refname)
            .ok()
            .and_then(|r| r.peel_to_commit().ok());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let oid = self
            .repo
            .commit(None, &sig, &sig, message, &tree, &parents)?;
        self.repo.reference(refname, oid, true, message)?;
        Ok(oid)
    }

    /// Commits `tree` on `refname` with `parent` as its one parent (or none), authored
    /// and committed at `at` (seconds since the epoch), as the harness commits a step
    /// that happened then.
    pub(crate) fn commit_on(
        &self,
        refname: &str,
        parent: Option<Oid>,
        tree: Oid,
        message: &str,
        at: i64,
    ) -> Result<Oid> {
        let sig = Signature::new("litany", "litany@localhost", &git2::Time::new(at, 0))?;
        let tree = self.repo.find_tree(tree)?;
        let parent = parent.map(|p| self.repo.find_commit(p)).transpose()?;
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let oid = self
            .repo
            .commit(None, &sig, &sig, message, &tree, &parents)?;
        self.repo.reference(refname, oid, true, message)?;
        Ok(oid)
    }

    /// Creates or advances agent `id`: its tree holds `goal.md`, `soul.md`, the `name`
    /// file (`<Name>\n`, or empty) and `files`.
    pub fn agent(&self, id: &str, name: Option<&str>, files: &[(&str, &[u8])]) -> Result<Oid> {
        let name_bytes = name.map(|n| format!("{n}\n")).unwrap_or_default();
        let mut all: Vec<(&str, &[u8])> = vec![
            ("goal.md", b"Do the thing.\n"),
            ("soul.md", b"You are careful.\n"),
            (NAME_FILE, name_bytes.as_bytes()),
        ];
        all.extend_from_slice(files);
        let tree = self.tree(&all)?;
        self.commit(&agent_ref(id), tree, &format!("dispatch: worker [{id}]"))
    }

    pub fn agent_tip(&self, id: &str) -> Result<Oid> {
        Ok(self.repo.refname_to_id(&agent_ref(id))?)
    }

    /// Removes agent `id`'s branch (what `litany delete` does to the ref).
    pub fn delete_agent(&self, id: &str) -> Result<()> {
        self.repo.find_reference(&agent_ref(id))?.delete()?;
        Ok(())
    }

    fn mark_ref(&self, kind: &str, id: &str) -> String {
        self.flavour.mark_ref(kind, id)
    }

    /// A mark pointing at a commit (`returned`, `abandoned`, ...).
    pub fn commit_mark(&self, kind: &str, id: &str, commit: Oid) -> Result<()> {
        self.repo
            .reference(&self.mark_ref(kind, id), commit, true, "mark")?;
        Ok(())
    }

    /// A mark pointing at a blob holding `value` (`cwd`, `held`, `role`).
    pub fn blob_mark(&self, kind: &str, id: &str, value: &[u8]) -> Result<Oid> {
        let oid = self.repo.blob(value)?;
        self.repo
            .reference(&self.mark_ref(kind, id), oid, true, "mark")?;
        Ok(oid)
    }

    #[cfg(test)]
    pub(crate) fn delete_mark(&self, kind: &str, id: &str) -> Result<()> {
        self.repo
            .find_reference(&self.mark_ref(kind, id))?
            .delete()?;
        Ok(())
    }

    /// `steps/<id>/<NNN>/`, formatted as the harness does.
    pub fn step_dir(&self, id: &str, n: u32) -> PathBuf {
        self.root
            .join(STEPS_DIR)
            .join(id)
            .join(step_dir_name(u64::from(n)))
    }

    /// Writes step record files under `steps/<id>/<NNN>/` (paths may contain `/`).
    pub fn step(&self, id: &str, n: u32, files: &[(&str, &[u8])]) -> Result<PathBuf> {
        let dir = self.step_dir(id, n);
        for (path, bytes) in files {
            let p = dir.join(path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(p, bytes)?;
        }
        Ok(dir)
    }

    /// An `output.json` record as the harness writes it (pretty JSON, field order).
    pub fn tool_output(stdout: &str, stderr: &str, exit_code: i32) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Output<'a> {
            stdout: &'a str,
            stderr: &'a str,
            exit_code: i32,
            started_at: &'a str,
            ended_at: &'a str,
        }
        let v = Output {
            stdout,
            stderr,
            exit_code,
            started_at: "2026-12-02T09:42:30Z",
            ended_at: "2026-12-02T09:42:31Z",
        };
        serde_json::to_vec_pretty(&v).unwrap_or_default()
    }

    pub fn inbox(&self, id: &str) -> PathBuf {
        self.root.join(INBOX_DIR).join(id)
    }

    /// Places a file in `inbox/<id>/` directly, as a deposit or as harness debris.
    pub fn inbox_file(&self, id: &str, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        let dir = self.inbox(id);
        std::fs::create_dir_all(&dir)?;
        let p = dir.join(name);
        std::fs::write(&p, bytes)?;
        Ok(p)
    }
}
