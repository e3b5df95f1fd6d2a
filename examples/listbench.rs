//! Lists every directory under `steps/` through the tree, without FUSE, and times it:
//! the daemon's own share of a walk (`cargo run --release --example listbench <ws>`).

use std::ffi::OsStr;
use std::time::Instant;

use litanyfs::tree::{Kind, Node, Tree};
use litanyfs::workspace::Workspace;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ws = std::env::args()
        .nth(1)
        .ok_or("usage: listbench WORKSPACE")?;
    let tree = Tree::new(Workspace::open(std::path::Path::new(&ws))?)?;
    let steps = tree.lookup(&Node::Root, OsStr::new("steps"))?.node;
    let t = Instant::now();
    let mut stack = vec![steps];
    let (mut dirs, mut entries) = (0, 0);
    while let Some(n) = stack.pop() {
        dirs += 1;
        for c in tree.list(&n)? {
            entries += 1;
            if c.attr.kind == Kind::Dir {
                stack.push(c.node);
            }
        }
    }
    let rss = std::fs::read_to_string("/proc/self/status")?
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or_default()
        .to_string();
    println!(
        "{dirs} dirs, {entries} entries, {:?}; page cache {} bytes in {} captures; {rss}",
        t.elapsed(),
        tree.pages().used_bytes(),
        tree.pages().entries()
    );
    Ok(())
}
