//! `litanyfs demo`, as a new user meets it: a healthy workspace dated now (steps done,
//! an answer with words, times on every transcript entry, pending mail from an agent, a
//! child, a held call, a cut tool output whose continuation address `cat` follows), no
//! warning in any log, and every line of the tour working as it says. Then the sample
//! checked against the real harness: its transcript's envelope and marker are litany's,
//! and `read_tool_output` pages its record as the mount does.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::mount::{BIN, eventually, is_mounted};

/// A demo this test started: unmounted when dropped, whatever the test did.
struct Demo {
    mnt: PathBuf,
    dir: tempfile::TempDir,
    tour: String,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let root = self.root();
        if is_mounted(&root) {
            let _ = Command::new("fusermount3").arg("-uz").arg(&root).status();
        }
    }
}

impl Demo {
    fn start() -> Demo {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(BIN)
            .arg("demo")
            .arg(dir.path().join("demo"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .output()
            .unwrap();
        // The tour walks the home's first workspace, at MNT/<it>.
        let first = litanyfs::demo::HOME_WORKSPACES[0];
        let d = Demo {
            mnt: dir.path().join("demo/mnt").join(first),
            dir,
            tour: String::from_utf8_lossy(&out.stdout).into_owned(),
        };
        assert!(
            out.status.success(),
            "demo failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        d
    }

    fn ws(&self) -> PathBuf {
        self.dir
            .path()
            .join("demo/home")
            .join(litanyfs::demo::HOME_WORKSPACES[0])
    }

    /// The home mount's root.
    fn root(&self) -> PathBuf {
        self.dir.path().join("demo/mnt")
    }

    fn log(&self) -> String {
        let dir = self.dir.path().join("state/litanyfs");
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect()
    }

    /// The tour's variables, as it prints them (`R=...`).
    fn vars(&self) -> Vec<(String, String)> {
        self.tour
            .lines()
            .filter_map(|l| {
                let (k, v) = l.trim().split_once('=')?;
                (k.len() == 1 && k.chars().all(|c| c.is_ascii_uppercase()))
                    .then(|| (k.to_string(), v.to_string()))
            })
            .collect()
    }

    fn var(&self, name: &str) -> String {
        self.vars()
            .into_iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("no {name}= in the tour:\n{}", self.tour))
            .1
    }

    /// `command` run by bash in the mount with the tour's variables set.
    fn bash(&self, command: &str) -> Output {
        let mut script = String::new();
        for (k, v) in self.vars() {
            script += &format!("{k}={v}\n");
        }
        script += command;
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&self.mnt)
            .env("PAGER", "cat")
            .output()
            .unwrap()
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.mnt.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`, from `date` (not from the code
/// under test).
fn epoch(utc: &str) -> i64 {
    let out = Command::new("date")
        .args(["-u", "-d", utc, "+%s"])
        .output()
        .unwrap();
    text(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a time: {utc}"))
}

#[test]
fn the_demo_is_a_healthy_workspace_and_every_tour_line_works() {
    let d = Demo::start();
    let (r, c, h) = (d.var("R"), d.var("C"), d.var("H"));
    assert!(c.starts_with(&format!("{r}-")), "{c} is not a child of {r}");

    // Current times: every id and every transcript entry from the last hour.
    let started = now();
    for id in [&r, &c, &h] {
        let ts = &id[id.len() - 25..id.len() - 9];
        let utc = format!(
            "{}-{}-{}T{}:{}:{}Z",
            &ts[0..4],
            &ts[4..6],
            &ts[6..8],
            &ts[9..11],
            &ts[11..13],
            &ts[13..15]
        );
        let age = started - epoch(&utc);
        assert!((0..3600).contains(&age), "{id} is {age} s old");
    }
    for id in [&r, &c, &h] {
        let transcript = d.read(&format!("steps/{id}/transcript.md"));
        assert!(!transcript.contains("time unknown"), "{id}:\n{transcript}");
        // Committed entries: `## <NNN> <origin> · <time>`; the sections after them say
        // where the agent stands (`## waiting · …`, `## held · …`), and a live entry has
        // its state where a time goes (doc/VIEWS.md).
        let live = |at: &str| {
            [
                "waiting in the inbox",
                "streaming, in flight",
                "cut, never committed",
            ]
            .contains(&at)
                || at.starts_with("running since ")
        };
        let entries: Vec<&str> = transcript
            .lines()
            .filter(|l| l.starts_with("## ") && l.contains(" · "))
            .filter(|l| {
                l[3..]
                    .split(' ')
                    .next()
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .filter(|l| !live(l.split(" · ").nth(1).unwrap()))
            .collect();
        assert!(entries.len() >= 2, "{id}: {entries:?}");
        for e in entries {
            let at = e.split(" · ").nth(1).unwrap();
            let age = started - epoch(at);
            assert!((0..3600).contains(&age), "{id}: {e}");
        }
    }

    // The home's root: both workspaces, and every agent of both in its status.
    let listed: Vec<String> = std::fs::read_dir(d.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for ws in litanyfs::demo::HOME_WORKSPACES {
        assert!(listed.contains(&ws.to_string()), "{listed:?}");
    }
    let home_status = std::fs::read_to_string(d.root().join("status")).unwrap();
    for ws in litanyfs::demo::HOME_WORKSPACES {
        let rows = home_status
            .lines()
            .filter(|l| l.starts_with(&format!("{ws} ")))
            .count();
        assert_eq!(rows, 3, "{ws}:\n{home_status}");
    }
    assert!(
        d.tour
            .contains(&format!("cat {}/status", d.root().display()))
    );

    // status: the three agents as the tour says.
    let status = d.read("status");
    let row = |id: &str| {
        status
            .lines()
            .find(|l| l.contains(&format!(" {id} ")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{status}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row(&r)[..5],
        ["BoulderThunder", r.as_str(), "pending", "003:done", "1"]
    );
    assert_eq!(
        row(&c)[..5],
        ["PeachHollow", c.as_str(), "idle", "002:done", "0"]
    );
    assert!(row(&c).contains(&"returned"));
    assert_eq!(
        row(&h)[..4],
        ["CopperLantern", h.as_str(), "held", "001:done"]
    );
    let notes: Vec<&str> = status
        .lines()
        .filter(|l| l.trim_start().starts_with('!'))
        .collect();
    // Two things need a look, both by design: the held call, and the child's result
    // waiting in BoulderThunder's inbox with no executor to take it (the `mail` signal,
    // ECOSYSTEM §3).
    assert_eq!(notes.len(), 2, "{status}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("held") && n.contains("bash")),
        "{status}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("mail") && n.contains(&format!("inbox/{r}"))),
        "{status}"
    );

    // The newest step's answer has words; the mail waiting is from an agent.
    let answer = d.read(&format!("steps/{r}/latest/response.md"));
    let words = answer
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(str::split_whitespace)
        .count();
    assert!(words > 10, "{answer}");
    let mail = d.read(&format!("inbox/{r}/{c}-001.md"));
    assert!(mail.contains("from_name: PeachHollow\n"), "{mail}");

    // No warning in any log: the drivers', and the daemon's, once the history is in.
    for id in [&r, &c, &h] {
        let log = d.ws().join(format!("steps/{id}/driver.log"));
        assert_eq!(std::fs::read(&log).unwrap(), b"", "{}", log.display());
    }
    assert!(eventually(Duration::from_secs(10), || d
        .log()
        .contains("events reconstructed")));
    let log = d.log();
    for bad in [" WARN ", " ERROR "] {
        assert!(!log.contains(bad), "the daemon's log:\n{log}");
    }
    let events = d.read("events");
    assert!(!events.contains("bad-record"), "{events}");

    // Every line of the tour, as printed, does what it says.
    let stops = litanyfs::demo::tour_stops(&litanyfs::demo::Sample::new(0, 0));
    assert!(stops.len() >= 10);
    for s in &stops {
        assert!(
            d.tour.contains(&format!("  {}\n", s.command)),
            "the tour does not print {:?}:\n{}",
            s.command,
            d.tour
        );
        let out = d.bash(&s.command);
        if s.refused {
            assert!(!out.status.success(), "{}: not refused", s.command);
            assert!(
                !out.stderr.is_empty(),
                "{}: refused without a word",
                s.command
            );
        } else {
            assert!(out.status.success(), "{}: {}", s.command, text(&out.stderr));
            assert!(
                out.stderr.is_empty(),
                "{}: {}",
                s.command,
                text(&out.stderr)
            );
        }
    }
    // The continuation address it greps is the one it cats, and the page is the cut
    // middle of `seq 1 3000`.
    let grep = d.bash(&format!("grep -o 'address [^ ]*' steps/{r}/transcript.md"));
    let address = text(&grep.stdout)
        .trim()
        .trim_start_matches("address ")
        .to_string();
    assert!(address.ends_with("#stdout@2048"), "{address}");
    let page = std::fs::read(d.mnt.join(&address)).unwrap();
    let seq: String = (1..=3000).map(|n| format!("{n}\n")).collect();
    assert_eq!(page, seq.as_bytes()[2048..2048 + 4096]);
    // The message the tour writes is in the real inbox; the refused one is not.
    let inbox: Vec<String> = std::fs::read_dir(d.ws().join("inbox").join(&r))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(inbox.contains(&"user-001.md".to_string()), "{inbox:?}");
    assert_eq!(inbox.len(), 2, "{inbox:?}");
}

#[test]
fn a_demo_directory_of_someone_else_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let open = t.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new(BIN).arg("demo").arg(&open).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("only you can write to"),
        "{}",
        text(&out.stderr)
    );
    assert!(!open.join("ws").exists() && !open.join("mnt").exists());
}

/// The record path of a marker's address, and its agent: `steps/<id>/...`.
fn record_agent(address: &str) -> &str {
    address.split('/').nth(1).unwrap()
}

#[test]
fn the_sample_is_written_as_the_real_harness_writes() {
    let Some(real) = common::harness::real_workspace() else {
        return;
    };
    // The envelope and marker of `seq 1 3000`, as litany committed them in the real
    // workspace (its text then goes on with a context file, which the sample has none
    // of), and as the sample renders them for the same record.
    let found = real
        .markers()
        .into_iter()
        .find(|m| m.marker.total == 13893 && m.marker.label == "stdout")
        .expect("the real workspace cut seq 1 3000's stdout");
    let record = found.marker.record.clone();
    let raw = real
        .show(&format!("agents/{}:{}", found.branch, found.entry))
        .expect("the marker's entry");
    let entry: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let real_text = entry[0]["content"][0]["text"].as_str().unwrap();
    let tool_id = entry[0]["tool_use_id"].as_str().unwrap();
    // The entry's shape and field order, byte for byte.
    assert_eq!(
        text(&litanyfs::demo::tool_entry(tool_id, real_text)),
        text(&raw)
    );
    let seq: String = (1..=3000).map(|n| format!("{n}\n")).collect();
    let ours = litanyfs::demo::envelope(0, &seq, "", &record);
    assert!(
        real_text.starts_with(&ours),
        "the sample's envelope is not litany's:\nours: {}\nreal: {}",
        &ours[..ours.len().min(2300)],
        &real_text[..real_text.len().min(2300)]
    );
    // The real read_tool_output pages the sample's record as the mount does.
    let d = Demo::start();
    let r = d.var("R");
    let grep = d.bash(&format!("grep -o 'address [^ ]*' steps/{r}/transcript.md"));
    let address = text(&grep.stdout)
        .trim()
        .trim_start_matches("address ")
        .to_string();
    assert_eq!(record_agent(&address), r);
    let (code, page, banner) = common::harness::read_tool_output(&d.ws(), &r, &address);
    assert_eq!(code, 0, "{banner}");
    assert_eq!(std::fs::read(d.mnt.join(&address)).unwrap(), page);
    assert!(Path::new(&d.mnt.join(&address)).exists());
}
