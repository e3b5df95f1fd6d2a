use super::*;
use crate::workspace::handles::{
    GIT_OBJECT_CACHE_BYTES, GIT_PACK_MAPPED_BYTES, GIT_PACK_WINDOW_BYTES, object_cache,
};

#[test]
fn opening_a_workspace_bounds_libgit2s_object_cache_and_pack_windows() {
    use crate::fixture::Fixture;
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    let a1 = f.agent("a1", None, &[("notes.md", b"x")]).unwrap();
    let refs = Refs::open(&f.root().join("repo.git")).unwrap();
    assert!(refs.snapshot().unwrap().agents.contains_key("a1"));
    let (held, bound) = object_cache();
    assert_eq!(
        bound, GIT_OBJECT_CACHE_BYTES,
        "libgit2's default is 256 MiB"
    );
    assert!(held <= bound, "{held} > {bound}");
    assert!(a1 != Oid::zero());
    // SAFETY: reading documented options.
    let (window, mapped) = unsafe {
        (
            git2::opts::get_mwindow_size().unwrap(),
            git2::opts::get_mwindow_mapped_limit().unwrap(),
        )
    };
    assert_eq!(
        (window, mapped),
        (GIT_PACK_WINDOW_BYTES, GIT_PACK_MAPPED_BYTES),
        "libgit2's are 1 GiB and 8 GiB"
    );
}

#[test]
fn a_refs_time_comes_with_its_target() {
    use crate::fixture::Fixture;
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    let a1 = f.agent("a1", None, &[]).unwrap();
    let a2 = f.agent("a2", None, &[]).unwrap();
    f.commit_mark("returned", "a1", a1).unwrap();
    let refs = Refs::open(&f.root().join("repo.git")).unwrap();
    refs.set_watched(true);
    let file_time = |r: &str| {
        std::fs::metadata(f.root().join("repo.git").join(r))
            .unwrap()
            .modified()
            .unwrap()
    };
    // The first snapshot dates refs by their files.
    let s1 = refs.snapshot().unwrap();
    assert_eq!(
        s1.moved[&agent_ref("a1")],
        (a1, file_time(&agent_ref("a1")))
    );
    let mark = Flavour::Litany.mark_ref("returned", "a1");
    assert_eq!(s1.moved[&mark], (a1, file_time(&mark)));
    // A moved ref gets the time of the snapshot that first shows its new target (not
    // earlier than the move), the others keep theirs; every time is paired with the
    // target the snapshot shows.
    std::thread::sleep(Duration::from_millis(20));
    let before = SystemTime::now();
    let a1b = f.agent("a1", None, &[("more.md", b"x")]).unwrap();
    refs.invalidate();
    let s2 = refs.snapshot().unwrap();
    let (target, at) = s2.moved[&agent_ref("a1")];
    assert_eq!(target, a1b);
    assert_eq!(s2.agents["a1"], a1b);
    assert!(at >= before, "{at:?} < {before:?}");
    assert_eq!(s2.moved[&agent_ref("a2")], s1.moved[&agent_ref("a2")]);
    assert_eq!(s2.moved[&agent_ref("a2")].0, a2);
    assert_eq!(s2.moved_at(&mark), s1.moved_at(&mark));
    // Nothing moved: nothing changes.
    refs.invalidate();
    let s3 = refs.snapshot().unwrap();
    assert_eq!(s3.moved, s2.moved);
}

/// Watched, an old snapshot is kept while the refs' fingerprint is unchanged (no
/// re-read of every ref), and a change the watch did not report still shows once the
/// snapshot is old: the fingerprint catches it.
#[test]
fn a_watched_snapshot_is_checked_not_reread_when_it_ages() {
    use crate::fixture::Fixture;
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    f.agent("a1", None, &[]).unwrap();
    let refs = Refs::open(&f.root().join("repo.git")).unwrap();
    refs.set_watched(true);
    // Times far enough out that the test's own slowness cannot reach them.
    let hour = Duration::from_secs(3600);
    let fresh = || Instant::now() + hour;
    let aged = || Instant::now().checked_sub(SNAPSHOT_MAX_AGE).unwrap();
    let s1 = refs.snapshot().unwrap();
    // Checked SNAPSHOT_MAX_AGE ago: checked again, and kept, as nothing changed.
    refs.date_cached(fresh(), aged());
    let s2 = refs.snapshot().unwrap();
    assert!(Arc::ptr_eq(&s1, &s2), "rebuilt though nothing changed");
    // A new agent, and no invalidate (as if the watch lost the event).
    f.agent("a2", None, &[]).unwrap();
    refs.date_cached(fresh(), fresh());
    assert!(
        Arc::ptr_eq(&refs.snapshot().unwrap(), &s2),
        "checked before it was SNAPSHOT_MAX_AGE old"
    );
    refs.date_cached(fresh(), aged());
    let s3 = refs.snapshot().unwrap();
    assert!(s3.agents.contains_key("a2"), "{:?}", s3.agents);
    // Unwatched, a snapshot older than SNAPSHOT_MAX_AGE is re-read even when its
    // fingerprint is unchanged (two updates may share a timestamp tick).
    refs.set_watched(false);
    let s4 = refs.snapshot().unwrap();
    refs.date_cached(aged(), fresh());
    assert!(
        !Arc::ptr_eq(&refs.snapshot().unwrap(), &s4),
        "kept past its age"
    );
}

/// Blobs are shared while held and refused past the bound from their header; walks
/// stop at their bound; reads go through handles of their own.
#[test]
fn reads_are_bounded_and_shared() {
    use crate::fixture::Fixture;
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    for i in 0..5 {
        f.agent("a1", None, &[("n", format!("{i}").as_bytes())])
            .unwrap();
    }
    let tip = f.agent_tip("a1").unwrap();
    let small = f.repo().blob(b"small").unwrap();
    let refs = Refs::open(&f.root().join("repo.git")).unwrap();
    let a = refs.blob(small).unwrap();
    let b = refs.blob(small).unwrap();
    assert!(Arc::ptr_eq(&a, &b), "a second read shares the first's copy");
    drop((a, b));
    assert_eq!(*refs.blob(small).unwrap(), b"small");
    // Past the bound: refused, and only the header was read.
    let big = {
        let odb = f.repo().odb().unwrap();
        let len = MAX_BLOB_BYTES as usize + 1;
        let mut w = odb.writer(len, ObjectType::Blob).unwrap();
        let chunk = vec![b'x'; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            std::io::Write::write_all(&mut w, &chunk[..n]).unwrap();
            left -= n;
        }
        w.finalize().unwrap()
    };
    let e = refs.blob(big).unwrap_err();
    assert!(e.to_string().contains("over the 32 MiB"), "{e}");
    // The walk stops at its bound.
    let (log, reached) = refs
        .first_parent_log_within(tip, &mut |_| false, 3)
        .unwrap();
    assert_eq!((log.len(), reached), (3, None));
    let (all, _) = refs.first_parent_log(tip, &mut |_| false).unwrap();
    assert!(all.len() > 3);
    // A read holding a handle does not hold up another.
    let held = refs.pool.get().unwrap();
    assert!(matches!(
        refs.entry_at(tip, &["n"]).unwrap(),
        Some(GitEntry::Blob { .. })
    ));
    drop(held);
    assert!(refs.pool.idle() >= 2);
}

#[test]
fn flavour_detection() {
    assert_eq!(Flavour::detect(false, false), Flavour::Litany);
    assert_eq!(Flavour::detect(true, false), Flavour::Litany);
    assert_eq!(Flavour::detect(false, true), Flavour::Lernie);
    assert_eq!(Flavour::detect(true, true), Flavour::Litany);
}
