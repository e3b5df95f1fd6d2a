//! A home mount against the real litany 0.0.15: workspaces made by `litany new` with no
//! path under a scratch `LITANY_HOME`, agents prompted with the fake adapter, the home
//! mounted with no SOURCE, and every workspace's tree, status and deposits checked
//! against what the harness itself wrote.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::harness::{fake_bz_path, git, litany_bin};
use common::mount::{BIN, eventually, is_mounted};

/// A scratch litany home whose model adapter is the fake one.
struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
    litany: PathBuf,
}

impl Home {
    fn new() -> Self {
        let litany = litany_bin().expect("litany 0.0.15 is needed (scripts/setup --harness)");
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("litany-home");
        let h = Self {
            _dir: dir,
            home,
            litany,
        };
        h.run(&["prime"]);
        let bin = h.home.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(fake_bz_path(), bin.join("fake-bz")).unwrap();
        std::fs::write(
            h.home.join("models.yaml"),
            format!("adapter: {}\n", bin.join("fake-bz").display()),
        )
        .unwrap();
        h
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.litany);
        c.args(args)
            .env("LITANY_HOME", &self.home)
            .env_remove("XDG_DATA_HOME")
            .stdin(Stdio::null());
        c
    }

    /// Runs a litany verb to its end; its stdout.
    fn run(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success(),
            "litany {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `litany new` with no path: a workspace under the home's `workspaces/`.
    fn new_workspace(&self) -> PathBuf {
        let ws = PathBuf::from(self.run(&["new"]).trim());
        assert_eq!(ws.parent().unwrap(), self.home.join("workspaces"));
        ws
    }
}

/// A home mount made as a user makes it (`litanyfs mount MNT`, SOURCE from
/// `LITANY_HOME`), unmounted when dropped.
struct HomeMount {
    mnt: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl HomeMount {
    fn new(home: &Home, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        let log = dir.path().join("daemon.log");
        std::fs::create_dir(&mnt).unwrap();
        let out = Command::new(BIN)
            .arg("mount")
            .arg(&mnt)
            .arg("--log-file")
            .arg(&log)
            .args(["--harness", home.litany.to_str().unwrap()])
            .args(extra)
            .env("LITANY_HOME", &home.home)
            .env_remove("XDG_DATA_HOME")
            .env("RUST_LOG", "litanyfs=debug")
            .output()
            .unwrap();
        let m = Self {
            mnt,
            log,
            _dir: dir,
        };
        assert!(
            out.status.success(),
            "mount failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&m.log).unwrap_or_default()
        );
        m
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for HomeMount {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new(BIN)
                .arg("unmount")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
        }
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

fn name_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The agent ids of a workspace, from its refs (as git shows them).
fn agent_ids(ws: &Path) -> Vec<String> {
    let out = git(
        ws,
        &["for-each-ref", "--format=%(refname)", "refs/heads/agents/"],
    );
    let mut v: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("refs/heads/agents/"))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn every_workspace_of_litany_home_in_one_mount() {
    let home = Home::new();
    let one = home.new_workspace();
    let two = home.new_workspace();
    let three = home.new_workspace();
    home.run(&[
        "prompt",
        one.to_str().unwrap(),
        "hello from one",
        "--name",
        "One",
    ]);
    home.run(&[
        "prompt",
        two.to_str().unwrap(),
        "hello from two",
        "--name",
        "Two",
    ]);
    let m = HomeMount::new(&home, &[]);

    // The root: every workspace by its directory name, and the views.
    let root = listing(&m.mnt);
    for ws in [&one, &two, &three] {
        assert!(root.contains(&name_of(ws)), "{root:?}");
    }
    for v in [
        "status",
        "status.json",
        "events",
        "events.ndjson",
        "attention",
        "attention.json",
    ] {
        assert!(root.contains(&v.to_string()), "{root:?}");
    }

    // Inside: the workspace's tree, with the paths litany prints working verbatim.
    let ids_one = agent_ids(&one);
    let root_one = ids_one.iter().find(|i| i.matches('-').count() == 1);
    let root_one = root_one.expect("a root agent in one");
    let rel = format!("steps/{root_one}/001/request.json");
    assert_eq!(
        std::fs::read(m.path(&format!("{}/{rel}", name_of(&one)))).unwrap(),
        std::fs::read(one.join(&rel)).unwrap()
    );
    assert_eq!(
        std::fs::read_link(m.path(&format!("{}/names/One", name_of(&one)))).unwrap(),
        PathBuf::from(format!("../agents/{root_one}"))
    );

    // grep -r and find across workspaces.
    let grep = Command::new("grep")
        .args(["-rl", "hello from two"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    let hits = String::from_utf8_lossy(&grep.stdout);
    assert!(
        hits.lines().any(|l| l.contains(&name_of(&two))),
        "grep -r found: {hits}"
    );
    assert!(!hits.lines().any(|l| l.contains(&name_of(&one))), "{hits}");
    let find = Command::new("find").arg(&m.mnt).output().unwrap();
    assert!(find.status.success(), "{find:?}");

    // The root status.json: every agent of every workspace, as the refs say.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path("status.json")).unwrap()).unwrap();
    for ws in [&one, &two, &three] {
        let mut shown: Vec<String> = json
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["workspace"] == name_of(ws).as_str())
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        shown.sort();
        assert_eq!(shown, agent_ids(ws), "{}", name_of(ws));
    }
    let text = std::fs::read_to_string(m.path("status")).unwrap();
    assert!(text.starts_with("home: "), "{text}");
    assert!(
        text.lines().nth(1).unwrap().starts_with("WORKSPACE "),
        "{text}"
    );

    // The root's events: every workspace's history, merged in time order (the clock
    // format sorts as the time does).
    let ndjson = std::fs::read_to_string(m.path("events.ndjson")).unwrap();
    let lines: Vec<serde_json::Value> = ndjson
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for ws in [&one, &two, &three] {
        assert_eq!(
            lines.iter().any(|e| e["workspace"] == name_of(ws).as_str()),
            !agent_ids(ws).is_empty(),
            "no event of {} in the root events:\n{ndjson}",
            name_of(ws)
        );
    }
    let times: Vec<&str> = lines.iter().map(|e| e["at"].as_str().unwrap()).collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "the root events are not in time order:\n{ndjson}"
    );

    // A deposit into one workspace's inbox reaches that workspace, and its agent reads it.
    let inbox = format!("{}/inbox/{root_one}/note", name_of(&one));
    std::fs::write(m.path(&inbox), "a note through the home\n").unwrap();
    let delivered = eventually(Duration::from_secs(30), || {
        let log = git(
            &one,
            &["log", "-p", &format!("refs/heads/agents/{root_one}")],
        );
        String::from_utf8_lossy(&log).contains("a note through the home")
    });
    assert!(
        delivered,
        "not delivered into {}\n{}",
        name_of(&one),
        m.log_text()
    );
    for other in [&two, &three] {
        let log = git(other, &["log", "--all", "-p"]);
        assert!(!String::from_utf8_lossy(&log).contains("a note through the home"));
    }

    // A workspace created while mounted appears, with its agents in the root status.
    let four = home.new_workspace();
    assert!(
        eventually(Duration::from_secs(2), || listing(&m.mnt)
            .contains(&name_of(&four))),
        "{} did not appear",
        name_of(&four)
    );
    home.run(&[
        "prompt",
        four.to_str().unwrap(),
        "hello from four",
        "--name",
        "Four",
    ]);
    assert!(eventually(Duration::from_secs(3), || {
        std::fs::read_to_string(m.path("status")).is_ok_and(|s| s.contains("Four"))
    }));
    // The event names the agent by its name, or by its id when litany had not yet
    // committed the name when the follower first saw the branch.
    let four_root = agent_ids(&four)
        .into_iter()
        .find(|i| i.matches('-').count() == 1)
        .expect("Four's root agent");
    assert!(
        eventually(Duration::from_secs(5), || {
            std::fs::read_to_string(m.path("events")).is_ok_and(|e| {
                e.lines().any(|l| {
                    l.contains(" agent-created ")
                        && l.contains(&format!("workspace={}", name_of(&four)))
                        && l.contains(&format!("/agents/{four_root}"))
                })
            })
        }),
        "no agent-created event for Four in the root events:\n{}\n{}",
        std::fs::read_to_string(m.path("events")).unwrap_or_default(),
        m.log_text()
    );

    // A workspace removed while mounted is gone, with nothing stale behind it.
    let names_two = m.path(&format!("{}/names", name_of(&two)));
    assert!(listing(&names_two).contains(&"Two".to_string()));
    std::fs::remove_dir_all(&two).unwrap();
    assert!(
        eventually(Duration::from_secs(2), || !listing(&m.mnt)
            .contains(&name_of(&two))),
        "{} still listed",
        name_of(&two)
    );
    // What the kernel had cached of it is dropped too: its paths answer ENOENT.
    assert!(
        eventually(Duration::from_secs(2), || std::fs::read_dir(&names_two)
            .is_err_and(|e| e.raw_os_error() == Some(libc::ENOENT))),
        "{} still answers",
        names_two.display()
    );
    let json = std::fs::read_to_string(m.path("status.json")).unwrap();
    assert!(!json.contains(&name_of(&two)), "{json}");
}

#[test]
fn a_yog_home_shows_named_world_and_replays_apart() {
    let home = Home::new();
    let a = home.new_workspace();
    let b = home.new_workspace();
    let c = home.new_workspace();
    home.run(&[
        "prompt",
        a.to_str().unwrap(),
        "named one",
        "--name",
        "Named",
    ]);
    home.run(&[
        "prompt",
        c.to_str().unwrap(),
        "replayed",
        "--name",
        "Replayed",
    ]);
    // yog's layout, built from real workspaces.
    let yog = home.home.join("yog");
    let world = yog.join("world/litany");
    for d in [
        "workspaces",
        "world/litany/workspaces",
        "world/litany/replays",
    ] {
        std::fs::create_dir_all(yog.join(d)).unwrap();
    }
    std::fs::rename(&a, yog.join("workspaces/research")).unwrap();
    std::fs::rename(&b, world.join("workspaces").join(name_of(&b))).unwrap();
    std::fs::rename(&c, world.join("replays/r1")).unwrap();
    // A workspace being created under a dot-temp is not shown.
    std::fs::create_dir_all(yog.join("workspaces/.new.yog-tmp-1/repo.git")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(BIN)
        .arg("mount")
        .args([yog.as_os_str(), mnt.as_os_str()])
        .args(["--log-file".as_ref(), dir.path().join("log").as_os_str()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let guard = HomeMount {
        mnt: mnt.clone(),
        log: dir.path().join("log"),
        _dir: dir,
    };
    let root = listing(&mnt);
    assert!(root.contains(&"research".to_string()), "{root:?}");
    assert!(root.contains(&"world".to_string()), "{root:?}");
    assert!(root.contains(&"replays".to_string()), "{root:?}");
    assert!(!root.iter().any(|n| n.contains("yog-tmp")), "{root:?}");
    assert_eq!(listing(&mnt.join("world")), [name_of(&b)]);
    assert_eq!(listing(&mnt.join("replays")), ["r1"]);
    assert!(
        std::fs::read_link(mnt.join("research/names/Named")).is_ok(),
        "{}",
        guard.log_text()
    );
    // A replay takes no deposit.
    let ids = agent_ids(&world.join("replays/r1"));
    let id = ids.first().expect("the replay has an agent");
    let e = std::fs::write(mnt.join(format!("replays/r1/inbox/{id}/x")), "x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    // The world's workspace takes one.
    let ids = agent_ids(&world.join("replays/r1"));
    assert!(!ids.is_empty());
}

/// How many workspaces a home's root lists: its directories (the rest are its views).
fn workspaces_listed(root: &Path) -> usize {
    std::fs::read_dir(root)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_dir())
        .count()
}

/// [`threads`] once two readings a moment apart agree: a thread just spawned carries its
/// spawner's name until it names itself (a history thread shows as `litanyfs-follow`
/// for that moment).
fn steady_threads(pid: i32) -> Vec<String> {
    let mut last = threads(pid);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = threads(pid);
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// The daemon's threads by name, less the history thread, which comes and goes.
fn threads(pid: i32) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .filter(|c| !c.starts_with("litanyfs-histor"))
        .collect();
    v.sort();
    v
}

#[test]
fn workspaces_nobody_opens_start_no_threads() {
    let home = Home::new();
    for _ in 0..3 {
        home.new_workspace();
    }
    let m = HomeMount::new(&home, &[]);
    let pid = common::mount::daemon_pid(&m.mnt).expect("the daemon");
    assert_eq!(workspaces_listed(&m.mnt), 3);
    std::fs::read(m.path("status")).unwrap();
    let before = steady_threads(pid);
    let mut made = Vec::new();
    for _ in 0..12 {
        made.push(home.new_workspace());
    }
    assert!(
        eventually(Duration::from_secs(5), || workspaces_listed(&m.mnt) == 15),
        "{:?}",
        listing(&m.mnt)
    );
    // Every workspace is followed (its agents would show in the root status) ...
    let status = std::fs::read_to_string(m.path("status")).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("WORKSPACE ")),
        "{status}"
    );
    // ... and the daemon runs the threads it ran with three.
    assert_eq!(steady_threads(pid), before, "{}", m.log_text());
    // Opening one starts its own (the counting sees threads come).
    listing(&m.path(&format!("{}/agents", name_of(&made[0]))));
    std::fs::write(m.mnt.join(name_of(&made[0])).join("status"), "x").unwrap_err();
    assert!(
        eventually(Duration::from_secs(2), || threads(pid).len() > before.len()),
        "{:?}",
        threads(pid)
    );
    let per_tree = steady_threads(pid).len() - before.len();
    let first = listing(&m.mnt.join(name_of(&made[0])));
    // Opening all fifteen, the home keeps at most MAX_OPEN_TREES of them open once they
    // are idle: the least recently used are closed, and their threads end.
    for ws in &made {
        listing(&m.path(&format!("{}/agents", name_of(ws))));
    }
    let bound = before.len() + per_tree * litanyfs::home::MAX_OPEN_TREES;
    let wait = litanyfs::home::IN_USE + litanyfs::home::SWEEP * 3;
    assert!(
        eventually(wait, || threads(pid).len() <= bound),
        "{} threads, more than {bound} ({per_tree} per open tree): {:?}\n{}",
        threads(pid).len(),
        threads(pid),
        m.log_text()
    );
    assert!(
        m.log_text().contains("closing workspace"),
        "{}",
        m.log_text()
    );
    // A closed workspace answers as before when looked at again.
    assert_eq!(listing(&m.mnt.join(name_of(&made[0]))), first);
}

#[test]
fn a_read_only_home_refuses_deposits_in_every_workspace() {
    let home = Home::new();
    let ws = home.new_workspace();
    home.run(&["prompt", ws.to_str().unwrap(), "hello", "--name", "Solo"]);
    let m = HomeMount::new(&home, &["--read-only"]);
    let id = agent_ids(&ws)
        .into_iter()
        .find(|i| i.matches('-').count() == 1)
        .expect("Solo's id");
    let e = std::fs::write(m.path(&format!("{}/inbox/{id}/x", name_of(&ws))), "x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    // And --agent, which names one workspace's agent, is refused on a home with one line.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("mount")
        .arg(dir.path())
        .args(["--agent", &id])
        .env("LITANY_HOME", &home.home)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--agent"), "{err}");
    assert!(!is_mounted(dir.path()));
}

/// `echo "$text" > $path` in bash: whether it succeeded, and what bash printed.
fn echo(path: &Path, text: &str) -> (bool, String) {
    let out = Command::new("bash")
        .arg("-c")
        .arg("echo \"$1\" > \"$2\"")
        .arg("bash")
        .arg(text)
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ctl_and_new_act_in_each_workspace_of_a_home() {
    let home = Home::new();
    let one = home.new_workspace();
    let two = home.new_workspace();
    let m = HomeMount::new(&home, &[]);
    let (one_dir, two_dir) = (name_of(&one), name_of(&two));
    assert!(listing(&m.path(&one_dir)).contains(&"new".to_string()));

    // A goal written into one workspace's new/ starts an agent there, and only there.
    std::fs::write(m.path(&format!("{one_dir}/new/Scout")), "hello from new\n").unwrap();
    // Its root (an id of two tokens), besides the titler child the stock config forks.
    let ids: Vec<String> = agent_ids(&one)
        .into_iter()
        .filter(|id| id.matches('-').count() == 1)
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = &ids[0];
    assert!(agent_ids(&two).is_empty());
    assert!(listing(&m.path(&format!("{two_dir}/new"))).is_empty());
    let target = std::fs::read_link(m.path(&format!("{one_dir}/names/Scout"))).unwrap();
    assert!(target.ends_with(id), "{target:?}");
    common::harness::wait_quiescent(&one, Duration::from_secs(60)).unwrap();

    // Its ctl: a refusal names the path under the workspace; a delete-tree removes it
    // and its titler child.
    let ctl = m.path(&format!("{one_dir}/steps/{id}/ctl"));
    let (ok, err) = echo(&ctl, "bogus");
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    assert!(
        m.log_text()
            .contains(&format!("{one_dir}/steps/{id}/ctl: unknown command")),
        "{}",
        m.log_text()
    );
    let (ok, err) = echo(&ctl, "delete-tree Scout");
    assert!(ok, "{err}");
    assert!(agent_ids(&one).is_empty(), "{:?}", agent_ids(&one));
    // The home's events show both acts, in their workspace.
    assert!(
        eventually(Duration::from_secs(10), || {
            let events = std::fs::read_to_string(m.path("events.ndjson")).unwrap();
            events.lines().any(|l| {
                l.contains("\"kind\":\"control\"")
                    && l.contains(&format!("\"workspace\":\"{one_dir}\""))
                    && l.contains("\"command\":\"delete-tree Scout\"")
            })
        }),
        "{}",
        std::fs::read_to_string(m.path("events")).unwrap()
    );
}
