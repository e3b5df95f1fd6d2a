//! `ctl` and `new/` in the tree, without a mount: where they exist, their modes, and
//! every refusal that is decided before a worker runs anything.

use super::*;
use crate::fixture::Fixture;
use crate::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";
const CHILD: &str = "20261202T094226Z-0122ccc2-20261202T094300Z-0abc0def";
const GONE: &str = "20261202T094500Z-0fedcba9";

fn workspace() -> (tempfile::TempDir, Fixture) {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    f.agent(A, Some("Alpha"), &[]).unwrap();
    f.agent(CHILD, None, &[]).unwrap();
    for id in [A, CHILD, GONE] {
        f.step(id, 1, &[("request.json", b"{}")]).unwrap();
    }
    (t, f)
}

fn tree(f: &Fixture, deposits: bool, confined: Option<&str>) -> Tree {
    let mut tree = Tree::new(Workspace::open(f.root()).unwrap()).unwrap();
    if let Some(id) = confined {
        tree = tree.confined_to(id);
    }
    if deposits {
        let depositor = crate::deposit::Depositor::new(
            tree.workspace(),
            crate::deposit::Options {
                guard: None,
                wake: crate::deposit::WakeMode::Off,
                spares: false,
                harness: Some("/nonexistent/litany".into()),
                ..Default::default()
            },
        )
        .unwrap();
        tree = tree.with_deposits(Deposits {
            depositor: Arc::new(depositor),
            sender: confined.unwrap_or("user").into(),
        });
    }
    tree
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

fn write(tree: &Tree, path: &str, text: &str) -> Result<Deferred, TreeError> {
    let (node, attr) = resolve(tree, path)?;
    let w = OpenMode::Write {
        by: 1,
        truncate: true,
    };
    tree.open(&node, &attr.identity, w)?;
    tree.write_act(&node, text.as_bytes(), Writer { pid: 1, uid: 0 })
}

#[test]
fn every_living_agent_has_a_ctl_for_its_owner_alone() {
    let (_t, f) = workspace();
    let tree = tree(&f, true, None);
    assert!(names(&tree, &format!("steps/{A}")).contains(&"ctl".to_string()));
    let (_, attr) = resolve(&tree, &format!("steps/{CHILD}/ctl")).unwrap();
    assert_eq!(
        (attr.kind, attr.perm, attr.owner),
        (Kind::File, 0o600, None)
    );
    // A directory of steps whose agent has no ref takes no commands.
    assert!(!names(&tree, &format!("steps/{GONE}")).contains(&"ctl".to_string()));
    assert!(
        resolve(&tree, &format!("steps/{GONE}/ctl"))
            .unwrap_err()
            .is_not_found()
    );
    let (_, attr) = resolve(&tree, "new").unwrap();
    assert_eq!((attr.kind, attr.perm), (Kind::Dir, 0o700));
    // Reading ctl: the row, the commands, what releases a held call.
    let (node, attr) = resolve(&tree, &format!("steps/{A}/ctl")).unwrap();
    let opened = tree.open(&node, &attr.identity, OpenMode::Read).unwrap();
    let text = String::from_utf8(tree.read(&node, &opened.content, 0, 1 << 20).unwrap()).unwrap();
    assert!(text.contains(&format!("Alpha  {A}")), "{text}");
    assert!(text.contains("delete-tree NAME-OR-ID"), "{text}");
    assert!(text.contains("tool_control"), "{text}");
}

#[test]
fn what_is_not_a_command_is_refused_at_the_write() {
    let (_t, f) = workspace();
    let tree = tree(&f, true, None);
    tree.views().start();
    assert!(tree.views().wait_history(Duration::from_secs(10)));
    let ctl = format!("steps/{A}/ctl");
    for (text, errno) in [
        ("bogus\n", libc::EINVAL),
        ("stop now\n", libc::EINVAL),
        ("delete Beta\n", libc::EINVAL),
        (&format!("delete {CHILD}\n"), libc::EINVAL),
    ] {
        let e = write(&tree, &ctl, text).err().unwrap();
        assert_eq!(e.errno(), errno, "{text:?}: {e}");
    }
    // A command is left for a worker; a harness that is not there is its error.
    for ok in ["delete Alpha\n", &format!("delete {A}\n"), "stop\n"] {
        let later = write(&tree, &ctl, ok).unwrap();
        let e = later.run().unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT, "{ok:?}: {e}");
    }
    // Each is an event.
    let log = tree.views().log();
    let text = crate::views::Rendering::Text;
    let events = String::from_utf8(log.read(text, 0, log.len(text) as u32).unwrap()).unwrap();
    assert!(events.contains(" control Alpha command=bogus "), "{events}");
    assert!(events.contains("result=EINVAL"), "{events}");
}

#[test]
fn a_read_only_tree_shows_them_and_refuses_every_act() {
    let (_t, f) = workspace();
    let tree = tree(&f, false, None);
    let (_, attr) = resolve(&tree, &format!("steps/{A}/ctl")).unwrap();
    assert_eq!(attr.perm, 0o400);
    let e = write(&tree, &format!("steps/{A}/ctl"), "stop\n")
        .err()
        .unwrap();
    assert_eq!(e.errno(), libc::EROFS, "{e}");
    let (new, _) = resolve(&tree, "new").unwrap();
    let e = tree.create(&new, OsStr::new("Scout")).unwrap_err();
    assert_eq!(e.errno(), libc::EROFS, "{e}");
}

#[test]
fn an_agent_acts_only_on_its_descendants_and_starts_nothing() {
    let (_t, f) = workspace();
    let tree = tree(&f, true, Some(A));
    assert!(!names(&tree, &format!("steps/{A}")).contains(&"ctl".to_string()));
    // Its child's directory shows the ctl alone.
    assert_eq!(names(&tree, &format!("steps/{CHILD}")), ["ctl"]);
    assert!(resolve(&tree, &format!("steps/{CHILD}/001")).is_err());
    assert!(resolve(&tree, "new").unwrap_err().is_not_found());
    let ctl = format!("steps/{CHILD}/ctl");
    for refused in ["delete x\n", "retarget alt\n", "workflow clear\n"] {
        let e = write(&tree, &ctl, refused).err().unwrap();
        assert_eq!(e.errno(), libc::EPERM, "{refused:?}: {e}");
    }
    assert!(write(&tree, &ctl, "stop\n").is_ok());
}

#[test]
fn a_goal_is_a_draft_in_new_bounded_and_text() {
    let (_t, f) = workspace();
    let tree = tree(&f, true, None);
    let (new, _) = resolve(&tree, "new").unwrap();
    let (node, _) = tree.create(&new, OsStr::new("Scout")).unwrap();
    assert_eq!(node.path(), "new/Scout");
    assert_eq!(names(&tree, "new"), ["Scout"]);
    let e = tree.write(&node, 0, b"\xff", 1).unwrap_err();
    assert_eq!(e.errno(), libc::EILSEQ, "{e}");
    let (big, _) = tree.create(&new, OsStr::new("Big")).unwrap();
    let max = crate::control::start::MAX_GOAL_BYTES as u64;
    let e = tree.write(&big, max, b"x", 1).unwrap_err();
    assert_eq!(e.errno(), libc::EFBIG, "{e}");
    // A dot file is private: its close starts nothing.
    let (dot, _) = tree.create(&new, OsStr::new(".draft")).unwrap();
    tree.write(&dot, 0, b"plan", 1).unwrap();
    assert!(tree.flush(&dot, None).is_ok());
    assert!(tree.unlink(&new, OsStr::new(".draft")).is_ok());
}
