//! The repository cites only what it holds (issues 28 and 46): every
//! decision a document or comment names (`D12`, `DECISIONS D16`) is
//! recorded in `docs/decisions.md`, and nothing points at files outside the
//! repository (the design document, the development machines' notes).
//!
//! What the documents (every tracked `*.md`: `docs/`, the READMEs) name in
//! backticks exists, by these rules (fenced code blocks are not read):
//!
//! - A word starting with a repository directory (`crates/`, `tests/`,
//!   `docs/`, ...; up to a `:`) is a repository path; so is one in a
//!   crate's sources (a crate's own `tests/...` is relative to the crate).
//! - A word ending in `.rs`, `.lua`, `.ts`, `.py` or `.mjs` (not starting
//!   with `.`, `/` or `~`) is a file of the repository, written whole or
//!   by its last components (`session.rs`, `git_sentry/ref_watch.rs`).
//! - A lowercase snake_case word of three or more parts
//!   (`wait_for_teardown`, a test name) is defined in the tree: a function
//!   or test (`fn` in Rust, `def` in Python, `function` in Lua, TypeScript
//!   and JavaScript), a module (a file of that name), or a key of the
//!   configuration file (a field of `crates/lazaret-core/src/config/raw.rs`).
//!   A trailing `…` stands for the rest of the name.
//! - Where such a name follows a file (`` `tests/e2e_git.rs` (`name` ``) or
//!   a suite (`` `name` (e2e_git) ``), it is defined in that file.
//! - A Rust path (`lazaret_rpc::client::within`, `podman::environment()`)
//!   names a module of the workspace (its lowercase segments, the last
//!   components of a module's path, a crate name first or not) and an
//!   item whose name is in the sources; a path whose first segment is no
//!   workspace module or crate (`std::`, `tokio::`) is not checked.
//! - A double-quoted phrase followed by the word "test" or "tests" is
//!   (part of) the title of an editor test: a `test(`/`describe(` of
//!   `tests/vscode/` or `vscode-extension/test/`, or a `T.test(` of
//!   `tests/nvim/unit/`; `...` stands for any text.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file of the repository (tracked or not yet tracked, ignored ones
/// and `node_modules` left out), relative to its root.
fn tracked_files() -> Vec<String> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(repository_root())
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .output()
        .expect("git ls-files");
    assert!(output.status.success(), "git ls-files: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|path| !path.contains("node_modules") && repository_root().join(path).is_file())
        .map(str::to_owned)
        .collect()
}

/// The repository's text files that say things: sources, documents, tests,
/// scripts (tracked or not yet tracked; generated and vendored ones left out).
fn text_files() -> Vec<PathBuf> {
    let root = repository_root();
    let extensions = ["rs", "md", "ts", "lua", "py", "mjs", "txt", "sh", "toml"];
    tracked_files()
        .iter()
        .map(String::as_str)
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

/// Every tracked Markdown document: (path from the root, text).
fn documents() -> Vec<(String, String)> {
    tracked_files()
        .into_iter()
        .filter(|path| path.ends_with(".md"))
        .filter_map(|path| std::fs::read_to_string(repository_root().join(&path)).ok().map(|text| (path, text)))
        .collect()
}

/// The inline code of a Markdown text, in order, with the text that follows
/// each span up to the next one; fenced code blocks left out.
fn inline_code(text: &str) -> Vec<(String, String)> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let parts: Vec<&str> = prose.split('`').collect();
    (1..parts.len()).step_by(2).map(|index| (parts[index].to_owned(), parts.get(index + 1).copied().unwrap_or("").to_owned())).collect()
}

/// Whether `word` is a lowercase snake_case name of at least `parts` parts
/// (`…` at its end allowed).
fn is_snake_name(word: &str, parts: usize) -> bool {
    let name = word.strip_suffix('…').unwrap_or(word);
    name.split('_').count() >= parts
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.split('_').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
}

/// The identifiers of `text`, in order.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|word| !word.is_empty())
}

/// The names `text` defines as functions: after `fn`, `def` or `function`
/// (a Lua `function M.name` or `M:name` by its last part).
fn defined_functions(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let words: Vec<&str> =
        text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == ':')).filter(|w| !w.is_empty()).collect();
    for pair in words.windows(2) {
        if matches!(pair[0], "fn" | "def" | "function") {
            if let Some(name) = pair[1].rsplit(['.', ':']).next().filter(|name| !name.is_empty()) {
                names.insert(name.trim_end_matches(':').to_owned());
            }
        }
    }
    names
}

/// What the tree defines, for the documents' names to be looked up in.
struct Tree {
    files: Vec<String>,
    functions_by_file: BTreeMap<String, BTreeSet<String>>,
    functions: BTreeSet<String>,
    /// Every identifier of the Rust sources.
    rust_words: BTreeSet<String>,
    /// Each crate's modules: the crate's name (`lazaret_core`), then the path.
    modules: Vec<Vec<String>>,
    stems: BTreeSet<String>,
    configuration_keys: BTreeSet<String>,
    /// The titles of the editors' tests.
    test_titles: Vec<String>,
}

fn tree() -> &'static Tree {
    static TREE: std::sync::OnceLock<Tree> = std::sync::OnceLock::new();
    TREE.get_or_init(|| {
        let root = repository_root();
        let files = tracked_files();
        let mut tree = Tree {
            files: files.clone(),
            functions_by_file: BTreeMap::new(),
            functions: BTreeSet::new(),
            rust_words: BTreeSet::new(),
            modules: Vec::new(),
            stems: BTreeSet::new(),
            configuration_keys: BTreeSet::new(),
            test_titles: Vec::new(),
        };
        for file in &files {
            let path = Path::new(file);
            tree.stems.extend(path.file_stem().map(|stem| stem.to_string_lossy().into_owned()));
            let source = [".rs", ".py", ".lua", ".ts", ".mjs"].iter().any(|extension| file.ends_with(extension));
            if !source {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(root.join(file)) else { continue };
            let functions = defined_functions(&text);
            tree.functions.extend(functions.iter().cloned());
            tree.functions_by_file.insert(file.clone(), functions);
            // (This file writes names that do not exist, as data.)
            if file.ends_with(".rs") && file != "crates/lazaret-core/tests/citations.rs" {
                tree.rust_words.extend(identifiers(&text).map(str::to_owned));
            }
            if let Some((crate_dir, module)) = file.strip_prefix("crates/").and_then(|rest| rest.split_once("/src/")) {
                let mut path = vec![crate_dir.replace('-', "_")];
                path.extend(module.trim_end_matches(".rs").split('/').map(str::to_owned));
                if matches!(path.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    path.pop();
                }
                tree.modules.push(path);
            }
            let titled =
                file.starts_with("tests/vscode/") || file.starts_with("vscode-extension/test/") || file.starts_with("tests/nvim/unit/");
            if titled {
                for opening in ["test(", "describe(", "T.test("] {
                    for (at, _) in text.match_indices(opening) {
                        let rest = text[at + opening.len()..].trim_start();
                        let Some(quote) = rest.chars().next().filter(|c| matches!(c, '"' | '\'' | '`')) else { continue };
                        let mut title = String::new();
                        let mut escaped = false;
                        for c in rest[1..].chars() {
                            match (escaped, c) {
                                (true, _) => {
                                    title.push(c);
                                    escaped = false;
                                }
                                (false, '\\') => escaped = true,
                                (false, c) if c == quote => break,
                                (false, _) => title.push(c),
                            }
                        }
                        tree.test_titles.push(title);
                    }
                }
            }
        }
        let raw = std::fs::read_to_string(root.join("crates/lazaret-core/src/config/raw.rs")).expect("config/raw.rs");
        for line in raw.lines() {
            if let Some(field) = line.trim().strip_prefix("pub(super) ").and_then(|rest| rest.split_once(':')).map(|(name, _)| name) {
                tree.configuration_keys.insert(field.to_owned());
            }
        }
        tree
    })
}

impl Tree {
    /// The files whose path is `path` or ends with `/path`.
    fn files_named(&self, path: &str) -> Vec<&String> {
        self.files.iter().filter(|file| *file == path || file.ends_with(&format!("/{path}"))).collect()
    }

    /// Whether `name` (`…` at its end: a prefix) is a function of `functions`.
    fn has_function(functions: &BTreeSet<String>, name: &str) -> bool {
        match name.strip_suffix('…') {
            Some(prefix) => functions.iter().any(|function| function.starts_with(prefix)),
            None => functions.contains(name),
        }
    }

    /// Whether `path` (module names) ends a module path of the workspace.
    fn is_module(&self, path: &[&str]) -> bool {
        !path.is_empty() && self.modules.iter().any(|module| module.len() >= path.len() && module[module.len() - path.len()..] == *path)
    }

    /// Why the Rust path `path` names nothing in the tree, if it does not.
    fn rust_path_problem(&self, path: &str) -> Option<String> {
        let mut segments: Vec<&str> = path.trim_end_matches("()").split("::").collect();
        if matches!(segments.first(), Some(&("crate" | "self" | "super"))) {
            segments.remove(0);
        }
        let first = *segments.first()?;
        let lowercase = |segment: &&str| segment.starts_with(|c: char| c.is_ascii_lowercase() || c == '_');
        if lowercase(&first) && !self.modules.iter().any(|module| module.iter().any(|part| part == first)) {
            return None; // another crate's: std, tokio, nix
        }
        let modules: Vec<&str> = segments.iter().copied().take_while(lowercase).collect();
        let (module, items) = if modules.len() == segments.len() {
            if self.is_module(&modules) {
                return None;
            }
            (&segments[..segments.len() - 1], &segments[segments.len() - 1..])
        } else {
            (&segments[..modules.len()], &segments[modules.len()..])
        };
        if !module.is_empty() && !self.is_module(module) {
            return Some(format!("no module `{}`", module.join("::")));
        }
        items.iter().find(|item| !self.rust_words.contains(**item)).map(|item| format!("no `{item}` in the Rust sources"))
    }
}

#[test]
fn source_files_named_in_documents_exist() {
    let tree = tree();
    let mut missing = Vec::new();
    let mut named = 0;
    for (document, text) in documents() {
        for (code, _) in inline_code(&text) {
            let path = code.split(':').next().unwrap_or("").trim_end_matches(['.', ',']);
            let source = [".rs", ".lua", ".ts", ".py", ".mjs"].iter().any(|extension| path.ends_with(extension));
            let literal = !path.starts_with(['.', '/', '~']) && !path.contains(['*', '<', '{', ' ', '$', '|', '(']);
            named += usize::from(source && literal);
            if source && literal && tree.files_named(path).is_empty() {
                missing.push(format!("{document}: `{code}`"));
            }
        }
    }
    assert!(named > 50, "the documents name only {named} source files");
    assert!(missing.is_empty(), "source files named but not in the repository: {missing:#?}");
}

#[test]
fn functions_tests_and_rust_paths_named_in_documents_exist() {
    let tree = tree();
    let mut missing = Vec::new();
    let (mut names, mut rust_paths) = (0, 0);
    for (document, text) in documents() {
        let spans = inline_code(&text);
        for (index, (code, after)) in spans.iter().enumerate() {
            let code = code.as_str();
            if is_snake_name(code, 3) {
                names += 1;
                let name = code.strip_suffix('…').unwrap_or(code);
                let known =
                    Tree::has_function(&tree.functions, code) || tree.stems.contains(name) || tree.configuration_keys.contains(name);
                if !known {
                    missing.push(format!("{document}: `{code}` is no function, test, module or configuration key"));
                }
                // `name` (e2e_git): defined in that suite.
                if let Some(suite) =
                    after.trim_start().strip_prefix("(e2e_").map(|rest| rest.split([')', ',', ' ', ';', ':']).next().unwrap_or(""))
                {
                    let file = format!("tests/e2e_{suite}.rs");
                    if !tree.functions_by_file.get(&file).is_some_and(|functions| Tree::has_function(functions, code)) {
                        missing.push(format!("{document}: `{code}` is not in {file}"));
                    }
                }
            }
            // `file` (`name`...: `name` is defined in that file.
            if let ("(", Some((name, _))) = (after.trim(), spans.get(index + 1)) {
                let files = tree.files_named(code);
                if is_snake_name(name, 2) && !files.is_empty() {
                    let defined = files
                        .iter()
                        .any(|file| tree.functions_by_file.get(*file).is_some_and(|functions| Tree::has_function(functions, name)));
                    if !defined {
                        missing.push(format!("{document}: `{name}` is not in `{code}`"));
                    }
                }
            }
            let rust_path = code.contains("::")
                && code.trim_end_matches("()").split("::").all(|segment| {
                    !segment.is_empty() && identifiers(segment).count() == 1 && identifiers(segment).next() == Some(segment)
                });
            if rust_path {
                rust_paths += 1;
                if let Some(problem) = tree.rust_path_problem(code) {
                    missing.push(format!("{document}: `{code}`: {problem}"));
                }
            }
        }
    }
    assert!(names > 100 && rust_paths > 20, "the documents name only {names} functions and tests and {rust_paths} Rust paths");
    assert!(missing.is_empty(), "names in documents that the tree does not define: {missing:#?}");
}

/// The double-quoted phrases of `text` followed by the word "test(s)",
/// or by `, ` or ` and ` and such a phrase (`"a", "b" and "c" tests`).
fn quoted_test_titles(text: &str) -> Vec<&str> {
    let mut phrases = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split('"').collect();
        let mut listed = Vec::new();
        for index in (1..parts.len().saturating_sub(1)).step_by(2) {
            let after = parts[index + 1];
            listed.push(parts[index]);
            if after.starts_with(" test") {
                phrases.append(&mut listed);
            } else if !matches!(after, ", " | " and " | ", and " | " or ") {
                listed.clear();
            }
        }
    }
    phrases
}

/// Whether `title` holds `phrase`, whose `...` (or `…`) stands for any text.
fn title_matches(title: &str, phrase: &str) -> bool {
    let mut rest = title;
    for part in phrase.split("...").flat_map(|part| part.split('…')).map(str::trim).filter(|part| !part.is_empty()) {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[test]
fn editor_tests_named_in_documents_exist() {
    let tree = tree();
    assert!(tree.test_titles.iter().any(|title| title.starts_with("issue 26 item 8")), "read the editors' test titles");
    let mut missing = Vec::new();
    let mut named = 0;
    for (document, text) in documents() {
        for phrase in quoted_test_titles(&text) {
            named += 1;
            if !tree.test_titles.iter().any(|title| title_matches(title, phrase)) {
                missing.push(format!("{document}: \"{phrase}\""));
            }
        }
    }
    assert!(named > 0, "the documents name editor tests by their titles");
    assert!(missing.is_empty(), "editor tests named but not found by their titles: {missing:#?}");
}

#[test]
fn the_citation_rules_find_what_is_named() {
    let spans = inline_code("a `b.rs` (`c_d`) and\n```\n`fenced`\n```\n`e` (e2e_x).");
    assert_eq!(
        spans,
        [("b.rs".to_owned(), " (".to_owned()), ("c_d".to_owned(), ") and\n".to_owned()), ("e".to_owned(), " (e2e_x).\n".to_owned())]
    );
    assert!(is_snake_name("a_long_test_name", 3) && is_snake_name("a_prefix_of…", 3));
    assert!(
        !is_snake_name("two_parts", 3) && !is_snake_name("Not_a_name", 3) && !is_snake_name("a__b_c", 3) && !is_snake_name("a b_c_d", 3)
    );
    assert_eq!(
        defined_functions(
            "pub async fn spawn_it<'a>() {}\ndef test_py():\nlocal function lua_local()\nfunction M.lua_field()\nfunction M:lua_method()"
        ),
        ["lua_field", "lua_local", "lua_method", "spawn_it", "test_py"].map(str::to_owned).into()
    );
    assert_eq!(
        quoted_test_titles("the \"issue 26 item 3\" tests, a \"0 pending\" label, \"a\", \"b\" and \"x ... y\" test, \"c\", not a test"),
        ["issue 26 item 3", "a", "b", "x ... y"]
    );
    assert!(title_matches(
        "issue 26: the hostile corpus (strings.json) through every surface",
        "the hostile corpus ... through every surface"
    ));
    assert!(!title_matches("every surface through the hostile corpus", "the hostile corpus ... through every surface"));
    let tree = tree();
    assert_eq!(tree.rust_path_problem("lazaret_rpc::client::within"), None);
    assert_eq!(tree.rust_path_problem("std::fs::no_such_thing"), None, "another crate's path is not checked");
    assert_eq!(tree.rust_path_problem("git_sentry::pod"), None, "a module alone");
    assert_eq!(tree.rust_path_problem("git_sentry::no_such_module::f"), Some("no module `git_sentry::no_such_module`".to_owned()));
    assert_eq!(tree.rust_path_problem("Domain::no_such_method"), Some("no `no_such_method` in the Rust sources".to_owned()));
}
