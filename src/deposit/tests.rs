//! The engine against the real `litany` binary: byte compatibility of what it writes,
//! and no loss when both deposit into one inbox at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::wake::tests::{fake_harness, hold_lock, records, release};
use super::*;
use crate::fixture::Fixture;
use crate::workspace::inbox::USER_SENDER;
use crate::workspace::refs::Flavour;
use parking_lot::Mutex;

/// The recipient.
const R: &str = "20260101T000000Z-0000000a";
/// A named sender.
const S: &str = "20260101T000000Z-0000000b";
/// An unnamed sender.
const U: &str = "20260101T000000Z-0000000c";

/// The real binary, 0.0.15 (see [`crate::testing::prereq`]: missing, the test fails unless
/// `LITANYFS_SKIP` names `litany`).
fn litany() -> Option<PathBuf> {
    crate::testing::prereq::litany()
}

struct Setup {
    t: tempfile::TempDir,
    f: Fixture,
    ws: Workspace,
}

fn setup() -> Setup {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    f.agent(R, Some("Rita"), &[]).unwrap();
    f.agent(S, Some("Sam"), &[]).unwrap();
    f.agent(U, None, &[]).unwrap();
    let ws = Workspace::open(f.root()).unwrap();
    Setup { t, f, ws }
}

impl Setup {
    /// A depositor whose harness is a recorder, so nothing real is ever launched.
    fn depositor(&self, opts: Options) -> (Depositor, PathBuf) {
        let (script, record) = fake_harness(self.t.path());
        let opts = Options {
            harness: Some(script),
            ..opts
        };
        (Depositor::new(&self.ws, opts).unwrap(), record)
    }

    fn inbox(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.ws.agent_inbox(R))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn litany_message(&self, bin: &Path, sender: &str, content: &str) -> std::process::Output {
        litany_message(bin, self.ws.root(), &self.home(), sender, content)
    }

    fn home(&self) -> PathBuf {
        self.t.path().join("litany-home")
    }
}

/// `LITANY_CONV_BRANCH=<sender> litany message <root> <R> <content>` (no variable for
/// `user`), with `LITANY_HOME=<home>` so the caller's harness home is never touched.
fn litany_message(
    bin: &Path,
    root: &Path,
    home: &Path,
    sender: &str,
    content: &str,
) -> std::process::Output {
    let mut cmd = Command::new(bin);
    // `--`: clap would take content starting with `-` for an option.
    cmd.arg("message")
        .arg(root)
        .arg(R)
        .arg("--")
        .arg(content)
        .env("LITANY_HOME", home)
        .env_remove("LITANY_LOCK_FD");
    if sender == USER_SENDER {
        cmd.env_remove("LITANY_CONV_BRANCH");
    } else {
        cmd.env("LITANY_CONV_BRANCH", sender);
    }
    cmd.output().unwrap()
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn is_timestamp(s: &str) -> bool {
    let shape = "dddd-dd-ddTdd:dd:ddZ";
    s.len() == shape.len()
        && s.chars().zip(shape.chars()).all(|(c, k)| match k {
            'd' => c.is_ascii_digit(),
            k => c == k,
        })
}

/// The `deposited_at:` value of a deposit.
fn deposited_at(body: &str) -> &str {
    body.lines()
        .find_map(|l| l.strip_prefix("deposited_at: "))
        .unwrap_or_default()
}

/// The deposit with its timestamp line blanked out.
fn without_timestamp(body: &str) -> String {
    body.replacen(deposited_at(body), "<ts>", 1)
}

/// `<sender>-<digits>.md`'s number, read here rather than by the crate's own parser
/// (which the engine numbers with), so that a name is checked against litany's, not
/// against itself.
fn number(name: &str, sender: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(sender)?
        .strip_prefix('-')?
        .strip_suffix(".md")?;
    digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse().ok())?
}

/// The content of a deposit: everything after the closing frontmatter delimiter.
fn content_of(body: &str) -> &str {
    let rest = body.strip_prefix("---\n").unwrap_or(body);
    rest.split_once("\n---\n").map(|(_, c)| c).unwrap_or("")
}

#[test]
fn byte_compatible_with_litany_message() {
    let Some(bin) = litany() else { return };
    let s = setup();
    let holder = hold_lock(&s.ws.agent_inbox(R));
    let (dep, record) = s.depositor(Options::default());
    let long = "y".repeat(100_000);
    let contents = [
        "first",
        "with\nnewlines\n\n",
        "---\nfrom: forged\nterminal_ref: 0000\n---\nbody",
        "  spaced  \t",
        "ünïcödé ✓ 🦀\r\n",
        long.as_str(),
    ];
    for sender in [USER_SENDER, S, U] {
        let expected_name = if sender == S { Some("Sam") } else { None };
        assert_eq!(sender_name(s.f.repo(), sender).as_deref(), expected_name);
        let mut last_ours: Option<u32> = None;
        for content in contents {
            let before = s.inbox();
            let out = s.litany_message(&bin, sender, content);
            assert!(out.status.success(), "litany message: {out:?}");
            assert!(out.stdout.is_empty(), "litany message printed {out:?}");
            let new: Vec<_> = s
                .inbox()
                .into_iter()
                .filter(|n| !before.contains(n))
                .collect();
            assert_eq!(new.len(), 1, "{new:?}");
            let theirs_name = &new[0];
            let theirs = std::fs::read_to_string(s.ws.agent_inbox(R).join(theirs_name)).unwrap();
            if let Some(n) = last_ours {
                assert_eq!(
                    number(theirs_name, sender),
                    Some(n + 1),
                    "litany follows us"
                );
            }
            let ts = deposited_at(&theirs);
            assert!(is_timestamp(ts), "{ts:?}");
            // Same timestamp → the very same bytes.
            assert_eq!(
                String::from_utf8(render(sender, expected_name, ts, content)).unwrap(),
                theirs,
                "render differs from litany for sender {sender}"
            );
            // Our own deposit: same bytes but for the clock, and the next number.
            let d = dep.deposit(R, sender, content.as_bytes()).unwrap();
            assert_eq!(d.wake, Wake::Busy, "the lock is held");
            let ours = std::fs::read_to_string(&d.published.path).unwrap();
            assert!(is_timestamp(deposited_at(&ours)));
            assert_eq!(without_timestamp(&ours), without_timestamp(&theirs));
            // litany's name, one number on (its width: at least three digits).
            let theirs_n = number(theirs_name, sender).expect("litany's name");
            assert_eq!(
                d.published.name,
                format!("{sender}-{:03}.md", theirs_n + 1),
                "litany wrote {theirs_name}"
            );
            last_ours = Some(theirs_n + 1);
        }
    }
    assert_eq!(s.inbox().len(), 3 * 2 * contents.len(), "{:?}", s.inbox());
    release(holder);
    assert!(
        records(&record, Duration::from_millis(300)).is_empty(),
        "a driver was launched while the lock was held"
    );
}

#[test]
fn refusals_carry_their_errno() {
    let s = setup();
    let (dep, _) = s.depositor(Options {
        max_message_bytes: 8,
        ..Options::default()
    });
    let errno = |r: Result<Deposited, DepositError>| r.unwrap_err().errno();
    assert_eq!(errno(dep.deposit(R, "user", b"")), None);
    assert_eq!(
        errno(dep.deposit(R, "user", b"123456789")),
        Some(libc::EFBIG)
    );
    assert_eq!(errno(dep.deposit(R, "user", b"\xff")), Some(libc::EILSEQ));
    assert_eq!(
        errno(dep.deposit("nobody", "user", b"x")),
        Some(libc::ENOENT)
    );
    assert_eq!(errno(dep.deposit("../x", "user", b"x")), Some(libc::EINVAL));
    assert_eq!(errno(dep.deposit(R, "nobody", b"x")), Some(libc::EINVAL));
    assert_eq!(errno(dep.deposit(R, ".user", b"x")), Some(libc::EINVAL));
    assert_eq!(errno(dep.deposit(R, "a\nb", b"x")), Some(libc::EINVAL));
    assert_eq!(dep.check_len(8).map_err(|e| e.errno()), Ok(()));
    assert_eq!(
        dep.check_len(9).map_err(|e| e.errno()),
        Err(Some(libc::EFBIG))
    );
    assert!(
        !s.ws.agent_inbox(R).exists(),
        "a refused deposit touched the inbox"
    );
}

#[test]
fn a_deposit_wakes_an_idle_recipient() {
    let s = setup();
    let (dep, record) = s.depositor(Options::default());
    let d = dep.deposit(R, S, b"hello").unwrap();
    assert_eq!(d.published.name, format!("{S}-001.md"));
    let Wake::Launched { pid } = d.wake else {
        panic!("{:?}", d.wake)
    };
    let recs = records(&record, Duration::from_secs(10));
    assert_eq!(recs.len(), 1);
    assert!(recs[0].contains(&format!(
        "argv: [advance] [--] [{}] [{R}]\npid: {pid}\nsid: {pid}\n",
        s.ws.root().display()
    )));
    assert_eq!(
        std::fs::read_to_string(&d.published.path).unwrap(),
        format!(
            "---\nfrom: {S}\nfrom_name: Sam\ndeposited_at: {}\n---\nhello",
            deposited_at(&std::fs::read_to_string(&d.published.path).unwrap())
        )
    );
}

#[test]
fn a_background_wake_runs_after_the_deposit_returns() {
    let s = setup();
    let (dep, record) = s.depositor(Options {
        wake: WakeMode::Background,
        ..Options::default()
    });
    // While an executor holds the lock, queued wakes find it busy and launch nothing.
    let holder = hold_lock(&s.ws.agent_inbox(R));
    for i in 0..20 {
        let d = dep.deposit(R, S, format!("m{i}").as_bytes()).unwrap();
        assert_eq!(d.wake, Wake::Queued);
    }
    drop(dep); // runs the queued wakes before returning
    assert!(
        records(&record, Duration::from_millis(300)).is_empty(),
        "launched while the lock was held"
    );
    release(holder);
    // Once it is free, a deposit's wake launches the driver, though the deposit did not
    // wait for it.
    let (dep, record) = s.depositor(Options {
        wake: WakeMode::Background,
        ..Options::default()
    });
    let d = dep.deposit(R, S, b"hello").unwrap();
    assert_eq!(d.wake, Wake::Queued);
    let recs = records(&record, Duration::from_secs(10));
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(recs[0].contains(&format!(
        "argv: [advance] [--] [{}] [{R}]\n",
        s.ws.root().display()
    )));
}

/// `litany message` (sender `user`) and our deposits (sender `user`) racing for the same
/// numbers, with `runners` litany processes at a time: every one of ours must survive
/// exactly once. With one runner litany never races itself, so every one of its messages
/// must survive too (we never destroy a deposit); with more, litany's own plain renames
/// lose and fail some of its messages, which is reported, not asserted.
fn race_litany(runners: usize) {
    let Some(bin) = litany() else { return };
    const LITANY_EACH: usize = 40;
    const OUR_THREADS: usize = 2;
    const OUR_MAX: usize = 5000;
    let s = setup();
    let holder = hold_lock(&s.ws.agent_inbox(R));
    let (dep, _) = s.depositor(Options::default());
    let dep = Arc::new(dep);
    let (root, home) = (s.ws.root(), s.home());
    let failed = AtomicUsize::new(0);
    let running = AtomicUsize::new(runners);
    let ours: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for r in 0..runners {
            let (bin, home, failed, running) = (&bin, &home, &failed, &running);
            scope.spawn(move || {
                for j in 0..LITANY_EACH {
                    let content = format!("theirs {r}/{j}");
                    let out = litany_message(bin, root, home, USER_SENDER, &content);
                    if !out.status.success() {
                        eprintln!("litany message failed: {out:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                running.fetch_sub(1, Ordering::Relaxed);
            });
        }
        // Ours keep coming, about one a millisecond per thread, for as long as litany runs.
        for i in 0..OUR_THREADS {
            let (dep, running, ours) = (dep.clone(), &running, &ours);
            scope.spawn(move || {
                let mut j = 0;
                while running.load(Ordering::Relaxed) > 0 && j < OUR_MAX {
                    let content = format!("ours {i}/{j}");
                    dep.deposit(R, USER_SENDER, content.as_bytes()).unwrap();
                    ours.lock().push(content);
                    j += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
    });
    let guard = dep.guard().unwrap();
    guard.sync();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for name in s.inbox() {
        assert!(number(&name, USER_SENDER).is_some(), "debris: {name}");
        let body = std::fs::read_to_string(s.ws.agent_inbox(R).join(&name)).unwrap();
        *seen.entry(content_of(&body).to_string()).or_default() += 1;
    }
    let ours = ours.into_inner();
    for content in &ours {
        let n = seen.get(content).copied().unwrap_or(0);
        assert_eq!(n, 1, "{content:?} is there {n} times");
    }
    let mut litany_lost = 0;
    for r in 0..runners {
        for j in 0..LITANY_EACH {
            match seen.get(&format!("theirs {r}/{j}")).copied().unwrap_or(0) {
                0 => litany_lost += 1,
                1 => {}
                n => panic!("theirs {r}/{j} is there {n} times"),
            }
        }
    }
    let failed = failed.into_inner();
    eprintln!(
        "race with {runners} litany runner(s): {} of our {} deposits re-deposited after a \
         litany rename-over; litany: {litany_lost} of {} messages missing, {failed} \
         invocations failed",
        guard.redeposits(),
        ours.len(),
        runners * LITANY_EACH
    );
    if runners == 1 {
        assert_eq!(
            (litany_lost, failed),
            (0, 0),
            "we destroyed a litany deposit"
        );
    }
    release(holder);
}

#[test]
fn no_loss_racing_one_litany_message_at_a_time() {
    race_litany(1);
}

#[test]
fn no_loss_racing_many_litany_messages() {
    race_litany(3);
}
