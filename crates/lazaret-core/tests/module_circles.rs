//! No Rust module imports one that imports it back, and no module of
//! `lazaret-coordinator` outside `coordinator/` imports the coordinator's
//! top level (issue 46). The Lua plugin and the VS Code extension hold the
//! same rule in their own unit suites (`tests/nvim/unit/modules_spec.lua`,
//! `vscode-extension/test/unit/imports.test.ts`).
//!
//! The graph is read from the tree, per crate target (each lib and bin of
//! every workspace package, from `cargo metadata`), so files that move or
//! split are followed without a list to keep:
//!
//! - The modules are what `mod NAME;` and `mod NAME { ... }` declare,
//!   followed from the target's root file (`NAME.rs` or `NAME/mod.rs` next
//!   to a `mod.rs`, `lib.rs` or `main.rs`, else in the directory named
//!   after the declaring file). Comments and string, char and raw string
//!   literals are removed first.
//! - A reference is any path that starts with `crate::`, `self::`,
//!   `super::` (repeated), the name of a child module, or a name a `use` in
//!   the same module bound to a module (`use crate::git_sentry::{self, ..}`
//!   then `git_sentry::sync::x`); `use` trees are expanded. It points at
//!   the longest prefix of the path that is a module: `crate::a::b::Item`
//!   at `a::b` when `a::b` is a module, else at `a`. A reference is made by
//!   the innermost module it is written in, inline modules included.
//! - A reference to the module itself or to one of its ancestors is
//!   containment, not a circle (`super::Item`, `crate::Error`, `crate::a`
//!   from inside `a::b`); every other reference is an edge, a parent's use
//!   of its own child included. Declaring a child (`mod b;`) is no edge.
//! - A circle is a strongly connected set of two or more modules.
//!   `#[cfg(test)]` modules are modules like any other: nothing imports
//!   them, so they never close a circle. The top-level rule holds for code
//!   that ships: a test module outside `coordinator/` may reach into it.
//!
//! What this does not see: a re-export (`super::Item` where the parent
//! re-exports `Item` from a sibling counts as the parent), and names a glob
//! import (`use x::*`) brings in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A token of Rust source with comments and literals removed: an
/// identifier (keywords included), `::`, or one punctuation character.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Path,
    Punct(char),
}

/// The tokens of `source` that matter here, each with its line.
fn tokens(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut at = 0;
    let count_lines = |from: usize, to: usize, line: &mut usize| {
        *line += chars[from..to.min(chars.len())].iter().filter(|&&c| c == '\n').count();
    };
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c == '\n' {
            line += 1;
            at += 1;
        } else if c.is_whitespace() {
            at += 1;
        } else if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = at;
            let mut depth = 0;
            while at < chars.len() {
                if chars[at] == '/' && chars.get(at + 1) == Some(&'*') {
                    depth += 1;
                    at += 2;
                } else if chars[at] == '*' && chars.get(at + 1) == Some(&'/') {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
            count_lines(start, at, &mut line);
        } else if c == '"' {
            let start = at;
            at += 1;
            while at < chars.len() && chars[at] != '"' {
                at += if chars[at] == '\\' { 2 } else { 1 };
            }
            at += 1;
            count_lines(start, at, &mut line);
        } else if c == '\'' {
            // A char literal ('a', '\n', '{'), else a lifetime or label.
            if next == Some('\\') {
                let start = at;
                at += 2;
                while at < chars.len() && chars[at] != '\'' {
                    at += 1;
                }
                at += 1;
                count_lines(start, at, &mut line);
            } else if chars.get(at + 2) == Some(&'\'') {
                at += 3;
            } else {
                at += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = at;
            while at < chars.len() && (chars[at].is_alphanumeric() || chars[at] == '_') {
                at += 1;
            }
            let word: String = chars[start..at].iter().collect();
            let following = chars.get(at).copied();
            let prefix = matches!(word.as_str(), "r" | "b" | "br" | "c" | "cr");
            if prefix && matches!(following, Some('"' | '#')) && (word.contains('r') || following == Some('"')) {
                // A raw or byte string: r"..", r#".."#, b"..", br#".."#.
                let mut hashes = 0;
                while chars.get(at) == Some(&'#') {
                    hashes += 1;
                    at += 1;
                }
                if chars.get(at) != Some(&'"') {
                    // `r#ident`, a raw identifier.
                    let start = at;
                    while at < chars.len() && (chars[at].is_alphanumeric() || chars[at] == '_') {
                        at += 1;
                    }
                    out.push((Token::Ident(chars[start..at].iter().collect()), line));
                    continue;
                }
                let start = at;
                at += 1;
                loop {
                    if at >= chars.len() {
                        break;
                    }
                    if chars[at] == '\\' && !word.contains('r') {
                        at += 2;
                        continue;
                    }
                    if chars[at] == '"' && (0..hashes).all(|index| chars.get(at + 1 + index) == Some(&'#')) {
                        at += 1 + hashes;
                        break;
                    }
                    at += 1;
                }
                count_lines(start, at, &mut line);
            } else if word == "b" && following == Some('\'') {
                // A byte literal: b'x', b'\n'.
                at += 1;
                if chars.get(at + 1) == Some(&'\\') {
                    at += 2;
                }
                while at < chars.len() && chars[at] != '\'' {
                    at += 1;
                }
                at += 1;
            } else {
                out.push((Token::Ident(word), line));
            }
        } else if c == ':' && next == Some(':') {
            out.push((Token::Path, line));
            at += 2;
        } else {
            out.push((Token::Punct(c), line));
            at += 1;
        }
    }
    out
}

fn ident(token: Option<&(Token, usize)>) -> Option<&str> {
    match token {
        Some((Token::Ident(word), _)) => Some(word),
        _ => None,
    }
}

fn punct(token: Option<&(Token, usize)>, wanted: char) -> bool {
    matches!(token, Some((Token::Punct(c), _)) if *c == wanted)
}

/// A path written in a module: its segments (`crate`, `super`, `self` or a
/// name first) and the name it binds when it is a `use`.
#[derive(Debug, Clone)]
struct Reference {
    segments: Vec<String>,
    line: usize,
    binds: Option<String>,
}

#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    line: usize,
    test: bool,
    children: BTreeSet<String>,
    references: Vec<Reference>,
}

/// One crate target's modules, by path (`[]` is the root).
type Modules = BTreeMap<Vec<String>, Module>;

/// The directory holding the files of the children of `file`'s module.
fn children_directory(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_name().and_then(|name| name.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => parent,
        _ => parent.join(file.file_stem().unwrap_or_default()),
    }
}

/// Parses one `use` tree from `at` (just after `use`) to its `;`, adding a
/// reference for each leaf. Returns the index after the `;`.
fn use_tree(tokens: &[(Token, usize)], mut at: usize, prefix: &[String], out: &mut Vec<Reference>) -> usize {
    let mut segments = prefix.to_vec();
    let line = tokens.get(at).map_or(0, |token| token.1);
    if matches!(tokens.get(at), Some((Token::Path, _))) {
        // `use ::std::x`: an external crate.
        at += 1;
    }
    loop {
        match tokens.get(at) {
            Some((Token::Ident(word), _)) if word == "as" => {
                let alias = ident(tokens.get(at + 1)).map(str::to_owned);
                out.push(Reference { binds: alias.filter(|alias| alias != "_"), segments: segments.clone(), line });
                return at + 2;
            }
            Some((Token::Ident(word), _)) => {
                if word == "self" && !segments.is_empty() {
                    // `use a::{self}` binds `a`.
                } else {
                    segments.push(word.clone());
                }
                at += 1;
                if matches!(tokens.get(at), Some((Token::Path, _))) {
                    at += 1;
                    continue;
                }
                let binds = segments.last().cloned();
                out.push(Reference { segments, line, binds });
                return at;
            }
            Some((Token::Punct('*'), _)) => {
                out.push(Reference { segments, line, binds: None });
                return at + 1;
            }
            Some((Token::Punct('{'), _)) => {
                at += 1;
                loop {
                    match tokens.get(at) {
                        Some((Token::Punct('}'), _)) => return at + 1,
                        Some((Token::Punct(','), _)) => at += 1,
                        None => return at,
                        _ => at = use_tree(tokens, at, &segments, out),
                    }
                }
            }
            _ => return at,
        }
    }
}

/// Whether the tokens before `at` (a `mod` keyword, behind any visibility)
/// end with `#[cfg(test)]`.
fn is_test_module(tokens: &[(Token, usize)], mut at: usize) -> bool {
    // Skip the visibility: `pub`, `pub(crate)`, `pub(super)`, `pub(self)`.
    while at > 0 {
        match &tokens[at - 1].0 {
            Token::Ident(word) if matches!(word.as_str(), "pub" | "crate" | "super" | "self" | "in") => at -= 1,
            Token::Punct('(' | ')') | Token::Path => at -= 1,
            _ => break,
        }
    }
    let attribute: Vec<&Token> = tokens[at.saturating_sub(7)..at].iter().map(|token| &token.0).collect();
    let expected = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".to_owned()),
        Token::Punct('('),
        Token::Ident("test".to_owned()),
        Token::Punct(')'),
        Token::Punct(']'),
    ];
    attribute.len() == 7 && attribute.iter().zip(expected.iter()).all(|(found, expected)| *found == expected)
}

/// Reads the module in `file` (at `path`) and, through its `mod NAME;`
/// declarations, every module below it.
fn read_module(file: &Path, path: Vec<String>, test: bool, modules: &mut Modules) {
    let source = std::fs::read_to_string(file).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
    let tokens = tokens(&source);
    modules.insert(path.clone(), Module { file: file.to_path_buf(), line: 1, test, ..Module::default() });
    // The inline modules open at this point, with the brace depth that closes each.
    let mut open: Vec<(Vec<String>, usize)> = vec![(path.clone(), 0)];
    let mut depth = 0;
    let mut files = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let current = open.last().map(|(module, _)| module.clone()).unwrap_or_default();
        match &tokens[at].0 {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if open.len() > 1 && open.last().is_some_and(|(_, closes)| *closes == depth) {
                    open.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let Some(name) = ident(tokens.get(at + 1)) {
                    let child: Vec<String> = current.iter().cloned().chain([name.to_owned()]).collect();
                    let test = modules[&current].test || is_test_module(&tokens, at);
                    modules.get_mut(&current).expect("the current module").children.insert(name.to_owned());
                    if punct(tokens.get(at + 2), ';') {
                        assert_eq!(current, path, "{}: a file module inside an inline module is not read", file.display());
                        files.push((name.to_owned(), child, test));
                    } else if punct(tokens.get(at + 2), '{') {
                        let line = tokens[at].1;
                        modules.insert(child.clone(), Module { file: file.to_path_buf(), line, test, ..Module::default() });
                        open.push((child, depth));
                        depth += 1;
                        at += 3;
                        continue;
                    }
                    at += 2;
                    continue;
                }
            }
            Token::Ident(word) if word == "use" => {
                let mut found = Vec::new();
                at = use_tree(&tokens, at + 1, &[], &mut found);
                modules.get_mut(&current).expect("the current module").references.extend(found);
                continue;
            }
            Token::Ident(_) => {
                // A path: a run of `name::name::...` not itself after `::`.
                let after_path = at > 0 && matches!(tokens[at - 1].0, Token::Path);
                if !after_path && matches!(tokens.get(at + 1), Some((Token::Path, _))) {
                    let line = tokens[at].1;
                    let mut segments = Vec::new();
                    while let Some(word) = ident(tokens.get(at)) {
                        segments.push(word.to_owned());
                        if !matches!(tokens.get(at + 1), Some((Token::Path, _))) {
                            break;
                        }
                        at += 2;
                    }
                    modules.get_mut(&current).expect("the current module").references.push(Reference { segments, line, binds: None });
                }
            }
            _ => {}
        }
        at += 1;
    }
    let directory = children_directory(file);
    for (name, child, test) in files {
        let flat = directory.join(format!("{name}.rs"));
        let nested = directory.join(&name).join("mod.rs");
        let found = if flat.is_file() { flat } else { nested };
        assert!(found.is_file(), "{}: `mod {name};` has no file", file.display());
        read_module(&found, child, test, modules);
    }
}

/// Where a reference made in `from` points, before taking the longest
/// module prefix; `None` for an external crate or a local item.
fn resolve(
    modules: &Modules,
    bindings: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    from: &[String],
    segments: &[String],
) -> Option<Vec<String>> {
    let (first, rest) = segments.split_first()?;
    let start: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => from.to_vec(),
        "super" => {
            let supers = segments.iter().take_while(|segment| *segment == "super").count();
            let start = from.get(..from.len().checked_sub(supers)?)?.to_vec();
            return Some(start.into_iter().chain(segments[supers..].iter().cloned()).collect());
        }
        name if modules.get(from).is_some_and(|module| module.children.contains(name)) => {
            from.iter().cloned().chain([name.to_owned()]).collect()
        }
        name => bindings.get(from).and_then(|names| names.get(name)).cloned()?,
    };
    Some(start.into_iter().chain(rest.iter().cloned()).collect())
}

/// The longest prefix of `path` that is a module.
fn module_of(modules: &Modules, path: &[String]) -> Vec<String> {
    (0..=path.len()).rev().map(|length| path[..length].to_vec()).find(|prefix| modules.contains_key(prefix)).unwrap_or_default()
}

/// Edges between modules: (from, to) with the line of the first reference.
type Edges = BTreeMap<(Vec<String>, Vec<String>), usize>;

fn edges(modules: &Modules) -> Edges {
    // The names each module's `use`s bind to modules, found in two rounds
    // (a `use` may name what another `use` of the module bound).
    let mut bindings: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for _ in 0..2 {
        for (path, module) in modules {
            for reference in &module.references {
                let (Some(name), Some(target)) = (&reference.binds, resolve(modules, &bindings, path, &reference.segments)) else {
                    continue;
                };
                if modules.contains_key(&target) {
                    bindings.entry(path.clone()).or_default().insert(name.clone(), target);
                }
            }
        }
    }
    let mut edges = Edges::new();
    for (path, module) in modules {
        for reference in &module.references {
            let Some(target) = resolve(modules, &bindings, path, &reference.segments) else { continue };
            let target = module_of(modules, &target);
            if !path.starts_with(&target) {
                edges.entry((path.clone(), target)).or_insert(reference.line);
            }
        }
    }
    edges
}

/// Every module that `start` reaches and that reaches `start` back.
fn strongly_connected(start: &[String], edges: &Edges) -> BTreeSet<Vec<String>> {
    let reach = |forward: bool| {
        let mut seen = BTreeSet::from([start.to_vec()]);
        let mut queue = vec![start.to_vec()];
        while let Some(node) = queue.pop() {
            for (from, to) in edges.keys() {
                let (here, there) = if forward { (from, to) } else { (to, from) };
                if here == &node && seen.insert(there.clone()) {
                    queue.push(there.clone());
                }
            }
        }
        seen
    };
    reach(true).intersection(&reach(false)).cloned().collect()
}

/// A shortest cycle from the first of `members` (a strongly connected set)
/// back to it, through members only.
fn cycle_through(members: &BTreeSet<Vec<String>>, edges: &Edges) -> Vec<Vec<String>> {
    let start = members.iter().next().cloned().unwrap_or_default();
    let mut came_from: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(node) = queue.pop_front() {
        for (_, target) in edges.keys().filter(|(from, to)| from == &node && members.contains(to)) {
            if *target == start {
                // Walk back from `node` to the start.
                let mut cycle = vec![start.clone(), node.clone()];
                while let Some(previous) = came_from.get(cycle.last().expect("a member")) {
                    cycle.push(previous.clone());
                }
                if cycle.last() != Some(&start) {
                    cycle.push(start.clone());
                }
                cycle.reverse();
                cycle.dedup();
                return cycle;
            }
            if !came_from.contains_key(target) {
                came_from.insert(target.clone(), node.clone());
                queue.push_back(target.clone());
            }
        }
    }
    vec![start]
}

/// A circle: one cycle through it, and all its modules.
type Circle = (Vec<Vec<String>>, BTreeSet<Vec<String>>);

/// Each strongly connected set of two or more modules.
fn circles(nodes: &BTreeSet<Vec<String>>, edges: &Edges) -> Vec<Circle> {
    let mut placed = BTreeSet::new();
    let mut circles = Vec::new();
    for node in nodes {
        if placed.contains(node) {
            continue;
        }
        let members = strongly_connected(node, edges);
        placed.extend(members.iter().cloned());
        if members.len() > 1 {
            circles.push((cycle_through(&members, edges), members));
        }
    }
    circles
}

fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

/// A target of a workspace package: its package, name and root file.
struct Target {
    package: String,
    name: String,
    root: PathBuf,
}

/// Every lib and bin target of the workspace's packages, from `cargo metadata`.
fn targets() -> Vec<Target> {
    let output = std::process::Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .output()
        .expect("cargo metadata");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let mut targets = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        for target in package["targets"].as_array().expect("targets") {
            let kinds: Vec<&str> = target["kind"].as_array().expect("kind").iter().filter_map(|kind| kind.as_str()).collect();
            if kinds.iter().any(|kind| matches!(*kind, "lib" | "rlib" | "bin" | "proc-macro")) {
                targets.push(Target {
                    package: package["name"].as_str().expect("a package name").to_owned(),
                    name: target["name"].as_str().expect("a target name").to_owned(),
                    root: PathBuf::from(target["src_path"].as_str().expect("src_path")),
                });
            }
        }
    }
    targets
}

/// The problems of one crate target: its circles, and (for the
/// coordinator's library) modules outside `coordinator/` importing it.
fn problems(target: &Target, modules: &Modules) -> Vec<String> {
    let edges = edges(modules);
    let nodes: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let root = target.root.parent().unwrap_or(Path::new(""));
    let at = |from: &Vec<String>, to: &Vec<String>| {
        let module = &modules[from];
        let line = edges.get(&(from.clone(), to.clone())).copied().unwrap_or(module.line);
        format!("{}:{line}", module.file.strip_prefix(root).unwrap_or(&module.file).display())
    };
    let mut problems = Vec::new();
    for (cycle, members) in circles(&nodes, &edges) {
        let steps: Vec<String> =
            cycle.windows(2).map(|pair| format!("{} -> {} ({})", name(&pair[0]), name(&pair[1]), at(&pair[0], &pair[1]))).collect();
        let others: Vec<String> = members.iter().filter(|member| !cycle.contains(member)).map(|member| name(member)).collect();
        let also = if others.is_empty() { String::new() } else { format!(" (in the same circle: {})", others.join(", ")) };
        problems.push(format!("{} ({}): circle: {}{also}", target.package, target.name, steps.join(", ")));
    }
    if target.package == "lazaret-coordinator" && target.name == "lazaret_coordinator" {
        let top = vec!["coordinator".to_owned()];
        for (from, to) in edges.keys() {
            let lower = !from.is_empty() && !from.starts_with(&top) && !modules[from].test;
            if lower && to.starts_with(&top) {
                problems.push(format!(
                    "{} ({}): {} imports the coordinator's top level {} ({})",
                    target.package,
                    target.name,
                    name(from),
                    name(to),
                    at(from, to)
                ));
            }
        }
    }
    problems
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let targets = targets();
    assert!(targets.iter().any(|target| target.package == "lazaret-coordinator"), "read the workspace's targets");
    let mut problems = Vec::new();
    let mut read = 0;
    for target in &targets {
        let mut modules = Modules::new();
        read_module(&target.root, Vec::new(), false, &mut modules);
        read += modules.len();
        problems.extend(self::problems(target, &modules));
    }
    assert!(read > 100, "read only {read} modules");
    assert!(problems.is_empty(), "module circles and imports of the coordinator's top level:\n{}", problems.join("\n"));
}

/// Writes `files` (relative path, source) into a fresh directory and reads
/// the crate rooted at its `lib.rs`.
fn crate_of(package: &str, files: &[(&str, &str)]) -> Vec<String> {
    let directory = tempfile::tempdir().expect("a temporary directory");
    for (path, source) in files {
        let path = directory.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
        std::fs::write(&path, source).expect("a source file");
    }
    let target = Target { package: package.to_owned(), name: package.replace('-', "_"), root: directory.path().join("lib.rs") };
    let mut modules = Modules::new();
    read_module(&target.root, Vec::new(), false, &mut modules);
    problems(&target, &modules)
}

#[test]
fn a_circle_through_a_use_group_or_a_path_is_found() {
    let problems = crate_of(
        "example",
        &[
            ("lib.rs", "mod a; mod b; mod c; mod d;"),
            ("a.rs", "use crate::{b::{self, Thing}, d};\npub fn f() {}"),
            ("d.rs", ""),
            ("b.rs", "pub struct Thing;\nfn g() { super::c::h(); }"),
            ("c.rs", "pub fn h() { let _ = crate::a::f; }"),
        ],
    );
    assert_eq!(problems, ["example (example): circle: a -> b (a.rs:1), b -> c (b.rs:2), c -> a (c.rs:1)"]);
}

#[test]
fn a_use_bound_module_and_a_tests_module_are_followed() {
    // `a` reaches `b::inner` through the name `b` that its `use` bound; the
    // inline `tests` of `b::inner` imports `a` and is found as its own module.
    let problems = crate_of(
        "example",
        &[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b;\nfn f() { b::inner::g(); }"),
            ("b/mod.rs", "pub mod inner;"),
            ("b/inner.rs", "pub fn g() {}\n#[cfg(test)]\nmod tests { use crate::a; }\nfn h() { super::super::a::f(); }"),
        ],
    );
    assert_eq!(problems, ["example (example): circle: a -> b::inner (a.rs:2), b::inner -> a (b/inner.rs:4)"]);
}

#[test]
fn containment_comments_and_strings_are_not_circles() {
    let problems = crate_of(
        "example",
        &[
            ("lib.rs", "pub mod a;\npub type Result = ();\nfn f() { a::b::g(); }"),
            ("a/mod.rs", "pub mod b;\npub struct Item;\nfn f() { b::g(); }"),
            (
                "a/b.rs",
                "use super::Item;\nuse crate::Result;\n// crate::a::x\n/* super::c */\npub fn g() { let _ = \"crate::a::f\"; let _ = r#\"self::a\"#; let _ = '\"'; let _ = crate::a::Item; }\n#[cfg(test)]\nmod tests { use super::*; }",
            ),
        ],
    );
    assert_eq!(problems, Vec::<String>::new());
}

#[test]
fn a_lower_module_importing_the_coordinator_is_found() {
    let files = [
        ("lib.rs", "mod coordinator; mod backend; mod podman; pub use coordinator::run;"),
        ("coordinator/mod.rs", "pub mod api;\npub fn run() { crate::backend::start(); }"),
        ("coordinator/api.rs", "pub struct Domain;"),
        ("backend.rs", "use crate::coordinator::api::Domain;\npub fn start() {}"),
        ("podman.rs", "#[cfg(test)]\nmod tests { use crate::coordinator::api::Domain; }"),
    ];
    let problems = crate_of("lazaret-coordinator", &files);
    assert_eq!(
        problems,
        ["lazaret-coordinator (lazaret_coordinator): backend imports the coordinator's top level coordinator::api (backend.rs:1)"]
    );
}
