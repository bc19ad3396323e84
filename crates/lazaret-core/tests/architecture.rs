//! `docs/ARCHITECTURE.md` says what the tree is (issue 46):
//!
//! - Its "Crate dependencies" table is `cargo metadata`'s: each row is a
//!   workspace crate; the second column names (in backticks) every
//!   workspace crate it depends on (normal dependencies, optional ones
//!   included), the third every one it depends on for tests only
//!   (dev-dependencies); other backticked words in those cells (a feature,
//!   a module) are notes. Every workspace crate has a row, and a crate
//!   depends only on crates in rows above it: that is what makes "no crate
//!   imports in a circle, and nothing depends on the binary" true.
//! - Every path its code map names exists: in a `### \`crates/NAME\``
//!   section, a backticked word ending in `.rs` or `/` is a file or
//!   directory of `crates/NAME/src` (inside a bullet that begins with a
//!   backticked directory, `- \`backend/\`: ...`, of that directory first),
//!   unless it starts with a repository directory (`crates/`, `tests/`,
//!   ...), when it is a repository path. A module the map names that is
//!   renamed, moved or split makes this fail until the map says so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn architecture() -> String {
    std::fs::read_to_string(repository_root().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md")
}

/// Each workspace crate's workspace dependencies: (normal, dev), by name.
type Dependencies = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

/// What `cargo metadata` says each workspace crate depends on (build
/// dependencies count as normal ones).
fn cargo_dependencies() -> Dependencies {
    let output = std::process::Command::new(env!("CARGO"))
        .current_dir(repository_root())
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .output()
        .expect("cargo metadata");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages.iter().filter_map(|package| package["name"].as_str()).map(str::to_owned).collect();
    let mut dependencies = Dependencies::new();
    for package in packages {
        let entry = dependencies.entry(package["name"].as_str().expect("a name").to_owned()).or_default();
        for dependency in package["dependencies"].as_array().expect("dependencies") {
            let name = dependency["name"].as_str().expect("a dependency's name");
            if !names.contains(name) {
                continue;
            }
            match dependency["kind"].as_str() {
                Some("dev") => entry.1.insert(name.to_owned()),
                _ => entry.0.insert(name.to_owned()),
            };
        }
    }
    dependencies
}

/// The backticked words of `text`.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The "Crate dependencies" table of `document`, in its order: (crate,
/// normal, dev), crates being the names in `crates`.
fn stated_dependencies(document: &str, crates: &BTreeSet<String>) -> Vec<(String, BTreeSet<String>, BTreeSet<String>)> {
    let section = document.split("\n### Crate dependencies\n").nth(1).expect("a \"### Crate dependencies\" section");
    let named = |cell: &str| -> BTreeSet<String> {
        backticked(cell).into_iter().filter(|word| crates.contains(*word)).map(str::to_owned).collect()
    };
    section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let crate_name = backticked(cells.get(1).copied().unwrap_or("")).first().map(|name| (*name).to_owned()).unwrap_or_default();
            (crate_name, named(cells.get(2).copied().unwrap_or("")), named(cells.get(3).copied().unwrap_or("")))
        })
        .collect()
}

/// What the table gets wrong against `actual`.
fn dependency_problems(document: &str, actual: &Dependencies) -> Vec<String> {
    let crates: BTreeSet<String> = actual.keys().cloned().collect();
    let stated = stated_dependencies(document, &crates);
    let mut problems = Vec::new();
    let mut above = BTreeSet::new();
    for (crate_name, normal, dev) in &stated {
        match actual.get(crate_name) {
            None => problems.push(format!("`{crate_name}` has a row but is no workspace crate")),
            Some((actual_normal, actual_dev)) => {
                if normal != actual_normal {
                    problems.push(format!("`{crate_name}` depends on {actual_normal:?}, the table says {normal:?}"));
                }
                if dev != actual_dev {
                    problems.push(format!("`{crate_name}` has the dev-dependencies {actual_dev:?}, the table says {dev:?}"));
                }
            }
        }
        for dependency in normal.difference(&above) {
            problems.push(format!("`{crate_name}` depends on `{dependency}`, which is not in a row above it"));
        }
        above.insert(crate_name.clone());
    }
    for crate_name in crates.difference(&above) {
        problems.push(format!("`{crate_name}` has no row"));
    }
    problems
}

#[test]
fn the_crate_dependencies_table_is_cargos() {
    let actual = cargo_dependencies();
    assert!(actual.len() >= 10 && actual.contains_key("lazaret-coordinator"), "read the workspace: {actual:?}");
    let problems = dependency_problems(&architecture(), &actual);
    assert!(problems.is_empty(), "docs/ARCHITECTURE.md, \"Crate dependencies\":\n{}", problems.join("\n"));
}

#[test]
fn a_wrong_or_missing_row_and_a_crate_below_its_dependency_are_found() {
    let actual: Dependencies = [
        ("a".to_owned(), (BTreeSet::new(), BTreeSet::new())),
        ("b".to_owned(), (BTreeSet::from(["a".to_owned()]), BTreeSet::from(["c".to_owned()]))),
        ("c".to_owned(), (BTreeSet::from(["a".to_owned(), "b".to_owned()]), BTreeSet::new())),
    ]
    .into();
    let right = "\n### Crate dependencies\n\n| crate | depends on | tests |\n| --- | --- | --- |\n| `a` | | |\n| `b` | `a` (its `x`) | `c` |\n| `c` | `a`, `b` | |\n";
    assert_eq!(dependency_problems(right, &actual), Vec::<String>::new());
    let wrong = "\n### Crate dependencies\n\n| crate | depends on | tests |\n| --- | --- | --- |\n| `b` | `a` | |\n| `a` | | |\n";
    assert_eq!(
        dependency_problems(wrong, &actual),
        ["`b` has the dev-dependencies {\"c\"}, the table says {}", "`b` depends on `a`, which is not in a row above it", "`c` has no row",]
    );
}

/// Repository directories: a backticked path starting with one is a
/// repository path, not a crate's.
const ROOTS: [&str; 8] = ["crates/", "docs/", "tests/", "editors/", "vscode-extension/", "scripts/", "fuzz/", "packaging/"];

/// The paths the code map of `document` names that do not exist under `root`.
fn missing_code_map_paths(document: &str, root: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let mut crate_name: Option<String> = None;
    // The backticked directory a bullet begins with, while in that bullet.
    let mut lead: Option<String> = None;
    for line in document.lines() {
        if line.starts_with('#') {
            crate_name = line.strip_prefix("### `crates/").and_then(|rest| rest.strip_suffix('`')).map(str::to_owned);
            lead = None;
            continue;
        }
        let Some(crate_name) = &crate_name else { continue };
        if let Some(item) = line.strip_prefix("- ") {
            lead = item.strip_prefix('`').and_then(|rest| rest.split('`').next()).filter(|first| first.ends_with('/')).map(str::to_owned);
        } else if !line.starts_with("  ") {
            lead = None;
        }
        let src = root.join("crates").join(crate_name).join("src");
        for word in backticked(line) {
            let path = word.trim_end_matches(['.', ',']);
            let pathlike = (path.ends_with(".rs") || path.ends_with('/')) && !path.starts_with(['/', '.', '~']);
            if !pathlike || path.contains([' ', '*', '<', '{', '$', '|', '(']) {
                continue;
            }
            let candidates: Vec<PathBuf> = if ROOTS.iter().any(|prefix| path.starts_with(prefix)) {
                vec![root.join(path)]
            } else {
                lead.iter().map(|lead| src.join(lead).join(path)).chain([src.join(path)]).collect()
            };
            let exists = candidates.iter().any(|candidate| if path.ends_with('/') { candidate.is_dir() } else { candidate.is_file() });
            if !exists {
                missing.push(format!("crates/{crate_name}: `{path}`"));
            }
        }
    }
    missing
}

#[test]
fn every_path_the_code_map_names_exists() {
    let document = architecture();
    assert!(document.contains("### `crates/lazaret-coordinator`"), "the code map's sections are headed by the crate's path");
    let missing = missing_code_map_paths(&document, &repository_root());
    assert!(missing.is_empty(), "docs/ARCHITECTURE.md's code map names what is not there:\n{}", missing.join("\n"));
}

#[test]
fn a_missing_module_of_the_code_map_is_found() {
    let root = tempfile::tempdir().expect("a temporary directory");
    for file in ["crates/x/src/lib.rs", "crates/x/src/a/mod.rs", "crates/x/src/b.rs", "tests/e2e.rs"] {
        let path = root.path().join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
        std::fs::write(path, "").expect("a file");
    }
    let document = "## Code map\n\n### `crates/x`\n\n- `a/`: `mod.rs` and `c.rs`; `b.rs` beside it.\n  More of `a/`: `gone.rs`.\n\
                    - `b.rs`, `lib.rs`, `tests/e2e.rs`, `tests/gone.rs`, `a b.rs`.\n\nProse: `mod.rs`.\n\n### Other\n\n`nowhere.rs`\n";
    assert_eq!(
        missing_code_map_paths(document, root.path()),
        ["crates/x: `c.rs`", "crates/x: `gone.rs`", "crates/x: `tests/gone.rs`", "crates/x: `mod.rs`"]
    );
}
