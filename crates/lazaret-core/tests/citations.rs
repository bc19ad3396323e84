//! The repository cites only what it holds (issue 28): every decision a
//! document or comment names (`D12`, `DECISIONS D16`) is recorded in
//! `docs/decisions.md`, every repository path written in backticks exists,
//! and nothing points at files outside the repository (the design
//! document, the development machines' notes).

use std::path::{Path, PathBuf};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The repository's text files that say things: sources, documents, tests,
/// scripts (tracked or not yet tracked; generated and vendored ones left out).
fn text_files() -> Vec<PathBuf> {
    let root = repository_root();
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .output()
        .expect("git ls-files");
    assert!(output.status.success(), "git ls-files: {}", String::from_utf8_lossy(&output.stderr));
    let extensions = ["rs", "md", "ts", "lua", "py", "mjs", "txt", "sh", "toml"];
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|path| {
            let name = Path::new(path);
            let scripted = path.starts_with("scripts/") || path.starts_with(".ci/") || *path == "tests/run";
            (scripted || name.extension().is_some_and(|extension| extensions.iter().any(|known| extension == *known)))
                && !path.contains("node_modules/")
                && !path.ends_with("protocol.schema.json")
                && !path.starts_with("tests/hostile/")
                && !path.contains("/snapshots/")
        })
        .map(|path| root.join(path))
        .filter(|path| path.is_file())
        .collect()
}

/// The decision numbers `docs/decisions.md` records (`## D12. ...`).
fn recorded_decisions() -> Vec<u32> {
    let text = std::fs::read_to_string(repository_root().join("docs/decisions.md")).expect("docs/decisions.md");
    text.lines().filter_map(|line| line.strip_prefix("## D")?.split('.').next()?.parse().ok()).collect()
}

/// Every `D<number>` in `text` standing as a word.
fn cited_decisions(text: &str) -> Vec<u32> {
    let bytes = text.as_bytes();
    let mut cited = Vec::new();
    for (index, _) in text.match_indices('D') {
        let before = index.checked_sub(1).map(|at| bytes[at]);
        if before.is_some_and(|byte| byte.is_ascii_alphanumeric() || byte == b'_') {
            continue;
        }
        let digits: String = text[index + 1..].chars().take_while(char::is_ascii_digit).collect();
        let after = bytes.get(index + 1 + digits.len()).copied();
        if digits.is_empty() || digits.len() > 2 || after.is_some_and(|byte| byte.is_ascii_alphanumeric() || byte == b'_') {
            continue;
        }
        cited.extend(digits.parse::<u32>().ok());
    }
    cited
}

#[test]
fn every_cited_decision_is_recorded() {
    let recorded = recorded_decisions();
    assert!(recorded.len() >= 17, "{recorded:?}");
    let mut missing = Vec::new();
    for file in text_files() {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for number in cited_decisions(&text) {
            if !recorded.contains(&number) {
                missing.push(format!("{}: D{number}", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "decisions cited but not in docs/decisions.md: {missing:#?}");
}

#[test]
fn repository_paths_in_backticks_exist() {
    let roots = ["crates/", "docs/", "tests/", "editors/", "vscode-extension/", "scripts/", "fuzz/", "packaging/"];
    let root = repository_root();
    let mut missing = Vec::new();
    // Documents and sources (tests write paths of their own as data).
    let citing = text_files().into_iter().filter(|file| {
        let relative = file.strip_prefix(&root).unwrap_or(file).to_string_lossy().into_owned();
        relative.starts_with("docs/") || relative == "README.md" || (relative.starts_with("crates/") && relative.contains("/src/"))
    });
    for file in citing {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        // A crate's own `tests/…` is relative to the crate.
        let crate_dir =
            file.ancestors().find(|dir| dir.join("Cargo.toml").is_file()).map(Path::to_path_buf).unwrap_or_else(|| root.clone());
        for quoted in text.split('`').skip(1).step_by(2) {
            let path = quoted.split(':').next().unwrap_or("").trim_end_matches(['.', ',']);
            let literal = !path.contains(['*', '<', '{', ' ', '$', '|', '(']);
            let exists = root.join(path).exists() || crate_dir.join(path).exists();
            if literal && roots.iter().any(|prefix| path.starts_with(prefix)) && !exists {
                missing.push(format!("{}: `{quoted}`", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "paths cited but not in the repository: {missing:#?}");
}

#[test]
fn nothing_cites_files_outside_the_repository() {
    let outside = ["ENVIRONMENT.md", "../shared", "spec/DECISIONS.md", "design document section", "000_0d0386a25995fc5d"];
    let mut found = Vec::new();
    for file in text_files() {
        if file.ends_with("tests/citations.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for needle in outside {
            if text.contains(needle) {
                found.push(format!("{}: {needle}", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "citations of files outside the repository: {found:#?}");
}

#[test]
fn decision_citations_are_found_as_words() {
    assert_eq!(cited_decisions("DECISIONS D16, (D4) and D12's; not DD1, D1x, HD5, D123 or D_1"), [16, 4, 12]);
}
