use super::*;
use crate::fixture::Fixture;
use crate::workspace::refs::Flavour;
use std::io::Write as _;

const A: &str = "20261202T094226Z-0122ccc2";
const B: &str = "20261202T094227Z-0abc0def";

fn setup(flavour: Flavour) -> (tempfile::TempDir, Fixture, Tree) {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), flavour).unwrap();
    let tip = f
        .agent(A, Some("Alpha"), &[("messages/001-user.md", b"hi")])
        .unwrap();
    f.agent(B, None, &[]).unwrap();
    f.commit_mark("returned", A, tip).unwrap();
    f.blob_mark("cwd", A, b"/tmp/work").unwrap();
    f.step(
        A,
        1,
        &[
            ("request.json", b"{}"),
            ("tools/toolu_1/output.json", b"{}"),
            ("tools/toolu_1/output.json.tmp", b"{"),
        ],
    )
    .unwrap();
    f.inbox_file(A, "user-001.md", b"---\nfrom: user\n---\nx")
        .unwrap();
    f.inbox_file(A, ".user-002.md.tmp", b"partial").unwrap();
    f.inbox_file(A, "notes.txt", b"not a deposit").unwrap();
    let ws = Workspace::open(f.root()).unwrap();
    let tree = Tree::new(ws).unwrap();
    (t, f, tree)
}

fn resolve(tree: &Tree, path: &str) -> Result<(Node, Attr), TreeError> {
    let mut node = Node::Root;
    let mut attr = tree.getattr(&node)?;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        let c = tree.lookup(&node, OsStr::new(part))?;
        (node, attr) = (c.node, c.attr);
    }
    Ok((node, attr))
}

fn names(tree: &Tree, path: &str) -> Vec<String> {
    let (node, _) = resolve(tree, path).unwrap();
    tree.list(&node)
        .unwrap()
        .into_iter()
        .map(|c| c.name.to_string_lossy().into_owned())
        .collect()
}

fn read(tree: &Tree, path: &str) -> Vec<u8> {
    let (node, attr) = resolve(tree, path).unwrap();
    let opened = tree.open(&node, &attr.identity, OpenMode::Read).unwrap();
    tree.read(&node, &opened.content, 0, 1 << 24).unwrap()
}

#[test]
fn root_lists_the_workspace_layout() {
    let (_t, _f, tree) = setup(Flavour::Litany);
    assert_eq!(
        names(&tree, ""),
        [
            "agents",
            "inbox",
            "marks",
            "names",
            "steps",
            "status",
            "status.json",
            "events",
            "events.ndjson",
            "attention",
            "attention.json",
            "new"
        ]
    );
    assert!(matches!(
        resolve(&tree, "repo.git"),
        Err(TreeError {
            kind: ErrorKind::NotFound,
            ..
        })
    ));
}

#[test]
fn steps_mirror_the_records_and_hide_harness_temps() {
    let (_t, _f, tree) = setup(Flavour::Litany);
    assert_eq!(
        names(&tree, &format!("steps/{A}/001")),
        ["request.json", "tools"]
    );
    assert_eq!(
        names(&tree, &format!("steps/{A}/001/tools/toolu_1")),
        ["output.json"]
    );
    assert!(
        resolve(
            &tree,
            &format!("steps/{A}/001/tools/toolu_1/output.json.tmp")
        )
        .is_err()
    );
    assert_eq!(read(&tree, &format!("steps/{A}/001/request.json")), b"{}");
    let (_, attr) = resolve(&tree, &format!("steps/{A}/001/request.json")).unwrap();
    assert_eq!(
        (attr.kind, attr.size, attr.perm),
        (Kind::File, 2, FILE_PERM)
    );
    assert!(matches!(attr.identity, Identity::Backing { .. }));
}

#[test]
fn a_small_watched_record_is_cached_across_opens_and_a_large_one_passed_through() {
    let (t, _f, tree) = setup(Flavour::Litany);
    let rel = format!("steps/{A}/001/request.json");
    let open = |tree: &Tree| {
        let (node, attr) = resolve(tree, &rel).unwrap();
        tree.open(&node, &attr.identity, OpenMode::Read).unwrap()
    };
    // Unwatched: nothing may stay cached, so the kernel reads the disk itself.
    let o = open(&tree);
    assert!(o.passthrough && !o.keep_cache, "{o:?}");
    let tree = tree.watching();
    names(&tree, &format!("steps/{A}/001"));
    let o = open(&tree);
    assert!(!o.passthrough && o.keep_cache && !o.direct_io, "{o:?}");
    std::fs::OpenOptions::new()
        .write(true)
        .open(t.path().join("ws").join(&rel))
        .unwrap()
        .set_len(PASSTHROUGH_BYTES)
        .unwrap();
    let o = open(&tree);
    assert!(o.passthrough && o.keep_cache, "{o:?}");
}

#[test]
fn inbox_shows_only_pending_deposits() {
    let (_t, f, tree) = setup(Flavour::Litany);
    assert_eq!(names(&tree, "inbox"), [A]);
    assert_eq!(names(&tree, &format!("inbox/{A}")), ["user-001.md"]);
    assert!(matches!(
        resolve(&tree, &format!("inbox/{A}/notes.txt")),
        Err(TreeError {
            kind: ErrorKind::NotFound,
            ..
        })
    ));
    std::fs::create_dir(f.inbox(A).join("user-009.md")).unwrap();
    assert_eq!(names(&tree, &format!("inbox/{A}")), ["user-001.md"]);
}

#[test]
fn marks_read_as_blob_bytes_or_commit_ids() {
    let (_t, f, tree) = setup(Flavour::Litany);
    assert_eq!(names(&tree, "marks"), ["cwd", "returned"]);
    assert_eq!(read(&tree, &format!("marks/cwd/{A}")), b"/tmp/work");
    let tip = f.agent_tip(A).unwrap();
    assert_eq!(
        read(&tree, &format!("marks/returned/{A}")),
        format!("{tip}\n").as_bytes()
    );
    let (_, attr) = resolve(&tree, &format!("marks/returned/{A}")).unwrap();
    assert_eq!(attr.size, 41);
    assert!(resolve(&tree, &format!("marks/returned/{B}")).is_err());
}

#[test]
fn lernie_workspaces_read_lernie_marks() {
    let (_t, _f, tree) = setup(Flavour::Lernie);
    assert_eq!(names(&tree, "marks"), ["cwd", "returned"]);
    assert_eq!(read(&tree, &format!("marks/cwd/{A}")), b"/tmp/work");
}

#[test]
fn agents_are_read_from_git() {
    let (_t, f, tree) = setup(Flavour::Litany);
    assert_eq!(names(&tree, "agents"), [A, B]);
    assert_eq!(
        names(&tree, &format!("agents/{A}")),
        ["goal.md", "messages", "name", "soul.md"]
    );
    assert_eq!(read(&tree, &format!("agents/{A}/name")), b"Alpha\n");
    assert_eq!(
        read(&tree, &format!("agents/{A}/messages/001-user.md")),
        b"hi"
    );
    // The branch moves: the view follows the new tip.
    f.agent(A, Some("Alpha"), &[("messages/002-x.json", b"[]")])
        .unwrap();
    tree.refs().invalidate();
    assert_eq!(
        names(&tree, &format!("agents/{A}/messages")),
        ["002-x.json"]
    );
    f.delete_agent(B).unwrap();
    tree.refs().invalidate();
    assert_eq!(names(&tree, "agents"), [A]);
}

#[test]
fn names_link_unique_living_agents() {
    let (_t, f, tree) = setup(Flavour::Litany);
    assert_eq!(names(&tree, "names"), ["Alpha"]);
    let (node, attr) = resolve(&tree, "names/Alpha").unwrap();
    assert_eq!(attr.kind, Kind::Symlink);
    assert_eq!(
        tree.readlink(&node).unwrap(),
        format!("../agents/{A}").as_bytes()
    );
    f.agent(B, Some("Alpha"), &[]).unwrap();
    tree.refs().invalidate();
    assert!(names(&tree, "names").is_empty());
    assert!(matches!(
        resolve(&tree, "names/Alpha"),
        Err(TreeError {
            kind: ErrorKind::NotFound,
            ..
        })
    ));
}

#[test]
fn an_agents_name_reaches_its_inbox_without_being_listed() {
    let (_t, f, tree) = setup(Flavour::Litany);
    std::fs::create_dir_all(f.inbox(B)).unwrap();
    let listed = names(&tree, "inbox");
    assert_eq!(listed, [A, B], "names are not listed, only the inboxes");
    let (node, attr) = resolve(&tree, "inbox/Alpha").unwrap();
    assert_eq!(attr.kind, Kind::Symlink);
    assert_eq!(tree.readlink(&node).unwrap(), A.as_bytes());
    // Through it, the inbox: as the kernel follows the link.
    assert_eq!(names(&tree, &format!("inbox/{A}")), ["user-001.md"]);
    // An id is taken first, as `litany message` takes it; an unknown name is nothing.
    f.agent(B, Some(A), &[]).unwrap();
    tree.refs().invalidate();
    assert_eq!(
        resolve(&tree, &format!("inbox/{A}")).unwrap().1.kind,
        Kind::Dir
    );
    assert!(resolve(&tree, "inbox/Nobody").unwrap_err().is_not_found());
    // A name two living agents wear is refused, naming them.
    f.agent(B, Some("Alpha"), &[]).unwrap();
    tree.refs().invalidate();
    let e = resolve(&tree, "inbox/Alpha").unwrap_err();
    assert_eq!(e.errno(), libc::ENOTUNIQ);
    let text = e.to_string();
    assert!(text.contains(A) && text.contains(B), "{text}");
}

#[test]
fn hostile_names_are_not_found() {
    let (_t, _f, tree) = setup(Flavour::Litany);
    for bad in ["..", ".", "a/b", ""] {
        assert!(
            tree.lookup(&Node::Root, OsStr::new(bad)).is_err(),
            "{bad:?}"
        );
        assert!(
            tree.lookup(&Node::git(GitNode::AgentsRoot), OsStr::new(bad))
                .is_err(),
            "{bad:?}"
        );
        assert!(
            tree.lookup(&Node::backing("steps"), OsStr::new(bad))
                .is_err(),
            "{bad:?}"
        );
    }
    assert!(matches!(
        resolve(&tree, &format!("marks/cwd/{A}/x")),
        Err(TreeError {
            kind: ErrorKind::NotDir,
            ..
        })
    ));
}

#[test]
fn large_captures_are_listed_without_being_parsed() {
    let (_t, f, tree) = setup(Flavour::Litany);
    let big = "x".repeat(EAGER_STREAMS_BYTES as usize + 10);
    let small = Fixture::tool_output("out", "err", 0);
    f.step(
        A,
        2,
        &[
            ("tools/big/output.json", &Fixture::tool_output(&big, "e", 0)),
            ("tools/small/output.json", &small),
            ("tools/bad/output.json", b"{\"stdout\": \"cut"),
        ],
    )
    .unwrap();
    let dir = format!("steps/{A}/002/tools");
    let listed = |tool: &str| {
        let (node, _) = resolve(&tree, &format!("{dir}/{tool}")).unwrap();
        tree.list(&node).unwrap()
    };
    // A small capture is parsed: exact sizes; one that does not parse lists no streams.
    let small_streams: Vec<(String, u64, bool)> = listed("small")
        .into_iter()
        .filter(|c| c.name != "output.json")
        .map(|c| {
            (
                c.name.to_string_lossy().into_owned(),
                c.attr.size,
                c.ttl != NO_TTL,
            )
        })
        .collect();
    assert_eq!(
        small_streams,
        [("stdout".into(), 3, true), ("stderr".into(), 3, true)]
    );
    assert_eq!(names(&tree, &format!("{dir}/bad")), ["output.json"]);
    // A large one is listed without reading it...
    let before = tree.pages().entries();
    let big_streams: Vec<(String, bool)> = listed("big")
        .into_iter()
        .filter(|c| c.name != "output.json")
        .map(|c| (c.name.to_string_lossy().into_owned(), c.ttl != NO_TTL))
        .collect();
    assert_eq!(
        big_streams,
        [("stdout".into(), false), ("stderr".into(), false)]
    );
    assert_eq!(tree.pages().entries(), before, "listing parsed the capture");
    // ...and a lookup gives the real size, after which listings know it too.
    let (_, attr) = resolve(&tree, &format!("{dir}/big/stdout")).unwrap();
    assert_eq!(attr.size, big.len() as u64);
    let known: Vec<(u64, bool)> = listed("big")
        .into_iter()
        .filter(|c| c.name == "stdout")
        .map(|c| (c.attr.size, c.ttl != NO_TTL))
        .collect();
    assert_eq!(known, [(big.len() as u64, true)]);
    // A large capture that turns out not to parse: listed unread, then not found.
    let mut broken = Fixture::tool_output(&big, "e", 0);
    broken.truncate(broken.len() - 40);
    f.step(A, 3, &[("tools/broken/output.json", &broken)])
        .unwrap();
    let broken_dir = format!("steps/{A}/003/tools/broken");
    assert_eq!(
        names(&tree, &broken_dir),
        ["output.json", "stdout", "stderr"]
    );
    let e = resolve(&tree, &format!("{broken_dir}/stdout")).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
}

#[test]
fn latest_links_to_the_highest_numbered_step_and_moves() {
    let (_t, f, tree) = setup(Flavour::Litany);
    assert_eq!(
        names(&tree, &format!("steps/{A}")),
        ["001", "latest", "transcript.md", "ctl"]
    );
    let (node, attr) = resolve(&tree, &format!("steps/{A}/latest")).unwrap();
    assert_eq!((attr.kind, attr.size), (Kind::Symlink, 3));
    assert_eq!(tree.readlink(&node).unwrap(), b"001");
    // Numbers, not names, decide: 10 is after 9, and files do not count.
    f.step(A, 9, &[("request.json", b"{}")]).unwrap();
    f.step(A, 10, &[("request.json", b"{}")]).unwrap();
    std::fs::write(f.root().join(format!("steps/{A}/999")), b"not a step").unwrap();
    assert_eq!(tree.readlink(&node).unwrap(), b"010");
    // An agent with no step directory has no latest; another agent's is hidden when
    // the view is confined.
    std::fs::create_dir_all(f.root().join(format!("steps/{B}"))).unwrap();
    assert!(resolve(&tree, &format!("steps/{B}/latest")).is_err());
    let confined = Tree::new(Workspace::open(f.root()).unwrap())
        .unwrap()
        .confined_to(B);
    let theirs = Node::record(RecordView::Latest { agent: A.into() });
    assert!(confined.getattr(&theirs).is_err());
    assert!(confined.readlink(&theirs).is_err());
    // Opening the link itself as a file is ELOOP.
    let e = tree.open_content(&node).unwrap_err();
    assert_eq!(e.errno(), libc::ELOOP);
}

#[test]
fn response_md_renders_the_record_and_grows_with_it() {
    let (_t, f, tree) = setup(Flavour::Litany);
    let start = concat!(
        r#"{"type":"message_start","v":1,"id":"m1","model":"fake","role":"assistant"}"#,
        "\n",
        r#"{"type":"content_start","index":0,"kind":{"text":{}}}"#,
        "\n",
        r#"{"type":"content_delta","index":0,"delta":{"text_delta":"Hello, "}}"#,
        "\n"
    );
    f.step(A, 2, &[("response.json", start.as_bytes())])
        .unwrap();
    let dir = format!("steps/{A}/002");
    assert!(names(&tree, &dir).contains(&"response.md".to_string()));
    let path = format!("{dir}/response.md");
    let first = read(&tree, &path);
    let text = String::from_utf8(first.clone()).unwrap();
    assert!(text.contains("Hello, "), "{text}");
    let (node, attr) = resolve(&tree, &path).unwrap();
    assert_eq!(attr.size, first.len() as u64, "stat is exact");
    assert_eq!(tree.ttl(&node, &attr), NO_TTL, "a step in flight may grow");
    // An appended delta (its line cut inside 'é' first) grows the rendering and keeps
    // what was shown.
    let more = r#"{"type":"content_delta","index":0,"delta":{"text_delta":"wörld é"}}"#;
    let file = f.root().join(&dir).join("response.json");
    let (head, tail) = more.as_bytes().split_at(more.len() - 4);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(head)
        .unwrap();
    assert_eq!(read(&tree, &path), first, "half a line shows nothing yet");
    let mut rest = tail.to_vec();
    rest.push(b'\n');
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(&rest)
        .unwrap();
    let second = read(&tree, &path);
    assert!(second.starts_with(&first), "append-only");
    assert!(String::from_utf8(second).unwrap().contains("wörld é"));
    // Under --agent, only one's own.
    let confined = Tree::new(Workspace::open(f.root()).unwrap())
        .unwrap()
        .confined_to(B);
    assert!(confined.getattr(&node).is_err());
}

/// `latest` is kept long only when a watch reports what changes it: the agent's step
/// directory (whose every entry invalidates it, `derived_from`); `transcript.md`, whose
/// live tail follows the step records and the inbox, never.
#[test]
fn latest_is_kept_long_only_when_watched_and_transcript_md_never() {
    let (_t, _f, tree) = setup(Flavour::Litany);
    let ttls = |tree: &Tree| -> Vec<(String, Duration)> {
        let (dir, _) = resolve(tree, &format!("steps/{A}")).unwrap();
        let mut v: Vec<_> = tree
            .list(&dir)
            .unwrap()
            .into_iter()
            .filter(|c| c.name == LATEST || c.name == TRANSCRIPT_MD)
            .map(|c| (c.name.to_string_lossy().into_owned(), c.ttl))
            .collect();
        v.sort();
        v
    };
    let both = |ttl| {
        vec![
            (LATEST.to_string(), ttl),
            (TRANSCRIPT_MD.to_string(), NO_TTL),
        ]
    };
    assert_eq!(ttls(&tree), both(SHORT_TTL));
    let tree = tree.watching();
    assert_eq!(ttls(&tree), both(WATCHED_TTL));
    for (name, ttl) in [(LATEST, WATCHED_TTL), (TRANSCRIPT_MD, NO_TTL)] {
        let (node, attr) = resolve(&tree, &format!("steps/{A}/{name}")).unwrap();
        assert_eq!(tree.ttl(&node, &attr), ttl, "{name}");
    }
    let dir = format!("steps/{A}");
    for entry in ["002", "driver.log"] {
        assert_eq!(
            derived_from(Path::new(&dir), OsStr::new(entry)),
            Some(Node::record(RecordView::Latest { agent: A.into() })),
            "{entry}"
        );
    }
}

#[test]
fn transcript_md_is_the_conversation_at_the_tip() {
    let (_t, _f, tree) = setup(Flavour::Litany);
    let path = format!("steps/{A}/transcript.md");
    let text = String::from_utf8(read(&tree, &path)).unwrap();
    assert!(text.contains("001"), "{text}");
    assert!(text.contains("hi"), "{text}");
    let (_, attr) = resolve(&tree, &path).unwrap();
    assert_eq!(attr.size, text.len() as u64);
    // An agent with no branch has none.
    assert!(resolve(&tree, "steps/nobody/transcript.md").is_err());
}

/// A ref change is reported against what was last reported, even when a request rebuilt
/// the refs' own snapshot (it expires) between the change and its report: the agent
/// that went still has its `steps/<id>/` listing (with its `transcript.md`) invalidated.
#[test]
fn a_deleted_agent_is_reported_even_after_a_request_reread_the_refs() {
    let (_t, f, tree) = setup(Flavour::Litany);
    let tree = tree.watching();
    assert!(names(&tree, &format!("steps/{A}")).contains(&"transcript.md".to_string()));
    f.delete_agent(A).unwrap();
    // A request after the snapshot expired re-reads the refs before the watcher reports.
    std::thread::sleep(crate::workspace::refs::SNAPSHOT_MAX_AGE + Duration::from_millis(50));
    assert!(resolve(&tree, &format!("agents/{A}")).is_err());
    let changed = tree.refs_changed();
    let dir = Node::backing(Path::new(crate::workspace::STEPS_DIR).join(A));
    assert!(changed.contains(&dir), "{changed:?}");
    // Reported once: nothing more changed since.
    assert!(tree.refs_changed().is_empty());
}

#[test]
fn the_views_are_fresh_at_every_open_and_the_events_grow() {
    let (_t, f, tree) = setup(Flavour::Litany);
    let status = String::from_utf8(read(&tree, "status")).unwrap();
    let lines: Vec<&str> = status.lines().skip(1).collect();
    assert!(status.starts_with("workspace: "), "{status}");
    assert!(lines[0].starts_with("NAME "), "{status}");
    assert!(
        lines[1].starts_with("Alpha ") && lines[1].contains(A),
        "{status}"
    );
    assert!(lines[1].contains(" pending "), "{status}");
    let json: serde_json::Value = serde_json::from_slice(&read(&tree, "status.json")).unwrap();
    assert_eq!(json[0]["id"], A);
    assert_eq!(json[0]["pending"], 1);
    assert_eq!(json[0]["marks"], serde_json::json!(["cwd", "returned"]));
    // A new agent shows at the next open.
    f.agent("20261202T094300Z-00000001", Some("Gamma"), &[])
        .unwrap();
    tree.refs().invalidate();
    std::thread::sleep(crate::workspace::refs::SNAPSHOT_MAX_AGE);
    let again = String::from_utf8(read(&tree, "status")).unwrap();
    assert!(again.contains("Gamma"), "{again}");
    for name in ["status", "events"] {
        let (node, attr) = resolve(&tree, name).unwrap();
        assert_eq!(tree.ttl(&node, &attr), NO_TTL, "{name}");
        let opened = tree.open(&node, &attr.identity, OpenMode::Read).unwrap();
        assert!(opened.direct_io && !opened.keep_cache, "{name}");
    }
    // Writing to a view is refused.
    let (node, attr) = resolve(&tree, "events").unwrap();
    assert!(
        tree.open(
            &node,
            &attr.identity,
            OpenMode::Write {
                truncate: false,
                by: 1
            }
        )
        .is_err()
    );

    // Once followed, the history shows, and the size is the log's.
    tree.views().start();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (node, _) = resolve(&tree, "events").unwrap();
    while tree.getattr(&node).unwrap().size == 0 {
        assert!(std::time::Instant::now() < deadline, "no history");
        std::thread::sleep(Duration::from_millis(20));
    }
    let events = String::from_utf8(read(&tree, "events")).unwrap();
    assert_eq!(tree.getattr(&node).unwrap().size, events.len() as u64);
    assert!(events.contains(" agent-created Alpha "), "{events}");
    assert!(
        events.contains(" message-deposited Alpha from=user "),
        "{events}"
    );
    let before = events.len();
    f.step(A, 2, &[("request.json", b"{}")]).unwrap();
    while tree.getattr(&node).unwrap().size == before as u64 {
        assert!(std::time::Instant::now() < deadline, "no live event");
        std::thread::sleep(Duration::from_millis(20));
    }
    let events = String::from_utf8(read(&tree, "events")).unwrap();
    assert!(
        events[before..].contains(&format!(" step-started Alpha step=002 steps/{A}/002\n")),
        "{events}"
    );
    let ndjson = String::from_utf8(read(&tree, "events.ndjson")).unwrap();
    assert_eq!(ndjson.lines().count(), events.lines().count());
}

/// A tree that takes deposits and decides closes from a stand-in `/proc`.
fn deposit_setup() -> (tempfile::TempDir, Fixture, Tree, std::path::PathBuf) {
    let (t, f, tree) = setup(Flavour::Litany);
    let proc = t.path().join("proc");
    std::fs::create_dir_all(&proc).unwrap();
    let depositor = crate::deposit::Depositor::new(
        tree.workspace(),
        crate::deposit::Options {
            guard: None,
            wake: crate::deposit::WakeMode::Off,
            spares: false,
            ..Default::default()
        },
    )
    .unwrap();
    let tree = tree
        .with_deposits(Deposits {
            depositor: Arc::new(depositor),
            sender: "user".into(),
        })
        .with_witness(crate::witness::Witness::with_proc(&proc, MOUNT));
    (t, f, tree, proc)
}

const MOUNT: u64 = 40;
const INO: u64 = 900;
const WR: u32 = libc::O_WRONLY as u32;

/// The bodies of agent A's real deposits other than the fixture's.
fn sent(f: &Fixture) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(f.inbox(A))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "user-001.md" && e.file_name() != "notes.txt")
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            text.rsplit_once("---\n").unwrap().1.to_string()
        })
        .collect();
    v.sort();
    v
}

/// A new draft `name`, created and opened for writing by `by`: its node, and the open
/// description (for its release).
fn draft(tree: &Tree, name: &str, by: u32) -> (Node, Content) {
    let (inbox, _) = resolve(tree, &format!("inbox/{A}")).unwrap();
    let (node, attr) = tree.create(&inbox, OsStr::new(name)).unwrap();
    let mode = OpenMode::Write {
        truncate: false,
        by,
    };
    let opened = tree.open(&node, &attr.identity, mode).unwrap();
    (node, opened.content)
}

fn close(tree: &Tree, node: &Node, tid: u32) -> Result<(), TreeError> {
    tree.flush(node, Some(Closer { tid, ino: INO }))
}

#[test]
fn a_reader_never_sends_and_a_second_writer_joins_the_message() {
    use crate::witness::fake;
    let (_t, f, tree, proc) = deposit_setup();
    // Process 50 writes the first half and keeps the file open.
    fake::process(&proc, 50, None, &[(3, WR, MOUNT, INO)], &[]).unwrap();
    let (node, writer) = draft(&tree, "half", 50);
    tree.write(&node, 0, b"first half;", 50).unwrap();
    // `cat` (51) opens it read-only, reads, closes, and its description is released.
    fake::process(
        &proc,
        51,
        None,
        &[(3, libc::O_RDONLY as u32, MOUNT, INO)],
        &[],
    )
    .unwrap();
    let attr = tree.getattr(&node).unwrap();
    assert_eq!(attr.perm, 0o600, "a draft is its writer's alone");
    let reader = tree.open(&node, &attr.identity, OpenMode::Read).unwrap();
    assert_eq!(read(&tree, &format!("inbox/{A}/half")), b"first half;");
    tree.close(&node, &reader.content, Closer { tid: 51, ino: INO })
        .unwrap();
    tree.release(&node, &reader.content);
    assert!(sent(&f).is_empty(), "a reader sent a half-written message");
    // A second, separate writable open (52) joins the same message.
    fake::process(&proc, 52, None, &[(4, WR, MOUNT, INO)], &[]).unwrap();
    let mode = OpenMode::Write {
        truncate: false,
        by: 52,
    };
    let second = tree.open(&node, &attr.identity, mode).unwrap();
    tree.write(&node, 11, b"second half", 50).unwrap();
    // The first writer closes while the second still holds it: nothing yet.
    fake::process(&proc, 50, None, &[], &[]).unwrap();
    close(&tree, &node, 50).unwrap();
    tree.release(&node, &writer);
    assert!(sent(&f).is_empty(), "sent while a second writer held it");
    // chmod cannot open it to others.
    tree.set_meta(&node, None, None, Some(0o666)).unwrap();
    assert_eq!(tree.getattr(&node).unwrap().perm, 0o600);
    // The last writer's close sends it, once.
    fake::process(&proc, 52, None, &[], &[]).unwrap();
    close(&tree, &node, 52).unwrap();
    tree.release(&node, &second.content);
    assert_eq!(sent(&f), ["first half;second half"]);
}

#[test]
fn the_last_writable_release_decides_what_no_close_did() {
    let (_t, f, tree, _proc) = deposit_setup();
    // No close was seen (a writer whose close the witness could not attribute): the
    // release of a reader decides nothing, that of the last writable description sends.
    let (node, writer) = draft(&tree, "m", 60);
    tree.write(&node, 0, b"whole", 60).unwrap();
    let attr = tree.getattr(&node).unwrap();
    let reader = tree.open(&node, &attr.identity, OpenMode::Read).unwrap();
    tree.release(&node, &reader.content);
    assert!(sent(&f).is_empty());
    tree.release(&node, &writer);
    assert_eq!(sent(&f), ["whole"]);
}

#[test]
fn the_write_path_sends_at_the_last_close_only() {
    use crate::witness::fake;
    let (_t, f, tree, proc) = deposit_setup();
    // Process 10 opened and wrote; a dup of it is still open in 10 itself.
    fake::process(&proc, 10, None, &[(3, WR, MOUNT, INO)], &[]).unwrap();
    let (node, writer) = draft(&tree, "m", 10);
    tree.write(&node, 0, b"a\n", 10).unwrap();
    close(&tree, &node, 10).unwrap();
    assert!(sent(&f).is_empty(), "sent at a dup's close");
    tree.write(&node, 2, b"b\n", 10).unwrap();
    // The same inode on another mount, or read-only, does not hold it.
    fake::process(
        &proc,
        10,
        None,
        &[
            (3, WR, MOUNT + 1, INO),
            (4, libc::O_RDONLY as u32, MOUNT, INO),
        ],
        &[],
    )
    .unwrap();
    close(&tree, &node, 10).unwrap();
    assert_eq!(sent(&f), ["a\nb\n"]);
    // Sent: further closes and the release change nothing; writes are refused.
    close(&tree, &node, 10).unwrap();
    tree.release(&node, &writer);
    assert_eq!(sent(&f).len(), 1);
    assert_eq!(
        tree.write(&node, 4, b"c", 10).unwrap_err().errno(),
        libc::EPERM
    );
}

#[test]
fn a_forked_child_holds_the_message_until_it_closes() {
    use crate::witness::fake;
    let (_t, f, tree, proc) = deposit_setup();
    fake::process(&proc, 20, None, &[], &[21]).unwrap();
    fake::process(&proc, 21, None, &[(1, WR, MOUNT, INO)], &[]).unwrap();
    let (node, _) = draft(&tree, "m", 20);
    tree.write(&node, 0, b"parent;", 20).unwrap();
    close(&tree, &node, 20).unwrap();
    assert!(sent(&f).is_empty(), "the child still holds it");
    tree.write(&node, 7, b"child", 21).unwrap();
    // The child exits (no address space left, status 0): its table is going away.
    fake::process(&proc, 21, Some(0), &[(1, WR, MOUNT, INO)], &[]).unwrap();
    fake::process(&proc, 20, None, &[], &[]).unwrap();
    close(&tree, &node, 21).unwrap();
    assert_eq!(sent(&f), ["parent;child"]);
}

#[test]
fn a_killed_writer_drops_the_message_and_a_killed_bystander_does_not() {
    use crate::witness::fake;
    let (_t, f, tree, proc) = deposit_setup();
    // A `sleep` (31) that never wrote is killed; the writer (30) then closes.
    fake::process(&proc, 30, None, &[(1, WR, MOUNT, INO)], &[31]).unwrap();
    fake::process(&proc, 31, Some(libc::SIGTERM), &[], &[]).unwrap();
    let (node, _) = draft(&tree, "kept", 30);
    tree.write(&node, 0, b"whole", 30).unwrap();
    close(&tree, &node, 31).unwrap();
    assert!(sent(&f).is_empty());
    fake::process(&proc, 30, None, &[], &[]).unwrap();
    close(&tree, &node, 30).unwrap();
    assert_eq!(sent(&f), ["whole"]);
    // The writer (32) killed while its child (33) still holds the file.
    fake::process(&proc, 32, None, &[], &[33]).unwrap();
    fake::process(&proc, 33, None, &[(1, WR, MOUNT, INO)], &[]).unwrap();
    let (node, writer) = draft(&tree, "half", 32);
    tree.write(&node, 0, b"half a mess", 32).unwrap();
    fake::process(&proc, 32, Some(libc::SIGKILL), &[], &[33]).unwrap();
    close(&tree, &node, 32).unwrap();
    assert!(!names(&tree, &format!("inbox/{A}")).contains(&"half".to_string()));
    // The child's normal close later sends nothing either.
    fake::process(&proc, 33, Some(0), &[], &[]).unwrap();
    close(&tree, &node, 33).unwrap();
    tree.release(&node, &writer);
    assert_eq!(sent(&f), ["whole"]);
    // The name, rewritten with O_TRUNC, starts a new message.
    let (n2, attr) = resolve(&tree, &format!("inbox/{A}/half")).unwrap();
    let mode = OpenMode::Write {
        truncate: true,
        by: 34,
    };
    tree.open(&n2, &attr.identity, mode).unwrap();
    tree.write(&n2, 0, b"again", 34).unwrap();
    close(&tree, &n2, 34).unwrap();
    assert_eq!(sent(&f), ["again", "whole"]);
}

/// A writer's thread id, once its task is gone, may be given to a thread of another
/// process: that process, killed holding the message, is not the writer (its start
/// time says so), and the message is sent, not dropped.
#[test]
fn a_reused_thread_id_does_not_make_a_killed_holder_the_writer() {
    use crate::witness::fake;
    let (_t, f, tree, proc) = deposit_setup();
    // 80 writes; its child 81 holds the file too and never writes.
    fake::process(&proc, 80, None, &[(3, WR, MOUNT, INO)], &[81]).unwrap();
    fake::started(&proc, 80, 1000).unwrap();
    fake::process(&proc, 81, None, &[(3, WR, MOUNT, INO)], &[]).unwrap();
    let (node, _) = draft(&tree, "whole", 80);
    tree.write(&node, 0, b"the whole message", 80).unwrap();
    // 80 exits normally: 81 still holds it, so nothing yet.
    fake::process(&proc, 80, Some(0), &[(3, WR, MOUNT, INO)], &[81]).unwrap();
    fake::started(&proc, 80, 1000).unwrap();
    close(&tree, &node, 80).unwrap();
    assert!(sent(&f).is_empty());
    // Id 80 is reused by a thread of 81, started later; then 81 is killed holding it.
    fake::thread(&proc, 80, 81, 2000).unwrap();
    fake::process(&proc, 81, Some(libc::SIGKILL), &[(3, WR, MOUNT, INO)], &[]).unwrap();
    close(&tree, &node, 81).unwrap();
    assert_eq!(
        sent(&f),
        ["the whole message"],
        "a dead writer's id made 81 a writer"
    );
    // The same, with the thread the writer's very own: the writer killed drops it.
    fake::process(&proc, 90, None, &[(3, WR, MOUNT, INO)], &[91]).unwrap();
    fake::thread(&proc, 91, 90, 500).unwrap();
    let (node, _) = draft(&tree, "half", 90);
    tree.write(&node, 0, b"half a mess", 91).unwrap();
    fake::process(&proc, 90, Some(libc::SIGKILL), &[(3, WR, MOUNT, INO)], &[]).unwrap();
    close(&tree, &node, 90).unwrap();
    assert_eq!(
        sent(&f),
        ["the whole message"],
        "a killed writer's message was sent"
    );
}

#[test]
fn a_cut_message_goes_unsent_at_its_last_close_with_the_refusal() {
    use crate::witness::fake;
    let (_t, f, tree, proc) = deposit_setup();
    fake::process(&proc, 40, None, &[(5, WR, MOUNT, INO)], &[]).unwrap();
    let (node, _) = draft(&tree, "big", 40);
    let max = crate::deposit::DEFAULT_MAX_MESSAGE_BYTES as u64;
    tree.write(&node, 0, b"x", 40).unwrap();
    let e = tree.write(&node, max, b"y", 40).unwrap_err();
    assert_eq!(e.errno(), libc::EFBIG);
    // A dup's close says so, and keeps it (the writer may truncate and rewrite).
    assert_eq!(close(&tree, &node, 40).unwrap_err().errno(), libc::EFBIG);
    assert!(names(&tree, &format!("inbox/{A}")).contains(&"big".to_string()));
    fake::process(&proc, 40, None, &[], &[]).unwrap();
    assert_eq!(close(&tree, &node, 40).unwrap_err().errno(), libc::EFBIG);
    assert!(!names(&tree, &format!("inbox/{A}")).contains(&"big".to_string()));
    assert!(sent(&f).is_empty());
}

/// Under `--agent`, another agent's capture or record view is refused by its own layer,
/// not only by the walk that reaches it: a node is also named directly (the kernel asks
/// about an inode it was handed earlier, by number).
#[test]
fn a_confined_view_refuses_another_agents_capture_at_every_layer() {
    let (_t, f, tree) = setup(Flavour::Litany);
    let out = Fixture::tool_output("a's output", "", 0);
    f.step(A, 2, &[("tools/toolu_2/output.json", &out)])
        .unwrap();
    let confined = Tree::new(Workspace::open(f.root()).unwrap())
        .unwrap()
        .confined_to(B);
    for name in ["output.json#stdout@0", "stdout"] {
        let path = format!("steps/{A}/002/tools/toolu_2/{name}");
        let (node, _) = resolve(&tree, &path).unwrap();
        assert!(resolve(&confined, &path).is_err(), "{path}");
        let e = confined.getattr(&node).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT, "{path}");
    }
    // The record views, the transcript (read from git, not the backing tree) among them.
    for path in [
        format!("steps/{A}/transcript.md"),
        format!("steps/{A}/latest"),
    ] {
        let (node, _) = resolve(&tree, &path).unwrap();
        assert!(resolve(&confined, &path).is_err(), "{path}");
        let e = confined.getattr(&node).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT, "{path}");
    }
}

/// Under `--agent`, another agent's inbox is listed (so that one can write to it) but its
/// pending deposits are reached by no path, not even by a node named directly; one's
/// own inbox shows its deposits.
#[test]
fn a_confined_view_shows_only_its_own_pending_deposits() {
    let (_t, f, tree) = setup(Flavour::Litany);
    let for_b = b"---\nfrom: user\n---\nfor b";
    f.inbox_file(B, "user-001.md", for_b).unwrap();
    let path = format!("inbox/{A}/user-001.md");
    let (theirs, _) = resolve(&tree, &path).unwrap();
    let confined = Tree::new(Workspace::open(f.root()).unwrap())
        .unwrap()
        .confined_to(B);
    assert_eq!(names(&confined, "inbox"), [A, B]);
    assert!(names(&confined, &format!("inbox/{A}")).is_empty());
    let e = resolve(&confined, &path).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{path}");
    let e = confined.getattr(&theirs).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{path} by its node");
    assert_eq!(names(&confined, &format!("inbox/{B}")), ["user-001.md"]);
    assert_eq!(read(&confined, &format!("inbox/{B}/user-001.md")), for_b);
}

#[test]
fn a_tree_is_not_at_rest_while_a_message_is_being_written() {
    let (_t, _f, tree, _proc) = deposit_setup();
    assert!(tree.at_rest(), "nothing written yet");
    let (_node, _content) = draft(&tree, "note.md", 70);
    assert!(!tree.at_rest(), "closing it now would lose the draft");
    tree.unlink(
        &resolve(&tree, &format!("inbox/{A}")).unwrap().0,
        OsStr::new("note.md"),
    )
    .unwrap();
    assert!(tree.at_rest(), "the draft was removed");
}
