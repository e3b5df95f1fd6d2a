//! The close rule, on a real mount: a message is deposited once, at the close of the last
//! descriptor on it (dups, forked children and exec'ed programs count), and never when a
//! process that wrote to it was killed by a signal holding it. Each writer of the table
//! in doc/SEMANTICS.md deposits exactly what is listed, byte for byte, and nothing else.

mod common;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::mount::{Mounted, alive, eventually};
use common::tmux::Session;
use common::workspace::Ws;
use litanyfs::testing::wait::{wait_for, wait_for_some};
use litanyfs::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";

/// How long anything asynchronous may take before the test fails (generous: the machine
/// may be busy; this is no performance assertion).
const DEADLINE: Duration = Duration::from_secs(20);

/// The children of process `pid`.
fn children(pid: u32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn workspace() -> Ws {
    let w = Ws::new(Flavour::Litany);
    w.f.agent(A, Some("Alpha"), &[]).unwrap();
    std::fs::create_dir_all(w.f.inbox(A)).unwrap();
    w
}

fn mount(w: &Ws) -> Mounted {
    Mounted::with_args(w.f.root(), &["--no-wake"])
}

/// The bodies of the real inbox's deposits (frontmatter stripped), sorted by name.
fn bodies(w: &Ws) -> Vec<Vec<u8>> {
    let mut names: Vec<_> = std::fs::read_dir(w.f.inbox(A))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| {
            let b = std::fs::read(p).unwrap();
            let text = String::from_utf8(b).unwrap();
            let rest = text.strip_prefix("---\n").expect("frontmatter");
            rest.split_once("---\n")
                .expect("closing ---")
                .1
                .as_bytes()
                .to_vec()
        })
        .collect()
}

fn listed(m: &Mounted) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(m.path(&format!("inbox/{A}")))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn quiet(cmd: &mut Command) -> &mut Command {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
}

fn run(shell: &str, script: &str) {
    let ok = quiet(Command::new(shell).arg("-c").arg(script))
        .status()
        .unwrap()
        .success();
    assert!(ok, "{shell} -c {script}");
}

fn python(script: &str, args: &[&Path]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_shell_writing_through_one_descriptor_sends_one_message_at_the_last_close() {
    if !litanyfs::testing::prereq::programs(&["bash", "dash"]) {
        return;
    }
    let w = workspace();
    let m = mount(&w);
    for (i, shell) in ["bash", "dash"].iter().enumerate() {
        let f = m.path(&format!("inbox/{A}/lines{i}"));
        run(
            shell,
            &format!(
                "exec 3>'{}'; echo a >&3; echo b >&3; exec 3>&-",
                f.display()
            ),
        );
        assert_eq!(bodies(&w).len(), i + 1, "{shell}");
        assert_eq!(bodies(&w)[i], b"a\nb\n", "{shell}");
    }
}

/// Issue 38, item 1: while a writer holds a message half-written, readers (`cat`,
/// `grep -r`, Python's `open(..., "r")`) and a second writable open that writes nothing
/// close and are released without sending it; the message arrives whole, once, at the
/// writer's own close.
#[test]
fn readers_and_a_second_opener_never_send_a_half_written_message() {
    let w = workspace();
    let m = mount(&w);
    let f = m.path(&format!("inbox/{A}/half"));
    // The writer writes the first half, says so, and waits for a line before the rest.
    let mut writer = Command::new("python3")
        .arg("-c")
        .arg(concat!(
            "import sys\n",
            "f = open(sys.argv[1], 'w')\n",
            "f.write('first half\\n'); f.flush()\n",
            "print('ready', flush=True)\n",
            "sys.stdin.readline()\n",
            "f.write('second half\\n'); f.close()\n",
            "print('closed', flush=True)\n",
        ))
        .arg(&f)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(writer.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    // A half-written draft is its writer's alone.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let cat = Command::new("cat").arg(&f).output().unwrap();
    assert_eq!(cat.stdout, b"first half\n");
    let grep = Command::new("grep")
        .args(["-r", "half"])
        .arg(m.path("inbox"))
        .output()
        .unwrap();
    assert!(grep.status.success(), "{grep:?}");
    python("open(__import__('sys').argv[1]).read()", &[&f]);
    // A second writable open that writes nothing joins the message and sends nothing.
    python("open(__import__('sys').argv[1], 'a').close()", &[&f]);
    assert!(
        bodies(&w).is_empty(),
        "a reader's close sent half a message: {:?}",
        bodies(&w)
    );
    writer.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(
        line, "closed\n",
        "the writer's second write or close failed"
    );
    assert!(writer.wait().unwrap().success());
    assert_eq!(bodies(&w), [b"first half\nsecond half\n".to_vec()]);
}

#[test]
fn a_writer_killed_by_a_signal_sends_nothing() {
    if !litanyfs::testing::prereq::programs(&["python3"]) {
        return;
    }
    let w = workspace();
    let m = mount(&w);
    // SIGTERM to a shell in the middle of a group; its child (a shell waiting on a FIFO)
    // still holds the file when the shell dies, and closes it normally later, once the
    // test lets it go on.
    let t = tempfile::tempdir().unwrap();
    let fifo = t.path().join("go");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let f = m.path(&format!("inbox/{A}/group"));
    let mut sh = quiet(Command::new("bash").arg("-c").arg(format!(
        "{{ echo a; sh -c 'read x < \"$0\"' '{}'; echo b; }} > '{}'",
        fifo.display(),
        f.display()
    )))
    .spawn()
    .unwrap();
    // The child exists once `echo a` is written; it inherited the file at its fork.
    let holder = wait_for_some(
        || children(sh.id()).first().copied(),
        DEADLINE,
        "the group's child shell",
    );
    // SAFETY: signalling the child this test spawned.
    unsafe { libc::kill(sh.id() as i32, libc::SIGTERM) };
    sh.wait().unwrap();
    // The orphan reads its line and exits normally: the file's last close.
    let mut go = wait_for_some(
        || {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
                .ok()
        },
        DEADLINE,
        "the orphaned child to open the FIFO",
    );
    go.write_all(b"go\n").unwrap();
    drop(go);
    wait_for(|| !alive(holder), DEADLINE, "the orphaned child to exit");
    // `timeout` kills a slow writer with SIGTERM; `kill -9` a Python writer.
    let slow = m.path(&format!("inbox/{A}/slow"));
    let _ = quiet(Command::new("sh").arg("-c").arg(format!(
        "timeout 1 sh -c 'while :; do echo y; sleep 0.1; done' > '{}'",
        slow.display()
    )))
    .status()
    .unwrap();
    let py = m.path(&format!("inbox/{A}/py"));
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, time\nf = open(sys.argv[1], 'wb', buffering=0)\n\
             f.write(b'half of it')\nprint('ready', flush=True)\ntime.sleep(30)\n",
        )
        .arg(&py)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut ready).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // Each of the three drops is told, the group's at its orphan's close.
    let dropped = || {
        std::fs::read_to_string(m.path("events.ndjson"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"] == "message-dropped")
            .count()
    };
    wait_for(|| dropped() >= 3, DEADLINE, "three message-dropped events");
    assert!(bodies(&w).is_empty(), "{:?}", bodies(&w));
    assert_eq!(
        listed(&m),
        Vec::<String>::new(),
        "a dropped message stayed listed"
    );
    let log = m.log_text();
    assert!(log.contains("killed by signal 15"), "{log}");
    assert!(log.contains("killed by signal 9"), "{log}");
    // And each drop is an event, with the writer's pid and signal.
    let events = std::fs::read_to_string(m.path("events.ndjson")).unwrap();
    let dropped: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["kind"] == "message-dropped")
        .collect();
    let signals: Vec<i64> = dropped
        .iter()
        .filter_map(|e| e["signal"].as_i64())
        .collect();
    assert_eq!(dropped.len(), 3, "{events}");
    assert!(signals.contains(&15) && signals.contains(&9), "{dropped:?}");
    assert!(
        dropped
            .iter()
            .all(|e| e["why"] == "killed" && e["agent"] == A)
    );
}

#[test]
fn a_writer_that_runs_out_of_room_leaves_no_name_behind() {
    // `yes` fills the message to --max-message-bytes at once, hears EFBIG and exits.
    let w = workspace();
    let m = mount(&w);
    let f = m.path(&format!("inbox/{A}/yes"));
    let mut yes = Command::new("yes")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&f).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for_some(
        || yes.try_wait().unwrap(),
        DEADLINE,
        "yes to be refused and exit",
    );
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut yes.stderr.take().unwrap(), &mut stderr).unwrap();
    let efbig = std::io::Error::from_raw_os_error(libc::EFBIG).to_string();
    let efbig = efbig.split(" (os error").next().unwrap();
    assert!(
        stderr.starts_with(&format!("yes: standard output: {efbig}\n")),
        "{status:?}: {stderr}"
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(bodies(&w).is_empty());
    assert_eq!(listed(&m), Vec::<String>::new());
}

/// `cat > f` in a terminal: a line typed, then `key` (C-c or C-d).
fn cat_in_tmux(path: &Path, key: &str) {
    let cat = Session::start(
        &format!("cat-{key}"),
        &format!("cat > '{}'", path.display()),
    );
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    wait_for(|| cat.runs("cat"), DEADLINE, "cat to run in the tmux pane");
    cat.type_text("typed line");
    cat.press("Enter");
    wait_for(|| size() > 0, DEADLINE, "the typed line to reach the file");
    cat.press(key);
    assert!(cat.ended_within(DEADLINE), "cat did not exit at {key}");
}

#[test]
fn ctrl_c_on_cat_sends_nothing_and_ctrl_d_sends_the_message() {
    if !litanyfs::testing::prereq::programs(&["tmux"]) {
        return;
    }
    let w = workspace();
    let m = mount(&w);
    cat_in_tmux(&m.path(&format!("inbox/{A}/interrupted")), "C-c");
    assert!(bodies(&w).is_empty(), "{:?}", bodies(&w));
    assert_eq!(listed(&m), Vec::<String>::new());
    cat_in_tmux(&m.path(&format!("inbox/{A}/ended")), "C-d");
    assert_eq!(bodies(&w), [b"typed line\n".to_vec()]);
}

#[test]
fn forked_children_and_exec_ed_programs_hold_the_message_until_the_last_close() {
    if !litanyfs::testing::prereq::programs(&["python3"]) {
        return;
    }
    let w = workspace();
    let m = mount(&w);
    let real = w.f.inbox(A);
    // The child writes and exits; the parent writes and closes.
    python(
        "import os, sys\nf = open(sys.argv[1], 'wb', buffering=0)\nf.write(b'parent 1;')\n\
         pid = os.fork()\nif pid == 0:\n    f.write(b'child;')\n    os._exit(0)\n\
         os.waitpid(pid, 0)\nf.write(b'parent 2')\nf.close()\n",
        &[&m.path(&format!("inbox/{A}/fork1"))],
    );
    assert_eq!(bodies(&w), [b"parent 1;child;parent 2".to_vec()]);
    // The parent closes first; the child writes after and closes last.
    let out = python(
        "import os, sys\nf = open(sys.argv[1], 'wb', buffering=0)\nf.write(b'parent;')\n\
         r, w = os.pipe()\npid = os.fork()\nif pid == 0:\n    os.read(r, 1)\n\
         \x20   f.write(b'child')\n    f.close()\n    os._exit(0)\nf.close()\n\
         print(len(os.listdir(sys.argv[2])))\nos.write(w, b'x')\nos.waitpid(pid, 0)\n\
         print(len(os.listdir(sys.argv[2])))\n",
        &[&m.path(&format!("inbox/{A}/fork2")), &real],
    );
    assert_eq!(out, "1\n2\n", "sent at the parent's close, not the child's");
    assert_eq!(bodies(&w)[1], b"parent;child");
    // A child exec's `head` with the descriptor as its stdout, waiting for its line on
    // a pipe; the writer closes before it is given it.
    let out = python(
        "import os, subprocess, sys\nf = open(sys.argv[1], 'wb', buffering=0)\n\
         f.write(b'before head\\n')\n\
         s = subprocess.Popen(['head', '-n', '1'], stdin=subprocess.PIPE, stdout=f)\n\
         f.close()\nprint(len(os.listdir(sys.argv[2])))\n\
         s.stdin.write(b'from head\\n')\ns.stdin.close()\ns.wait()\n\
         print(len(os.listdir(sys.argv[2])))\n",
        &[&m.path(&format!("inbox/{A}/exec")), &real],
    );
    assert_eq!(out, "2\n3\n", "sent before head exited, or never");
    assert_eq!(bodies(&w)[2], b"before head\nfrom head\n");
    // Both streams of one command into one message.
    run(
        "sh",
        &format!(
            "{{ echo out; echo err >&2; }} > '{}' 2>&1",
            m.path(&format!("inbox/{A}/both")).display()
        ),
    );
    assert_eq!(bodies(&w).len(), 4);
    assert!(bodies(&w).contains(&b"out\nerr\n".to_vec()));
}

/// How long a call may take before the watchdog below takes it for hung. A hang is for
/// good, and a busy machine can hold an honest call for a second or more: this is no
/// speed target (those are in scripts/bench).
const HUNG: Duration = Duration::from_secs(10);

/// The milliseconds since `t0`, never 0 (0 means idle below).
fn ms_since(t0: Instant) -> u64 {
    t0.elapsed().as_millis() as u64 + 1
}

#[test]
fn closes_never_wait_on_forks_execs_and_proc_readers() {
    // The hang an earlier design met: a close-on-exec in a forked child is a close the
    // daemon must answer while the child holds its exec lock, and `/proc` readers wait
    // on that lock. Writers, forkers and `/proc` readers in one process, under a
    // watchdog: a call that takes more than HUNG kills the daemon (so every stuck
    // call returns) and fails the test.
    const WRITERS: usize = 4;
    const MESSAGES: usize = 1000;
    let w = workspace();
    let m = mount(&w);
    let t0 = Instant::now();
    let busy: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let stuck = Arc::new(AtomicBool::new(false));
    let daemon = m.daemon_pid().unwrap();
    let watchdog = {
        let (busy, done, stuck) = (busy.clone(), done.clone(), stuck.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let now = ms_since(t0);
                if busy.iter().any(|b| {
                    let at = b.load(Ordering::Relaxed);
                    at != 0 && now.saturating_sub(at) > HUNG.as_millis() as u64
                }) {
                    stuck.store(true, Ordering::Relaxed);
                    // SAFETY: the daemon this test started; its death fails every
                    // call still waiting on it, so the test ends.
                    unsafe { libc::kill(daemon, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let forkers: Vec<_> = (0..2)
        .map(|_| {
            let done = done.clone();
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let _ = quiet(&mut Command::new("true")).status();
                }
            })
        })
        .collect();
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                for e in std::fs::read_dir("/proc/self/task")
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let _ = std::fs::read(e.path().join("stat"));
                    let _ = std::fs::read(e.path().join("children"));
                }
                for e in std::fs::read_dir("/proc/self/fd")
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let _ = std::fs::read_link(e.path());
                }
            }
        })
    };
    let dir = m.path(&format!("inbox/{A}"));
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (busy, dir) = (busy.clone(), dir.clone());
            std::thread::spawn(move || -> Result<(), String> {
                for i in (t..MESSAGES).step_by(WRITERS) {
                    busy[t].store(ms_since(t0), Ordering::Relaxed);
                    let r = (|| {
                        let mut f = std::fs::File::create(dir.join(format!("m{i}")))?;
                        f.write_all(format!("message {i}, ").as_bytes())?;
                        f.write_all(b"whole\n")?;
                        f.sync_all().ok();
                        drop(f);
                        Ok::<(), std::io::Error>(())
                    })();
                    busy[t].store(0, Ordering::Relaxed);
                    r.map_err(|e| format!("message {i}: {e}"))?;
                }
                Ok(())
            })
        })
        .collect();
    let results: Vec<_> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    done.store(true, Ordering::Relaxed);
    watchdog.join().unwrap();
    for h in forkers {
        h.join().unwrap();
    }
    reader.join().unwrap();
    assert!(
        !stuck.load(Ordering::Relaxed),
        "a call waited over {HUNG:?}"
    );
    for r in results {
        r.unwrap();
    }
    // A message whose last holder was a forked child goes at that child's close: soon.
    let all_in = eventually(Duration::from_secs(10), || bodies(&w).len() >= MESSAGES);
    let mut got = bodies(&w);
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..MESSAGES)
        .map(|i| format!("message {i}, whole\n").into_bytes())
        .collect();
    want.sort();
    assert!(all_in, "{} of {MESSAGES} deposited", got.len());
    assert_eq!(got, want);
}

/// A writer whose forked child holds the message close-on-exec and never execs makes its
/// own close wait for the spawn grace, and nobody else's request: with one request
/// thread, a `stat` made during that wait is answered before the close returns.
#[test]
fn the_spawn_grace_is_the_writers_wait_not_a_request_threads() {
    let w = workspace();
    let m = Mounted::with_args(w.f.root(), &["--no-wake", "--threads", "1"]);
    let out = python(
        r#"
import os, sys, threading, time
draft, other = sys.argv[1], sys.argv[2]
fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
os.write(fd, b"held by a child that never execs")
pid = os.fork()
if pid == 0:
    time.sleep(1.0)
    os._exit(0)
got = {}
def close():
    t = time.monotonic()
    os.close(fd)
    got["close"] = (t, time.monotonic())
th = threading.Thread(target=close)
th.start()
time.sleep(0.05)
t = time.monotonic()
os.stat(other)
got["stat"] = (t, time.monotonic())
th.join()
os.waitpid(pid, 0)
(c0, c1), (s0, s1) = got["close"], got["stat"]
print(f"{(c1 - c0) * 1000:.0f} {(s1 - s0) * 1000:.0f} {int(s1 < c1)}")
"#,
        &[&m.path(&format!("inbox/{A}/held")), &m.path("status")],
    );
    let fields: Vec<u64> = out.split_whitespace().map(|f| f.parse().unwrap()).collect();
    let [close_ms, stat_ms, stat_first] = fields[..] else {
        panic!("{out}")
    };
    eprintln!("close {close_ms} ms, stat during it {stat_ms} ms");
    // The close did wait for the child (which holds it close-on-exec, as a child on its
    // way to an exec does), and the stat did not wait for the close.
    assert!(close_ms >= 150, "the close did not wait: {out}");
    assert_eq!(stat_first, 1, "the stat waited for the close: {out}");
    // The child's exit is the last close: the message goes whole, once.
    assert!(
        common::mount::eventually(std::time::Duration::from_secs(5), || bodies(&w).len() == 1),
        "{:?}",
        bodies(&w)
    );
    assert_eq!(bodies(&w), [b"held by a child that never execs".to_vec()]);
}
