//! What needs a look and what it cost, on a real mount of a workspace the real harness
//! (litany 0.0.15, driven offline by tests/harness/fake-bz) writes while mounted:
//! - every signal raised and cleared by what answers it (a message after a truncated,
//!   refused or failed call; `litany advance` once the tool control passes a held call
//!   and to deliver waiting mail; removing a mark; `litany stop` raises no `stopped`),
//!   each shown in `status`, `status.json`, `attention` and `events`;
//! - tokens per agent and per tree equal litany's rule computed here, independently, over
//!   the same `response.json` files, and the exhausted tree's budget row says so;
//! - the first read of `events` after the mount is the whole history.
//!
//! Without litany 0.0.15 it fails, unless `LITANYFS_SKIP` names `litany` (see
//! `litanyfs::testing::prereq`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::harness;
use common::mount::{Mounted, eventually};
use serde_json::Value;

/// How long anything asynchronous may take (a signal waits SETTLE_SECS besides).
const DEADLINE: Duration = Duration::from_secs(30);

/// A private litany home and workspace, with configs for each scenario.
struct Lab {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    home: PathBuf,
    ws: PathBuf,
    bin: PathBuf,
}

impl Lab {
    fn new(bin: PathBuf) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let lab = Lab {
            _dir: dir,
            dir: root.clone(),
            home: home.clone(),
            ws: root.join("ws"),
            bin,
        };
        assert!(lab.lit(&["prime"], &[]).status.success());
        std::fs::create_dir_all(home.join("bin")).unwrap();
        let fake = home.join("bin/fake-bz");
        std::fs::copy(harness::fake_bz_path(), &fake).unwrap();
        script(&fake, None);
        std::fs::write(
            home.join("models.yaml"),
            format!("adapter: {}\n", fake.display()),
        )
        .unwrap();
        let ws = lab.ws.to_str().unwrap().to_string();
        assert!(lab.lit(&["new", &ws], &[]).status.success());
        // The tool control: holds every call until `pass` exists.
        let control = home.join("bin/control");
        script(
            &control,
            Some(&format!(
                "cat >/dev/null\nif [ -e {} ]; then echo '{{\"verdict\":\"pass\"}}'; \
                 else echo '{{\"verdict\":\"hold\",\"reason\":\"ask first\"}}'; fi\n",
                root.join("pass").display()
            )),
        );
        // Configs: the stock workflow without the titler (`plain`), and without the
        // stop bindings too (`bare`); with a 10-token budget (`tight`); with the control.
        let strip =
            "grep -v 'dispatch(titler)\\|land_response(title)\\|titler_return\\|user_message'";
        let bare = "grep -v 'branch_stopped\\|mark_abandoned\\|notify_ui'";
        let edits = [
            ("plain", format!("{strip} \"$f\" >\"$f.new\"\n")),
            ("bare", format!("{strip} \"$f\" | {bare} >\"$f.new\"\n")),
            (
                "tight",
                format!(
                    "{strip} \"$f\" | grep -v 'max_depth: 5\\|^budgets:' >\"$f.new\"\n\
                     printf 'budgets:\\n  max_depth: 5\\n  max_total_tokens: 10\\n' >>\"$f.new\"\n"
                ),
            ),
            (
                "control",
                format!(
                    "{strip} \"$f\" >\"$f.new\"\nprintf 'tool_control:\\n  command: {}\\n' >>\"$f.new\"\n",
                    control.display()
                ),
            ),
        ];
        for (name, edit) in edits {
            let editor = home.join(format!("bin/edit-{name}"));
            script(
                &editor,
                Some(&format!(
                    "f=\"$1/workflow.yaml\"\n{edit}mv \"$f.new\" \"$f\"\n"
                )),
            );
            let out = lab.lit(
                &["config", &ws, name, "--from", "default"],
                &[("EDITOR", editor.as_os_str())],
            );
            assert!(out.status.success(), "config {name}: {out:?}");
        }
        lab
    }

    /// `litany <args>` in this lab, with `env` (nothing of an enclosing run leaks in).
    fn lit(&self, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("LITANY_HOME", &self.home)
            .env_remove("FAKE_BZ_SCENARIO")
            .env_remove("FAKE_BZ_LINE_DELAY")
            .env_remove("FAKE_BZ_LOG")
            .env_remove("LITANY_CONV_BRANCH")
            .env_remove("LITANY_CONV_REPO")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run litany")
    }

    /// A new root agent named `name` under `config`, the adapter playing `scenario`;
    /// returns its id once the harness is quiet.
    fn prompt(&self, name: &str, config: &str, scenario: Option<&str>) -> String {
        let ws = self.ws.to_str().unwrap();
        let env: Vec<(&str, &std::ffi::OsStr)> = scenario
            .map(|s| ("FAKE_BZ_SCENARIO", s.as_ref()))
            .into_iter()
            .collect();
        let before = harness::agents(&self.ws);
        // A failed first step fails the prompt (and prints no id): the agent is there.
        let out = self.lit(
            &["prompt", ws, "hello", "--name", name, "--config", config],
            &env,
        );
        self.quiet();
        let new: Vec<String> = harness::agents(&self.ws)
            .into_iter()
            .filter(|a| !before.contains(a))
            .collect();
        assert_eq!(new.len(), 1, "prompt {name}: {out:?}");
        new[0].clone()
    }

    fn message(&self, id: &str, text: &str, env: &[(&str, &std::ffi::OsStr)]) {
        let ws = self.ws.to_str().unwrap();
        let out = self.lit(&["message", "--", ws, id, text], env);
        assert!(out.status.success(), "{out:?}");
    }

    fn quiet(&self) {
        harness::wait_quiescent(&self.ws, Duration::from_secs(60)).expect("the harness settles");
    }

    fn git(&self, args: &[&str]) {
        harness::git(&self.ws, args);
    }
}

/// Writes `body` (when given) as a shell script at `path` and makes it executable.
fn script(path: &Path, body: Option<&str>) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(body) = body {
        std::fs::write(path, format!("#!/bin/sh\nset -eu\n{body}")).unwrap();
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn read(m: &Mounted, rel: &str) -> String {
    String::from_utf8(std::fs::read(m.path(rel)).expect(rel)).expect("UTF-8")
}

fn rows(m: &Mounted) -> Vec<Value> {
    match serde_json::from_str(&read(m, "status.json")).expect("status.json parses") {
        Value::Array(rows) => rows,
        other => panic!("not an array: {other}"),
    }
}

fn row(m: &Mounted, id: &str) -> Value {
    rows(m)
        .into_iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no row for {id}"))
}

fn kinds(m: &Mounted, id: &str) -> Vec<String> {
    row(m, id)["signals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap().to_string())
        .collect()
}

fn events(m: &Mounted) -> Vec<Value> {
    read(m, "events.ndjson")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one object per line"))
        .collect()
}

/// Waits until agent `id` has signal `kind` raised, and checks every file says so.
fn raised(m: &Mounted, id: &str, kind: &str) -> Value {
    assert!(
        eventually(DEADLINE, || kinds(m, id).iter().any(|k| k == kind)),
        "{kind} never raised for {id}:\n{}",
        read(m, "status")
    );
    let r = row(m, id);
    let s = r["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap()
        .clone();
    let says = s["says"].as_str().unwrap();
    let path = s["path"].as_str().unwrap();
    // The path opens (the tree reads the refs on its own schedule: a moment after the
    // views may have seen a new mark).
    assert!(
        eventually(DEADLINE, || std::fs::symlink_metadata(m.path(path)).is_ok()),
        "{path} does not open under the mount"
    );
    let status = read(m, "status");
    assert!(
        status.contains(&format!("    ! {kind}: {says} ({path})\n")),
        "{status}"
    );
    let attention = read(m, "attention");
    assert!(
        attention.lines().any(|l| l.starts_with(kind)
            && l.contains(id)
            && l.contains(path)
            && l.ends_with(says)),
        "{attention}"
    );
    let aj: Vec<Value> = serde_json::from_str(&read(m, "attention.json")).unwrap();
    assert!(aj.iter().any(|a| a["id"] == id && a["kind"] == kind));
    assert!(
        eventually(DEADLINE, || events(m).iter().any(|e| e["kind"]
            == "signal-raised"
            && e["agent"] == id
            && e["signal"] == kind
            && e["path"] == path)),
        "no signal-raised {kind} for {id}"
    );
    s
}

/// Waits until agent `id`'s signal `kind` is cleared everywhere.
fn cleared(m: &Mounted, id: &str, kind: &str) {
    assert!(
        eventually(DEADLINE, || !kinds(m, id).iter().any(|k| k == kind)),
        "{kind} never cleared for {id}:\n{}",
        read(m, "status")
    );
    let attention = read(m, "attention");
    assert!(
        !attention
            .lines()
            .any(|l| l.starts_with(&format!("{kind} ")) && l.contains(id)),
        "{attention}"
    );
    assert!(
        eventually(DEADLINE, || events(m)
            .iter()
            .any(|e| e["kind"] == "signal-cleared"
                && e["agent"] == id
                && e["signal"] == kind)),
        "no signal-cleared {kind} for {id}"
    );
}

/// litany's token rule (prompt/budget/derive.rs) over one step directory: every usage
/// line of its `response.json`.
fn step_tokens(step: &Path) -> u64 {
    let Ok(text) = std::fs::read_to_string(step.join("response.json")) else {
        return 0;
    };
    let mut total = 0;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["type"] != "usage" {
            continue;
        }
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let prompt = match v["input_total_tokens"].as_u64() {
            Some(t) => t,
            None => n("input_tokens").max(n("cache_read_tokens") + n("cache_write_tokens")),
        };
        total += prompt + n("output_tokens");
    }
    total
}

/// [`step_tokens`] over every `steps/<dir>/NNN/` whose `<dir>` `keep` accepts.
fn litany_tokens(ws: &Path, keep: impl Fn(&str) -> bool) -> u64 {
    let mut total = 0;
    for dir in std::fs::read_dir(ws.join("steps")).unwrap().flatten() {
        let name = dir.file_name().into_string().unwrap();
        if !keep(&name) {
            continue;
        }
        for step in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let n = step.file_name().into_string().unwrap();
            if n.len() != 3 || !n.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            total += step_tokens(&step.path());
        }
    }
    total
}

#[test]
fn every_signal_is_raised_and_cleared_and_spend_is_litanys() {
    let Some(bin) = harness::litany_bin() else {
        return;
    };
    let lab = Lab::new(bin.clone());
    let m = Mounted::with_env(
        &lab.ws,
        &["--no-wake", "--harness", bin.to_str().unwrap()],
        &[("LITANY_HOME", lab.home.as_os_str())],
    );
    assert_eq!(read(&m, "attention"), "", "nothing needs a look yet");
    assert_eq!(read(&m, "attention.json"), "[]\n");

    // Truncated, then a message that goes through clears it.
    let long = lab.prompt("Long", "plain", Some("length"));
    let s = raised(&m, &long, "truncated");
    assert_eq!(s["path"], format!("steps/{long}/001/response.md"));
    lab.message(&long, "shorter, please", &[]);
    lab.quiet();
    cleared(&m, &long, "truncated");

    // Refused: the provider turned the credentials down.
    let auth = lab.prompt("Auth", "plain", Some("refused"));
    let s = raised(&m, &auth, "refused");
    assert!(
        s["says"].as_str().unwrap().contains("401 Unauthorized"),
        "{s}"
    );
    lab.message(&auth, "logged in again", &[]);
    lab.quiet();
    cleared(&m, &auth, "refused");

    // Stopped: a call that failed otherwise; abandoning it clears it.
    let bad = lab.prompt("Bad", "plain", Some("error"));
    let s = raised(&m, &bad, "stopped");
    assert!(
        s["says"].as_str().unwrap().contains("400 Bad Request"),
        "{s}"
    );
    lab.git(&[
        "update-ref",
        &format!("refs/litany/abandoned/{bad}"),
        &format!("refs/heads/agents/{bad}"),
    ]);
    cleared(&m, &bad, "stopped");

    // Budget: a tree under a 10-token budget runs out after its first call.
    let tight = lab.prompt("Tight", "tight", None);
    raised(&m, &tight, "budget");
    let r = row(&m, &tight);
    let b = &r["budget"];
    assert_eq!(b["max_total_tokens"], 10, "{r}");
    assert!(b["spent"].as_u64().unwrap() >= 10, "{r}");
    assert_eq!(b["left"], 0, "{r}");
    assert_eq!(b["workflow_from"], "config lineage tip", "{r}");
    let tight_line = read(&m, "status");
    let tight_line = tight_line.lines().find(|l| l.contains(&tight)).unwrap();
    assert!(
        tight_line.contains(&format!(" {}/10 ", b["spent"])),
        "{tight_line}"
    );
    lab.git(&[
        "update-ref",
        "-d",
        &format!("refs/litany/budget-exhausted/{tight}"),
    ]);
    cleared(&m, &tight, "budget");

    // Held: the tool control holds the first call; once it would pass, an advance goes on.
    let held = lab.prompt("Held", "control", None);
    let s = raised(&m, &held, "held");
    assert!(s["says"].as_str().unwrap().contains("(ask first)"), "{s}");
    std::fs::write(lab.dir.join("pass"), "").unwrap();
    let ws = lab.ws.to_str().unwrap();
    let out = lab.lit(&["advance", ws, &held], &[]);
    assert!(out.status.success(), "{out:?}");
    lab.quiet();
    cleared(&m, &held, "held");

    // Mail: a deposit through a --no-wake mount waits, and nothing takes it...
    std::fs::write(m.path(&format!("inbox/{held}/note")), "any news?").unwrap();
    raised(&m, &held, "mail");
    // ...until a driver delivers it.
    let out = lab.lit(&["advance", ws, &held], &[]);
    assert!(out.status.success(), "{out:?}");
    lab.quiet();
    cleared(&m, &held, "mail");

    // A stop mid-call raises no `stopped`: the operator did it. Where the workflow binds
    // `branch_stopped`, it marks the agent abandoned and asks for attention (`notify`),
    // which removing the mark answers.
    for (name, config) in [("Cut", "bare"), ("Told", "plain")] {
        let id = lab.prompt(name, config, None);
        lab.message(&id, "slowly", &[("FAKE_BZ_LINE_DELAY", "1".as_ref())]);
        assert!(
            eventually(DEADLINE, || row(&m, &id)["step_state"] == "in-flight"),
            "{}",
            read(&m, "status")
        );
        let out = lab.lit(&["stop", ws, &id], &[]);
        assert!(out.status.success(), "{out:?}");
        lab.quiet();
        assert!(eventually(DEADLINE, || row(&m, &id)["step_state"] == "failed"));
        // A message through the --no-wake mount waits: once its `mail` is raised, the
        // stop is older than any state must stand to raise a signal, and raised none.
        std::fs::write(m.path(&format!("inbox/{id}/note")), "go on").unwrap();
        raised(&m, &id, "mail");
        let k = kinds(&m, &id);
        assert!(!k.contains(&"stopped".to_string()), "{name}: {k:?}");
        if config == "plain" {
            assert_eq!(k, ["mail", "notify"], "{name}");
            lab.git(&["update-ref", "-d", &format!("refs/litany/notify/{id}")]);
            cleared(&m, &id, "notify");
        } else {
            assert_eq!(k, ["mail"], "{name}");
        }
        // And delivered, the message goes on as ever.
        let out = lab.lit(&["advance", ws, &id], &[]);
        assert!(out.status.success(), "{out:?}");
        lab.quiet();
        cleared(&m, &id, "mail");
        assert!(eventually(DEADLINE, || row(&m, &id)["step_state"] == "done"));
    }

    // Conflicted: the mark litany writes when a landing conflicts.
    lab.git(&[
        "update-ref",
        &format!("refs/litany/conflicted/{long}"),
        &format!("refs/heads/agents/{long}"),
    ]);
    raised(&m, &long, "conflicted");
    lab.git(&[
        "update-ref",
        "-d",
        &format!("refs/litany/conflicted/{long}"),
    ]);
    cleared(&m, &long, "conflicted");

    // Nothing is left to look at but what was left on purpose.
    let left: Vec<Value> = serde_json::from_str(&read(&m, "attention.json")).unwrap();
    assert!(left.is_empty(), "{left:?}");

    // Spend: every agent's and tree's tokens are litany's rule over the same files.
    lab.quiet();
    let status = rows(&m);
    let mut total = 0;
    for r in &status {
        let id = r["id"].as_str().unwrap();
        let own = litany_tokens(&lab.ws, |d| d == id);
        let tree = litany_tokens(&lab.ws, |d| d == id || d.starts_with(&format!("{id}-")));
        assert_eq!(r["tokens"], own, "{id}: {r}");
        assert_eq!(r["tree"]["tokens"], tree, "{id}: {r}");
        assert!(r["steps"].as_u64().unwrap() >= 1, "{r}");
        total += own;
    }
    assert_eq!(total, litany_tokens(&lab.ws, |_| true));
    let text = read(&m, "status");
    assert!(
        text.starts_with(&format!(
            "workspace: {} tokens, ",
            litanyfs::views::status::compact(total)
        )),
        "{text}"
    );
    // Each step-finished event carries the step's own tokens and wall time.
    let ev = events(&m);
    let finished: Vec<&Value> = ev.iter().filter(|e| e["kind"] == "step-finished").collect();
    assert!(!finished.is_empty());
    for e in finished {
        let path = e["path"].as_str().unwrap();
        assert_eq!(e["tokens"], step_tokens(&lab.ws.join(path)), "{e}");
        assert!(e["wall_seconds"].is_u64(), "{e}");
    }
    drop(m);

    // A fresh mount: the first read of `events` holds the whole history, and the
    // signals standing (none now) are part of it.
    let m = Mounted::new(&lab.ws);
    let first = read(&m, "events.ndjson");
    let agents = harness::agents(&lab.ws);
    for id in &agents {
        assert!(
            first.contains(&format!("\"kind\":\"agent-created\",\"agent\":\"{id}\"")),
            "{id} missing from the first read:\n{first}"
        );
    }
    let by_kind: BTreeMap<String, usize> = first
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .fold(BTreeMap::new(), |mut m, e| {
            *m.entry(e["kind"].as_str().unwrap_or("").to_string())
                .or_default() += 1;
            m
        });
    assert!(
        by_kind.get("step-finished").copied().unwrap_or(0) >= agents.len(),
        "{by_kind:?}"
    );
}

#[test]
fn prices_add_money_and_a_bad_table_refuses_the_mount() {
    let ws = common::workspace::Ws::new(litanyfs::workspace::refs::Flavour::Litany);
    let f = &ws.f;
    f.agent("20261202T094226Z-0122ccc2", Some("Alpha"), &[])
        .unwrap();
    let usage = b"{\"type\":\"message_start\",\"v\":1,\"model\":\"m1\",\"role\":\"assistant\"}\n\
        {\"type\":\"usage\",\"input_tokens\":600000,\"output_tokens\":100000}\n";
    f.step(
        "20261202T094226Z-0122ccc2",
        1,
        &[
            ("response.json", usage),
            ("meta.json", br#"{"provider":"p"}"#),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"p": 1}"#).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = common::mount::litanyfs(&[
        "mount".as_ref(),
        f.root().as_os_str(),
        mnt.as_os_str(),
        "--prices".as_ref(),
        bad.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--prices"), "{out:?}");
    assert!(!common::mount::is_mounted(&mnt));

    let good = dir.path().join("prices.json");
    std::fs::write(
        &good,
        r#"[{"provider": "p", "model": "m*", "input": 2, "output": 10}]"#,
    )
    .unwrap();
    let m = Mounted::with_args(f.root(), &["--prices", good.to_str().unwrap()]);
    let status = read(&m, "status");
    assert!(
        status.starts_with("workspace: 700k tokens, 0s wall, 1 steps, $2.20\n"),
        "{status}"
    );
    assert!(
        status.lines().nth(1).unwrap().contains(" COST "),
        "{status}"
    );
    let r = row(&m, "20261202T094226Z-0122ccc2");
    assert_eq!(r["cost_usd"], 2.2, "{r}");
    assert_eq!(r["unpriced_tokens"], 0, "{r}");
    assert_eq!(r["tree"]["cost_usd"], 2.2, "{r}");
}
