//! Build script shared by `lazaret` and the two static helpers: puts the git
//! commit of the checkout into `LAZARET_GIT_COMMIT`, so `--version` of each
//! names it and `lazaret doctor` can tell a helper of another build. A
//! source tree without git (a tarball) may set `LAZARET_GIT_COMMIT` itself.

use std::path::Path;
use std::process::Command;

fn git(arguments: &[&str]) -> Option<String> {
    let output = Command::new("git").args(arguments).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=LAZARET_GIT_COMMIT");
    let commit = std::env::var("LAZARET_GIT_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LAZARET_GIT_COMMIT={commit}");
    // Build again when HEAD moves: HEAD itself, the branch it names, packed refs.
    // In a linked worktree HEAD is in its own git directory, while branches and
    // packed refs are in the common one.
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        let common_dir = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).unwrap_or_else(|| git_dir.display().to_string());
        let common_dir = Path::new(&common_dir);
        let mut watched = vec![git_dir.join("HEAD"), common_dir.join("packed-refs")];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(common_dir.join(branch));
        }
        for path in watched.into_iter().filter(|path| path.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
