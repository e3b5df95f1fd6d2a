//! The path-to-node resolver over a fixed fixture workspace: the input is a sequence of
//! path components (split on `/`, arbitrary bytes), each looked up from where the last
//! one led; every node reached is listed, stat'ed, opened, read and asked for its link
//! target and xattrs.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use litanyfs::fixture::Fixture;
use litanyfs::paging::{Address, PAGE_BYTES};
use litanyfs::tree::{Capture, Content, Node, OpenMode, Tree, XATTR_NEXT};
use litanyfs::workspace::Workspace;
use litanyfs::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";
const B: &str = "20261202T094227Z-0abc0def";
/// An id that is odd but still one path component.
const ODD: &str = "a#b@c";

fn build(root: &Path) -> Tree {
    let f = Fixture::create(root, Flavour::Litany).expect("fixture");
    let tip = f
        .agent(
            A,
            Some("Alpha"),
            &[
                ("messages/001-user.md", b"hi"),
                ("src/lib.rs", b"fn x() {}\n"),
            ],
        )
        .expect("agent A");
    f.agent(B, None, &[]).expect("agent B");
    f.agent(ODD, Some("Odd"), &[("x", b"y")])
        .expect("agent odd");
    f.commit_mark("returned", A, tip).expect("commit mark");
    f.blob_mark("cwd", A, b"/tmp/work").expect("blob mark");
    f.blob_mark("role", ODD, b"worker").expect("blob mark");
    let big = "0123456789abcdef\u{e9}\u{1f600}\n".repeat(300);
    let dir = f
        .step(
            A,
            1,
            &[
                ("request.json", b"{}"),
                (
                    "tools/toolu_1/output.json",
                    &Fixture::tool_output("hello\n", "warn\n", 0),
                ),
                ("tools/toolu_1/output.json.tmp", b"{"),
                (
                    "tools/toolu_2/output.json",
                    &Fixture::tool_output(&big, "", 1),
                ),
                ("tools/toolu_3/output.json", b"{\"stdout\":1}"),
                ("tools/toolu_4/input.json", b"{}"),
            ],
        )
        .expect("step 1");
    f.step(A, 12, &[("response.json", b"{}")]).expect("step 12");
    f.step(
        ODD,
        1,
        &[(
            "tools/t#1@2/output.json",
            &Fixture::tool_output("odd", "", 0),
        )],
    )
    .expect("odd step");
    // Links that point out of the workspace and around it.
    std::os::unix::fs::symlink("../../../..", dir.join("up")).expect("symlink");
    std::os::unix::fs::symlink("/etc/passwd", dir.join("passwd")).expect("symlink");
    std::os::unix::fs::symlink("tools", dir.join("tools-link")).expect("symlink");
    std::os::unix::fs::symlink("../../../../inbox", dir.join("tools/inbox")).expect("symlink");
    f.inbox_file(A, "user-001.md", b"---\nfrom: user\n---\nx")
        .expect("inbox");
    f.inbox_file(A, &format!("{B}-002.md"), b"from b")
        .expect("inbox");
    f.inbox_file(A, ".user-002.md.tmp", b"partial")
        .expect("inbox");
    f.inbox_file(A, "notes.txt", b"not a deposit")
        .expect("inbox");
    std::os::unix::fs::symlink("../../steps", f.inbox(A).join("user-003.md")).expect("symlink");
    std::fs::create_dir_all(f.inbox(B)).expect("inbox B");
    Tree::new(Workspace::open(f.root()).expect("workspace")).expect("tree")
}

thread_local! {
    static FIXTURE: (tempfile::TempDir, Tree) = {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = build(&dir.path().join("ws"));
        (dir, tree)
    };
}

/// The node's mount path never climbs.
fn check_path(node: &Node) {
    let path = node.path();
    assert!(
        !path.split('/').any(|c| c == ".."),
        "{node:?} has path {path:?}"
    );
}

/// A backing node names something under `steps/` or `inbox/`, with plain components.
fn check_backing(node: &Node) {
    if let Node::Backing(b) = node {
        let rel = b.rel();
        let mut parts = rel.components();
        let first = parts.next();
        assert!(
            matches!(first, Some(Component::Normal(c)) if c == "steps" || c == "inbox"),
            "{rel:?}"
        );
        assert!(parts.all(|c| matches!(c, Component::Normal(_))), "{rel:?}");
    }
}

/// A backing node that exists was reached without passing through a symlink: every
/// directory above it, on disk, is a real directory.
fn check_confined(root: &Path, node: &Node) {
    if let Node::Backing(b) = node {
        let rel = b.rel();
        let mut dir = root.to_path_buf();
        let parents: Vec<_> = rel.components().collect();
        for part in &parents[..parents.len().saturating_sub(1)] {
            dir.push(part);
            let meta = std::fs::symlink_metadata(&dir).expect("a parent of a node exists");
            assert!(meta.is_dir(), "{rel:?} is reached through {dir:?}");
        }
    }
}

/// A page is the slice of its whole stream that it names, of the size its attributes
/// give, and its `next` xattr is the address just past it.
fn check_page(tree: &Tree, node: &Node, address: &Address) {
    let Ok(Content::Bytes(page)) = tree.open_content(node) else {
        return;
    };
    let attr = tree.getattr(node).expect("an open page has attributes");
    assert_eq!(attr.size, page.len() as u64, "{address}");
    let whole = Node::capture(Capture::Stream {
        record: address.record.clone(),
        stream: address.stream,
    });
    let stream = tree.open_content(&whole).expect("a page's stream opens");
    let slice = tree
        .read(&whole, &stream, address.offset, PAGE_BYTES as u32)
        .expect("a page's stream reads");
    assert_eq!(slice, page.as_slice(), "{address}");
    let len = tree
        .getattr(&whole)
        .expect("a page's stream has attributes")
        .size;
    let end = address.offset + page.len() as u64;
    let xattrs = tree.xattrs(node).expect("a page has xattrs");
    let next = xattrs
        .iter()
        .find(|(k, _)| k == XATTR_NEXT)
        .map(|(_, v)| v.clone());
    let want = (end < len).then(|| address.moved_to(end).to_string().into_bytes());
    assert_eq!(next, want, "{address}");
}

/// Ask `node` everything a reader could.
fn visit(root: &Path, tree: &Tree, node: &Node) {
    check_path(node);
    check_backing(node);
    if tree.getattr(node).is_ok() {
        check_confined(root, node);
    }
    let _ = tree.readlink(node);
    let _ = tree.xattrs(node);
    if let Ok(children) = tree.list(node) {
        for child in children {
            check_path(&child.node);
            check_backing(&child.node);
            // What a listing shows, a lookup finds.
            match tree.lookup(node, &child.name) {
                Ok(found) => assert_eq!(found.node, child.node, "{:?} in {node:?}", child.name),
                Err(e) => panic!("{:?} listed in {node:?} but not found: {e}", child.name),
            }
        }
    }
    if let Node::Capture(capture) = node
        && let Capture::Page(address) = &**capture
    {
        check_page(tree, node, address);
    }
    if let Ok(attr) = tree.getattr(node)
        && let Ok(opened) = tree.open(node, &attr.identity, OpenMode::Read)
    {
        for offset in [0, 1, 4096, u64::MAX] {
            let _ = tree.read(node, &opened.content, offset, 4096);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    FIXTURE.with(|(dir, tree)| {
        let root = dir.path().join("ws");
        let mut node = Node::Root;
        visit(&root, tree, &node);
        for name in data.split(|&b| b == b'/') {
            let parent = node.clone();
            // A failed lookup leaves the walk where it was.
            if let Ok(found) = tree.lookup(&parent, OsStr::from_bytes(name)) {
                if let Node::Backing(_) = parent {
                    check_backing(&found.node);
                }
                node = found.node;
                visit(&root, tree, &node);
            }
        }
    });
});
