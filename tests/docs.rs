//! The documentation holds together: README.md is a front door of at most 250 lines that
//! links to every page in doc/, and every relative link in README.md and doc/*.md leads
//! to a file that exists and, when it names a `#fragment`, to a heading that is there
//! (the fragment GitHub derives from the heading's text). Plain files, no mount.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The README's bound, from the issue that moved the reference into doc/.
const README_MAX_LINES: usize = 250;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page in doc/, sorted.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("doc"))
        .expect("doc/ exists")
        .map(|e| e.expect("doc/ lists").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "doc/ holds no page");
    out.extend(docs);
    out
}

/// The lines of `text` outside fenced code blocks (``` or ~~~, closed by a fence of the
/// same character at least as long), with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let opener = trimmed
            .chars()
            .next()
            .filter(|c| (*c == '`' || *c == '~') && indent <= 3)
            .map(|c| (c, trimmed.chars().take_while(|x| *x == c).count()))
            .filter(|(_, n)| *n >= 3);
        match (fence, opener) {
            (None, Some(f)) => fence = Some(f),
            (Some((c, n)), Some((c2, n2)))
                if c == c2 && n2 >= n && trimmed[n2 * c.len_utf8()..].trim().is_empty() =>
            {
                fence = None
            }
            (None, None) => out.push((i + 1, line)),
            (Some(_), _) => {}
        }
    }
    out
}

/// `line` with its code spans (`...`, ``...``) blanked out, so that a link shown as
/// code is not taken for a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        let closer = "`".repeat(ticks);
        match after.find(&closer) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links `[text](target)` on a line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].trim();
        // `[text](target "title")`
        let target = target.split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end + 1..];
    }
    out
}

/// The fragment GitHub gives a heading: its text lowercased, code marks and punctuation
/// other than `-` and `_` dropped, spaces made `-`; a repeated one gets `-1`, `-2`...
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every fragment a page's headings answer to.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every relative link on every page, as (page, line, target), the page's own path
/// included.
fn links() -> Vec<(PathBuf, usize, String)> {
    let mut out = Vec::new();
    for page in pages() {
        let text = read(&page);
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if !target.contains("://") && !target.starts_with("mailto:") {
                    out.push((page.clone(), n, target));
                }
            }
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let all = links();
    assert!(
        all.len() >= 20,
        "only {} relative links found: the scanner is not finding them",
        all.len()
    );
    for (page, n, target) in &all {
        let at = format!("{}:{n}: ({target})", shown(page));
        let (file, fragment) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        if file.starts_with('/') {
            broken.push(format!(
                "{at}: an absolute path, which does not resolve in the repository"
            ));
            continue;
        }
        let dest = if file.is_empty() {
            page.clone()
        } else {
            page.parent().expect("a page has a directory").join(file)
        };
        if !dest.exists() {
            broken.push(format!("{at}: no such file"));
            continue;
        }
        if let Some(fragment) = fragment {
            if dest.extension().is_none_or(|x| x != "md") {
                broken.push(format!("{at}: a fragment on a page that is not markdown"));
            } else if !anchors(&read(&dest)).contains(fragment) {
                broken.push(format!("{at}: no heading #{fragment} in {}", shown(&dest)));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_short_and_links_every_page() {
    let readme = root().join("README.md");
    let lines = read(&readme).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move reference into doc/"
    );
    let linked: BTreeSet<PathBuf> = links()
        .into_iter()
        .filter(|(page, _, _)| *page == readme)
        .map(|(_, _, t)| root().join(t.split('#').next().unwrap_or("")))
        .collect();
    let unlinked: Vec<String> = pages()
        .into_iter()
        .filter(|p| *p != readme && !linked.contains(p))
        .map(|p| shown(&p))
        .collect();
    assert!(
        unlinked.is_empty(),
        "README.md does not link to {unlinked:?}"
    );
}

#[test]
fn the_readme_opens_with_the_two_commands() {
    let readme = read(&root().join("README.md"));
    let first_block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("README.md has a sh block");
    let commands: Vec<&str> = first_block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .collect();
    assert_eq!(commands, ["bash scripts/try", "bash scripts/test"]);
    assert!(
        !readme[..readme.find("```sh\n").unwrap_or(0)].contains("\n## "),
        "a section comes before the two commands"
    );
}

/// The scanner itself, on the cases the pages rely on: fences of four backticks holding
/// three, code spans, repeated headings and code in headings.
#[test]
fn the_scanner_reads_markdown_as_github_does() {
    let text = "# Top\n\n````text\n# not a heading\n```sh\n[x](inside.md)\n```\n````\n\
                ## `status` and `status.json`\n## Top\nsee [a](b.md#c) and `[d](e.md)`\n";
    let prose: Vec<&str> = prose_lines(text).into_iter().map(|(_, l)| l).collect();
    assert!(
        !prose
            .iter()
            .any(|l| l.contains("inside.md") || l.contains("not a heading"))
    );
    assert_eq!(
        anchors(text),
        BTreeSet::from(["top".into(), "top-1".into(), "status-and-statusjson".into()])
    );
    assert_eq!(
        link_targets("see [a](b.md#c) and `[d](e.md)`, [f](g.md \"title\")"),
        ["b.md#c", "g.md"]
    );
    assert_eq!(slug(" The `litany stop` hazard"), "the-litany-stop-hazard");
}
