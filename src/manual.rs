//! Shell completions and the man page `litanyfs.1`, generated from the clap definition
//! of the command line (`litanyfs completions SHELL`, `litanyfs man`), so they list
//! exactly the options the binary parses and cannot drift from them.
//!
//! clap_mangen renders one command per page; `litanyfs.1` is the top-level page with a
//! section per subcommand (its synopsis, description, options and notes) in place of the
//! list of subcommands (which would name pages that are not there), so one page holds
//! every option. Its DESCRIPTION and TREE sections are written here from the tree's one
//! table ([`guide`]): a tagged paragraph per path, which a formatter wraps whole, never
//! reflowing one entry into the next; and the page is not hyphenated, so a path or an
//! option is never split.

use std::io;

use clap::Command;
use clap_mangen::Man;

use crate::guide;

/// Text as one line of roff: backslashes and hyphens escaped (`\-` is a real minus, so
/// an option copied from the page works), a no-break space kept (`\~`), and a leading
/// `.` or `'` kept from being read as a request.
fn roff_text(text: &str) -> String {
    let escaped = text
        .replace('\\', "\\e")
        .replace('-', "\\-")
        .replace(guide::NO_BREAK, "\\~");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// The page's DESCRIPTION (what the command is, then [`guide::INTRO`]) and TREE (a
/// tagged paragraph per [`guide::entries`], then [`guide::OUTRO`]).
fn tree_sections(about: &str) -> String {
    let mut out = format!(
        ".SH DESCRIPTION\n{}\n.PP\n{}\n.SH TREE\n",
        roff_text(about),
        roff_text(guide::INTRO)
    );
    for e in guide::entries() {
        // An indent narrower than every path puts each text under its path.
        out += &format!(
            ".TP 4\n{}\n{}\n",
            roff_text(&guide::unbreakable(&e.path)),
            roff_text(&guide::unbreakable(&e.what))
        );
    }
    out += &format!(".PP\n{}\n", roff_text(&guide::home()));
    out += &format!(".PP\n{}\n", roff_text(guide::OUTRO));
    out
}

/// The completions for `shell` of the command line `cmd`.
pub fn completions(shell: clap_complete::Shell, cmd: &mut Command) -> Vec<u8> {
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, cmd, name, &mut out);
    out
}

/// One section of a page, rendered, with its `.SH` headings replaced: each `(from, to)`
/// turns `.SH from` into `to`, and a heading mapped to "" is dropped.
fn section(
    render: impl FnOnce(&mut Vec<u8>) -> io::Result<()>,
    headings: &[(&str, &str)],
) -> io::Result<String> {
    let mut buf = Vec::new();
    render(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    Ok(text
        .lines()
        .filter_map(
            |l| match headings.iter().find(|(from, _)| l == format!(".SH {from}")) {
                Some((_, "")) => None,
                Some((_, to)) => Some(to.to_string()),
                None => Some(l.to_string()),
            },
        )
        .map(|l| l + "\n")
        .collect())
}

/// The man page `<name>.1` of the command line `cmd`, with every subcommand's options.
pub fn man_page(cmd: &Command) -> io::Result<Vec<u8>> {
    let mut cmd = cmd.clone();
    cmd.build();
    let man = Man::new(cmd.clone());
    let mut page = String::new();
    page += &section(|w| man.render_title(w), &[])?;
    // No hyphenation (a path or an option split at a hyphen reads as two), left-adjusted.
    page += ".nh\n.ad l\n";
    page += &section(|w| man.render_name_section(w), &[])?;
    page += &section(|w| man.render_synopsis_section(w), &[])?;
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    page += &tree_sections(&about);
    page += &section(|w| man.render_options_section(w), &[])?;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let title = format!("{} {}", cmd.get_name(), sub.get_name());
        let heading = format!(".SH \"{}\"", title.to_uppercase());
        let man = Man::new(sub.clone().name(title));
        page += &section(
            |w| man.render_synopsis_section(w),
            &[("SYNOPSIS", &heading)],
        )?;
        page += &section(
            |w| man.render_description_section(w),
            &[("DESCRIPTION", ".PP")],
        )?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            page += &section(
                |w| man.render_options_section(w),
                &[("OPTIONS", ".SS Options")],
            )?;
        }
        if sub.get_after_long_help().is_some() {
            page += &section(|w| man.render_extra_section(w), &[("EXTRA", ".SS Notes")])?;
        }
    }
    if cmd.get_after_long_help().is_some() {
        page += &section(
            |w| man.render_extra_section(w),
            &[("EXTRA", ".SH ENVIRONMENT")],
        )?;
    }
    page += &section(|w| man.render_version_section(w), &[])?;
    Ok(page.into_bytes())
}
