//! The documentation holds together: every relative link of the README and of `docs/`
//! names a file that is there (and one of its headings, when it names one), the index
//! lists every page, the README stays short, and the configuration reference is the one
//! `config/berth.toml` makes (`BERTH_BLESS=1 cargo test --test docs` writes it again).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The markdown files of the project: the README and every page of `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fence: Option<String> = None;
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let ticks: String = trimmed.chars().take_while(|&c| c == '`').collect();
        match &fence {
            Some(open) if ticks.len() >= open.len() && trimmed.trim() == ticks => fence = None,
            Some(_) => {}
            None if ticks.len() >= 3 => fence = Some(ticks),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The targets of the inline links `[text](target)` in `text`.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].to_string());
        }
    }
    found
}

/// GitHub's anchor of a heading: lowercase, spaces to dashes, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_link_of_the_readme_and_the_docs_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&prose(&text)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !file.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            let is_page = file.extension().is_some_and(|e| e == "md");
            if !fragment.is_empty() && is_page {
                let there = anchors(&std::fs::read_to_string(&file).unwrap());
                if !there.contains(fragment) {
                    broken.push(format!("{}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_index_lists_every_page_of_the_docs() {
    let index = std::fs::read_to_string(Path::new(ROOT).join("docs/README.md")).unwrap();
    let listed: BTreeSet<String> = links(&index).into_iter().collect();
    let missing: Vec<String> = pages()
        .iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("docs")))
        .filter_map(|p| Some(p.file_name()?.to_str()?.to_string()))
        .filter(|name| name != "README.md" && !listed.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/README.md does not list {missing:?}"
    );
}

#[test]
fn the_readme_is_read_in_ten_minutes() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines (at most 300)");
}

/// One key of `config/berth.toml`: its name, the value written and what its comment
/// says; `example` when the line is commented out (unset by default).
struct Key {
    name: String,
    value: String,
    example: bool,
    says: String,
}

/// A table of `config/berth.toml`: its name, what the comment above its header says, and
/// its keys in order.
struct Table {
    /// As the file writes it: `[agent]`, `[[app]]`.
    header: String,
    /// The comment's lines, examples (indented) as they are.
    says: Vec<String>,
    keys: Vec<Key>,
}

/// The tables of `config/berth.toml`, in its order; a table commented out (`# [[notify]]`)
/// is one too, its keys unset. A key's comment is the run of comment lines above it (a key
/// right under another shares that one's, and says so); lines indented in a comment are
/// examples, not keys.
fn tables(toml: &str) -> Vec<Table> {
    let mut tables: Vec<Table> = Vec::new();
    let (mut comment, mut after_key): (Vec<String>, bool) = (Vec::new(), false);
    let mut first_of_run = String::new();
    for line in toml.lines() {
        let bare = line.strip_prefix("# ").or(line.strip_prefix('#'));
        let text = bare.unwrap_or(line);
        if text.starts_with('[') && text.ends_with(']') {
            tables.push(Table {
                header: text.to_string(),
                says: std::mem::take(&mut comment),
                keys: Vec::new(),
            });
            (comment, after_key) = (Vec::new(), false);
            continue;
        }
        let is_key = !text.starts_with(' ')
            && text.split_once(" = ").is_some_and(|(k, _)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            });
        match tables.last_mut() {
            Some(table) if is_key => {
                let (name, value) = text.split_once(" = ").unwrap();
                let says = match (after_key, comment.is_empty()) {
                    (_, true) => String::new(),
                    (true, false) => format!("With `{first_of_run}`, above."),
                    (false, false) => comment
                        .iter()
                        .map(|l| l.trim())
                        .collect::<Vec<_>>()
                        .join(" "),
                };
                if !after_key {
                    first_of_run = name.to_string();
                }
                table.keys.push(Key {
                    name: name.to_string(),
                    value: value.to_string(),
                    example: bare.is_some(),
                    says,
                });
                after_key = true;
            }
            _ if bare.is_some() => {
                if after_key {
                    (comment, after_key) = (Vec::new(), false);
                }
                comment.push(text.to_string());
            }
            _ => (comment, after_key) = (Vec::new(), false),
        }
    }
    tables
}

/// The reference `tables` make: what each table is for, and a row for each key.
fn reference(tables: &[Table]) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('<', "&lt;");
    let mut out = String::new();
    for table in tables {
        out.push_str(&format!("\n### `{}`\n\n", table.header));
        // The prose, then its examples (the indented lines) as TOML.
        let (examples, prose): (Vec<&String>, Vec<&String>) =
            table.says.iter().partition(|l| l.starts_with(' '));
        if !prose.is_empty() {
            let prose: Vec<&str> = prose.iter().map(|l| l.trim()).collect();
            out.push_str(&format!("{}\n\n", prose.join(" ").replace('<', "&lt;")));
        }
        if !examples.is_empty() {
            let examples: Vec<&str> = examples.iter().map(|l| l.trim()).collect();
            out.push_str(&format!("```toml\n{}\n```\n\n", examples.join("\n")));
        }
        out.push_str("| key | default | what it does |\n| --- | --- | --- |\n");
        for key in &table.keys {
            let value = if key.example {
                format!("unset (e.g. `{}`)", key.value)
            } else {
                format!("`{}`", key.value)
            };
            out.push_str(&format!(
                "| `{}` | {} | {} |\n",
                key.name,
                cell(&value),
                cell(&key.says)
            ));
        }
    }
    out
}

const GENERATED: &str = "<!-- generated from config/berth.toml by tests/docs.rs: BERTH_BLESS=1 cargo test --test docs writes it -->\n";

#[test]
fn the_configuration_reference_is_the_one_the_shipped_file_makes() {
    let toml = std::fs::read_to_string(Path::new(ROOT).join("config/berth.toml")).unwrap();
    let tables = tables(&toml);
    let keys: usize = tables.iter().map(|t| t.keys.len()).sum();
    assert!(keys > 100, "only {keys} keys read");
    let path = Path::new(ROOT).join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (by_hand, generated) = doc
        .split_once(GENERATED)
        .expect("docs/configuration.md has the generated part's marker");
    let wanted = reference(&tables);
    if std::env::var_os("BERTH_BLESS").is_some() {
        std::fs::write(&path, format!("{by_hand}{GENERATED}{wanted}")).unwrap();
        return;
    }
    assert!(
        generated == wanted,
        "docs/configuration.md is not what config/berth.toml makes: run BERTH_BLESS=1 cargo test --test docs"
    );
}
