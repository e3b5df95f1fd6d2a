//! Against the real `litany tool read_tool_output` (0.0.15, found by
//! [`crate::testing::prereq::litany`]): the same page bytes on stdout, the same
//! banner or refusal on stderr.

use super::{Rng, ToolOutputRecord, mixed_text};
use crate::paging::address::Address;
use crate::paging::reader::{CaptureKey, PageCache, PageError};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const AGENT: &str = "20261202T094226Z-0122ccc2";

/// What the tool printed: stdout, stderr, and whether it exited 0.
struct Answer {
    stdout: Vec<u8>,
    stderr: String,
    ok: bool,
}

fn ask(bin: &Path, ws: &Path, caller: &str, address: &str) -> Answer {
    let mut child = Command::new(bin)
        .args(["tool", "read_tool_output"])
        .env("LITANY_CONV_REPO", ws)
        .env("LITANY_CONV_BRANCH", caller)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn litany");
    let body = serde_json::json!({ "address": address }).to_string();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("litany runs");
    Answer {
        stdout: out.stdout,
        stderr: String::from_utf8(out.stderr).expect("utf8 stderr"),
        ok: out.status.success(),
    }
}

/// Our answer in the tool's shape: the whole read, including the steps
/// the filesystem layer owns (grammar, confinement, opening the file).
fn answer(cache: &PageCache, ws: &Path, caller: &str, text: &str) -> Answer {
    let refuse = |e: PageError| Answer {
        stdout: Vec::new(),
        stderr: format!("litany tool read_tool_output: {e}\n"),
        ok: false,
    };
    let address = match Address::parse(text) {
        Ok(a) => a,
        Err(e) => return refuse(e.into()),
    };
    if let Err(e) = PageError::confine(&address.record, caller) {
        return refuse(e);
    }
    let path = ws.join(address.record.to_string());
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(source) => {
            return refuse(PageError::NoRecord {
                record: path,
                source,
            });
        }
    };
    let key = CaptureKey::of(&file).expect("fstat");
    match cache.page(&file, key, &address) {
        Ok(page) => Answer {
            stdout: page.bytes,
            stderr: page.banner,
            ok: true,
        },
        Err(e) => refuse(e.with_record(&path)),
    }
}

fn write_record(ws: &Path, step: &str, tool: &str, bytes: &[u8]) -> String {
    let record = format!("steps/{AGENT}/{step}/tools/{tool}/output.json");
    let path = ws.join(&record);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, bytes).expect("write record");
    record
}

#[test]
fn pages_and_refusals_match_the_real_tool() {
    let Some(bin) = crate::testing::prereq::litany() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("repo.git")).expect("repo.git");
    let mut rng = Rng::new(2026);

    let ascii: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    let escapes = "tab\there \"quoted\" back\\slash \u{1} \u{1f} nul\u{0} / \r\n".repeat(200);
    let multibyte = mixed_text(&mut rng, 5000);
    let records = vec![
        ("001", "toolu_ascii", ToolOutputRecord::new(&ascii, "")),
        (
            "001",
            "toolu_escapes",
            ToolOutputRecord::new(&escapes, &escapes[..100]),
        ),
        (
            "002",
            "toolu_multibyte",
            ToolOutputRecord::new(&multibyte, &multibyte[..999]),
        ),
        ("7", "toolu_small", ToolOutputRecord::new("héllo\n", "")),
        ("0003", "toolu_empty", ToolOutputRecord::new("", "")),
    ];
    let cache = PageCache::with_checkpoint_interval(1 << 20, 1000);
    let mut compared = 0;
    for (step, tool, rec) in &records {
        let record = write_record(ws, step, tool, &rec.pretty());
        for (stream, text) in [("stdout", &rec.stdout), ("stderr", &rec.stderr)] {
            let len = text.len() as u64;
            let mut offsets = vec![0, 1, 2048, 4095, len / 2, len, len + 1];
            offsets.extend([len.saturating_sub(1), u64::MAX]);
            let mut addresses: Vec<String> = offsets
                .iter()
                .map(|o| format!("{record}#{stream}@{o}"))
                .collect();
            addresses.push(format!("{record}#{stream}@18446744073709551616"));
            addresses.push(format!("{record}#{stream}@+3"));
            for text in &addresses {
                let theirs = ask(&bin, ws, AGENT, text);
                let ours = answer(&cache, ws, AGENT, text);
                assert_eq!(ours.ok, theirs.ok, "{text}: {}", theirs.stderr);
                assert_eq!(ours.stderr, theirs.stderr, "{text}");
                assert!(ours.stdout == theirs.stdout, "{text}: page bytes differ");
                compared += 1;
            }
        }
    }

    // Records litany refuses: the same refusal, message and position.
    let good = String::from_utf8(ToolOutputRecord::new("x", "y").pretty()).expect("utf8");
    let mut invalid_utf8 = good.replace("\"x\"", "\"a\u{e9}b\"").into_bytes();
    let at = invalid_utf8.iter().position(|b| *b == 0xc3).expect("é");
    invalid_utf8[at] = 0xff;
    let refused: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        Vec::new(),
        good.replace("\"exit_code\": 0", "\"exit_code\": \"0\"")
            .into_bytes(),
        good.replace("\"exit_code\": 0", "\"exit_code\": -0")
            .into_bytes(),
        good.replace("\"exit_code\": 0", "\"exit_code\": 2147483648")
            .into_bytes(),
        good.replace("\"exit_code\": 0", "\"exit_code\": 1e400")
            .into_bytes(),
        good.replace("\"stdout\": \"x\"", "\"stdout\": 0.1")
            .into_bytes(),
        good.replace("\"stdout\": \"x\"", "\"stdout\": \"\\ud800\"")
            .into_bytes(),
        good.replace("\"stdout\": \"x\"", "\"stdout\": \"\\udc00\"")
            .into_bytes(),
        good.replace("\"stdout\": \"x\"", "\"stdout\": \"a\u{1}b\"")
            .into_bytes(),
        good.replace("\"stdout\": \"x\",", "").into_bytes(),
        good.replace(
            "\"stdout\": \"x\",",
            "\"stdout\": \"x\", \"stdout\": \"x\",",
        )
        .into_bytes(),
        format!("{good} trailing").into_bytes(),
        invalid_utf8,
        b"[\"a\",\"b\",0,\"c\"]".to_vec(),
        b"[\"a\",\"b\",0,\"c\",\"d\",\"e\"]".to_vec(),
    ];
    for (i, bytes) in refused.iter().enumerate() {
        let record = write_record(ws, "009", &format!("toolu_bad{i}"), bytes);
        let text = format!("{record}#stdout@0");
        let theirs = ask(&bin, ws, AGENT, &text);
        let ours = answer(&cache, ws, AGENT, &text);
        assert!(
            !theirs.ok,
            "litany accepted {:?}",
            String::from_utf8_lossy(bytes)
        );
        assert_eq!(
            ours.stderr,
            theirs.stderr,
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
        compared += 1;
    }

    // Records litany accepts in unusual shapes.
    let accepted: Vec<Vec<u8>> = vec![
        b"[\"out\",\"err\",-1,\"s\",\"e\"]".to_vec(),
        br#"{"extra":[1,{"x":"\udead"}],"std\u006fut":"o\ud83d\ude00","stderr":"","exit_code":5,"started_at":"","ended_at":""}"#.to_vec(),
    ];
    for (i, bytes) in accepted.iter().enumerate() {
        let record = write_record(ws, "010", &format!("toolu_odd{i}"), bytes);
        let text = format!("{record}#stdout@1");
        let theirs = ask(&bin, ws, AGENT, &text);
        assert!(theirs.ok, "litany refused: {}", theirs.stderr);
        let ours = answer(&cache, ws, AGENT, &text);
        assert_eq!(ours.stderr, theirs.stderr);
        assert_eq!(ours.stdout, theirs.stdout);
        compared += 1;
    }

    // Refusals that never reach a record.
    let record = &records[0];
    let path = format!("steps/{AGENT}/{}/tools/{}/output.json", record.0, record.1);
    for (caller, text) in [
        ("someone-else", format!("{path}#stdout@0")),
        (AGENT, format!("{path}#stdout")),
        (
            AGENT,
            format!("steps/{AGENT}/../tools/x/output.json#stdout@0"),
        ),
        (
            AGENT,
            format!("steps/{AGENT}/001/tools/absent/output.json#stdout@0"),
        ),
    ] {
        let theirs = ask(&bin, ws, caller, &text);
        let ours = answer(&cache, ws, caller, &text);
        assert!(!theirs.ok);
        assert_eq!(ours.stderr, theirs.stderr, "{text}");
        compared += 1;
    }
    eprintln!("compared {compared} answers with {}", bin.display());
}

/// The fuzz corpus of the `address` target: its seeds, and its dictionary's
/// tokens, each alone, in place of each part of a good address, before and
/// after one, and as a page name under a record.
fn corpus_shapes() -> Vec<String> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let under = format!("steps/{AGENT}/001/tools/toolu_1/");
    let mut shapes = std::collections::BTreeSet::new();
    let seeds = std::fs::read_dir(fuzz.join("seeds/address")).expect("fuzz/seeds/address");
    for e in seeds {
        let text = std::fs::read_to_string(e.expect("seed").path()).expect("a UTF-8 seed");
        shapes.insert(format!("{under}{text}"));
        shapes.insert(text);
    }
    let dict = std::fs::read_to_string(fuzz.join("dicts/address.dict")).expect("address.dict");
    let tokens: Vec<String> = dict
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let quoted = l.trim();
            assert!(
                quoted.len() >= 2 && quoted.starts_with('"') && quoted.ends_with('"'),
                "a dictionary line this test cannot read: {l:?}"
            );
            assert!(!quoted.contains('\\'), "an escape in {l:?}");
            quoted[1..quoted.len() - 1].to_string()
        })
        .collect();
    assert!(tokens.len() >= 10, "{tokens:?}");
    let parts = [
        "steps",
        AGENT,
        "001",
        "tools",
        "toolu_1",
        "output.json",
        "stdout",
        "0",
    ];
    let render = |p: &[&str]| {
        format!(
            "{}/{}/{}/{}/{}/{}#{}@{}",
            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
        )
    };
    let good = render(&parts);
    for token in &tokens {
        shapes.insert(token.clone());
        shapes.insert(format!("{token}{good}"));
        shapes.insert(format!("{good}{token}"));
        shapes.insert(format!("{under}{token}"));
        for at in 0..parts.len() {
            let mut p = parts;
            p[at] = token;
            shapes.insert(render(&p));
        }
    }
    shapes.into_iter().collect()
}

#[test]
fn the_grammar_agrees_with_the_real_tool_on_every_corpus_shape() {
    use super::address::{ODD_BUT_LEGAL, REFUSED, litany_parse};
    let Some(bin) = crate::testing::prereq::litany() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("repo.git")).expect("repo.git");
    let stdout: String = (0..900).map(|i| format!("line {i}\n")).collect();
    let record = ToolOutputRecord::new(&stdout, "é".repeat(3000).as_str()).pretty();
    let mut shapes = corpus_shapes();
    shapes.extend(REFUSED.iter().map(|(t, _)| t.to_string()));
    shapes.extend(ODD_BUT_LEGAL.iter().map(|t| t.to_string()));
    // Every record an accepted shape names exists, so the comparison reaches the page.
    for text in &shapes {
        if let Some((rec, ..)) = litany_parse(text)
            && !rec.contains('\0')
        {
            let path = ws.join(&rec);
            if std::fs::create_dir_all(path.parent().expect("parent")).is_ok() {
                std::fs::write(&path, &record).expect("write record");
            }
        }
    }
    let cache = PageCache::with_checkpoint_interval(1 << 20, 1000);
    let (mut accepted, mut refused) = (0, 0);
    for text in &shapes {
        // The caller is the agent segment as written (an agent may page only its own
        // captures), so that accepted shapes get past confinement.
        let caller = text
            .strip_prefix("steps/")
            .and_then(|r| r.split_once('/'))
            .map(|(a, _)| a)
            .filter(|a| !a.is_empty() && !a.contains('\0'))
            .unwrap_or(AGENT);
        let theirs = ask(&bin, ws, caller, text);
        let ours = answer(&cache, ws, caller, text);
        assert_eq!(ours.ok, theirs.ok, "{text:?}: {}", theirs.stderr);
        assert_eq!(ours.stderr, theirs.stderr, "{text:?}");
        assert!(ours.stdout == theirs.stdout, "{text:?}: page bytes differ");
        // The hand copy of litany's parser used by the generated tests says what the
        // real one says.
        let malformed = theirs.stderr.contains(": malformed address ");
        assert_eq!(
            litany_parse(text).is_none(),
            malformed,
            "{text:?}: the reference parser disagrees with litany: {}",
            theirs.stderr
        );
        if malformed {
            refused += 1;
        } else {
            accepted += 1;
        }
    }
    assert!(accepted >= 20 && refused >= 50, "{accepted} / {refused}");
    eprintln!(
        "{} shapes: litany accepted {accepted}, refused {refused}",
        shapes.len()
    );
}
