//! The soak (issue 36): a home mount of real litany 0.0.15 workspaces under live agents,
//! writers, readers and `tail -f`, through an upgrade (SIGTERM), a crash (SIGKILL), a
//! writer killed mid-message, an inotify queue overflow and a full disk under the events
//! log; afterwards it checks from the workspaces themselves that nothing was lost,
//! doubled or leaked. Run it with `scripts/soak` (`--quick` for CI); doc/TESTING.md says
//! what each check means. It writes `target/soak/report.json` and exits non-zero, naming
//! the checks, when one fails.

mod checks;
mod load;
mod world;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use checks::Check;
use load::Shared;
use parking_lot::Mutex;
use world::{Home, LoweredQueue, Mount, Rng, Tmpfs};

/// Agents the issue asks to be live (an executor running) at any time of a full run.
const LIVE_AT_LEAST: usize = 20;

struct Options {
    quick: bool,
    minutes: f64,
    seed: u64,
    ctl: bool,
    keep: bool,
    /// The mount's `--cache-bytes`.
    cache_bytes: u64,
    /// The daemon's `--nice` (None: as started).
    nice: Option<i8>,
}

/// The soak's `--cache-bytes` unless told otherwise: both caches full within its first
/// minutes, so that the run spends most of its time evicting at the bound, and the RSS
/// check's "once warm" (minute 5 of the last daemon) finds them full, as the default 64
/// MiB are only after 15 minutes or more of this load.
const SOAK_CACHE_BYTES: u64 = 16 << 20;
/// The daemon's niceness unless `--nice` says otherwise: the harness starts each executor
/// in a session of its own, which the kernel's autogroups weigh like the daemon's whole
/// session; -10 weighs the daemon about 9 times one agent (doc/USAGE.md#priority).
const SOAK_NICE: i8 = -10;

/// How long the workspaces compact before the run turns compaction off: each compaction
/// leaves an agent behind (the eighth 30-minute run grew from 439 to 800 agents in its
/// last daemon's life), so like the dispatches (load::DISPATCH_CAP) they happen early and
/// the rest of the run is steady for the RSS check. A quick run compacts all through.
const COMPACTING_FOR: Duration = Duration::from_secs(4 * 60);

fn options() -> Result<Options, String> {
    let mut o = Options {
        quick: false,
        minutes: 30.0,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        ctl: true,
        keep: false,
        cache_bytes: SOAK_CACHE_BYTES,
        nice: Some(SOAK_NICE),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => {
                o.quick = true;
                o.minutes = 2.0;
            }
            "--minutes" => {
                o.minutes = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--minutes needs a number")?
            }
            "--seed" => {
                o.seed = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--seed needs a number")?
            }
            "--cli" => o.ctl = false,
            "--keep" => o.keep = true,
            "--cache-bytes" => {
                o.cache_bytes = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--cache-bytes needs a number")?
            }
            "--nice" => {
                o.nice = match args.next().as_deref() {
                    Some("none") => None,
                    v => Some(
                        v.and_then(|v| v.parse().ok())
                            .ok_or("--nice needs a number or none")?,
                    ),
                }
            }
            _ => {
                return Err(format!(
                    "unknown argument {a:?} (--quick, --minutes N, --seed N, --cli, --keep, \
                     --cache-bytes N, --nice N|none)"
                ));
            }
        }
    }
    Ok(o)
}

fn main() {
    // scripts/soak, before it notes the limit to put back at its exit.
    if std::env::args().nth(1).as_deref() == Some("--put-back-queue") {
        if let Err(e) = LoweredQueue::undo_left_behind() {
            eprintln!("soak: {e}");
            std::process::exit(1);
        }
        return;
    }
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    let code = match soak(&o) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("soak: error: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// The release build of the daemon, next to this example's binary.
fn daemon_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    profile.join("litanyfs")
}

fn soak(o: &Options) -> Result<bool, String> {
    let litany = litanyfs::testing::prereq::litany_lookup()?;
    let bin = daemon_bin();
    let out_dir = world::crate_root().join("target/soak");
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let root = tempfile::Builder::new()
        .prefix("litanyfs-soak-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let dir = root.path().to_path_buf();
    let before_tmp = tmp_litanyfs_files();
    LoweredQueue::undo_left_behind()?;
    // Full: 3 workspaces of 10 roots (30, plus their children: LIVE_AT_LEAST live with room
    // to spare, as each root is idle between its messages); quick: 2 of 6.
    let (nws, roots) = if o.quick { (2, 6) } else { (3, 10) };
    let duration = Duration::from_secs_f64(o.minutes * 60.0);
    eprintln!(
        "soak: {} minutes, seed {}, {nws} workspaces x {roots} roots, in {}",
        o.minutes,
        o.seed,
        dir.display()
    );
    // The daemon's and the drivers' TMPDIR: the disk the events log fills.
    let tmpfs = Tmpfs::new(&dir.join("tmp"), 64 << 20)?;
    let home = Home::build(&dir.join("home"), &tmpfs.0, &litany, nws, roots)?;
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let mount = Mount {
        bin: bin.clone(),
        mnt: mnt.clone(),
        log: dir.join("daemon.log"),
        source: home.dir.clone(),
        litany: litany.clone(),
        tmp: tmpfs.0.clone(),
        cache_bytes: Some(o.cache_bytes),
        nice: o.nice,
        generation: AtomicU64::new(0),
        since: Mutex::new(Instant::now()),
    };
    mount.mount()?;
    let s = Arc::new(Shared {
        home,
        mount,
        dir: dir.clone(),
        start: Instant::now(),
        stop: AtomicBool::new(false),
        ctl: o.ctl,
        quick: o.quick,
        seed: o.seed,
        deposits: Mutex::new(Vec::new()),
        killed: Mutex::new(Vec::new()),
        mails: Mutex::new(Vec::new()),
        reads: Mutex::default(),
        status_reads: Mutex::default(),
        greps: Mutex::default(),
        tails: Mutex::new(Vec::new()),
        live: Mutex::new(Vec::new()),
        rss: Mutex::new(Vec::new()),
        acts: AtomicU64::new(0),
        forks: AtomicU64::new(0),
        dispatches: AtomicU64::new(0),
        faults: Mutex::new(Vec::new()),
        children: Mutex::new(Vec::new()),
    });
    let mut threads = Vec::new();
    let spawn = |f: fn(Arc<Shared>), s: &Arc<Shared>| {
        let s = Arc::clone(s);
        std::thread::spawn(move || f(s))
    };
    for w in 0..4 {
        let s2 = Arc::clone(&s);
        threads.push(std::thread::spawn(move || load::writer(s2, w)));
    }
    for f in [
        load::walker,
        load::grepper,
        load::status_reader,
        load::mailer,
        load::actor,
    ] {
        threads.push(spawn(f, &s));
    }
    let samplers = vec![spawn(load::tails, &s), spawn(load::sampler, &s)];

    let mut failures: Vec<Check> = Vec::new();
    let run = faults(&s, duration, &mut failures);
    s.stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    if let Err(e) = &run {
        failures.push(Check {
            name: "the faults ran",
            ok: false,
            detail: e.clone(),
        });
    }
    let quiet = quiesce(&s, Duration::from_secs(240));
    for c in s.children.lock().iter_mut() {
        let _ = c.wait();
    }
    // Let the follower log what the last steps did.
    std::thread::sleep(Duration::from_secs(3));
    let events = std::fs::read_to_string(s.mount.mnt.join("events")).unwrap_or_default();
    let _ = std::fs::write(out_dir.join("events.txt"), &events);
    let finals = |rel: &str| std::fs::read(s.mount.mnt.join(rel)).ok();
    for t in samplers {
        let _ = t.join();
    }
    let mut all: Vec<Check> = failures;
    all.push(Check {
        name: "the harness came to rest",
        ok: quiet.is_ok(),
        detail: quiet.err().unwrap_or_default(),
    });
    all.extend(checks::deposits(
        &s.home.workspaces,
        &s.deposits.lock(),
        &s.killed.lock(),
        &s.mails.lock(),
    ));
    let since = std::time::SystemTime::now() - s.mount.since.lock().elapsed();
    let (ev, kinds) = checks::events(&s.home.workspaces, &events, since);
    all.push(ev);
    all.push(checks::tails(&s.tails.lock(), &finals));
    let reads = s.reads.lock();
    let status = s.status_reads.lock();
    let longest = reads.max().max(status.max());
    // Quick (CI, on a shared machine, a minute or so per daemon): past 5 s is a hang;
    // the full run holds every call to the 1 s.
    let limit = if o.quick { 5.0 } else { 1.0 };
    all.push(Check {
        name: if o.quick {
            "no reader call took 5 s or more (quick; the full run holds to 1 s)"
        } else {
            "no reader call took 1 s or more"
        },
        ok: longest < limit,
        detail: format!(
            "{} calls, longest {longest:.3} s, {} over 1 s; slowest: {:?}",
            reads.calls + status.calls,
            reads.over_1s + status.over_1s,
            &reads.longest[..reads.longest.len().min(3)]
        ),
    });
    // The daemon's own account of its slow handlers (`SLOW_REQUEST`): a call the reader
    // timed long and the daemon did not answered late for want of a CPU or a thread.
    let slow = daemon_slow(&s.mount.log);
    let rss = s.rss.lock().clone();
    all.push(rss_check(&rss, &s, o.quick));
    let live = s.live.lock().clone();
    let warm = live.iter().filter(|l| l.0 > 30.0).map(|l| l.1);
    let (lmin, lmax) = warm
        .clone()
        .fold((usize::MAX, 0), |(a, b), v| (a.min(v), b.max(v)));
    let lavg = warm.clone().sum::<usize>() as f64 / warm.clone().count().max(1) as f64;
    // The issue asks for at least LIVE_AT_LEAST agents live at any time: how often not.
    let samples = warm.clone().count();
    let below = warm.filter(|&v| v < LIVE_AT_LEAST).count();

    // Take everything down, then look for what is left.
    let unmounted = s.mount.unmount();
    let leaks = leftovers(&s, &tmpfs.0);
    all.push(Check {
        name: "unmounted cleanly",
        ok: unmounted.is_ok(),
        detail: unmounted.err().unwrap_or_default(),
    });
    drop(tmpfs);
    let after_tmp = tmp_litanyfs_files();
    let new_tmp: Vec<&String> = after_tmp
        .iter()
        .filter(|f| !before_tmp.contains(f))
        .collect();
    let mut leak_detail = leaks;
    if !new_tmp.is_empty() {
        leak_detail.push(format!("temporary files: {new_tmp:?}"));
    }
    let under = world::mounts_under(&dir);
    if !under.is_empty() {
        leak_detail.push(format!("mounts: {under:?}"));
    }
    all.push(Check {
        name: "no mount, process, temporary file or inotify watch left",
        ok: leak_detail.is_empty(),
        detail: leak_detail.join("; "),
    });

    let deposits = s.deposits.lock();
    let report = serde_json::json!({
        "mode": if o.quick { "quick" } else { "full" },
        "minutes": o.minutes,
        "cache_bytes": o.cache_bytes,
        "daemon_nice": o.nice,
        "seed": o.seed,
        "workspaces": nws,
        "roots_per_workspace": roots,
        "agents_at_end": agents_now(&s),
        "live_executors": {
            "min": if lmin == usize::MAX { 0 } else { lmin }, "avg": lavg, "max": lmax,
            "samples": samples, "below_at_least": below, "at_least": LIVE_AT_LEAST,
        },
        "live_curve": live,
        "deposits": {
            "written": deposits.len(),
            "close_ok": deposits.iter().filter(|d| d.ok).count(),
            "by_method": load_methods(&deposits),
        },
        "mail": s.mails.lock().len(),
        "acts": s.acts.load(Ordering::SeqCst),
        "forks": s.forks.load(Ordering::SeqCst),
        "dispatches": s.dispatches.load(Ordering::SeqCst),
        "events": kinds,
        "events_lines": events.lines().count(),
        "requests_timed": reads.calls + status.calls,
        "status_reads": status.calls,
        "longest_request_s": longest,
        "slowest": reads.longest,
        "daemon_slow": {"count": slow.0, "slowest": slow.1},
        "census": census(&s.mount.log),
        "grep_runs": s.greps.lock().calls,
        "longest_grep_s": s.greps.lock().max(),
        "rss_kib": rss,
        "faults": *s.faults.lock(),
        "checks": all,
    });
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    let name = if o.quick { "quick.json" } else { "report.json" };
    let _ = std::fs::write(out_dir.join(name), &text);
    println!("soak: {} minutes, seed {}", o.minutes, o.seed);
    println!(
        "  agents: {} at the end ({} dispatched); executors live (after 30 s): min {} avg {lavg:.1} max {lmax}, under {LIVE_AT_LEAST} in {below} of {samples} samples",
        agents_now(&s),
        s.dispatches.load(Ordering::SeqCst),
        if lmin == usize::MAX { 0 } else { lmin }
    );
    println!(
        "  deposits: {} written, {} closed with 0; mail {}; stops+restarts {} ({} forked)",
        deposits.len(),
        deposits.iter().filter(|d| d.ok).count(),
        s.mails.lock().len(),
        s.acts.load(Ordering::SeqCst),
        s.forks.load(Ordering::SeqCst)
    );
    println!(
        "  requests timed {}, longest {longest:.3} s; events {} lines; the daemon logged {} \
         handlers of {} ms or more, the slowest {} ms",
        reads.calls + status.calls,
        events.lines().count(),
        slow.0,
        litanyfs::testing::SLOW_REQUEST.as_millis(),
        slow.1.first().map_or(0, |l| l.0)
    );
    for (t, f) in s.faults.lock().iter() {
        println!("  fault at {t:.0}s: {f}");
    }
    let mut ok = true;
    for c in &all {
        println!(
            "  [{}] {}: {}",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.detail
        );
        ok &= c.ok;
    }
    println!(
        "soak: {} (report: {})",
        if ok { "passed" } else { "FAILED" },
        out_dir.join(name).display()
    );
    if o.keep {
        let kept = root.keep();
        eprintln!("soak: kept {}", kept.display());
    }
    Ok(ok)
}

fn load_methods(d: &[load::Deposit]) -> serde_json::Value {
    let mut m = std::collections::BTreeMap::new();
    for x in d {
        *m.entry(x.method).or_insert(0u64) += 1;
    }
    serde_json::json!(m)
}

fn agents_now(s: &Shared) -> usize {
    s.home
        .workspaces
        .iter()
        .map(|w| {
            std::fs::read_dir(w.dir.join("steps"))
                .map(|r| r.count())
                .unwrap_or(0)
        })
        .sum()
}

/// The faults, at their moments in a run of `d`; then the load runs out its time.
fn faults(s: &Arc<Shared>, d: Duration, checks: &mut Vec<Check>) -> Result<(), String> {
    let mut rng = Rng::new(s.seed ^ 0xfa17);
    let at = |f: f64| d.mul_f64(f);
    let hold = if s.quick {
        Duration::from_secs(15)
    } else {
        Duration::from_secs(60)
    };
    let until = |t: Duration| {
        while s.start.elapsed() < t {
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The workspaces compact for a while, then stop growing (world::Home::stop_compactions).
    if COMPACTING_FOR < d {
        until(COMPACTING_FOR);
        s.home.stop_compactions()?;
        s.fault("compaction off in every workspace (a litany config commit)".into());
    }
    // An upgrade: SIGTERM, and a new daemon, whose inotify queue is made small (the limit
    // is read when an inotify instance is made) and put back a while later.
    until(at(0.15 + rng.below(5) as f64 / 100.0));
    let lowered = LoweredQueue::lower(world::LOWERED_QUEUE)?;
    let old = s.mount.kill(libc::SIGTERM)?;
    s.fault(format!(
        "SIGTERM of the daemon (it detached its mount); inotify max_queued_events {} -> 16",
        lowered.was
    ));
    // An upgrade mounts again at once. The old daemon serves what is still open on it
    // (the tails, restarted on the new mount) and then ends, leaving the new mount alone.
    s.mount.mount()?;
    s.fault("remounted (upgrade)".into());
    let generation = s.mount.generation();
    let ended = world::wait_until(Duration::from_secs(20), || !world::alive(old));
    std::thread::sleep(Duration::from_millis(500));
    let kept = world::is_mounted(&s.mount.mnt) && s.mount.generation() == generation;
    checks.push(Check {
        name: "the SIGTERMed daemon ended once its files were closed, and left the new mount",
        ok: ended && kept,
        detail: format!("pid {old}: ended {ended}, the new mount still there {kept}"),
    });
    std::thread::sleep(hold);
    drop(lowered);
    s.fault("inotify max_queued_events put back".into());
    let overflowed = std::fs::read_to_string(&s.mount.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("overflow"))
        .count();
    s.fault(format!("daemon log lines about an overflow: {overflowed}"));

    until(at(0.35));
    let killed = load::killed_writer(s, &mut rng)?;
    s.fault(killed);

    // A crash: SIGKILL, the dead mount detached (fusermount3 -uz), mounted again.
    until(at(0.5));
    s.mount.kill(libc::SIGKILL)?;
    s.fault("SIGKILL of the daemon; dead mount detached with fusermount3 -uz".into());
    s.mount.mount()?;
    s.fault("remounted (after the crash)".into());

    // A full disk under the events log, then room again.
    until(at(0.65));
    let ballast = s.home.tmp.join("ballast");
    fill(&ballast);
    s.fault(format!(
        "the daemon's TMPDIR filled ({} bytes of ballast)",
        size(&ballast)
    ));
    std::thread::sleep(hold);
    let _ = std::fs::remove_file(&ballast);
    s.fault("the daemon's TMPDIR has room again".into());

    until(d);
    Ok(())
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Writes `p` until the filesystem is full.
fn fill(p: &Path) {
    use std::io::Write;
    let Ok(mut f) = std::fs::File::create(p) else {
        return;
    };
    let block = vec![0u8; 1 << 20];
    while f.write_all(&block).is_ok() {}
    let _ = f.write_all(&block[..4096]);
    let _ = f.flush();
}

/// Waits until no executor holds a lock and no harness process runs, three looks in a
/// row.
fn quiesce(s: &Shared, limit: Duration) -> Result<(), String> {
    let end = Instant::now() + limit;
    let mut calm = 0;
    loop {
        let locks = world::locked_inboxes(&s.home.workspaces);
        let procs: Vec<_> = world::processes_under(&s.home.dir)
            .into_iter()
            .filter(|(_, c)| !c.contains("litanyfs"))
            .collect();
        if locks == 0 && procs.is_empty() {
            calm += 1;
            if calm >= 3 {
                return Ok(());
            }
        } else {
            calm = 0;
        }
        if Instant::now() > end {
            return Err(format!(
                "after {limit:?}: {locks} locked inboxes, processes {:?}",
                &procs[..procs.len().min(5)]
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// How long a window the RSS is taken over, at minute 5 and at the end: the daemon's
/// memory swings by a tenth within seconds as its git handles are retired and their
/// caches fill again (every 30 s, `HANDLES_LIVE_FOR`), so one sample says more about
/// where in that swing it fell than about a growth.
const RSS_WINDOW_SECS: f64 = 60.0;

/// The median of `v` (empty: 0).
fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// RSS at the end within 10% of its value at minute 5 of the daemon's life (quick: 30 s
/// after the last mount, reported only), each the median of the samples of a
/// [`RSS_WINDOW_SECS`] window: the minute from minute 5, and the last minute.
fn rss_check(rss: &[(f64, u64, u64)], s: &Shared, quick: bool) -> Check {
    let name = "daemon RSS at the end within 10% of its value once warm (medians of a minute)";
    let last_gen = s.mount.generation();
    let mine: Vec<&(f64, u64, u64)> = rss.iter().filter(|r| r.1 == last_gen).collect();
    let (Some(born), Some(end)) = (mine.first().map(|r| r.0), mine.last().map(|r| r.0)) else {
        return Check {
            name,
            ok: false,
            detail: "no sample of the last daemon".into(),
        };
    };
    // Quick: the last daemon lives about a minute, while its caches still fill; its
    // figure is reported, not held to the 10%.
    let warm = born + if quick { 30.0 } else { 300.0 };
    let window = if quick { 10.0 } else { RSS_WINDOW_SECS };
    let within = |from: f64, to: f64| -> Vec<u64> {
        mine.iter()
            .filter(|r| r.0 >= from && r.0 <= to)
            .map(|r| r.2)
            .collect()
    };
    let (first, last) = (within(warm, warm + window), within(end - window, end));
    if first.is_empty() || last.is_empty() || (!quick && warm + window > end - window) {
        return Check {
            name,
            ok: false,
            detail: format!("too few samples ({} and {})", first.len(), last.len()),
        };
    }
    let span = |v: &[u64]| {
        format!(
            "{}-{}",
            v.iter().min().unwrap_or(&0),
            v.iter().max().unwrap_or(&0)
        )
    };
    let (r, e) = (median(first.clone()), median(last.clone()));
    let ratio = e as f64 / r.max(1) as f64;
    // The single samples too: the first of the window and the last of the run.
    let (r1, e1) = (first[0], last[last.len() - 1]);
    Check {
        name,
        ok: quick || ratio <= 1.10,
        detail: format!(
            "{r} KiB over {:.0}-{:.0} s ({} samples, {} KiB), {e} KiB over the last {window:.0} s \
             ({} samples, {} KiB): x{ratio:.2}{}; single samples {r1} and {e1} KiB: x{:.2}",
            warm - born,
            warm - born + window,
            first.len(),
            span(&first),
            last.len(),
            span(&last),
            if quick { " (quick: reported only)" } else { "" },
            e1 as f64 / r1.max(1) as f64
        ),
    }
}

/// `.litanyfs-*` files in the temporary directory (the events log's fallback names).
fn tmp_litanyfs_files() -> Vec<String> {
    std::fs::read_dir(std::env::temp_dir())
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".litanyfs"))
                .collect()
        })
        .unwrap_or_default()
}

/// What the run left after the unmount: processes naming its directory, files in the
/// daemon's TMPDIR, and inotify watches on its directories.
fn leftovers(s: &Shared, tmp: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let procs = world::processes_under(&s.dir);
    if !procs.is_empty() {
        out.push(format!("processes: {procs:?}"));
    }
    let files: Vec<String> = std::fs::read_dir(tmp)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !files.is_empty() {
        out.push(format!("files in the daemon's TMPDIR: {files:?}"));
    }
    let watches = watches_on(&s.dir);
    if watches > 0 {
        out.push(format!(
            "{watches} inotify watches on the soak's directories"
        ));
    }
    out
}

/// Inotify watches any process holds on a directory under `dir` (by inode, from
/// `/proc/*/fdinfo`).
fn watches_on(dir: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let mut inodes = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    let dev = std::fs::metadata(dir).map(|m| m.dev()).unwrap_or(0);
    while let Some(d) = stack.pop() {
        if let Ok(m) = std::fs::symlink_metadata(&d) {
            if m.dev() != dev {
                continue;
            }
            inodes.insert(m.ino());
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    let mut n = 0;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for p in procs.flatten() {
        let Ok(fds) = std::fs::read_dir(p.path().join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(info) = std::fs::read_to_string(fd.path()) else {
                continue;
            };
            for line in info.lines().filter(|l| l.starts_with("inotify wd:")) {
                let ino = line
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("ino:"))
                    .and_then(|h| u64::from_str_radix(h, 16).ok());
                if ino.is_some_and(|i| inodes.contains(&i)) {
                    n += 1;
                }
            }
        }
    }
    n
}

/// The daemon's census lines (one per upkeep: what it holds), as logged.
fn census(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains(litanyfs::testing::CENSUS_MARK))
        .map(str::to_string)
        .collect()
}

/// The handlers the daemon logged as slow: how many, and the ten slowest (milliseconds,
/// the log line).
fn daemon_slow(log: &Path) -> (usize, Vec<(u64, String)>) {
    use litanyfs::testing::SLOW_LOG_MARK as MARK;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut all: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            let ms = l.split(MARK).nth(1)?.split(' ').next()?.parse().ok()?;
            Some((ms, l.to_string()))
        })
        .collect();
    all.sort_by_key(|l| std::cmp::Reverse(l.0));
    let n = all.len();
    all.truncate(10);
    (n, all)
}
