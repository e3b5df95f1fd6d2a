//! Readable records against the real harness (litany 0.0.15 driven offline by
//! tests/harness/fake-bz): for every step litany completed, `response.md` shows each
//! committed text block byte for byte and each tool input equal as JSON; every agent's
//! `transcript.md` shows its entries in order, and every continuation address it shows
//! names a record that exists. Run on the shared workspace and on one built with the
//! adapter's `rich` scenario (thinking, several text blocks, non-ASCII tool input split
//! inside an escape, a retried attempt). Without litany 0.0.15 they fail, unless
//! `LITANYFS_SKIP` names `litany` (see `litanyfs::testing::prereq`).

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::harness::{self, RealWorkspace};
use litanyfs::paging::CaptureKey;
use litanyfs::records::Records;
use litanyfs::workspace::refs::{GitEntry, Refs};
use serde_json::Value;

/// The shared workspace (default scenario).
fn plain() -> Option<&'static RealWorkspace> {
    harness::real_workspace()
}

static RICH_DIR: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

extern "C" fn remove_rich_dir() {
    if let Some(dir) = RICH_DIR.lock().ok().and_then(|mut d| d.take()) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A workspace built with `FAKE_BZ_SCENARIO=rich`, once per test process, removed at
/// exit.
fn rich() -> Option<&'static RealWorkspace> {
    static WS: OnceLock<RealWorkspace> = OnceLock::new();
    let bin = harness::litany_bin()?;
    Some(WS.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("litanyfs-records-")
            .tempdir()
            .expect("temp dir")
            .keep();
        if let Ok(mut d) = RICH_DIR.lock() {
            *d = Some(dir.clone());
            // SAFETY: registers a plain extern "C" fn with no captured state.
            unsafe { libc::atexit(remove_rich_dir) };
        }
        let out = Command::new("bash")
            .arg(harness::script_path())
            .arg(dir.join("rw"))
            .env("LITANY_BIN", &bin)
            .env("FAKE_BZ_SCENARIO", "rich")
            .env_remove("FAKE_BZ_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/real-workspace");
        assert!(
            out.status.success(),
            "real-workspace (rich) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        RealWorkspace::parse_summary(&String::from_utf8_lossy(&out.stdout)).expect("summary")
    }))
}

/// Every (agent, tip) of the workspace, from the refs.
fn agents(refs: &Refs) -> Vec<(String, git2::Oid)> {
    let snapshot = refs.snapshot().expect("refs snapshot");
    snapshot
        .agents
        .iter()
        .map(|(id, tip)| (id.clone(), *tip))
        .collect()
}

/// The step directories of `agent` that completed (those with a `meta.json`).
fn completed_steps(ws: &Path, agent: &str) -> Vec<PathBuf> {
    let mut steps: Vec<PathBuf> = std::fs::read_dir(ws.join("steps").join(agent))
        .expect("steps dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("meta.json").is_file())
        .collect();
    steps.sort();
    steps
}

/// `response.md` of a step, through the cache, as a closed file.
fn response_md(records: &Records, step: &Path) -> String {
    let file = File::open(step.join("response.json")).expect("response.json");
    let key = CaptureKey::of(&file).expect("fstat");
    let len = records.response_len(&file, key, true).expect("length");
    let bytes = records
        .response_read(&file, key, true, 0, len)
        .expect("read");
    assert_eq!(bytes.len() as u64, len, "{}: stat is exact", step.display());
    String::from_utf8(bytes).expect("response.md is UTF-8")
}

/// The committed model entry a step produced: the first `transcript NNN: <origin>`
/// commit after the step's starting commit whose entry is a model's `.json`.
fn committed_entry(refs: &Refs, tip: git2::Oid, step: &Path) -> (String, Value) {
    let meta: Value =
        serde_json::from_slice(&std::fs::read(step.join("meta.json")).expect("meta")).unwrap();
    let start = git2::Oid::from_str(meta["commit"].as_str().expect("commit")).unwrap();
    let (log, reached) = refs
        .first_parent_log(tip, &mut |id| id == start)
        .expect("log");
    assert_eq!(
        reached,
        Some(start),
        "{}: start on the branch",
        step.display()
    );
    for c in log.iter().rev() {
        let Some(rest) = c.summary.strip_prefix("transcript ") else {
            continue;
        };
        let (number, rest) = rest.split_once(": ").unwrap();
        let origin = rest.split(" [").next().unwrap();
        if origin == "tool" {
            continue;
        }
        let name = format!("{number}-{origin}.json");
        if let Some(GitEntry::Blob { oid, .. }) = refs.entry_at(tip, &["messages", &name]).unwrap()
        {
            let entry = serde_json::from_slice(&refs.blob(oid).unwrap()).unwrap();
            return (name, entry);
        }
    }
    panic!(
        "{}: no committed model entry after its start",
        step.display()
    );
}

/// Reads a fenced body at the start of `s`: (info string, body, rest after the fence).
fn fenced(s: &str) -> (&str, &str, &str) {
    let ticks = s.len() - s.trim_start_matches('`').len();
    assert!(ticks >= 3, "no fence at {:?}", &s[..s.len().min(40)]);
    let (open, rest) = s.split_once('\n').unwrap();
    let close = format!("\n{}\n\n", &open[..ticks]);
    let end = rest.find(&close).expect("closing fence");
    (&open[ticks..], &rest[..end], &rest[end + close.len()..])
}

/// Checks the last attempt of `md` against a committed model entry, block by block.
fn check_faithful(md: &str, entry: &Value, what: &str) -> usize {
    let last = md
        .rfind("# attempt ")
        .map(|i| &md[i..])
        .unwrap_or_else(|| panic!("{what}: no attempt in\n{md}"));
    let (_, mut rest) = last.split_once("\n\n").unwrap();
    let blocks = entry["content"].as_array().expect("content");
    for (i, block) in blocks.iter().enumerate() {
        let at = format!("{what}: block {i} in\n{last}");
        match block["type"].as_str().unwrap() {
            kind @ ("text" | "thinking") => {
                let want = format!("## {kind}\n\n{}\n\n", block["text"].as_str().unwrap());
                rest = rest.strip_prefix(&want).unwrap_or_else(|| panic!("{at}"));
            }
            "tool_use" => {
                let header = format!(
                    "## tool_use {} ({})\n\n",
                    block["name"].as_str().unwrap(),
                    block["id"].as_str().unwrap()
                );
                rest = rest.strip_prefix(&header).unwrap_or_else(|| panic!("{at}"));
                let (info, body, after) = fenced(rest);
                let input: Value = match info {
                    "sh" => serde_json::json!({ "command": body }),
                    "json" => serde_json::from_str(body).unwrap(),
                    other => panic!("{at}: fence {other}"),
                };
                assert_eq!(input, block["input"], "{at}");
                rest = after;
            }
            other => panic!("{at}: unexpected committed block {other}"),
        }
    }
    // Then the finish line, with the committed usage.
    let finish = rest
        .strip_prefix("## finish ")
        .unwrap_or_else(|| panic!("{what}: {rest}"));
    let line = finish.split('\n').next().unwrap();
    let shown: BTreeMap<String, Value> = line
        .split_once(" · usage ")
        .map(|(_, u)| {
            u.split(' ')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), serde_json::from_str(v).unwrap())
                })
                .collect()
        })
        .unwrap_or_default();
    let committed: BTreeMap<String, Value> = entry["usage"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    assert_eq!(shown, committed, "{what}: usage");
    blocks.len()
}

/// Every completed step of every agent of `r`; returns (steps, blocks) checked.
fn faithful_everywhere(r: &RealWorkspace) -> (usize, usize, String) {
    let refs = Refs::open(&r.ws.join("repo.git")).unwrap();
    let records = Records::new(64 << 20);
    let (mut steps, mut blocks, mut all) = (0, 0, String::new());
    for (agent, tip) in agents(&refs) {
        for step in completed_steps(&r.ws, &agent) {
            let md = response_md(&records, &step);
            let (name, entry) = committed_entry(&refs, tip, &step);
            let what = format!("{agent}/{} ({name})", step.display());
            blocks += check_faithful(&md, &entry, &what);
            steps += 1;
            all.push_str(&md);
        }
    }
    (steps, blocks, all)
}

#[test]
fn every_completed_step_shows_its_committed_blocks() {
    let Some(r) = plain() else { return };
    let (steps, blocks, _) = faithful_everywhere(r);
    assert!(
        steps >= 8 && blocks >= steps,
        "{steps} steps, {blocks} blocks"
    );
}

#[test]
fn rich_steps_show_thinking_many_blocks_non_ascii_input_and_the_retry() {
    let Some(r) = rich() else { return };
    let (steps, blocks, all) = faithful_everywhere(r);
    assert!(
        steps >= 8 && blocks >= 3 * steps,
        "{steps} steps, {blocks} blocks"
    );
    // The failed first attempt, then its retry.
    let first = response_md(
        &Records::new(1 << 20),
        &r.ws.join("steps").join(&r.root_a).join("001"),
    );
    assert!(
        first.starts_with(
            "# attempt 1 · id msg_rich_flaky · model fake\n\n## text\n\nThis attempt is cut \n\n\
             ## error transport: connection reset by fake-bz\n\n\
             # attempt 2 · id msg_rich_tools · model fake\n\n## thinking\n\n"
        ),
        "{first}"
    );
    assert!(first.contains(
        "## tool_use bash (toolu_rich3)\n\n```sh\necho 'größe: 20 €' && printf 'ünï\n'\n```\n\n"
    ));
    assert!(all.contains("## tool_use read_file (toolu_rich4)\n\n```json\n"));
}

/// The `[... truncated …]` marker lines of a text, parsed.
fn markers(text: &str) -> Vec<harness::Marker> {
    text.lines().filter_map(harness::parse_marker).collect()
}

fn check_transcripts(r: &RealWorkspace) -> usize {
    let refs = Refs::open(&r.ws.join("repo.git")).unwrap();
    let records = Records::new(64 << 20);
    let mut addresses = 0;
    for (agent, tip) in agents(&refs) {
        let md = records.transcript(&refs, tip).unwrap();
        let md = std::str::from_utf8(&md).expect("transcript.md is UTF-8");
        // One section per entry, in number order.
        let names = harness::git(
            &r.ws,
            &[
                "ls-tree",
                "--name-only",
                &format!("agents/{agent}"),
                "messages/",
            ],
        );
        let mut want: Vec<(u32, String)> = String::from_utf8_lossy(&names)
            .lines()
            .map(|l| {
                let name = l.trim_start_matches("messages/").to_string();
                (name.split('-').next().unwrap().parse().unwrap(), name)
            })
            .collect();
        want.sort();
        let headers: Vec<&str> = md.lines().filter(|l| l.starts_with("## ")).collect();
        let shown: Vec<String> = headers
            .iter()
            .map(|h| {
                let mut parts = h[3..].split(' ');
                format!("{}-{}", parts.next().unwrap(), parts.next().unwrap())
            })
            .collect();
        let want_stems: Vec<String> = want
            .iter()
            .map(|(_, n)| n.rsplit_once('.').unwrap().0.to_string())
            .collect();
        assert_eq!(shown, want_stems, "{agent}: entries in order\n{md}");
        assert!(
            headers.iter().all(|h| !h.contains("time unknown")),
            "{agent}: every entry is timed: {headers:?}"
        );
        // Messages carry their frontmatter in the header; bodies and model text verbatim.
        for (_, name) in &want {
            let blob = harness::show(&r.ws, &format!("agents/{agent}:messages/{name}")).unwrap();
            let text = String::from_utf8(blob).unwrap();
            if let Some(rest) = name.strip_suffix(".md") {
                let (front, body) = text[4..].split_once("\n---\n").unwrap();
                let header = headers
                    .iter()
                    .find(|h| h[3..].starts_with(&rest.replacen('-', " ", 1)))
                    .unwrap();
                for line in front.lines() {
                    assert!(header.contains(line), "{agent}: {header} lacks {line}");
                }
                assert!(
                    md.contains(&format!("\n\n{body}\n\n")),
                    "{agent}: {name} body"
                );
            } else {
                let entry: Value = serde_json::from_str(&text).unwrap();
                let blocks = entry
                    .get("content")
                    .and_then(Value::as_array)
                    .or(entry.as_array())
                    .unwrap();
                for b in blocks {
                    for key in ["text"] {
                        if let Some(t) = b[key].as_str() {
                            assert!(md.contains(t), "{agent}: {name} text");
                        }
                    }
                    for item in b["content"].as_array().into_iter().flatten() {
                        let t = item["text"].as_str().unwrap();
                        assert!(
                            md.contains(&format!("\n\n{t}\n\n")),
                            "{agent}: {name} result"
                        );
                    }
                }
            }
        }
        // Every continuation address names a record that exists, within its stream.
        for m in markers(md) {
            let Some(address) = m.address else { continue };
            let a = harness::split_address(&address).expect("address grammar");
            let record = r.ws.join(&a.record);
            let capture: Value = serde_json::from_slice(
                &std::fs::read(&record)
                    .unwrap_or_else(|e| panic!("{agent}: {address}: {}: {e}", record.display())),
            )
            .unwrap();
            let stream = capture[&a.stream].as_str().expect("stream");
            assert_eq!(stream.len(), m.total, "{address}");
            assert!(a.offset <= stream.len(), "{address}");
            addresses += 1;
        }
    }
    addresses
}

/// For every step litany completed in one attempt, `transcript.md` at the step's start
/// with the step streaming (its whole `response.json`) is exactly the transcript at the
/// commit of its model entry but for the state the entry's time replaces: the commit only
/// overwrote the state, in place. The fake's whole adapter stream, real commits.
fn check_streamed_entries(r: &RealWorkspace) -> usize {
    use litanyfs::records::live::{Facts, ModelFacts};
    const STREAMING: &str = "streaming, in flight";
    let refs = Refs::open(&r.ws.join("repo.git")).unwrap();
    let records = Records::new(64 << 20);
    let mut checked = 0;
    for (agent, tip) in agents(&refs) {
        for step in completed_steps(&r.ws, &agent) {
            let raw = std::fs::read(step.join("response.json")).unwrap();
            if raw
                .split(|b| *b == b'\n')
                .any(|l| l.starts_with(br#"{"type":"error""#))
            {
                continue; // a retry: its failed attempt is in the stream, not the entry
            }
            let meta: Value =
                serde_json::from_slice(&std::fs::read(step.join("meta.json")).unwrap()).unwrap();
            let start = git2::Oid::from_str(meta["commit"].as_str().unwrap()).unwrap();
            let (name, _) = committed_entry(&refs, tip, &step);
            let (log, _) = refs.first_parent_log(tip, &mut |id| id == start).unwrap();
            let number = name.split('-').next().unwrap();
            let commit = log
                .iter()
                .find(|c| c.summary.starts_with(&format!("transcript {number}: ")))
                .unwrap()
                .id;
            let file = File::open(step.join("response.json")).unwrap();
            let key = CaptureKey::of(&file).unwrap();
            let origin = name.split_once('-').unwrap().1.trim_end_matches(".json");
            let facts = Facts {
                model: Some(ModelFacts {
                    step: step.file_name().unwrap().to_string_lossy().into_owned(),
                    origin: origin.to_string(),
                    response: Some((file, key)),
                    live: true,
                    closed: true,
                }),
                ..Facts::default()
            };
            let view = records.transcript_view(&refs, start, facts).unwrap();
            let mut live = Vec::new();
            records.view_read(&view, 0, view.len(), &mut live).unwrap();
            let live = String::from_utf8(live).unwrap();
            let committed = records.transcript(&refs, commit).unwrap();
            let committed = std::str::from_utf8(&committed).unwrap();
            let at = live
                .rfind(STREAMING)
                .unwrap_or_else(|| panic!("{}: {live}", step.display()));
            let mut expect = live.clone();
            expect.replace_range(
                at..at + STREAMING.len(),
                &committed[at..at + STREAMING.len()],
            );
            assert_eq!(
                expect,
                committed,
                "{agent} {}: the stream is the entry",
                step.display()
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn every_step_streamed_is_the_entry_its_commit_adds() {
    let Some(r) = plain() else { return };
    assert!(check_streamed_entries(r) >= 8);
    let Some(r) = rich() else { return };
    assert!(check_streamed_entries(r) > 0);
}

#[test]
fn every_transcript_shows_its_entries_and_every_address_exists() {
    let Some(r) = plain() else { return };
    let shown = check_transcripts(r);
    assert!(shown >= r.marker_addresses().len() && shown > 0, "{shown}");
}

#[test]
fn rich_transcripts_too() {
    let Some(r) = rich() else { return };
    assert!(check_transcripts(r) > 0);
}

#[test]
fn a_real_response_json_appended_byte_by_byte_only_grows() {
    let Some(r) = rich() else { return };
    let bytes =
        std::fs::read(r.ws.join("steps").join(&r.root_a).join("001/response.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("response.json");
    let mut out = File::create(&path).unwrap();
    let records = Records::with_checkpoint_interval(1 << 20, 64);
    let mut shown: Vec<u8> = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        use std::io::Write;
        out.write_all(&[*b]).unwrap();
        // Every byte inside a line's first multi-byte character, and every line end.
        if *b != b'\n' && i % 7 != 0 && (*b & 0xc0) != 0x80 {
            continue;
        }
        let file = File::open(&path).unwrap();
        let key = CaptureKey::of(&file).unwrap();
        let len = records.response_len(&file, key, false).unwrap();
        let now = records.response_read(&file, key, false, 0, len).unwrap();
        assert!(now.starts_with(&shown), "append-only at byte {i}");
        assert!(
            std::str::from_utf8(&now).is_ok(),
            "complete UTF-8 at byte {i}"
        );
        shown = now;
    }
    let file = File::open(&path).unwrap();
    let key = CaptureKey::of(&file).unwrap();
    let fresh = Records::new(1 << 20);
    let len = fresh.response_len(&file, key, false).unwrap();
    assert_eq!(
        shown,
        fresh.response_read(&file, key, false, 0, len).unwrap()
    );
}

// ---------------------------------------------------------------------------------------
// The same views through a real mount.
// ---------------------------------------------------------------------------------------

/// Through the mount, every completed step's `response.md` holds the blocks litany
/// committed, is exactly as long as `stat` says, and reaches its step through `latest`
/// for the highest one; every continuation address in every `transcript.md` opens.
#[test]
fn through_the_mount_response_md_and_transcript_md_hold_what_litany_committed() {
    let Some(r) = plain() else { return };
    let m = common::mount::Mounted::new(&r.ws);
    let refs = Refs::open(&r.ws.join("repo.git")).unwrap();
    let (mut steps, mut addresses) = (0, 0);
    for (agent, tip) in agents(&refs) {
        for step in completed_steps(&r.ws, &agent) {
            let rel = step.strip_prefix(&r.ws).unwrap();
            let md_path = m.mnt.join(rel).join("response.md");
            let md = std::fs::read(&md_path).unwrap();
            assert_eq!(
                std::fs::metadata(&md_path).unwrap().len(),
                md.len() as u64,
                "{}: stat is exact",
                md_path.display()
            );
            let md = String::from_utf8(md).unwrap();
            let (name, entry) = committed_entry(&refs, tip, &step);
            check_faithful(&md, &entry, &format!("{agent}/{} ({name})", rel.display()));
            steps += 1;
        }
        let transcript = std::fs::read_to_string(m.path(&format!("steps/{agent}/transcript.md")))
            .unwrap_or_else(|e| panic!("{agent}: transcript.md: {e}"));
        for marker in markers(&transcript) {
            let Some(address) = marker.address else {
                continue;
            };
            // `cat` follows the address verbatim under the mount.
            let page = std::fs::read(m.mnt.join(&address))
                .unwrap_or_else(|e| panic!("{agent}: {address}: {e}"));
            assert!(page.len() <= 4096, "{address}");
            addresses += 1;
        }
        let latest = std::fs::read_link(m.path(&format!("steps/{agent}/latest"))).unwrap();
        assert!(
            m.path(&format!("steps/{agent}"))
                .join(&latest)
                .join("request.json")
                .exists(),
            "{agent}: latest -> {latest:?}"
        );
    }
    assert!(steps >= 8, "{steps} steps");
    assert!(
        addresses > 0,
        "no continuation address in any transcript.md"
    );
}

/// `tail -f response.md`, in a real process, while a response.json grows line by line
/// (one line cut inside a multi-byte character): what it prints is the final rendering,
/// so nothing shown ever changed, and the words arrive while the step streams.
#[test]
fn tail_f_of_response_md_follows_a_growing_response() {
    let Some(r) = rich() else { return };
    let source =
        std::fs::read(r.ws.join("steps").join(&r.root_a).join("001/response.json")).unwrap();
    let t = tempfile::tempdir().unwrap();
    let f = litanyfs::fixture::Fixture::create(
        &t.path().join("ws"),
        litanyfs::workspace::refs::Flavour::Litany,
    )
    .unwrap();
    let id = "20261202T094226Z-0122ccc2";
    f.agent(id, None, &[]).unwrap();
    f.step(id, 1, &[("response.json", b"")]).unwrap();
    let backing = f.root().join(format!("steps/{id}/001/response.json"));
    let m = common::mount::Mounted::new(f.root());
    let md = m.path(&format!("steps/{id}/latest/response.md"));
    let mut tail = Command::new("tail")
        .args(["-c", "+1", "-f", "-s", "0.1"])
        .arg(&md)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = tail.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut out = std::fs::OpenOptions::new()
        .append(true)
        .open(&backing)
        .unwrap();
    let mut printed = Vec::new();
    let lines: Vec<&[u8]> = source.split_inclusive(|b| *b == b'\n').collect();
    for (i, line) in lines.iter().enumerate() {
        use std::io::Write;
        // Cut a line inside its first multi-byte character, if it has one.
        let cut = line
            .iter()
            .position(|b| *b >= 0xc0)
            .map_or(line.len(), |p| p + 1);
        out.write_all(&line[..cut]).unwrap();
        out.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        out.write_all(&line[cut..]).unwrap();
        out.flush().unwrap();
        while let Ok(chunk) = rx.recv_timeout(std::time::Duration::from_millis(300)) {
            printed.extend_from_slice(&chunk);
        }
        if i == lines.len() / 2 {
            // Half the response is written: its words show before the rest is.
            litanyfs::testing::wait::wait_for(
                || {
                    while let Ok(chunk) = rx.try_recv() {
                        printed.extend_from_slice(&chunk);
                    }
                    String::from_utf8_lossy(&printed).contains("## text")
                },
                std::time::Duration::from_secs(20),
                "tail -f to show text while the response streams",
            );
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let want = std::fs::read(&md).unwrap();
    while printed.len() < want.len() && std::time::Instant::now() < deadline {
        if let Ok(chunk) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            printed.extend_from_slice(&chunk);
        }
    }
    let _ = tail.kill();
    let _ = tail.wait();
    assert_eq!(
        String::from_utf8_lossy(&printed),
        String::from_utf8_lossy(&want),
        "tail -f printed something the final response.md does not hold"
    );
    assert!(std::str::from_utf8(&printed).is_ok(), "only complete UTF-8");
}
