use super::*;
use crate::fixture::Fixture;
use crate::workspace::refs::Flavour;
use std::time::Instant;

const A: &str = "20260101-a1";

fn setup() -> (tempfile::TempDir, Fixture) {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    f.agent(A, Some("Ann"), &[]).unwrap();
    (t, f)
}

fn inbox_files(f: &Fixture) -> Vec<(String, String)> {
    let mut v: Vec<_> = std::fs::read_dir(f.inbox(A))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// What litany's `atomic_create` does: write `.<name>.tmp`, rename onto `<name>`.
fn litany_style(f: &Fixture, name: &str, body: &str) {
    let tmp = f.inbox(A).join(format!(".{name}.tmp"));
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, f.inbox(A).join(name)).unwrap();
}

fn pair(name: &str, body: &str) -> (String, String) {
    (name.to_string(), body.to_string())
}

#[test]
fn a_rename_over_our_file_is_redeposited() {
    let (_t, f) = setup();
    let hits = Arc::new(Mutex::new(Vec::new()));
    let hook: OnRedeposit = {
        let hits = hits.clone();
        Box::new(move |who, p| hits.lock().push((who.to_string(), p.name.clone())))
    };
    let g = Guard::new(f.root(), GuardOptions::default(), Some(hook)).unwrap();
    let p = g.publish(A, "user", b"ours").unwrap();
    assert_eq!(p.name, "user-001.md");
    litany_style(&f, "user-001.md", "theirs");
    g.sync();
    assert_eq!(
        inbox_files(&f),
        [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
    );
    assert_eq!(g.redeposits(), 1);
    assert_eq!(*hits.lock(), [(A.to_string(), "user-002.md".to_string())]);
    // The re-deposit is protected in turn.
    assert_eq!(g.tracked(), 1);
    litany_style(&f, "user-002.md", "theirs again");
    g.sync();
    assert_eq!(
        inbox_files(&f),
        [
            pair("user-001.md", "theirs"),
            pair("user-002.md", "theirs again"),
            pair("user-003.md", "ours")
        ]
    );
    // And nothing more happens without a cause.
    g.sync();
    assert_eq!(g.redeposits(), 2);
}

#[test]
fn the_background_thread_redeposits_unasked() {
    let (_t, f) = setup();
    let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
    g.publish(A, "user", b"ours").unwrap();
    litany_style(&f, "user-001.md", "theirs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while inbox_files(&f).len() < 2 {
        assert!(Instant::now() < deadline, "never re-deposited");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        inbox_files(&f),
        [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
    );
}

#[test]
fn delivery_is_not_replacement() {
    let (t, f) = setup();
    let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
    let worktree = t.path().join("messages");
    std::fs::create_dir_all(&worktree).unwrap();
    // Delivered (renamed out), then the name reused by litany: no re-deposit.
    g.publish(A, "user", b"ours").unwrap();
    std::fs::rename(f.inbox(A).join("user-001.md"), worktree.join("001-user.md")).unwrap();
    litany_style(&f, "user-001.md", "theirs");
    g.sync();
    assert_eq!(inbox_files(&f), [pair("user-001.md", "theirs")]);
    assert_eq!(g.tracked(), 0);
    // Deleted by hand: no re-deposit either.
    let p = g.publish(A, "user", b"second").unwrap();
    assert_eq!(p.name, "user-002.md");
    std::fs::remove_file(&p.path).unwrap();
    litany_style(&f, "user-002.md", "theirs 2");
    g.sync();
    assert_eq!(
        inbox_files(&f),
        [
            pair("user-001.md", "theirs"),
            pair("user-002.md", "theirs 2")
        ]
    );
    assert_eq!(g.redeposits(), 0);
    assert_eq!(
        std::fs::read_to_string(worktree.join("001-user.md")).unwrap(),
        "ours"
    );
}

#[test]
fn a_deleted_agent_gets_no_redeposit() {
    let (_t, f) = setup();
    let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
    g.publish(A, "user", b"ours").unwrap();
    f.delete_agent(A).unwrap();
    litany_style(&f, "user-001.md", "theirs");
    g.sync();
    assert_eq!(inbox_files(&f), [pair("user-001.md", "theirs")]);
    assert_eq!(g.redeposits(), 0);
    assert_eq!(g.tracked(), 0);
}

#[test]
fn protection_is_bounded() {
    let (_t, f) = setup();
    // In time...
    let opts = GuardOptions {
        window: Duration::ZERO,
        ..GuardOptions::default()
    };
    let g = Guard::new(f.root(), opts, None).unwrap();
    g.publish(A, "user", b"ours").unwrap();
    g.sync();
    assert_eq!(g.tracked(), 0, "the window has passed");
    litany_style(&f, "user-001.md", "theirs");
    g.sync();
    assert_eq!(g.redeposits(), 0);
    // ...and in space.
    let opts = GuardOptions {
        max_records: 2,
        max_bytes: 10,
        ..GuardOptions::default()
    };
    let g = Guard::new(f.root(), opts, None).unwrap();
    for body in ["aaaa", "bbbb", "cccc"] {
        g.publish(A, "user", body.as_bytes()).unwrap();
    }
    assert_eq!(g.tracked(), 2);
    g.publish(A, "user", b"0123456789").unwrap();
    assert_eq!(g.tracked(), 1);
}

/// Feeds the guard a synthetic event on the (only) watched inbox, as if the kernel had
/// queued it at this point.
fn inject(g: &Guard, mask: u32, name: &str) {
    let mut st = g.shared.state.lock();
    let wd = *st.watches.keys().next().unwrap();
    g.shared.apply(&mut st, wd, mask, name.as_bytes());
}

#[test]
fn events_queued_before_our_create_are_not_ours() {
    // Point 2: an event on the name that was queued between the drain point and our
    // link (here: a previous occupant leaving) must not be read as ours leaving, even
    // when by the time it is read our file has been replaced.
    let (_t, f) = setup();
    let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
    g.publish(A, "user", b"ours").unwrap();
    litany_style(&f, "user-001.md", "theirs");
    inject(&g, libc::IN_MOVED_FROM, "user-001.md");
    g.sync();
    assert_eq!(
        inbox_files(&f),
        [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
    );
}

#[test]
fn an_event_about_another_file_keeps_ours_protected() {
    // Point 4: while our inode still holds the name, a departure event on that name
    // was about some other file.
    let (_t, f) = setup();
    let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
    g.publish(A, "user", b"ours").unwrap();
    g.sync();
    inject(&g, libc::IN_MOVED_FROM, "user-001.md");
    inject(&g, libc::IN_DELETE, "user-001.md");
    assert_eq!(g.tracked(), 1);
    litany_style(&f, "user-001.md", "theirs");
    g.sync();
    assert_eq!(g.redeposits(), 1);
    assert_eq!(
        inbox_files(&f),
        [pair("user-001.md", "theirs"), pair("user-002.md", "ours")]
    );
}

#[test]
fn the_names_view_numbers_as_a_listing_would() {
    // Each deposit takes litany's next number over the inbox as it is at that moment,
    // whatever others did to the inbox since the previous deposit: the guard's view of
    // the names must follow creations, renames in and out, and deletions.
    use crate::workspace::inbox::next_sequence;
    let (_t, f) = setup();
    let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
    let inbox = f.inbox(A);
    let listed_next = |sender: &str| {
        // No inbox yet before the first deposit.
        let names: Vec<String> = std::fs::read_dir(&inbox)
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        next_sequence(names.iter().map(String::as_str), sender).unwrap()
    };
    let mut seen = Vec::new();
    let mut step = |what: &dyn Fn()| {
        what();
        let want = listed_next("user");
        let p = g.publish(A, "user", b"m").unwrap();
        seen.push(p.name.clone());
        assert_eq!(p.name, format!("user-{want:03}.md"), "after {seen:?}");
    };
    step(&|| {});
    step(&|| litany_style(&f, "user-007.md", "a higher one, renamed in"));
    step(&|| std::fs::write(inbox.join("user-011.md"), "created in place").unwrap());
    step(&|| {
        // The drain takes everything out.
        for e in std::fs::read_dir(&inbox).unwrap() {
            let e = e.unwrap();
            std::fs::rename(e.path(), f.root().join(e.file_name())).unwrap();
        }
    });
    step(&|| std::fs::remove_file(inbox.join("user-001.md")).unwrap());
    step(&|| litany_style(&f, "user-040.md", "then removed again"));
    step(&|| std::fs::remove_file(inbox.join("user-040.md")).unwrap());
    step(&|| {
        // An overflow forgets the view; the next deposit lists afresh.
        let mut st = g.shared.state.lock();
        g.shared.apply(&mut st, -1, libc::IN_Q_OVERFLOW, b"");
    });
    assert_eq!(
        seen,
        [
            "user-001.md",
            "user-008.md",
            "user-012.md",
            "user-001.md",
            "user-001.md",
            "user-041.md",
            "user-042.md",
            "user-043.md",
        ]
    );
}

#[test]
fn an_overflow_is_settled_from_the_files() {
    let (_t, f) = setup();
    let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
    g.publish(A, "user", b"kept").unwrap();
    g.publish(A, "user", b"lost track").unwrap();
    litany_style(&f, "user-002.md", "theirs");
    let p3 = g.publish(A, "user", b"delivered").unwrap();
    std::fs::rename(&p3.path, f.root().join("003-user.md")).unwrap();
    let p4 = g.publish(A, "user", b"deleted").unwrap();
    std::fs::remove_file(&p4.path).unwrap();
    {
        let mut st = g.shared.state.lock();
        g.shared.apply(&mut st, -1, libc::IN_Q_OVERFLOW, b"");
    }
    // user-001.md still holds its name; user-002.md was replaced and is queued again;
    // the delivered and the deleted ones are forgotten.
    assert_eq!(g.tracked(), 1);
    g.sync();
    assert_eq!(g.redeposits(), 1);
    assert_eq!(
        inbox_files(&f),
        [
            pair("user-001.md", "kept"),
            pair("user-002.md", "theirs"),
            pair("user-003.md", "lost track"),
        ]
    );
    litany_style(&f, "user-001.md", "theirs 1");
    g.sync();
    assert_eq!(g.redeposits(), 2);
}

#[test]
fn two_renames_onto_our_name_cannot_hide_behind_a_reused_inode() {
    // Two litany processes that both picked our number: the first rename frees our
    // inode; without a descriptor on it, the second file could get the same inode
    // number and both events would look like "ours is still there".
    let (_t, f) = setup();
    let g = Guard::start(f.root(), GuardOptions::default(), None, false).unwrap();
    let p = g.publish(A, "user", b"ours").unwrap();
    litany_style(&f, "user-001.md", "first");
    litany_style(&f, "user-001.md", "second");
    let now = std::fs::metadata(&p.path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_ne!(
        now.ino(),
        p.ino,
        "our inode number was reused while tracked"
    );
    g.sync();
    assert_eq!(g.redeposits(), 1);
    assert_eq!(
        inbox_files(&f),
        [pair("user-001.md", "second"), pair("user-002.md", "ours")]
    );
}

#[test]
fn the_inbox_being_removed_drops_its_records() {
    let (_t, f) = setup();
    let g = Guard::new(f.root(), GuardOptions::default(), None).unwrap();
    g.publish(A, "user", b"ours").unwrap();
    std::fs::remove_dir_all(f.inbox(A)).unwrap();
    g.sync();
    assert_eq!(g.tracked(), 0);
    assert!(!f.inbox(A).exists(), "nothing recreated the inbox");
}
