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
