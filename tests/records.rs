//! Readable records against the real harness (litany 0.0.15 driven offline by
//! tests/harness/fake-bz): for every step litany completed, `response.md` shows each
//! committed text block byte for byte and each tool input equal as JSON; every agent's
//! `transcript.md` shows its entries in order, and every continuation address it shows
//! names a record that exists. Run on the shared workspace and on one built with the
//! adapter's `rich` scenario (thinking, several text blocks, non-ASCII tool input split
//! inside an escape, a retried attempt). Skips with a reason only where litany cannot be
//! found, and never under CI.

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
    static WS: OnceLock<Option<RealWorkspace>> = OnceLock::new();
    WS.get_or_init(|| {
        let Some(bin) = harness::litany_bin() else {
            assert!(
                !harness::in_ci(),
                "CI is set but the litany oracle is unavailable"
            );
            return None;
        };
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
        let ws =
            RealWorkspace::parse_summary(&String::from_utf8_lossy(&out.stdout)).expect("summary");
        Some(ws)
    })
    .as_ref()
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
