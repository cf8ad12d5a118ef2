//! The man-style pages under `docs/` cannot drift from the binary: every flag a command's
//! `--help` lists is on the command's page, and every flag a page documents is in `--help`.
//!
//! The commands are the real binary's: `sluice --help` names them, and `sluice CMD --help` is
//! run for each. A page marks the flags it documents for some commands with an HTML comment,
//! invisible once rendered:
//!
//! ```text
//!   <!-- flags: cp cat ls -->          the list items below document flags of these commands
//!   - `-r`, `--read-only`: ...         one item per flag: its names in backticks before ": "
//!   <!-- flags: cp -->                 a new marker replaces the set
//!   <!-- /flags -->                    the end of the documented flags
//! ```
//!
//! A command with no flags of its own still gets a marker, so that "no page" is an error.
//! The README must also give each command one row of its command table and link only pages
//! that exist.

mod common;

use common::repo_root;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Flags every command has, which pages need not repeat.
const IMPLICIT: &[&str] = &["-h", "--help", "-V", "--version"];

#[test]
fn every_flag_in_help_is_on_its_page_and_every_documented_flag_is_in_help() {
    let commands = subcommands(&help(&[]));
    assert!(
        commands.len() >= 10,
        "`sluice --help` lists too few commands to be parsed right: {commands:?}"
    );
    let pages = documented_flags();
    let mut problems = Vec::new();
    for cmd in &commands {
        let in_help = help_flags(&help(&[cmd, "--help"]));
        if cmd == "serve" {
            assert!(
                in_help.contains("--listen") && in_help.contains("--no-write-delegations"),
                "the flags of `sluice serve --help` were not parsed: {in_help:?}"
            );
        }
        let Some(doc) = pages.get(cmd.as_str()) else {
            problems.push(format!(
                "`sluice {cmd}` has no page: no `<!-- flags: {cmd} -->` section under docs/"
            ));
            continue;
        };
        for flag in in_help.difference(&doc.flags) {
            problems.push(format!(
                "`sluice {cmd} {flag}` is in --help but not on {}",
                doc.pages_list()
            ));
        }
        for flag in doc.flags.difference(&in_help) {
            problems.push(format!(
                "{} documents `sluice {cmd} {flag}`, which --help does not list",
                doc.pages_list()
            ));
        }
    }
    for cmd in pages.keys() {
        if !commands.iter().any(|c| c == cmd) {
            problems.push(format!(
                "{} documents `sluice {cmd}`, which `sluice --help` does not list",
                pages[cmd].pages_list()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the pages under docs/ and --help disagree:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_readme_has_one_row_per_command_and_its_links_resolve() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let mut problems = Vec::new();
    for cmd in subcommands(&help(&[])) {
        let rows = readme
            .lines()
            .filter(|l| {
                l.strip_prefix(&format!("| `sluice {cmd}"))
                    .is_some_and(|rest| rest.starts_with([' ', '`']))
            })
            .count();
        if rows != 1 {
            problems.push(format!(
                "README: {rows} command-table rows for `sluice {cmd}` (want 1)"
            ));
        }
    }
    for target in relative_links(&readme) {
        let path = target.split('#').next().unwrap_or_default();
        if !path.is_empty() && !repo_root().join(path).exists() {
            problems.push(format!("README links to {target}, which does not exist"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The "Where is" table names files; a refactor that moves one must move the row with it.
/// A path is written from the repository root (`crates/...`) or, after the first one in a
/// row, from `crates/` (`engine/src/readcore.rs`).
#[test]
fn every_file_the_readmes_where_is_table_names_exists() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let table: Vec<&str> = readme
        .lines()
        .skip_while(|l| l.trim() != "## Where is")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect();
    assert!(!table.is_empty(), "README has no \"## Where is\" section");
    let mut problems = Vec::new();
    for line in table.iter().filter(|l| l.starts_with('|')) {
        for (i, quoted) in line.split('`').enumerate() {
            let is_path = i % 2 == 1 && quoted.contains('/') && !quoted.contains(' ');
            if !is_path {
                continue;
            }
            let root = repo_root();
            let found = root.join(quoted).exists() || root.join("crates").join(quoted).exists();
            if !found {
                problems.push(format!(
                    "README's Where is table names `{quoted}`, which does not exist"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The help text of `sluice ARGS`, or of `sluice --help` when `args` is empty.
fn help(args: &[&str]) -> String {
    let args: Vec<&str> = if args.is_empty() {
        vec!["--help"]
    } else {
        args.to_vec()
    };
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(&args)
        .output()
        .expect("run sluice");
    assert!(out.status.success(), "sluice {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands under "Commands:", without clap's `help`.
fn subcommands(top_help: &str) -> Vec<String> {
    section(top_help, "Commands:")
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The flags under "Options:": every name (`-r`, `--read-only`) on a line that starts with a
/// flag at clap's option indent, without the ones every command has.
fn help_flags(cmd_help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in section(cmd_help, "Options:") {
        let indent = line.len() - line.trim_start().len();
        // Long help puts descriptions on their own lines, indented 10: never a flag line.
        if indent > 6 || !line.trim_start().starts_with('-') {
            continue;
        }
        for token in line.split_whitespace() {
            let name = token.trim_end_matches(',');
            if !name.starts_with('-') {
                break;
            }
            flags.insert(name.to_string());
        }
    }
    flags.retain(|f| !IMPLICIT.contains(&f.as_str()));
    flags
}

/// The lines after `heading` up to the next line that is not indented (a blank line or the
/// next heading).
fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| l.trim() != heading)
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .collect()
}

/// What the pages document for one command.
#[derive(Default)]
struct Documented {
    pages: BTreeSet<String>,
    flags: BTreeSet<String>,
}

impl Documented {
    fn pages_list(&self) -> String {
        let pages: Vec<&str> = self.pages.iter().map(String::as_str).collect();
        pages.join(", ")
    }
}

/// Every `docs/*.md` page's flag sections, by command.
fn documented_flags() -> BTreeMap<String, Documented> {
    let mut out: BTreeMap<String, Documented> = BTreeMap::new();
    let docs = repo_root().join("docs");
    for entry in std::fs::read_dir(&docs).expect("docs/") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let page = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
        let text = std::fs::read_to_string(&path).unwrap();
        let mut current: Vec<String> = Vec::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(list) = trimmed
                .strip_prefix("<!-- flags:")
                .and_then(|r| r.strip_suffix("-->"))
            {
                current = list.split_whitespace().map(str::to_string).collect();
                for cmd in &current {
                    out.entry(cmd.clone())
                        .or_default()
                        .pages
                        .insert(page.clone());
                }
            } else if trimmed == "<!-- /flags -->" {
                current.clear();
            } else if let Some(item) = line.strip_prefix("- `") {
                let names = item_flags(&format!("`{item}"));
                for cmd in &current {
                    out.entry(cmd.clone())
                        .or_default()
                        .flags
                        .extend(names.iter().cloned());
                }
            }
        }
    }
    out
}

/// The flag names of one list item: the first word of each backticked span before the ": "
/// that ends the item's term (outside backticks), when it starts with `-`.
fn item_flags(item: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_code = false;
    let mut code = String::new();
    let mut chars = item.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' if in_code => {
                in_code = false;
                if let Some(word) = code.split_whitespace().next() {
                    if word.starts_with('-') {
                        names.push(word.to_string());
                    }
                }
                code.clear();
            }
            '`' => in_code = true,
            _ if in_code => code.push(c),
            ':' if chars.peek() == Some(&' ') => break,
            _ => {}
        }
    }
    names
}

/// The targets of the Markdown links `[text](target)` that are paths in the repository.
fn relative_links(markdown: &str) -> Vec<String> {
    markdown
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|t| !t.contains("://") && !t.starts_with('#') && !t.starts_with("mailto:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn item_flags_reads_the_term_only() {
    assert_eq!(
        item_flags("`-r`, `--read-only`: mount read-only, unlike `--rw`."),
        ["-r", "--read-only"]
    );
    assert_eq!(
        item_flags("`--queue SIZE` (default: `max(BDP, 1 MiB)`): the bound, see `--rate`"),
        ["--queue"]
    );
    assert_eq!(
        item_flags("`--listen ADDR:PORT` (default `127.0.0.1:2049`): where"),
        ["--listen"]
    );
}
