//! Source files stay small enough to read (issue 46): every `.rs` file under
//! `crates/*/src` has at most [`MAX_LINES`] lines, so a module holds one
//! thing and its name can say what. Two kinds of file may be larger:
//! tests (a file named `tests.rs` or under a `tests/` directory) and files
//! that say why in their first [`MARKER_WINDOW`] lines with a comment
//! `// size: <reason>` (a data table, a list of wire types). A larger file
//! without either is split along its seams, not marked.

use std::path::{Path, PathBuf};

/// The most lines a source file has without a reason.
const MAX_LINES: usize = 800;
/// How many lines from its top a file's `// size:` comment must be within.
const MARKER_WINDOW: usize = 20;
/// The marker, followed by the reason.
const MARKER: &str = "// size:";

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file below `dir`, depth first.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

/// Whether `relative` (a path below a crate's `src`) is a test file.
fn is_tests(relative: &Path) -> bool {
    relative.file_name().is_some_and(|name| name == "tests.rs") || relative.components().any(|part| part.as_os_str() == "tests")
}

/// The reason a file gives for its size, if it gives one.
fn marked_reason(text: &str) -> Option<&str> {
    text.lines()
        .take(MARKER_WINDOW)
        .find_map(|line| line.trim_start().strip_prefix(MARKER))
        .map(str::trim)
        .filter(|reason| !reason.is_empty())
}

#[test]
fn source_files_are_under_the_size_limit_or_say_why() {
    let root = repository_root();
    let mut crates: Vec<PathBuf> =
        std::fs::read_dir(root.join("crates")).expect("crates/").flatten().map(|entry| entry.path().join("src")).collect();
    crates.sort();
    let mut too_large = Vec::new();
    let mut checked = 0;
    for src in crates.iter().filter(|src| src.is_dir()) {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        for file in files {
            checked += 1;
            let text = std::fs::read_to_string(&file).expect("a source file");
            let lines = text.lines().count();
            let relative = file.strip_prefix(&root).unwrap_or(&file).to_string_lossy().into_owned();
            let below_src = file.strip_prefix(src).unwrap_or(&file);
            if lines > MAX_LINES && !is_tests(below_src) && marked_reason(&text).is_none() {
                too_large.push(format!("{relative}: {lines} lines"));
            }
        }
    }
    assert!(checked > 100, "found the sources ({checked} files)");
    too_large.sort();
    assert!(
        too_large.is_empty(),
        "source files over {MAX_LINES} lines: split each along its seams, or give the reason in a `{MARKER} <reason>` \
         comment within its first {MARKER_WINDOW} lines: {too_large:#?}"
    );
}

#[test]
fn a_marker_needs_a_reason_near_the_top() {
    assert_eq!(marked_reason("//! A table.\n// size: one row per syscall\n"), Some("one row per syscall"));
    assert_eq!(marked_reason("// size:\n"), None, "a reason is required");
    let late = format!("{}// size: too late\n", "\n".repeat(MARKER_WINDOW));
    assert_eq!(marked_reason(&late), None);
    assert!(is_tests(Path::new("policy/tests.rs")));
    assert!(is_tests(Path::new("tests/support.rs")));
    assert!(!is_tests(Path::new("policy/tables.rs")));
}
