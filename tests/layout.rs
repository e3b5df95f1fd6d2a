//! The shape of the source tree, held to what issue 30 asks of it: no import circle
//! between the crate's top-level modules (a module that uses another never gets used by
//! it, directly or round a longer loop), so the crate reads in one direction; and no
//! source file outside tests of [`MAX_LINES`] lines or more, so each can be read whole.
//!
//! A top-level module is `src/<m>.rs` or `src/<m>/`. Module `a` uses `b` when code of
//! `a` outside tests names `crate::b` (or reaches `b` through `super::`). Comments,
//! string literals and `#[cfg(test)]` items are not code for this purpose: a unit test
//! may build its fixtures from anywhere. Run alone with `cargo test --test layout`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The length a source file stays under (tests aside).
const MAX_LINES: usize = 1000;

/// One use of a module by another: where it is, for the failure message.
type Uses = BTreeMap<(String, String), BTreeSet<String>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out
}

/// The crate's top-level modules: `src/<m>.rs` and `src/<m>/` (the crate roots aside).
fn top_level_modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            match name.strip_suffix(".rs") {
                Some("lib" | "main") => None,
                Some(stem) => Some(stem.to_string()),
                None => p.is_dir().then_some(name),
            }
        })
        .collect()
}

/// A test-only file: `tests.rs`, or anything under a `tests/` directory of `src/`.
fn is_test_file(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs") || rel.iter().any(|c| c == "tests")
}

/// `text` with comments, string and character literals blanked out (to spaces, so
/// offsets stay), leaving the code.
fn code_only(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if b[i] == b'r' && matches!(b.get(i + 1), Some(b'#' | b'"')) && !ident_byte(b, i) {
            // A raw string: r"…", r#"…"#, …
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let start = i + 2 + hashes;
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| start + n + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 3..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|n| i + 3 + n)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end + 1);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Whether `b[i - 1]` continues an identifier (so `b[i]` is inside one).
fn ident_byte(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// `code` with every `#[cfg(test)]` item blanked out: up to its `;`, or through the
/// block its first `{` opens.
fn without_test_items(mut code: Vec<u8>) -> Vec<u8> {
    const ATTR: &[u8] = b"#[cfg(test)]";
    let mut from = 0;
    while let Some(at) = code[from..]
        .windows(ATTR.len())
        .position(|w| w == ATTR)
        .map(|n| from + n)
    {
        let mut j = at + ATTR.len();
        while j < code.len() && code[j] != b';' && code[j] != b'{' {
            j += 1;
        }
        if j < code.len() && code[j] == b'{' {
            let mut depth = 0;
            while j < code.len() {
                match code[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        let end = (j + 1).min(code.len());
        for c in &mut code[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    code
}

/// The identifier starting at `b[i]`, if one does.
fn ident_at(b: &[u8], i: usize) -> Option<&str> {
    let len = b[i..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count();
    (len > 0).then(|| std::str::from_utf8(&b[i..i + len]).unwrap())
}

/// The first identifiers of the paths in a `{…}` group starting at `b[i]` (`{a, b::c}`
/// gives `a` and `b`), one level deep.
fn group_heads(b: &[u8], i: usize) -> Vec<&str> {
    let mut heads = Vec::new();
    let (mut j, mut depth, mut expect) = (i + 1, 1, true);
    while j < b.len() && depth > 0 {
        match b[j] {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b',' if depth == 1 => expect = true,
            c if expect && depth == 1 && (c.is_ascii_alphabetic() || c == b'_') => {
                heads.extend(ident_at(b, j));
                expect = false;
            }
            _ => {}
        }
        j += 1;
    }
    heads
}

/// The crate-level names `code` reaches, with the line of each: `crate::x`, and
/// `super::…::x` where the `super`s climb from a module `depth` levels down to the root.
fn crate_level_names(code: &[u8], depth: usize) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let line_of = |at: usize| code[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let mut i = 0;
    while i < code.len() {
        if ident_byte(code, i)
            || !(code[i..].starts_with(b"crate::") || code[i..].starts_with(b"super::"))
        {
            i += 1;
            continue;
        }
        let start = i;
        let mut climbs = if code[i..].starts_with(b"crate::") {
            i += "crate::".len();
            depth
        } else {
            0
        };
        while code[i..].starts_with(b"super::") {
            climbs += 1;
            i += "super::".len();
        }
        if climbs == depth {
            if code.get(i) == Some(&b'{') {
                for head in group_heads(code, i) {
                    found.push((head.to_string(), line_of(start)));
                }
            } else if let Some(name) = ident_at(code, i) {
                found.push((name.to_string(), line_of(start)));
            }
        }
        i += 1;
    }
    found
}

/// How deep the module a file holds sits: `src/a.rs` and `src/a/mod.rs` are 1,
/// `src/a/b.rs` is 2.
fn module_depth(rel: &Path) -> usize {
    let parts = rel.iter().count();
    if rel.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

/// Who uses whom among the top-level modules, with where.
fn module_uses() -> Uses {
    let src = src();
    let modules = top_level_modules();
    let mut uses = Uses::new();
    for path in rust_files(&src) {
        let rel = path.strip_prefix(&src).unwrap().to_path_buf();
        let Some(top) = rel.iter().next().and_then(|c| c.to_str()) else {
            continue;
        };
        let top = top.strip_suffix(".rs").unwrap_or(top).to_string();
        if !modules.contains(&top) || is_test_file(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = without_test_items(code_only(&text));
        for (name, line) in crate_level_names(&code, module_depth(&rel)) {
            if name != top && modules.contains(&name) {
                uses.entry((top.clone(), name))
                    .or_default()
                    .insert(format!("src/{}:{line}", rel.display()));
            }
        }
    }
    uses
}

/// A circle in `uses`, as the modules round it (the first repeated at the end), if any.
fn find_circle(uses: &Uses) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in uses.keys() {
        next.entry(a).or_default().push(b);
    }
    // Depth-first search; `path` is the current chain, `done` what has no circle below.
    fn visit<'a>(
        m: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            let mut circle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            circle.push(m.to_string());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m);
        for n in next.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    for m in next.keys() {
        if let Some(c) = visit(m, &next, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let uses = module_uses();
    // The check sees the crate as it is: the request path through the layers.
    for (a, b) in [("fs", "tree"), ("tree", "workspace"), ("tree", "views")] {
        assert!(
            uses.contains_key(&(a.to_string(), b.to_string())),
            "{a} no longer uses {b}: is the parse still finding uses? {uses:#?}"
        );
    }
    if let Some(circle) = find_circle(&uses) {
        let mut why = String::new();
        for pair in circle.windows(2) {
            let at = &uses[&(pair[0].clone(), pair[1].clone())];
            why += &format!("\n  {} uses {}: {at:?}", pair[0], pair[1]);
        }
        panic!("import circle: {}{why}", circle.join(" -> "));
    }
}

#[test]
fn every_source_file_outside_tests_is_under_the_line_limit() {
    let src = src();
    let files = rust_files(&src);
    assert!(
        files.len() > 50,
        "found only {} files under {src:?}",
        files.len()
    );
    let long: Vec<String> = files
        .iter()
        .filter(|p| !is_test_file(p.strip_prefix(&src).unwrap()))
        .filter_map(|p| {
            let lines = std::fs::read_to_string(p).unwrap().lines().count();
            (lines >= MAX_LINES).then(|| format!("{} ({lines} lines)", p.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these along a seam in the code: {long:?}"
    );
}

#[test]
fn the_parse_finds_uses_and_circles() {
    let code = code_only(
        "use crate::{a, b::c};\n// crate::d\nlet s = \"crate::e\";\nuse super::super::f;\n\
         #[cfg(test)]\nmod tests { use crate::g; }\nfn x() { crate::h::y() }\n",
    );
    let names: Vec<String> = crate_level_names(&without_test_items(code), 2)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["a", "b", "f", "h"]);
    let mut uses = Uses::new();
    for (a, b) in [("x", "y"), ("y", "z"), ("z", "x"), ("x", "w")] {
        uses.insert((a.into(), b.into()), BTreeSet::new());
    }
    assert_eq!(find_circle(&uses).unwrap(), ["x", "y", "z", "x"]);
    uses.remove(&("z".into(), "x".into()));
    assert_eq!(find_circle(&uses), None);
}
