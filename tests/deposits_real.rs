//! Deposits under contention with the real harness: 8 writers x 50 messages through the
//! mount, while `litany message` deposits as the same sender from outside and the real
//! drain delivers as messages arrive. Every message must land exactly once, complete.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::harness::{self, RealWorkspace};
use common::mount::Mounted;

const WRITERS: usize = 8;
const PER_WRITER: usize = 50;
const LITANY_DEPOSITS: usize = 30;

#[test]
fn every_message_lands_exactly_once_while_litany_deposits_and_drains() {
    let Some(bin) = harness::litany_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let r = RealWorkspace::build_with(&bin, &dir.path().join("rw")).unwrap();
    let agent = r.root_b.clone();
    // The mount wakes the agent after each deposit, so the real drain runs throughout.
    let m = Mounted::with_args(&r.ws, &["--harness", bin.to_str().unwrap()]);
    let inbox = m.path(&format!("inbox/{agent}"));
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let inbox = inbox.clone();
            s.spawn(move || {
                for i in 0..PER_WRITER {
                    let body = format!("token mount-{w}-{i} ends here\n");
                    std::fs::write(inbox.join(format!("w{w}-{i}.txt")), body).unwrap();
                }
            });
        }
        let (ws, home, agent) = (&r.ws, &r.home, &agent);
        s.spawn(move || {
            for i in 0..LITANY_DEPOSITS {
                let (code, err) = harness::litany_message(
                    ws,
                    home,
                    agent,
                    &format!("token litany-{i} ends here\n"),
                    None,
                );
                assert_eq!(code, 0, "{err}");
            }
        });
    });
    harness::wait_quiescent(&r.ws, Duration::from_secs(120)).expect("the harness settles");
    // Count every token across what is still pending and what was delivered.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut count = |text: &str| {
        for word in text
            .split_whitespace()
            .filter(|w| w.starts_with("mount-") || w.starts_with("litany-"))
        {
            *seen.entry(word.to_string()).or_default() += 1;
        }
        assert!(
            !text.contains("token ") || text.contains(" ends here"),
            "a partial message: {text:?}"
        );
    };
    for e in std::fs::read_dir(r.ws.join("inbox").join(&agent)).unwrap() {
        let e = e.unwrap();
        if common::drain::accepts(&e.file_name().to_string_lossy()) {
            count(&std::fs::read_to_string(e.path()).unwrap());
        }
    }
    let listing = String::from_utf8(r.git(&[
        "ls-tree",
        "--name-only",
        &format!("refs/heads/agents/{agent}"),
        "messages/",
    ]))
    .unwrap();
    let mut delivered = 0;
    for path in listing.lines().filter(|p| p.ends_with("-user.md")) {
        let text = String::from_utf8(
            r.show(&format!("refs/heads/agents/{agent}:{path}"))
                .unwrap(),
        )
        .unwrap();
        delivered += 1;
        count(&text);
    }
    let mut missing = Vec::new();
    for w in 0..WRITERS {
        for i in 0..PER_WRITER {
            let t = format!("mount-{w}-{i}");
            match seen.get(&t) {
                Some(1) => {}
                n => missing.push(format!("{t}: {n:?}")),
            }
        }
    }
    assert!(
        missing.is_empty(),
        "mount deposits not landed exactly once: {missing:?}"
    );
    let litany_dupes: Vec<_> = seen
        .iter()
        .filter(|(k, n)| k.starts_with("litany-") && **n != 1)
        .collect();
    assert!(litany_dupes.is_empty(), "{litany_dupes:?}");
    let litany_landed = seen.keys().filter(|k| k.starts_with("litany-")).count();
    eprintln!(
        "{} mount deposits and {litany_landed}/{LITANY_DEPOSITS} litany deposits landed; {delivered} transcript entries from user; redeposits logged: {}",
        WRITERS * PER_WRITER,
        m.log_text().matches("re-deposit").count()
    );
    assert!(delivered > 0, "the drain delivered nothing");
}

/// The frontmatter lines and content of a deposit, with the timestamp line's value blanked.
fn normalized(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with("deposited_at: ") {
                "deposited_at: <ts>"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_deposit_through_the_mount_is_byte_compatible_and_delivered() {
    let Some(bin) = harness::litany_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let r = RealWorkspace::build_with(&bin, &dir.path().join("rw")).unwrap();
    let agent = r.root_c.clone();
    let content = "please summarise — ünïcode, \"quotes\" and\nlines\n";
    // Byte compatibility: hold the lock so both deposits stay in the inbox, then compare.
    let inbox = r.ws.join("inbox").join(&agent);
    {
        let _lock = harness::InboxLock::try_hold(&r.ws, &agent).unwrap();
        let m = Mounted::with_args(&r.ws, &["--harness", bin.to_str().unwrap()]);
        let (code, err) = harness::litany_message(&r.ws, &r.home, &agent, content, None);
        assert_eq!(code, 0, "{err}");
        std::fs::write(m.path(&format!("inbox/{agent}/note")), content).unwrap();
        let mut files: Vec<_> = std::fs::read_dir(&inbox)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 2, "{files:?}");
        let theirs = std::fs::read(&files[0]).unwrap();
        let ours = std::fs::read(&files[1]).unwrap();
        assert_eq!(normalized(&ours), normalized(&theirs));
        assert!(
            files[1].file_name().unwrap().to_str().unwrap() == "user-002.md",
            "{files:?}"
        );
        // Both stay pending while the executor lock is held.
        assert!(m.path(&format!("inbox/{agent}/user-002.md")).exists());
    }
    // Released: the next deposit through the mount wakes the agent, and the real harness
    // drains all three into the transcript.
    let m = Mounted::with_args(&r.ws, &["--harness", bin.to_str().unwrap()]);
    std::fs::write(m.path(&format!("inbox/{agent}/again")), "and then stop\n").unwrap();
    harness::wait_quiescent(&r.ws, Duration::from_secs(60)).expect("the harness settles");
    let listing = String::from_utf8(r.git(&[
        "ls-tree",
        "--name-only",
        &format!("refs/heads/agents/{agent}"),
        "messages/",
    ]))
    .unwrap();
    let delivered: Vec<String> = listing
        .lines()
        .filter(|p| p.ends_with("-user.md"))
        .map(|p| {
            String::from_utf8(r.show(&format!("refs/heads/agents/{agent}:{p}")).unwrap()).unwrap()
        })
        .collect();
    assert_eq!(
        delivered.iter().filter(|t| t.ends_with(content)).count(),
        2,
        "{delivered:?}"
    );
    assert_eq!(
        delivered
            .iter()
            .filter(|t| t.ends_with("and then stop\n"))
            .count(),
        1,
        "{delivered:?}"
    );
    assert!(
        std::fs::read_dir(&inbox)
            .unwrap()
            .all(|e| !common::drain::accepts(&e.unwrap().file_name().to_string_lossy()))
    );
}
