//! The completions and the man page are generated from the command line's definition:
//! each lists every option `litanyfs mount --help` shows, with its `-o` spelling.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_litanyfs");

fn stdout(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The long options `litanyfs mount --help` lists, and each one's `[-o ...]` note.
fn mount_options() -> Vec<(String, Option<String>)> {
    let help = stdout(&["mount", "--help"]);
    let mut found = Vec::new();
    let lines: Vec<&str> = help.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(long) = line
            .trim_start()
            .split([' ', ','])
            .find(|w| w.starts_with("--"))
            .filter(|_| line.trim_start().starts_with('-'))
        else {
            continue;
        };
        // The option's help runs until the next option or a blank line before one.
        let note = lines[i + 1..]
            .iter()
            .take_while(|l| !l.trim_start().starts_with('-'))
            .find_map(|l| {
                let start = l.find("[-o ")?;
                Some(l[start..=start + l[start..].find(']')?].to_string())
            });
        found.push((long.to_string(), note));
    }
    found
}

#[test]
fn completions_and_the_man_page_list_every_mount_option() {
    let options = mount_options();
    assert!(options.len() > 10, "{options:?}");
    assert!(options.iter().any(|(l, _)| l == "--read-only"));
    let bash = stdout(&["completions", "bash"]);
    let zsh = stdout(&["completions", "zsh"]);
    let fish = stdout(&["completions", "fish"]);
    let man = stdout(&["man"]);
    assert!(man.contains("\n.TH litanyfs 1 "), "{man}");
    for (long, note) in &options {
        let name = long.trim_start_matches("--");
        assert!(bash.contains(long.as_str()), "bash completions miss {long}");
        assert!(zsh.contains(long.as_str()), "zsh completions miss {long}");
        assert!(
            fish.contains(&format!("-l {name}")),
            "fish completions miss {long}"
        );
        assert!(
            man.contains(&long.replace('-', "\\-")),
            "the man page misses {long}"
        );
        if long != "--help" {
            let note = note
                .as_ref()
                .unwrap_or_else(|| panic!("{long} has no -o note"));
            assert!(
                man.contains(&note.replace('-', "\\-")),
                "the man page misses {note}"
            );
        }
    }
    // The mount(8) form and the environment are on the page too.
    for want in [
        "LITANYFS MOUNT",
        "litanyfs WORKSPACE MOUNTPOINT \\-o",
        "NOTIFY_SOCKET",
    ] {
        assert!(man.contains(want), "the man page misses {want}");
    }
}

/// Plain text, whitespace collapsed: what a formatter may change in a paragraph.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The man page as `man -l` shows it on an 80-column terminal, in ASCII, without the
/// overstrikes of bold and underline.
fn rendered_man() -> String {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("litanyfs.1");
    std::fs::write(&page, stdout(&["man"])).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANWIDTH", "80")
        .env("LC_ALL", "C")
        .env("MANPAGER", "cat")
        .env_remove("MAN_KEEP_FORMATTING")
        .output()
        .unwrap_or_else(|e| {
            panic!("man: {e} (man-db and groff-base: `bash scripts/setup --harness`)")
        });
    assert!(
        out.status.success(),
        "man -l: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut plain = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The lines of `section` (a heading flush left) up to the next heading.
fn section<'a>(page: &'a str, heading: &str) -> Vec<&'a str> {
    page.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

#[test]
fn help_and_the_man_page_describe_the_whole_tree_entry_by_entry() {
    use litanyfs::guide::{entries, plain};
    let entries = entries();
    assert!(entries.len() >= 15, "{entries:?}");
    // --help: each path on a line of its own, its text under it, whole.
    let help = stdout(&["--help"]);
    let lines: Vec<&str> = help.lines().collect();
    for e in &entries {
        let path = plain(&e.path);
        let at = lines
            .iter()
            .position(|l| l.trim_end() == format!("  {path}"))
            .unwrap_or_else(|| panic!("--help has no line `  {path}`:\n{help}"));
        let text: Vec<&str> = lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("      "))
            .copied()
            .collect();
        assert_eq!(words(&text.join(" ")), words(&plain(&e.what)), "{path}");
    }
    // The man page, formatted: the TREE section holds every entry in order, its path
    // alone on a line and its text in the lines under it, none reflowed into another.
    let man = rendered_man();
    let tree = section(&man, "TREE");
    assert!(!tree.is_empty(), "no TREE section in\n{man}");
    let mut rest = &tree[..];
    for e in &entries {
        let path = plain(&e.path);
        let at = rest
            .iter()
            .position(|l| l.trim() == path)
            .unwrap_or_else(|| panic!("no line `{path}` in the man page's TREE:\n{tree:#?}"));
        let text: Vec<&str> = rest[at + 1..]
            .iter()
            .take_while(|l| !l.trim().is_empty())
            .copied()
            .collect();
        assert_eq!(words(&text.join(" ")), words(&plain(&e.what)), "{path}");
        rest = &rest[at + 1 + text.len()..];
    }
    for line in man.lines() {
        assert!(line.len() <= 80, "a line wider than the page: {line:?}");
    }
    // The lists in the notes (the environment, the generic mount options) keep each
    // item's head on a line of its own.
    let env = section(&man, "ENVIRONMENT");
    for var in [
        "RUST_LOG",
        "XDG_STATE_HOME",
        "HOME",
        "PATH",
        "NOTIFY_SOCKET",
    ] {
        assert!(env.iter().any(|l| l.trim() == var), "{var}: {env:#?}");
    }
    for (names, _) in litanyfs::helper::GENERIC {
        let head = names.join(", ");
        assert!(
            man.lines().any(|l| l.trim() == head),
            "generic options `{head}` reflowed"
        );
    }
}
