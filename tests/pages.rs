//! Continuation addresses under the mount, against the real `read_tool_output`: every
//! `output.json` the harness wrote, both streams, at the offsets that matter; the
//! `user.litany.*` attributes against the tool's banner; and the whole-stream files.

mod common;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::harness::{self, RealWorkspace};
use common::mount::Mounted;

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and a writable buffer of the given length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

fn records(ws: &Path) -> Vec<PathBuf> {
    let out = Command::new("find")
        .arg(ws.join("steps"))
        .args(["-name", "output.json"])
        .output()
        .unwrap();
    let mut v: Vec<PathBuf> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| Path::new(l).strip_prefix(ws).unwrap().to_path_buf())
        .collect();
    v.sort();
    v
}

fn streams(ws: &Path, record: &Path) -> [(String, Vec<u8>); 2] {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.join(record)).unwrap()).unwrap();
    ["stdout", "stderr"].map(|s| (s.to_string(), v[s].as_str().unwrap().as_bytes().to_vec()))
}

#[test]
fn every_page_matches_read_tool_output() {
    let Some(r) = harness::real_workspace() else {
        return;
    };
    let m = Mounted::new(&r.ws);
    let recs = records(&r.ws);
    assert!(recs.len() >= 3, "{recs:?}");
    let mut compared = 0;
    for record in &recs {
        let agent = record
            .components()
            .nth(1)
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        for (stream, bytes) in streams(&r.ws, record) {
            let len = bytes.len() as u64;
            let mut offsets = vec![
                0,
                1,
                2048,
                4095,
                len / 2,
                len.saturating_sub(1),
                len,
                len + 1,
                len + 4096,
                u64::MAX,
            ];
            offsets.sort();
            offsets.dedup();
            for off in offsets {
                let address = format!("{}#{stream}@{off}", record.display());
                let (code, out, err) = harness::read_tool_output(&r.ws, agent, &address);
                let page = m.mnt.join(&address);
                let seen = std::fs::read(&page);
                if code == 0 {
                    assert_eq!(seen.as_deref().ok(), Some(out.as_slice()), "{address}");
                    let meta = std::fs::metadata(&page).unwrap();
                    assert_eq!(meta.len(), out.len() as u64, "{address}");
                    let banner = err.trim_end_matches('\n');
                    assert_eq!(
                        xattr(&page, "user.litany.banner").as_deref(),
                        Some(banner.as_bytes()),
                        "{address}"
                    );
                    assert_eq!(
                        xattr(&page, "user.litany.length"),
                        Some(len.to_string().into_bytes()),
                        "{address}"
                    );
                    let next = banner
                        .split_once("continue with address ")
                        .map(|(_, a)| a.as_bytes().to_vec());
                    assert_eq!(xattr(&page, "user.litany.next"), next, "{address}");
                } else {
                    let e = seen.expect_err(&address);
                    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{address}: {err}");
                }
                compared += 1;
            }
        }
    }
    assert!(compared > 40);
    // The refusals reach the log with the tool's own reason, the true length included.
    let log = m.log_text();
    assert!(log.contains("is past the end of"), "{log}");
}

#[test]
fn every_printed_address_can_be_followed_with_cat() {
    let Some(r) = harness::real_workspace() else {
        return;
    };
    let m = Mounted::new(&r.ws);
    let addrs = r.marker_addresses();
    assert!(
        addrs.len() >= 2,
        "the fake adapter's captures are cut: {addrs:?}"
    );
    for a in &addrs {
        let (code, out, _) = harness::read_tool_output(&r.ws, &a.agent_id, &a.address);
        assert_eq!(code, 0, "{}", a.address);
        let cat = Command::new("cat")
            .arg(m.mnt.join(&a.address))
            .output()
            .unwrap();
        assert!(cat.status.success(), "{}", a.address);
        assert_eq!(cat.stdout, out, "{}", a.address);
        // Follow the chain to the end of the stream, as the tool's banners say.
        let mut next = Some(a.address.clone());
        let mut pages = 0;
        let mut joined = Vec::new();
        while let Some(addr) = next {
            let page = m.mnt.join(&addr);
            joined.extend(std::fs::read(&page).unwrap());
            next = xattr(&page, "user.litany.next").map(|v| String::from_utf8(v).unwrap());
            pages += 1;
            assert!(pages < 10_000);
        }
        let stream = m
            .mnt
            .join(Path::new(&a.record).parent().unwrap())
            .join(&a.stream);
        let whole = std::fs::read(&stream).unwrap();
        assert_eq!(joined, whole[a.offset..], "{}", a.address);
    }
}

#[test]
fn stream_files_hold_the_decoded_streams() {
    let Some(r) = harness::real_workspace() else {
        return;
    };
    let m = Mounted::new(&r.ws);
    for record in records(&r.ws) {
        let dir = m.mnt.join(record.parent().unwrap());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert!(
            names.contains(&"stdout".to_string()) && names.contains(&"stderr".to_string()),
            "{names:?}"
        );
        assert!(
            !names.iter().any(|n| n.contains('#')),
            "pages are never listed: {names:?}"
        );
        for (stream, bytes) in streams(&r.ws, &record) {
            let path = dir.join(&stream);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "{record:?} {stream}");
            let tail = Command::new("tail")
                .args(["-c", "+2049"])
                .arg(&path)
                .output()
                .unwrap();
            assert_eq!(
                tail.stdout,
                bytes[bytes.len().min(2048)..],
                "{record:?} {stream}"
            );
            let out = m.mnt.join(&record);
            assert_eq!(
                xattr(&out, &format!("user.litany.length.{stream}")),
                Some(bytes.len().to_string().into_bytes())
            );
        }
    }
}

#[test]
fn pages_follow_a_rewritten_record_and_lernie_shapes() {
    let Some(bin) = harness::litany_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let r = RealWorkspace::build_with(&bin, &dir.path().join("rw")).unwrap();
    let m = Mounted::new(&r.ws);
    let record = records(&r.ws).into_iter().next().unwrap();
    let addr = format!("{}#stdout@0", record.display());
    let before = std::fs::read(m.mnt.join(&addr)).unwrap();
    // The harness rewrites records through a temp file and a rename; so do we.
    let tmp = r.ws.join(format!("{}.tmp", record.display()));
    let v = serde_json::json!({"stdout": "rewritten", "stderr": "", "exit_code": 0, "started_at": "2026-12-02T09:42:30Z", "ended_at": "2026-12-02T09:42:31Z"});
    std::fs::write(&tmp, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    std::fs::rename(&tmp, r.ws.join(&record)).unwrap();
    assert!(common::mount::eventually(
        std::time::Duration::from_secs(3),
        || std::fs::read(m.mnt.join(&addr)).ok().as_deref() == Some(b"rewritten".as_slice())
    ));
    assert_ne!(before, b"rewritten");
    let agent = record
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap();
    let (_, out, _) = harness::read_tool_output(&r.ws, agent, &addr);
    assert_eq!(out, b"rewritten");
    // A record that appears for the first time is paged too.
    let fresh = record
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("toolu_new/output.json");
    std::fs::create_dir_all(r.ws.join(fresh.parent().unwrap())).unwrap();
    std::fs::write(r.ws.join(&fresh), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    assert_eq!(
        std::fs::read(m.mnt.join(format!("{}#stdout@3", fresh.display()))).unwrap(),
        b"ritten"
    );
}

#[test]
fn hostile_addresses_are_enoent() {
    let Some(r) = harness::real_workspace() else {
        return;
    };
    let m = Mounted::new(&r.ws);
    let record = records(&r.ws).into_iter().next().unwrap();
    let dir = m.mnt.join(record.parent().unwrap());
    for bad in [
        "output.json#stdin@0",
        "output.json#stdout",
        "output.json@0",
        "output.json#stdout@x",
        "output.json#stdout@-1",
        "output.json#stdout@99999999999999999999999",
        "output.json#stdout@0#stderr@0",
    ] {
        let e = std::fs::read(dir.join(bad)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{bad}");
    }
    // `..` never escapes: the kernel resolves it before we see a name.
    assert!(std::fs::read(dir.join("../../../../../../etc/passwd")).is_err());
}
