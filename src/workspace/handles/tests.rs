//! Handles let go of the packs a repack replaced: checked on this process's own
//! descriptors, against a repository repacked by `git` as the harness's `gc` would.

use std::path::Path;
use std::process::Command;

use super::*;
use crate::fixture::Fixture;
use crate::workspace::refs::Flavour;

/// Packs everything into one new pack and deletes the old ones (`git repack -a -d`).
fn repack(repo: &Path) {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["repack", "-a", "-d", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The files under `repo` this process holds open whose names end with `end`, as
/// `/proc/self/fd` names them.
fn held_under(repo: &Path, end: &str) -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.starts_with(&*repo.to_string_lossy()) && p.ends_with(end))
        .collect()
}

/// The pack files under `repo` this process holds open after they were deleted.
fn deleted_packs_held(repo: &Path) -> Vec<String> {
    held_under(repo, ".pack (deleted)")
}

/// A repository with two agents' commits in one pack, and the id of one commit.
fn packed() -> (tempfile::TempDir, Fixture, PathBuf, git2::Oid) {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    let tip = f.agent("a1", None, &[("notes.md", b"one")]).unwrap();
    let repo = t.path().join("ws").join("repo.git");
    repack(&repo);
    (t, f, repo, tip)
}

/// A new commit, then a repack that replaces the pack read so far, and time for a handle
/// to look at the packs again. The fixture goes first: its own handle would hold the old
/// pack too (packs are shared in a process).
fn commit_and_repack(f: Fixture, repo: &Path) -> git2::Oid {
    let newer = f.agent("a2", None, &[("notes.md", b"two")]).unwrap();
    drop(f);
    repack(repo);
    std::thread::sleep(PACKS_LOOKED_AT_EVERY);
    newer
}

/// Reads `oid` (from its pack) and a commit made after the repack.
fn read_through(repo: &Repository, oid: git2::Oid) {
    assert!(repo.find_commit(oid).is_ok());
}

#[test]
fn a_pool_lets_go_of_a_pack_a_repack_deleted() {
    let (_t, f, repo, tip) = packed();
    let pool = Pool::open(&repo).unwrap();
    read_through(&pool.get().unwrap(), tip);
    assert!(deleted_packs_held(&repo).is_empty());
    let newer = commit_and_repack(f, &repo);
    let lease = pool.get().unwrap();
    read_through(&lease, newer);
    read_through(&lease, tip);
    drop(lease);
    assert_eq!(deleted_packs_held(&repo), Vec::<String>::new());
    assert_eq!(pool.idle(), 1);
}

#[test]
fn a_lent_handle_of_an_earlier_state_is_closed_when_given_back() {
    let (_t, f, repo, tip) = packed();
    let pool = Pool::open(&repo).unwrap();
    let early = pool.get().unwrap();
    read_through(&early, tip);
    commit_and_repack(f, &repo);
    // A reader after the repack sees the new state, and the early handle, given back
    // after that, is not kept.
    read_through(&pool.get().unwrap(), tip);
    drop(early);
    assert_eq!(deleted_packs_held(&repo), Vec::<String>::new());
    assert_eq!(pool.idle(), 1);
}

#[test]
fn the_sweep_closes_an_idle_handle_nobody_reads_again() {
    let (_t, f, repo, tip) = packed();
    let pool = Pool::open(&repo).unwrap();
    read_through(&pool.get().unwrap(), tip);
    commit_and_repack(f, &repo);
    assert!(!deleted_packs_held(&repo).is_empty());
    sweep();
    assert_eq!(deleted_packs_held(&repo), Vec::<String>::new());
    assert_eq!(pool.idle(), 0);
}

/// How many pack files under `repo` this process holds open.
fn packs_held(repo: &Path) -> usize {
    held_under(repo, ".pack").len()
}

/// A pool on a packed repository no other handle holds, whose pack it has read.
fn pool_that_read_its_pack() -> (tempfile::TempDir, PathBuf, git2::Oid, Pool) {
    let (t, f, repo, tip) = packed();
    drop(f);
    let pool = Pool::open(&repo).unwrap();
    read_through(&pool.get().unwrap(), tip);
    assert_eq!(packs_held(&repo), 1);
    (t, repo, tip, pool)
}

#[test]
fn old_handles_are_closed_together_once_none_is_lent() {
    let (_t, repo, tip, pool) = pool_that_read_its_pack();
    let early = pool.get().unwrap();
    pool.0.retire_older_than(Duration::ZERO);
    // While one is lent, a reader gets a handle of its own, not kept once given back.
    let during = pool.get().unwrap();
    read_through(&during, tip);
    drop(during);
    assert_eq!(pool.idle(), 0);
    assert_eq!(
        packs_held(&repo),
        1,
        "the early handle still holds the pack"
    );
    drop(early);
    assert_eq!(
        packs_held(&repo),
        0,
        "the last handle took the pack with it"
    );
    // And the pool goes on as before.
    read_through(&pool.get().unwrap(), tip);
    assert_eq!(pool.idle(), 1);
    assert_eq!(packs_held(&repo), 1);
}

#[test]
fn handles_younger_than_their_life_stay() {
    let (_t, repo, _tip, pool) = pool_that_read_its_pack();
    pool.0.retire_older_than(HANDLES_LIVE_FOR);
    assert_eq!(pool.idle(), 1);
    assert_eq!(packs_held(&repo), 1);
}

#[test]
fn a_second_pool_on_a_repository_is_the_first() {
    let (_t, f, repo, _tip) = packed();
    drop(f);
    let first = Pool::open(&repo).unwrap();
    let second = Pool::open(&repo).unwrap();
    let lease = first.get().unwrap();
    assert_eq!(second.idle(), 0, "the one idle handle is lent by the first");
    drop(lease);
    assert_eq!(second.idle(), 1);
}
