//! The manual holds together: every relative link in README.md and docs/ names a file that
//! exists, and README stays an operator's manual of at most 300 lines (the rest belongs
//! in docs/, one topic per file). Needs no root.

use std::{fs, path::Path};

use hstrace_tests::util::workspace;

/// The relative link targets of a Markdown text, anchors cut off (`[x](docs/a.md#b)`).
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|t| !t.contains("://") && !t.starts_with('#') && !t.starts_with("mailto:"))
        .map(|t| t.split('#').next().unwrap_or(t).to_string())
        .collect()
}

#[test]
fn every_relative_link_in_the_manual_resolves() {
    let root = workspace();
    let mut pages = vec![root.join("README.md")];
    for entry in fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = fs::read_to_string(page).unwrap();
        for target in links(&text) {
            checked += 1;
            if !page
                .parent()
                .unwrap_or(Path::new("."))
                .join(&target)
                .exists()
            {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

#[test]
fn readme_is_a_manual_of_at_most_300_lines() {
    let readme = fs::read_to_string(workspace().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: move detail to docs/"
    );
    // the fresh-machine rule: Quick start's two commands, as written, and .ci/run runs the second
    assert!(readme.contains("cargo xtask demo") && readme.contains("cargo xtask test"));
    let ci = fs::read_to_string(workspace().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "exec cargo xtask test"),
        "{ci}"
    );
}

#[test]
fn the_link_parser_finds_links_and_leaves_urls_and_anchors() {
    assert_eq!(
        links("see [a](docs/a.md#x), [b](https://x.org/y) and [c](#top), [d](../e.yaml)"),
        ["docs/a.md", "../e.yaml"]
    );
}
