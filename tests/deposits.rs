//! Deposits through the mount with every common writer, and every refusal at the call
//! that caused it. Fixture workspaces, mounted with `--no-wake` (no harness to wake).

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::mount::{Mounted, eventually};
use common::tmux::Session;
use common::workspace::Ws;
use litanyfs::workspace::refs::Flavour;

const A: &str = "20261202T094226Z-0122ccc2";
const B: &str = "20261202T094227Z-0abc0def";

fn workspace() -> Ws {
    let w = Ws::new(Flavour::Litany);
    let f = &w.f;
    f.agent(A, Some("Alpha"), &[]).unwrap();
    f.agent(B, Some("Beta"), &[]).unwrap();
    std::fs::create_dir_all(f.inbox(A)).unwrap();
    std::fs::create_dir_all(f.inbox(B)).unwrap();
    w
}

fn mount(w: &Ws, extra: &[&str]) -> Mounted {
    let mut args = vec!["--no-wake"];
    args.extend_from_slice(extra);
    Mounted::with_args(w.f.root(), &args)
}

/// The real inbox's deposits, as (name, bytes).
fn deposits(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// Splits a deposit into its frontmatter lines and its content.
fn split(bytes: &[u8]) -> (Vec<String>, Vec<u8>) {
    let text = std::str::from_utf8(bytes).unwrap();
    let rest = text.strip_prefix("---\n").expect("frontmatter");
    let (front, content) = rest.split_once("---\n").expect("closing ---");
    (
        front.lines().map(String::from).collect(),
        content.as_bytes().to_vec(),
    )
}

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh").arg("-c").arg(cmd).output().unwrap()
}

/// Runs `write` (which writes `content` to the given mount path) and checks that exactly
/// one deposit with that content appeared, stamped by `user`.
fn check_writer(
    m: &Mounted,
    w: &Ws,
    name: &str,
    content: &[u8],
    write: impl FnOnce(&Path),
) -> String {
    let real = w.f.inbox(A);
    let before = deposits(&real);
    let target = m.path(&format!("inbox/{A}/{name}"));
    write(&target);
    let after = deposits(&real);
    let new: Vec<_> = after.iter().filter(|d| !before.contains(d)).collect();
    assert_eq!(new.len(), 1, "{name}: {new:?}");
    let (file, bytes) = new[0];
    let (front, body) = split(bytes);
    assert_eq!(body, content, "{name}");
    assert_eq!(front[0], "from: user", "{name}");
    assert!(
        front[1].starts_with("deposited_at: ") && front[1].ends_with('Z') && front[1].len() == 34,
        "{front:?}"
    );
    assert_eq!(front.len(), 2);
    // The next of user's numbers in the inbox (CONTRACT §3.1), counted here.
    let next = before
        .iter()
        .filter_map(|(n, _)| common::drain::seq_of(n, "user"))
        .max()
        .map_or(1, |n| n + 1);
    assert_eq!(*file, format!("user-{next:03}.md"), "{name}");
    // The listing shows the deposit, not the writer's name.
    let listed = names(&m.path(&format!("inbox/{A}")));
    assert!(listed.contains(file.as_str()), "{listed:?}");
    if name != file {
        assert!(!listed.contains(name), "{name} still listed: {listed:?}");
    }
    assert!(!real.join(name).exists() || name == file);
    file.clone()
}

#[test]
fn every_common_writer_deposits_exactly_once() {
    if !litanyfs::testing::prereq::programs(&["python3", "tmux", "vim", "nano"]) {
        return;
    }
    let w = workspace();
    let m = mount(&w, &[]);
    let t = tempfile::tempdir().unwrap();
    let mut results = Vec::new();

    let mut run = |label: &str, name: &str, content: &[u8], f: &dyn Fn(&Path)| {
        let file = check_writer(&m, &w, name, content, f);
        results.push(format!("{label} -> {file}"));
    };
    run("echo >", "echo.txt", b"from echo\n", &|p| {
        assert!(
            sh(&format!("echo 'from echo' > '{}'", p.display()))
                .status
                .success()
        )
    });
    run("printf >", "printf.txt", b"from printf", &|p| {
        assert!(
            sh(&format!("printf 'from printf' > '{}'", p.display()))
                .status
                .success()
        )
    });
    run("cat >", "cat.txt", b"from cat\nline 2\n", &|p| {
        let mut c = Command::new("sh")
            .arg("-c")
            .arg(format!("cat > '{}'", p.display()))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin
            .take()
            .unwrap()
            .write_all(b"from cat\nline 2\n")
            .unwrap();
        assert!(c.wait().unwrap().success());
    });
    run("tee", "tee.txt", b"from tee\n", &|p| {
        assert!(
            sh(&format!(
                "echo 'from tee' | tee '{}' > /dev/null",
                p.display()
            ))
            .status
            .success()
        )
    });
    let src = t.path().join("src.md");
    std::fs::write(&src, "from cp\n").unwrap();
    run("cp", "cp.md", b"from cp\n", &|p| {
        assert!(
            sh(&format!("cp '{}' '{}'", src.display(), p.display()))
                .status
                .success()
        )
    });
    run("cp -p", "cp-p.md", b"from cp\n", &|p| {
        let out = sh(&format!("cp -p '{}' '{}'", src.display(), p.display()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let mv_src = t.path().join("mv.md");
    run("mv (other fs)", "mv.md", b"from mv\n", &|p| {
        std::fs::write(&mv_src, "from mv\n").unwrap();
        let out = sh(&format!("mv '{}' '{}'", mv_src.display(), p.display()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!mv_src.exists());
    });
    run("dd", "dd.bin", b"from dd\n", &|p| {
        let out = sh(&format!(
            "printf 'from dd\\n' | dd of='{}' status=none",
            p.display()
        ));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    run(
        "python open('w')",
        "py.txt",
        "from python ✓\n".as_bytes(),
        &|p| {
            let out = Command::new("python3")
            .arg("-c")
            .arg("import sys\nwith open(sys.argv[1], 'w') as f:\n    f.write('from python ✓\\n')\n")
            .arg(p)
            .output()
            .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        },
    );
    run("vim :w", "vim-note", b"from vim\n", &|p| {
        let out = Command::new("vim")
            .args([
                "-u",
                "NONE",
                "-i",
                "NONE",
                "-c",
                "call setline(1, 'from vim')",
                "-c",
                "wq",
            ])
            .arg(p)
            .env("TERM", "dumb")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "vim: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    });
    run("nano save", "nano-note", b"from nano\n", &|p| {
        nano_write(p, "from nano")
    });
    eprintln!("{}", results.join("\n"));
    // Nothing private or temporary reached the real inbox.
    for (name, _) in deposits(&w.f.inbox(A)) {
        assert!(common::drain::accepts(&name), "{name}");
    }
    assert_eq!(deposits(&w.f.inbox(A)).len(), 11);
}

fn nano_write(path: &Path, text: &str) {
    let nano = Session::start("nano", &format!("nano '{}'", path.display()));
    // Each key goes in once nano shows it is ready for it.
    let shows =
        |what: &str, secs| eventually(Duration::from_secs(secs), || nano.screen().contains(what));
    assert!(shows("^X", 10), "nano did not start: {}", nano.screen());
    nano.type_text(text);
    assert!(shows(text, 5), "{}", nano.screen());
    nano.press("C-o");
    assert!(shows("File Name to Write", 5), "{}", nano.screen());
    nano.press("Enter");
    assert!(shows("Wrote", 5), "{}", nano.screen());
    nano.press("C-x");
    assert!(
        nano.ended_within(Duration::from_secs(5)),
        "nano did not exit"
    );
}

#[test]
fn refusals_reach_the_call_that_caused_them() {
    if !litanyfs::testing::prereq::programs(&["python3"]) {
        return;
    }
    let w = workspace();
    let m = mount(&w, &["--max-message-bytes", "1000"]);
    let dir = m.path(&format!("inbox/{A}"));
    let errno = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
    // Not UTF-8: the write says EILSEQ, and nothing is deposited.
    let mut f = std::fs::File::create(dir.join("bad")).unwrap();
    assert_eq!(
        f.write_all(&[0xff, 0xfe, b'x']).unwrap_err().raw_os_error(),
        Some(libc::EILSEQ)
    );
    // Python buffers its writes: the one write(2) happens at close(), which raises.
    let c = Command::new("python3")
        .arg("-c")
        .arg("import sys,errno\nf=open(sys.argv[1],'wb')\nf.write(b'\\xff\\xfe')\ntry:\n    f.close()\nexcept OSError as e:\n    sys.exit(0 if e.errno==errno.EILSEQ else 3)\nsys.exit(4)")
        .arg(dir.join("bad2"))
        .status()
        .unwrap();
    assert_eq!(c.code(), Some(0), "python close() should raise EILSEQ");
    drop(f);
    // Too big: the write that crosses the limit says EFBIG.
    let mut f = std::fs::File::create(dir.join("big")).unwrap();
    assert_eq!(
        f.write_all(&[b'a'; 1001]).unwrap_err().raw_os_error(),
        Some(libc::EFBIG)
    );
    drop(f);
    assert!(
        deposits(&w.f.inbox(A)).is_empty(),
        "{:?}",
        deposits(&w.f.inbox(A))
    );
    // A directory that names no agent: ENOENT at create, and nothing on disk.
    std::fs::create_dir_all(w.f.inbox("ghost")).unwrap();
    assert!(eventually(Duration::from_secs(3), || m
        .path("inbox/ghost")
        .exists()));
    assert_eq!(
        errno(std::fs::write(m.path("inbox/ghost/note"), b"hi")),
        Some(libc::ENOENT)
    );
    assert!(deposits(&w.f.inbox("ghost")).is_empty());
    // A deposited message is immutable.
    std::fs::write(dir.join("note"), b"first").unwrap();
    let (name, _) = deposits(&w.f.inbox(A)).pop().unwrap();
    let dep = dir.join(&name);
    assert_eq!(
        errno(
            std::fs::OpenOptions::new()
                .append(true)
                .open(&dep)
                .map(drop)
        ),
        Some(libc::EPERM)
    );
    assert_eq!(errno(std::fs::write(&dep, b"over")), Some(libc::EPERM));
    assert_eq!(errno(std::fs::remove_file(&dep)), Some(libc::EPERM));
    let c = std::ffi::CString::new(dep.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 0) }, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM)
    );
    // Elsewhere, the tree stays read-only.
    assert_eq!(
        errno(std::fs::write(m.path("steps-x"), b"x")),
        Some(libc::EROFS)
    );
    assert_eq!(
        errno(std::fs::create_dir(dir.join("sub"))),
        Some(libc::EROFS)
    );
    assert_eq!(
        errno(std::fs::write(m.path("inbox/new-agent-file"), b"x")),
        Some(libc::EROFS)
    );
    let log = m.log_text();
    for needle in [
        "not UTF-8",
        "exceeds the 1000-byte limit",
        "has no agent ref",
        "immutable",
    ] {
        assert!(log.contains(needle), "log lacks {needle:?}:\n{log}");
    }
}

#[test]
fn private_and_empty_files_are_never_deposited() {
    let w = workspace();
    let m = mount(&w, &[]);
    let dir = m.path(&format!("inbox/{A}"));
    std::fs::write(dir.join(".note.swp"), b"swap \xff binary").unwrap();
    std::fs::write(dir.join("4913"), b"").unwrap();
    std::fs::File::create(dir.join("empty")).unwrap();
    assert_eq!(
        std::fs::read(dir.join(".note.swp")).unwrap(),
        b"swap \xff binary"
    );
    // Closed empty, a message is refused: it leaves the listing at once (private
    // scratch stays), and its name still resolves for the alias grace.
    let listed = names(&dir);
    assert!(listed.contains(".note.swp"), "{listed:?}");
    assert!(
        !listed.contains("4913") && !listed.contains("empty"),
        "{listed:?}"
    );
    std::fs::remove_file(dir.join("4913")).unwrap();
    assert!(deposits(&w.f.inbox(A)).is_empty());
    // `touch f` then `>> f`: the append starts the message anew and sends it.
    let out = sh(&format!(
        "cd '{}' && touch later && echo appended >> later",
        dir.display()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), 1);
    assert_eq!(split(&d[0].1).1, b"appended\n");
    std::fs::remove_file(w.f.inbox(A).join(&d[0].0)).unwrap();
    // An editor's atomic save: write a private temp, rename it over the public name.
    std::fs::write(dir.join(".tmp-save"), b"saved atomically").unwrap();
    std::fs::rename(dir.join(".tmp-save"), dir.join("saved")).unwrap();
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), 1);
    assert_eq!(split(&d[0].1).1, b"saved atomically");
}

#[test]
fn sender_option_stamps_an_agent_with_its_name() {
    let w = workspace();
    let m = mount(&w, &["--sender", B]);
    std::fs::write(m.path(&format!("inbox/{A}/hi")), b"from beta").unwrap();
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), 1);
    assert!(d[0].0.starts_with(&format!("{B}-")), "{}", d[0].0);
    let (front, body) = split(&d[0].1);
    assert_eq!(front[0], format!("from: {B}"));
    assert_eq!(front[1], "from_name: Beta");
    assert_eq!(body, b"from beta");
    // Content cannot forge the frontmatter.
    std::fs::write(
        m.path(&format!("inbox/{A}/forge")),
        b"---\nfrom: someone\nterminal_ref: 0000\n---\nx",
    )
    .unwrap();
    let d = deposits(&w.f.inbox(A));
    let (front, body) = split(&d[1].1);
    assert_eq!(front[0], format!("from: {B}"));
    assert!(body.starts_with(b"---\nfrom: someone"));
}

#[test]
fn a_sigkill_mid_write_leaves_nothing_and_the_next_mount_starts_clean() {
    let w = workspace();
    let m = mount(&w, &[]);
    let mut f = std::fs::File::create(m.path(&format!("inbox/{A}/partial"))).unwrap();
    f.write_all(b"half a mess").unwrap();
    let pid = m.daemon_pid().unwrap();
    // SAFETY: the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(eventually(
        Duration::from_secs(5),
        || !common::mount::alive(pid)
    ));
    drop(f);
    assert!(
        std::fs::read_dir(w.f.inbox(A)).unwrap().next().is_none(),
        "something reached the inbox"
    );
    let out = common::mount::litanyfs(&[
        "mount".as_ref(),
        w.f.root().as_os_str(),
        m.mnt.as_os_str(),
        "--no-wake".as_ref(),
        "--log-file".as_ref(),
        m.log.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(names(&m.path(&format!("inbox/{A}"))).is_empty());
    std::fs::write(m.path(&format!("inbox/{A}/after")), b"whole").unwrap();
    assert_eq!(deposits(&w.f.inbox(A)).len(), 1);
}

#[test]
fn read_only_mounts_refuse_deposits() {
    let w = workspace();
    let m = mount(&w, &["--read-only"]);
    let e = std::fs::write(m.path(&format!("inbox/{A}/note")), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    // The kernel knows it is read-only: findmnt and /proc/mounts say `ro`.
    let mnt = m.mnt.display().to_string();
    let line = std::fs::read_to_string("/proc/mounts").unwrap();
    let opts = line
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[1] == mnt)
        .map(|f| f[3].to_string());
    assert!(
        opts.as_deref()
            .is_some_and(|o| o.split(',').any(|x| x == "ro")),
        "{mnt}: {opts:?}"
    );
    assert!(deposits(&w.f.inbox(A)).is_empty());
    let _: PathBuf = m.path("x");
}

#[test]
fn a_child_that_inherits_the_descriptor_does_not_deposit_half_a_message() {
    let w = workspace();
    let m = mount(&w, &[]);
    let mut f = std::fs::File::create(m.path(&format!("inbox/{A}/halves"))).unwrap();
    f.write_all(b"part 1, ").unwrap();
    // fork + exec closes the inherited (close-on-exec) copy: a close(2) the kernel
    // reports as a flush, from another process.
    for _ in 0..3 {
        assert!(Command::new("true").status().unwrap().success());
    }
    f.write_all(b"part 2").unwrap();
    drop(f);
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(split(&d[0].1).1, b"part 1, part 2");
}

#[test]
fn writing_the_same_name_twice_sends_two_messages() {
    let w = workspace();
    let m = mount(&w, &[]);
    let f = m.path(&format!("inbox/{A}/note"));
    let out = sh(&format!(
        "echo first > '{0}' && echo second > '{0}'",
        f.display()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Appending to what was just sent is refused: a message is immutable.
    let out = sh(&format!("echo third >> '{}'", f.display()));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = deposits(&w.f.inbox(A));
    let bodies: Vec<Vec<u8>> = d.iter().map(|(_, b)| split(b).1).collect();
    assert_eq!(bodies, [b"first\n".to_vec(), b"second\n".to_vec()]);
}

#[test]
fn a_fast_sender_is_never_refused_for_bookkeeping() {
    // More messages within the alias grace than drafts may be held at once: each is a
    // finished message, so none may fail (it once did with ENOSPC at the 1025th).
    let w = workspace();
    let m = mount(&w, &[]);
    let n = litanyfs::tree::drafts::MAX_DRAFTS + 200;
    for i in 0..n {
        std::fs::write(m.path(&format!("inbox/{A}/m{i}")), format!("message {i}\n"))
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
    }
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), n);
    let mut bodies: Vec<Vec<u8>> = d.iter().map(|(_, b)| split(b).1).collect();
    bodies.sort();
    let mut want: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("message {i}\n").into_bytes())
        .collect();
    want.sort();
    assert_eq!(bodies, want);
}

#[test]
fn messages_being_written_are_bounded_in_bytes_with_enospc_at_the_write() {
    // Many large messages held open at once: once they hold DRAFT_BYTES together, the
    // write that would go past it fails with ENOSPC (and nothing already written is lost).
    let w = workspace();
    let m = mount(&w, &[]);
    let chunk = vec![b'm'; 1_000_000];
    let mut open_files = Vec::new();
    let mut refused = None;
    for i in 0..litanyfs::tree::drafts::DRAFT_BYTES / chunk.len() + 2 {
        let mut f = std::fs::File::create(m.path(&format!("inbox/{A}/big{i}"))).unwrap();
        match f.write_all(&chunk) {
            Ok(()) => open_files.push(f),
            Err(e) => {
                refused = Some((i, e.raw_os_error()));
                break;
            }
        }
    }
    let (at, errno) = refused.expect("no write was refused");
    assert_eq!(errno, Some(libc::ENOSPC));
    assert_eq!(at, litanyfs::tree::drafts::DRAFT_BYTES / chunk.len());
    // Every message written in full is deposited in full when closed. Other tests spawn
    // children meanwhile, each holding all 64 descriptors until its exec closes them:
    // that close, a moment later, may be the last one.
    drop(open_files);
    eventually(Duration::from_secs(10), || {
        deposits(&w.f.inbox(A)).len() >= at
    });
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), at);
    assert!(d.iter().all(|(_, b)| split(b).1 == chunk));
}

#[test]
fn a_message_cut_short_by_a_refused_write_is_never_sent() {
    // `cat big > f` writes in pieces: the pieces before the limit succeed, the one that
    // crosses it is refused. The close must not send the part that got through (it once
    // deposited the first MiB of a 3 MB message); it answers the same errno, and the
    // name goes with it (no half message is left listed as if it were waiting).
    use std::os::fd::IntoRawFd;
    let w = workspace();
    let m = mount(&w, &["--max-message-bytes", "1000"]);
    let path = m.path(&format!("inbox/{A}/cut"));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&[b'a'; 600]).unwrap();
    let e = f.write_all(&[b'b'; 600]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
    // SAFETY: closing a descriptor we own, to see close(2)'s own answer.
    let closed = unsafe { libc::close(f.into_raw_fd()) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    assert_eq!((closed, errno), (-1, Some(libc::EFBIG)));
    assert!(
        deposits(&w.f.inbox(A)).is_empty(),
        "part of a message was sent"
    );
    assert!(!names(&m.path(&format!("inbox/{A}"))).contains("cut"));
    let refused = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(m.path("events.ndjson"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|e: &serde_json::Value| e["kind"] == "message-refused")
            .collect()
    };
    assert!(eventually(Duration::from_secs(10), || !refused().is_empty()));
    let refused = refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["why"], "too-large");
    assert_eq!(refused[0]["path"], format!("inbox/{A}/cut"));
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("exceeds the 1000-byte limit"),
        "{}",
        refused[0]
    );
    // Written again within the limit, it is sent whole.
    std::fs::write(&path, b"short and whole").unwrap();
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), 1);
    assert_eq!(split(&d[0].1).1, b"short and whole");
}

/// The `message-refused` events of a mount, as (name written, why).
fn refused_events(m: &Mounted) -> Vec<(String, String)> {
    std::fs::read_to_string(m.path("events.ndjson"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == "message-refused")
        .map(|e| {
            let path = e["path"].as_str().unwrap_or_default();
            let name = path.rsplit('/').next().unwrap_or_default().to_string();
            (name, e["why"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

#[test]
fn a_shell_redirection_reports_a_refused_message_and_nothing_stays_listed() {
    // bash ignores the result of close(2) on a redirection, so a refusal must come at
    // the write for `printf ... > f; echo $?` to show it. Each case: the command, then
    // whether bash must say it failed.
    let w = workspace();
    let m = mount(&w, &[]);
    let dir = m.path(&format!("inbox/{A}"));
    let bash = |script: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&dir)
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (script, name) in [
        (r#"printf "\xff\xfe bad\n" > bad; echo $?"#, "bad"),
        (r#"echo $'caf\xe9' > latin1; echo $?"#, "latin1"),
    ] {
        let (out, err) = bash(script);
        assert_ne!(out.trim(), "0", "{script}: bash saw success; stderr: {err}");
        assert!(
            err.contains("Invalid or incomplete multibyte or wide character"),
            "{script}: {err}"
        );
        assert!(!names(&dir).contains(name), "{name} still listed");
    }
    // Empty files: nothing sent, nothing left listed.
    let (out, err) = bash("touch x; : > y; echo $?");
    assert_eq!(out.trim(), "0", "{err}");
    let listed = names(&dir);
    assert!(!listed.contains("x") && !listed.contains("y"), "{listed:?}");
    assert!(deposits(&w.f.inbox(A)).is_empty());
    // Each is an event with its reason (once the history is in the log).
    let want: Vec<(String, String)> = [
        ("bad", "not-utf8"),
        ("latin1", "not-utf8"),
        ("x", "empty"),
        ("y", "empty"),
    ]
    .iter()
    .map(|(n, w)| (n.to_string(), w.to_string()))
    .collect();
    assert!(
        eventually(Duration::from_secs(10), || {
            let events = refused_events(&m);
            want.iter().all(|w| events.contains(w))
        }),
        "want {want:?} among {:?}",
        refused_events(&m)
    );
    // A character cut across two writes is fine; one cut by the end is refused at
    // the close, which a program that checks close (here Python) reports.
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT)\n\
             os.write(fd,b'caf\\xc3')\nos.write(fd,b'\\xa9\\n')\nos.close(fd)\n\
             fd=os.open(sys.argv[2],os.O_WRONLY|os.O_CREAT)\nos.write(fd,b'caf\\xc3')\n\
             try:\n    os.close(fd)\nexcept OSError as e:\n    print(e.errno)",
        )
        .arg(dir.join("whole"))
        .arg(dir.join("cut"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        libc::EILSEQ.to_string()
    );
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(split(&d[0].1).1, "café\n".as_bytes());
    assert!(!names(&dir).contains("cut"));
    let cut = ("cut".to_string(), "not-utf8".to_string());
    assert!(eventually(Duration::from_secs(10), || refused_events(&m)
        .contains(&cut)));
}

#[test]
fn an_agents_name_takes_a_message_as_its_id_does() {
    let w = workspace();
    let m = mount(&w, &[]);
    let out = sh(&format!(
        "cd '{}' && echo hi > inbox/Alpha/note && ls inbox",
        m.path("").display()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Listed by id only; the message is in the id's inbox, from the user.
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(listed, [A, B]);
    let d = deposits(&w.f.inbox(A));
    assert_eq!(d.len(), 1, "{d:?}");
    let (front, body) = split(&d[0].1);
    assert_eq!(front[0], "from: user");
    assert_eq!(body, b"hi\n");
    // A name two living agents wear is refused at the call, and the log says why.
    w.f.agent(B, Some("Alpha"), &[]).unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        std::fs::symlink_metadata(m.path("inbox/Alpha"))
            .err()
            .and_then(|e| e.raw_os_error())
            == Some(libc::ENOTUNIQ)
    }));
    let out = Command::new("bash")
        .arg("-c")
        .arg("echo hi > inbox/Alpha/again; echo $?")
        .current_dir(m.path(""))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Name not unique"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(deposits(&w.f.inbox(A)).len(), 1);
    let log = m.log_text();
    assert!(
        log.contains("the name Alpha is worn by 2 living agents"),
        "{log}"
    );
}
