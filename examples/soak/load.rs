//! The load: writers depositing through the mount, readers walking and grepping it (each
//! call timed), `cat status` every second, `tail -f` on the events and on one agent's
//! records, mail from the harness's side, stops and restarts of agents, and the samplers
//! of live executors and the daemon's memory. Every thread ends when `Shared::stop` is
//! set; what it saw goes into `Shared`.

use std::io::{BufRead, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::world::{self, Home, Mount, Rng};

/// One message written through the mount.
#[derive(Debug, Clone)]
pub struct Deposit {
    pub token: String,
    pub ws: usize,
    pub agent: String,
    /// The bytes written (what the agent must read, after the frontmatter).
    pub content: Vec<u8>,
    pub method: &'static str,
    /// The writer's close returned 0 (its program exited 0).
    pub ok: bool,
    pub err: String,
    /// The mount's generation when the write started and when it ended: a write a
    /// remount crossed.
    pub generations: (u64, u64),
}

/// One `tail -f` run: what it followed and where its output went.
#[derive(Debug, Clone)]
pub struct TailRun {
    pub what: &'static str,
    /// The file it had open, relative to the mount (resolved through `latest`).
    pub file: String,
    pub out: PathBuf,
    pub generation: u64,
    /// The file as read through the mount right after the tail ended (`None` when that
    /// mount had gone).
    pub snapshot: Option<Vec<u8>>,
}

/// The longest calls, and how many there were.
#[derive(Debug, Default)]
pub struct Timings {
    pub calls: u64,
    pub over_1s: u64,
    pub longest: Vec<(f64, String)>,
    pub errors: u64,
}

impl Timings {
    pub fn add(&mut self, secs: f64, what: impl FnOnce() -> String) {
        self.calls += 1;
        if secs > 1.0 {
            self.over_1s += 1;
        }
        if self.longest.len() < 10 || secs > self.longest[self.longest.len() - 1].0 {
            self.longest.push((secs, what()));
            self.longest.sort_by(|a, b| b.0.total_cmp(&a.0));
            self.longest.truncate(10);
        }
    }
    pub fn max(&self) -> f64 {
        self.longest.first().map_or(0.0, |l| l.0)
    }
}

pub struct Shared {
    pub home: Home,
    pub mount: Mount,
    pub dir: PathBuf,
    pub start: Instant,
    pub stop: AtomicBool,
    /// Acts (stop, nudge) go through `steps/<id>/ctl` (else `litany stop` and `advance`).
    pub ctl: bool,
    pub quick: bool,
    pub seed: u64,
    pub deposits: Mutex<Vec<Deposit>>,
    /// Tokens of messages whose writer was killed mid-message.
    pub killed: Mutex<Vec<String>>,
    /// `(token, ws, agent, exit 0)` of mail sent with `litany message`.
    pub mails: Mutex<Vec<(String, usize, String, bool)>>,
    pub reads: Mutex<Timings>,
    pub status_reads: Mutex<Timings>,
    pub greps: Mutex<Timings>,
    pub tails: Mutex<Vec<TailRun>>,
    /// `(seconds, locked inboxes)`.
    pub live: Mutex<Vec<(f64, usize)>>,
    /// `(seconds, generation, KiB)`.
    pub rss: Mutex<Vec<(f64, u64, u64)>>,
    /// Stops of the acted roots followed by a nudge (and a fork when litany declined).
    pub acts: AtomicU64,
    /// Acted roots forked from their history: stopped where litany would not go on.
    pub forks: AtomicU64,
    /// `soak:dispatch` directives sent so far (at most [`DISPATCH_CAP`]).
    pub dispatches: AtomicU64,
    pub faults: Mutex<Vec<(f64, String)>>,
    /// Children to reap at the end (restarted drivers).
    pub children: Mutex<Vec<Child>>,
}

/// The most children the run dispatches. Each stays an agent once returned, so without
/// a bound the workspaces grow all run long (a 30-minute run ended with 1,063 agents),
/// and a daemon's memory grows with them however well it keeps: the cap is reached in
/// the first minutes, and the rest of the run is steady, which is what the RSS check
/// needs to see a leak.
pub const DISPATCH_CAP: u64 = 150;

impl Shared {
    /// Whether one more `soak:dispatch` may be sent (counted if so).
    pub fn may_dispatch(&self) -> bool {
        self.dispatches
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < DISPATCH_CAP).then_some(n + 1)
            })
            .is_ok()
    }
    pub fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
    /// Sleeps `d`, or less when the run ends.
    pub fn nap(&self, d: Duration) {
        let end = Instant::now() + d;
        while !self.stopped() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
        }
    }
    pub fn fault(&self, what: String) {
        eprintln!("soak: {:>7.1}s {what}", self.secs());
        self.faults.lock().push((self.secs(), what));
    }
    fn mnt(&self) -> &Path {
        &self.mount.mnt
    }
}

/// Runs `f`, timing it into `t` under the name `what`; errors are counted, not timed
/// (a call answered ENOTCONN by a dead mount says nothing of latency).
fn timed<T>(t: &Mutex<Timings>, what: &str, f: impl FnOnce() -> std::io::Result<T>) -> Option<T> {
    let at = Instant::now();
    match f() {
        Ok(v) => {
            let secs = at.elapsed().as_secs_f64();
            t.lock().add(secs, || what.to_string());
            Some(v)
        }
        Err(_) => {
            t.lock().errors += 1;
            None
        }
    }
}

const METHODS: [&str; 4] = ["echo", "python", "cp", "vim"];

/// Writer `w` deposits until the run ends, with its own program (`METHODS[w % 4]`).
pub fn writer(s: Arc<Shared>, w: usize) {
    let mut rng = Rng::new(s.seed ^ (0x9e37 + w as u64 * 7919));
    let agents = s.home.agents();
    let method = METHODS[w % METHODS.len()];
    let src = s.dir.join(format!("cp-src-{w}"));
    let mut n = 0;
    while !s.stopped() {
        n += 1;
        let (ws, agent) = agents[rng.below(agents.len())].clone();
        let roots = &s.home.workspaces[ws].roots;
        let directive = match rng.below(100) {
            60..85 => format!(" soak:msg={}", roots[rng.below(roots.len())]),
            85.. if s.may_dispatch() => " soak:dispatch".to_string(),
            _ => String::new(),
        };
        let token = format!("soak-dep-{w}-{n}");
        let mut text = format!("soak deposit {token}{directive} via {method}");
        if method != "vim" {
            // Some body: lines of varied length, so bytes are worth comparing.
            for i in 0..rng.below(40) {
                text.push_str(&format!("\nline {i} {}", "x".repeat(rng.below(120))));
            }
        }
        let content = format!("{text}\n").into_bytes();
        let name = format!("note-{token}");
        let path = s
            .mnt()
            .join(&s.home.workspaces[ws].name)
            .join("inbox")
            .join(&agent)
            .join(&name);
        let g0 = s.mount.generation();
        let mut cmd = Command::new("timeout");
        cmd.arg("60");
        match method {
            "echo" => {
                cmd.args(["sh", "-c", "echo \"$1\" > \"$2\"", "sh", &text]);
                cmd.arg(&path);
            }
            "python" => {
                cmd.args([
                    "python3",
                    "-c",
                    "import sys\nf = open(sys.argv[2], 'w')\nf.write(sys.argv[1])\nf.close()",
                ]);
                cmd.arg(String::from_utf8_lossy(&content).as_ref())
                    .arg(&path);
            }
            "cp" => {
                if std::fs::write(&src, &content).is_err() {
                    continue;
                }
                cmd.arg("cp").arg(&src).arg(&path);
            }
            _ => {
                cmd.args(["vim", "-es", "-N", "-n", "-u", "NONE", "-i", "NONE", "-c"]);
                cmd.arg(format!("call setline(1, '{text}')"))
                    .args(["-c", "wq"])
                    .arg(&path)
                    .env("TERM", "dumb");
            }
        }
        let out = cmd.stdin(Stdio::null()).output();
        let (ok, err) = match out {
            Ok(o) => (
                o.status.success(),
                String::from_utf8_lossy(&o.stderr).trim().to_string(),
            ),
            Err(e) => (false, e.to_string()),
        };
        s.deposits.lock().push(Deposit {
            token,
            ws,
            agent,
            content,
            method,
            ok,
            err,
            generations: (g0, s.mount.generation()),
        });
        s.nap(Duration::from_millis(200 + rng.below(400) as u64));
    }
}

/// A writer killed mid-message: Python writes half a message unbuffered, says so, and
/// is SIGKILLed holding it. Its token must never arrive.
pub fn killed_writer(s: &Shared, rng: &mut Rng) -> Result<String, String> {
    let agents = s.home.agents();
    let (ws, agent) = agents[rng.below(agents.len())].clone();
    let token = format!("soak-killed-{}", rng.below(1_000_000));
    let path = s
        .mnt()
        .join(&s.home.workspaces[ws].name)
        .join("inbox")
        .join(&agent)
        .join(format!("note-{token}"));
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, time\nf = open(sys.argv[2], 'wb', buffering=0)\n\
             f.write(sys.argv[1].encode())\nprint('ready', flush=True)\ntime.sleep(120)\n\
             f.write(b'the rest never comes')\nf.close()",
        ])
        .arg(format!("soak killed {token} first half\n"))
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    s.killed.lock().push(token.clone());
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    std::thread::sleep(Duration::from_millis(500));
    let _ = child.kill();
    let status = child.wait().map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        return Err(format!("the writer never wrote its half ({status:?})"));
    }
    Ok(format!(
        "writer killed mid-message ({token} to {}, signal {:?})",
        agent,
        status.signal()
    ))
}

/// Mail from the harness's side: `litany message` from one root to another, with
/// directives like the writers'.
pub fn mailer(s: Arc<Shared>) {
    let mut rng = Rng::new(s.seed ^ 0x51ab);
    let mut n = 0;
    while !s.stopped() {
        n += 1;
        let ws = rng.below(s.home.workspaces.len());
        let w = &s.home.workspaces[ws];
        let to = w.roots[rng.below(w.roots.len())].clone();
        let from = w.roots[rng.below(w.roots.len())].clone();
        let token = format!("soak-mail-{n}");
        let dir = w.dir.to_string_lossy().into_owned();
        let body = if rng.below(3) == 0 && s.may_dispatch() {
            format!("soak mail {token} soak:dispatch")
        } else {
            format!("soak mail {token}")
        };
        let ok = s
            .home
            .cmd(&["message", "--", &dir, &to, &body])
            .env("LITANY_CONV_BRANCH", &from)
            .output()
            .is_ok_and(|o| o.status.success());
        s.mails.lock().push((token, ws, to, ok));
        s.nap(Duration::from_millis(1000 + rng.below(1000) as u64));
    }
}

/// Reads a file in 64 KiB calls, each timed.
fn read_timed(t: &Mutex<Timings>, path: &Path, what: &str) -> Option<usize> {
    let mut f = timed(t, &format!("open {what}"), || std::fs::File::open(path))?;
    let mut total = 0;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = timed(t, &format!("read {what}"), || f.read(&mut buf))?;
        if n == 0 || total > 4 << 20 {
            return Some(total);
        }
        total += n;
    }
}

fn list_timed(t: &Mutex<Timings>, path: &Path, what: &str) -> Vec<String> {
    timed(t, &format!("readdir {what}"), || {
        std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<Vec<_>>>()
    })
    .unwrap_or_default()
}

/// The walker: listings, stats and reads of what an operator looks at, each timed.
pub fn walker(s: Arc<Shared>) {
    let mut rng = Rng::new(s.seed ^ 0x3a1c);
    let t = &s.reads;
    while !s.stopped() {
        let root = s.mnt().to_path_buf();
        list_timed(t, &root, "/");
        let ws = &s.home.workspaces[rng.below(s.home.workspaces.len())];
        let wsp = root.join(&ws.name);
        for d in ["agents", "steps", "inbox", "names", "marks"] {
            list_timed(t, &wsp.join(d), d);
        }
        let steps = list_timed(t, &wsp.join("steps"), "steps");
        for _ in 0..3 {
            if steps.is_empty() {
                break;
            }
            let id = &steps[rng.below(steps.len())];
            let dir = wsp.join("steps").join(id);
            let entries = list_timed(t, &dir, "steps/<id>");
            for e in entries.iter().take(50) {
                timed(t, "stat steps/<id>/<e>", || std::fs::metadata(dir.join(e)));
            }
            let latest = dir.join("latest");
            for f in ["response.md", "meta.json", "request.json"] {
                read_timed(t, &latest.join(f), &format!("latest/{f}"));
            }
            read_timed(
                t,
                &latest.join("tools/toolu_big/output.json#stdout@2048"),
                "a page of toolu_big",
            );
            list_timed(t, &wsp.join("inbox").join(id), "inbox/<id>");
            list_timed(t, &wsp.join("agents").join(id).join("messages"), "messages");
            if rng.below(4) == 0 {
                read_timed(t, &dir.join("transcript.md"), "transcript.md");
            }
        }
        s.nap(Duration::from_millis(100));
    }
}

/// The grepper: `grep -r` over inboxes, an agent's latest step and committed tree (each
/// run timed whole), and timed reads of the workspace status between them.
pub fn grepper(s: Arc<Shared>) {
    let mut rng = Rng::new(s.seed ^ 0x6e9);
    while !s.stopped() {
        let ws = &s.home.workspaces[rng.below(s.home.workspaces.len())];
        let wsp = s.mnt().join(&ws.name);
        let id = &ws.roots[rng.below(ws.roots.len())];
        for (what, dir) in [
            ("grep -r inbox", wsp.join("inbox")),
            (
                "grep -r steps/<id>/latest/",
                wsp.join("steps").join(id).join("latest/"),
            ),
            ("grep -r agents/<id>", wsp.join("agents").join(id)),
        ] {
            timed(&s.greps, what, || {
                Command::new("grep")
                    .args(["-r", "-c", "soak"])
                    .arg(&dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
            });
        }
        read_timed(&s.reads, &wsp.join("status"), "<ws>/status");
        read_timed(&s.reads, &wsp.join("attention"), "<ws>/attention");
        s.nap(Duration::from_millis(300));
    }
}

/// `cat status` at the root, every second.
pub fn status_reader(s: Arc<Shared>) {
    while !s.stopped() {
        read_timed(&s.status_reads, &s.mnt().join("status"), "status");
        s.nap(Duration::from_secs(1));
    }
}

/// The file a tail has open under the mount, from `/proc/<pid>/fd`.
fn open_file(pid: u32, mnt: &Path) -> Option<String> {
    for _ in 0..100 {
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for e in rd.flatten() {
                if let Ok(target) = std::fs::read_link(e.path())
                    && let Ok(rel) = target.strip_prefix(mnt)
                {
                    return Some(rel.to_string_lossy().into_owned());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `tail -f` on the root `events` (started again after each remount), and on the first
/// agent's `transcript.md` and `latest/response.md` (started again every 15 s).
pub fn tails(s: Arc<Shared>) {
    let ws = &s.home.workspaces[0];
    let agent = ws.roots[0].clone();
    let dir = s.dir.join("tails");
    let _ = std::fs::create_dir_all(&dir);
    let mut running: Vec<(Child, TailRun)> = Vec::new();
    let mut generation = 0;
    let mut records_at = Instant::now();
    let mut k = 0;
    let start = |what: &'static str, rel: String, generation: u64, k: &mut u32| {
        *k += 1;
        let out = dir.join(format!("{what}-{k}.txt"));
        let err = dir.join(format!("{what}-{k}.err"));
        let file = std::fs::File::create(&out).ok()?;
        let errf = std::fs::File::create(&err).ok()?;
        let child = Command::new("tail")
            .args(["-f", "-n", "+1", "-s", "0.2"])
            .arg(s.mnt().join(&rel))
            .stdout(file)
            .stderr(errf)
            .stdin(Stdio::null())
            .spawn()
            .ok()?;
        let file = open_file(child.id(), s.mnt()).unwrap_or(rel);
        Some((
            child,
            TailRun {
                what,
                file,
                out,
                generation,
                snapshot: None,
            },
        ))
    };
    let finish = |running: &mut Vec<(Child, TailRun)>, pick: &dyn Fn(&TailRun) -> bool| {
        let mut keep = Vec::new();
        for (mut c, mut t) in running.drain(..) {
            if pick(&t) {
                // SAFETY: our own child.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let _ = c.wait();
                // What it printed must be the start of what the file holds now.
                if s.mount.generation() == t.generation {
                    t.snapshot = std::fs::read(s.mnt().join(&t.file)).ok();
                }
                s.tails.lock().push(t);
            } else {
                keep.push((c, t));
            }
        }
        *running = keep;
    };
    while !s.stopped() {
        let g = s.mount.generation();
        if g != generation && world::is_mounted(s.mnt()) {
            finish(&mut running, &|_| true);
            // Give the new daemon its history first, as `cat events` would wait for it.
            std::thread::sleep(Duration::from_millis(500));
            generation = g;
            running.extend(start("events", "events".into(), g, &mut k));
            records_at = Instant::now() - Duration::from_secs(60);
        }
        // The records' tails start again every 15 s: the response follows `latest` from
        // step to step, and each run ends with a look at what the file then holds.
        if records_at.elapsed() > Duration::from_secs(15)
            && world::is_mounted(s.mnt())
            && g == generation
        {
            finish(&mut running, &|t| t.what != "events");
            let response = format!("{}/steps/{agent}/latest/response.md", ws.name);
            let transcript = format!("{}/steps/{agent}/transcript.md", ws.name);
            running.extend(start("response", response, generation, &mut k));
            running.extend(start("transcript", transcript, generation, &mut k));
            records_at = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    finish(&mut running, &|_| true);
}

/// Samples how many executors hold their lock (2 s) and the daemon's RSS (5 s).
pub fn sampler(s: Arc<Shared>) {
    let mut i = 0u64;
    while !s.stopped() {
        let live = world::locked_inboxes(&s.home.workspaces);
        s.live.lock().push((s.secs(), live));
        if i.is_multiple_of(5)
            && let Some(pid) = s.mount.pid()
            && let Some(kib) = world::rss_kib(pid)
        {
            s.rss.lock().push((s.secs(), s.mount.generation(), kib));
        }
        i += 1;
        s.nap(Duration::from_secs(1));
    }
}

/// Stops an agent mid-turn and starts it again, every 45 s (quick: 20 s): a message to
/// its workspace's acted root (through the mount) starts a turn; once an executor holds
/// the agent, 0-4 s later it is stopped through `steps/<id>/ctl` (`stop`) and 3 s after
/// that nudged (`nudge`; `EBUSY` when it is live again already, `EIO` when litany
/// declined at once), or with `--cli` through
/// `litany stop` and `litany advance`. A stop during the turn's tool leaves a branch
/// litany declines to advance (its tool's side effects are not replayable): an agent
/// not live 5 s after the nudge is forked from its history (`litany prompt --from`), as
/// litany says to, and the fork is the acted root from then on.
pub fn actor(s: Arc<Shared>) {
    let mut rng = Rng::new(s.seed ^ 0xac7);
    let period = if s.quick { 20 } else { 45 };
    let mut acted: Vec<String> = s.home.workspaces.iter().map(|w| w.acted.clone()).collect();
    s.nap(Duration::from_secs(period));
    let mut n = 0;
    while !s.stopped() {
        n += 1;
        let ws = rng.below(acted.len());
        let id = acted[ws].clone();
        let w = &s.home.workspaces[ws];
        let dir = w.dir.to_string_lossy().into_owned();
        let wsp = s.mnt().join(&w.name);
        let note = wsp
            .join("inbox")
            .join(&id)
            .join(format!("note-soak-act-{n}"));
        if std::fs::write(&note, format!("soak act {n}\n")).is_err() {
            s.nap(Duration::from_secs(period));
            continue;
        }
        let began = Instant::now();
        while !world::is_live(&w.dir, &id) && began.elapsed() < Duration::from_secs(10) {
            s.nap(Duration::from_millis(100));
        }
        s.nap(Duration::from_millis(rng.below(4000) as u64));
        let ctl = wsp.join("steps").join(&id).join("ctl");
        let stopped = if s.ctl {
            std::fs::write(&ctl, "stop\n").is_ok()
        } else {
            s.home.run(&["stop", &dir, &id]).is_ok()
        };
        s.nap(Duration::from_secs(3));
        let nudged = if s.ctl {
            // EIO: litany declined at once (the fork below restarts it).
            match std::fs::write(&ctl, "nudge\n") {
                Ok(()) => true,
                Err(e) => matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EIO)),
            }
        } else {
            match s
                .home
                .cmd(&["advance", &dir, &id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(c) => {
                    s.children.lock().push(c);
                    true
                }
                Err(_) => false,
            }
        };
        s.nap(Duration::from_secs(5));
        let mut restarted = true;
        if !world::is_live(&w.dir, &id) {
            let from = format!("refs/heads/agents/{id}");
            match s
                .home
                .run(&["prompt", &dir, "soak:quiet resumed", "--from", &from])
            {
                Ok(fork) => {
                    acted[ws] = fork.trim().to_string();
                    s.forks.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => {
                    s.fault(format!("could not fork {id} from its history: {e}"));
                    restarted = false;
                }
            }
        }
        if stopped && nudged && restarted {
            s.acts.fetch_add(1, Ordering::SeqCst);
        }
        s.nap(Duration::from_secs(period));
    }
}
