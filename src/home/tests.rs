use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::fixture::Fixture;
use crate::tree::{Identity, OpenMode};
use crate::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";
const B: &str = "20261202T094227Z-0abc0def";

/// A litany data root with two workspaces (`aaaa0001` with agent A named Alpha,
/// `bbbb0002` with agent B named Beta), and the space serving it.
fn setup() -> (tempfile::TempDir, Space, Arc<Home>) {
    setup_with(TreeLimits::default())
}

/// [`setup`], its home closing trees by `limits`.
fn setup_with(limits: TreeLimits) -> (tempfile::TempDir, Space, Arc<Home>) {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let a = Fixture::create(&data.join("workspaces/aaaa0001"), Flavour::Litany).unwrap();
    a.agent(A, Some("Alpha"), &[("messages/001-user.md", b"hi")])
        .unwrap();
    a.step(A, 1, &[("request.json", b"{}")]).unwrap();
    a.inbox_file(A, "user-001.md", b"---\nfrom: user\n---\nx")
        .unwrap();
    let b = Fixture::create(&data.join("workspaces/bbbb0002"), Flavour::Litany).unwrap();
    b.agent(B, Some("Beta"), &[]).unwrap();
    let Source::Home { root, shelves } = classify(&data) else {
        panic!("a data root is a home");
    };
    let opener: Opener = Box::new(|_key, ws, _read_only, views| {
        Ok(Arc::new(
            Tree::new(ws.clone())
                .map_err(|e| e.to_string())?
                .sharing_views(views),
        ))
    });
    let home = Home::with_limits(root, shelves, opener, limits);
    (t, Space::Home(home.clone()), home)
}

fn open_keys(home: &Home) -> Vec<String> {
    let mut v: Vec<String> = home
        .open_trees()
        .into_iter()
        .map(|(k, _)| k.to_string())
        .collect();
    v.sort();
    v
}

fn resolve(space: &Space, path: &str) -> Result<(Node, Attr), TreeError> {
    let mut node = Node::Root;
    let mut attr = match space {
        Space::Home(h) => h.getattr(&node)?,
        Space::One(t) => t.getattr(&node)?,
    };
    for part in path.split('/').filter(|p| !p.is_empty()) {
        let c = space.lookup(&node, OsStr::new(part))?;
        (node, attr) = (c.node, c.attr);
    }
    Ok((node, attr))
}

fn names(space: &Space, path: &str) -> Vec<String> {
    let (node, _) = resolve(space, path).unwrap();
    let mut v: Vec<String> = space
        .list(&node)
        .unwrap()
        .into_iter()
        .map(|c| c.name.to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn read(space: &Space, path: &str) -> Vec<u8> {
    let (node, attr) = resolve(space, path).unwrap();
    let opened = space.open(&node, &attr.identity, OpenMode::Read).unwrap();
    let mut out = Vec::new();
    space
        .read_into(&node, &opened.content, 0, 1 << 20, &mut out)
        .unwrap();
    out
}

#[test]
fn the_root_lists_every_workspace_and_the_views_without_opening_any() {
    let (_t, space, home) = setup();
    assert_eq!(
        names(&space, ""),
        [
            "aaaa0001",
            "attention",
            "attention.json",
            "bbbb0002",
            "events",
            "events.ndjson",
            "status",
            "status.json"
        ]
    );
    assert!(home.open_trees().is_empty(), "a listing opened a workspace");
    // A workspace's directory is stat'able, and still not opened.
    let (node, attr) = resolve(&space, "aaaa0001").unwrap();
    assert_eq!(attr.kind, Kind::Dir);
    assert!(space.stat(&node, &attr.identity).is_ok());
    assert!(home.open_trees().is_empty());
}

#[test]
fn a_workspace_inside_the_home_is_its_whole_single_tree() {
    let (t, space, home) = setup();
    assert_eq!(
        names(&space, "aaaa0001"),
        [
            "agents",
            "attention",
            "attention.json",
            "events",
            "events.ndjson",
            "inbox",
            "marks",
            "names",
            "new",
            "status",
            "status.json",
            "steps"
        ]
    );
    assert_eq!(home.open_trees().len(), 1);
    // The same bytes as the backing file, by the path litany prints.
    let rel = format!("steps/{A}/001/request.json");
    assert_eq!(read(&space, &format!("aaaa0001/{rel}")), b"{}");
    let raw = t.path().join("data/workspaces/aaaa0001").join(&rel);
    assert_eq!(std::fs::read(raw).unwrap(), b"{}");
    // Names resolve in their own workspace only.
    assert!(resolve(&space, "aaaa0001/names/Alpha").is_ok());
    assert!(resolve(&space, "bbbb0002/names/Alpha").is_err());
    // Two workspaces' identical paths are two identities.
    let (_, a) = resolve(&space, "aaaa0001/names").unwrap();
    let (_, b) = resolve(&space, "bbbb0002/names").unwrap();
    assert_ne!(a.identity, b.identity);
    assert!(matches!(a.identity, Identity::Virtual(Node::Home(_))));
    // An error names the mount-relative path.
    let e = resolve(&space, "bbbb0002/steps/nope").unwrap_err();
    assert!(e.path.starts_with("bbbb0002/"), "{}", e.path);
}

#[test]
fn the_root_status_has_every_workspaces_agents() {
    let (_t, space, _home) = setup();
    let text = String::from_utf8(read(&space, "status")).unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert!(
        text.starts_with("home: 0 tokens, 0s wall, 1 steps\n"),
        "{text}"
    );
    assert!(lines[0].starts_with("WORKSPACE "), "{text}");
    assert!(
        lines[1].starts_with("aaaa0001 ") && lines[1].contains(A),
        "{text}"
    );
    assert!(
        lines[2].starts_with("bbbb0002 ") && lines[2].contains(B),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_slice(&read(&space, "status.json")).unwrap();
    assert_eq!(json[0]["workspace"], "aaaa0001");
    assert_eq!(json[1]["workspace"], "bbbb0002");
    assert_eq!(json[1]["name"], "Beta");
    // A single workspace's status has no such column.
    let (node, attr) = resolve(&space, "aaaa0001/status").unwrap();
    let opened = space.open(&node, &attr.identity, OpenMode::Read).unwrap();
    let mut out = Vec::new();
    space
        .read_into(&node, &opened.content, 0, 1 << 20, &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("workspace: "), "{text}");
    assert!(text.lines().nth(1).unwrap().starts_with("NAME "), "{text}");
}

#[test]
fn a_new_workspace_shows_and_a_removed_one_is_gone_with_its_nodes() {
    let (t, space, home) = setup();
    let data = t.path().join("data");
    // Being created under a dot-temp: not shown; renamed into place: shown.
    let tmp = data.join("workspaces/.cccc0003.yog-tmp-7");
    let c = Fixture::create(&tmp, Flavour::Litany).unwrap();
    c.agent(A, Some("Gamma"), &[]).unwrap();
    assert!(!names(&space, "").contains(&".cccc0003.yog-tmp-7".to_string()));
    std::fs::rename(&tmp, data.join("workspaces/cccc0003")).unwrap();
    assert!(names(&space, "").contains(&"cccc0003".to_string()));
    assert!(resolve(&space, "cccc0003/names/Gamma").is_ok());
    // Opened, then removed: its old nodes answer NotFound, never the old tree.
    let (node, attr) = resolve(&space, "bbbb0002/names").unwrap();
    assert!(home.open_trees().iter().any(|(k, _)| &**k == "bbbb0002"));
    std::fs::remove_dir_all(data.join("workspaces/bbbb0002")).unwrap();
    std::thread::sleep(RECHECK);
    let e = space.stat(&node, &attr.identity).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    assert!(!names(&space, "").contains(&"bbbb0002".to_string()));
    assert!(!home.open_trees().iter().any(|(k, _)| &**k == "bbbb0002"));
    // A views-only read of the root is unaffected.
    let status = read(&space, "status");
    assert!(status.starts_with(b"home: "));
    assert!(
        status
            .split(|b| *b == b'\n')
            .nth(1)
            .unwrap()
            .starts_with(b"WORKSPACE")
    );
}

#[test]
fn a_yog_home_keeps_named_world_and_replays_apart() {
    let t = tempfile::tempdir().unwrap();
    let yog = t.path().join("yog");
    Fixture::create(&yog.join("workspaces/research"), Flavour::Litany).unwrap();
    Fixture::create(
        &yog.join("world/litany/workspaces/0badf00d"),
        Flavour::Litany,
    )
    .unwrap();
    Fixture::create(&yog.join("world/litany/replays/r1"), Flavour::Litany).unwrap();
    let Source::Home { root, shelves } = classify(&yog) else {
        panic!("yog's data root is a home");
    };
    let opener: Opener = Box::new(|_key, ws, read_only, views| {
        assert_eq!(read_only, ws.root().ends_with("r1"));
        Ok(Arc::new(
            Tree::new(ws.clone())
                .map_err(|e| e.to_string())?
                .sharing_views(views),
        ))
    });
    let space = Space::Home(Home::new(root, shelves, opener));
    let root = names(&space, "");
    for want in ["research", "world", "replays", "status"] {
        assert!(root.contains(&want.to_string()), "{root:?}");
    }
    assert_eq!(names(&space, "world"), ["0badf00d"]);
    assert_eq!(names(&space, "replays"), ["r1"]);
    assert!(resolve(&space, "world/0badf00d/agents").is_ok());
    assert!(resolve(&space, "replays/r1/marks").is_ok());
    // Nothing but views and directories at the home level: a write is refused there.
    let (root_node, _) = resolve(&space, "").unwrap();
    let e = space.create(&root_node, OsStr::new("x"), None).unwrap_err();
    assert_eq!(e.errno(), libc::EROFS);
    let (status, attr) = resolve(&space, "status").unwrap();
    let mode = OpenMode::Write {
        truncate: true,
        by: 1,
    };
    assert_eq!(
        space
            .open(&status, &attr.identity, mode)
            .unwrap_err()
            .errno(),
        libc::EROFS
    );
}

#[test]
fn the_root_attention_is_every_workspaces_most_urgent_first() {
    let (t, space, _home) = setup();
    assert_eq!(read(&space, "attention"), b"");
    let data = t.path().join("data/workspaces");
    let b = Fixture::open(&data.join("bbbb0002"), Flavour::Litany).unwrap();
    let tip = b.agent_tip(B).unwrap();
    b.commit_mark("notify", B, tip).unwrap();
    let a = Fixture::open(&data.join("aaaa0001"), Flavour::Litany).unwrap();
    a.blob_mark(
        "held",
        A,
        br#"{"tool_use_id":"t","tool":"bash","reason":"ask"}"#,
    )
    .unwrap();
    let text = String::from_utf8(read(&space, "attention")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("WORKSPACE  SIGNAL  NAME"), "{text}");
    assert!(
        lines[1].starts_with("aaaa0001   held    Alpha")
            && lines[1].contains(&format!(" aaaa0001/marks/held/{A} ")),
        "{text}"
    );
    assert!(
        lines[2].starts_with("bbbb0002   notify  Beta")
            && lines[2].contains(&format!(" bbbb0002/marks/notify/{B} ")),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_slice(&read(&space, "attention.json")).unwrap();
    assert_eq!(json[0]["workspace"], "aaaa0001");
    assert_eq!(json[1]["kind"], "notify");
    // And every path opens under the home's root.
    for p in [
        format!("aaaa0001/marks/held/{A}"),
        format!("bbbb0002/marks/notify/{B}"),
    ] {
        assert!(resolve(&space, &p).is_ok(), "{p}");
    }
}

#[test]
fn idle_trees_close_least_recently_used_first_and_open_again_on_use() {
    let in_use = Duration::from_millis(60);
    let (_t, space, home) = setup_with(TreeLimits {
        max_open: 1,
        in_use,
        idle_close: Duration::from_secs(3600),
    });
    assert_eq!(names(&space, "aaaa0001/names"), ["Alpha"]);
    assert_eq!(open_keys(&home), ["aaaa0001"]);
    std::thread::sleep(in_use * 2);
    // Opening a second over the limit closes the first, idle one.
    assert_eq!(names(&space, "bbbb0002/names"), ["Beta"]);
    assert_eq!(open_keys(&home), ["bbbb0002"]);
    // The closed one answers as before, from a tree opened again; the other, used just
    // now, is not idle yet and stays open beside it.
    assert_eq!(
        read(
            &space,
            "aaaa0001/inbox/20261202T094226Z-0122ccc2/user-001.md"
        ),
        b"---\nfrom: user\n---\nx"
    );
    assert_eq!(open_keys(&home), ["aaaa0001", "bbbb0002"]);
    std::thread::sleep(in_use * 2);
    assert_eq!(names(&space, "aaaa0001/names"), ["Alpha"]);
    home.close_idle();
    assert_eq!(
        open_keys(&home),
        ["aaaa0001"],
        "bbbb0002 was the least recently used"
    );
}

#[test]
fn a_tree_with_a_request_inside_is_not_closed() {
    let (_t, space, home) = setup_with(TreeLimits {
        max_open: 0,
        in_use: Duration::ZERO,
        idle_close: Duration::ZERO,
    });
    assert_eq!(names(&space, "aaaa0001/names"), ["Alpha"]);
    let held = home.tree("aaaa0001").unwrap();
    home.close_idle();
    assert_eq!(
        open_keys(&home),
        ["aaaa0001"],
        "a holder beyond the home's is a request"
    );
    drop(held);
    home.close_idle();
    assert!(open_keys(&home).is_empty());
}

#[test]
fn a_tree_unused_for_long_closes_however_few_are_open() {
    let idle_close = Duration::from_millis(80);
    let (_t, space, home) = setup_with(TreeLimits {
        max_open: 8,
        in_use: Duration::ZERO,
        idle_close,
    });
    assert_eq!(names(&space, "aaaa0001/names"), ["Alpha"]);
    home.close_idle();
    assert_eq!(open_keys(&home), ["aaaa0001"], "used just now");
    std::thread::sleep(idle_close * 2);
    home.close_idle();
    assert!(open_keys(&home).is_empty());
}

#[test]
fn gathering_gives_each_item_once_and_leaves_out_only_one_that_panics() {
    let items: Vec<u32> = (0..23).collect();
    let mut got = gather_each(&items, |i| {
        assert_ne!(*i, 7, "a reading that fails");
        i * 10
    });
    got.sort_by_key(|g| g.0);
    let want: Vec<(usize, u32)> = (0..23)
        .filter(|i| *i != 7)
        .map(|i| (i, i as u32 * 10))
        .collect();
    assert_eq!(got, want);
    assert_eq!(gather_each(&[5u32], |i| *i), vec![(0, 5)]);
    assert!(gather_each(&[] as &[u32], |i| *i).is_empty());
}
