//! The installed layout: the Debian package that `tests/run` builds with
//! `scripts/package-deb` (unpacked into a scratch root) and `scripts/install`
//! under a scratch prefix, each checked for its files, `--version`, the
//! helpers that `lazaret doctor` finds beside the CLI, man pages and shell
//! completions; `scripts/install --uninstall` removes exactly what it put.

use std::path::{Path, PathBuf};
use std::process::Command;

use lazaret_test_support::*;

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// What `--version` must say: the workspace version and this checkout's commit.
fn expected_version() -> String {
    let commit = Command::new("git").arg("-C").arg(repository_root()).args(["rev-parse", "--short=12", "HEAD"]).output().expect("git");
    format!("lazaret {} (commit {})", env!("CARGO_PKG_VERSION"), stdout(&commit).trim())
}

/// Doctor's helper checks, run from an installed `lazaret`: both pass and
/// point into `helper_dir`.
fn assert_doctor_finds_installed_helpers(lazaret: &Path, helper_dir: &Path) {
    let env = TestEnv::new();
    let output = Command::new(lazaret)
        .args(["doctor", "--json"])
        .env("XDG_CONFIG_HOME", env.path().join("config"))
        .env("XDG_DATA_HOME", env.path().join("data"))
        .env("XDG_RUNTIME_DIR", env.path().join("run"))
        .env_remove("LAZARET_HELPER_DIR")
        .output()
        .expect("doctor");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("doctor json");
    for helper in ["lazaret-escalate", "lazaret-sidecar"] {
        let check = json["checks"].as_array().expect("checks").iter().find(|check| check["name"] == helper).expect("helper check");
        assert_eq!(check["status"], "pass", "{check}");
        let detail = check["detail"].as_str().expect("detail");
        assert!(detail.starts_with(&helper_dir.join(helper).display().to_string()), "the installed helper is used: {detail}");
        assert!(detail.contains("same build"), "{detail}");
    }
}

fn assert_man_and_completions(share: &Path, zsh_dir: &str) {
    for page in ["lazaret.1.gz", "lazaret-run.1.gz", "lazaret-doctor.1.gz", "lazaret-net-allow.1.gz"] {
        assert!(share.join("man/man1").join(page).is_file(), "man page {page}");
    }
    let page = Command::new("man")
        .arg("-l")
        .arg(share.join("man/man1/lazaret-run.1.gz"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man");
    let text = stdout(&page);
    assert!(text.contains("lazaret-run") && text.contains("Run a command"), "man lazaret-run shows the CLI's help: {text}");
    // bash-completion's own loader finds it where it looks (XDG_DATA_DIRS).
    let loader = "source /usr/share/bash-completion/bash_completion && _completion_loader lazaret; complete -p lazaret";
    let complete = Command::new("bash").arg("-c").arg(loader).env("XDG_DATA_DIRS", share).output().expect("bash");
    assert!(stdout(&complete).contains("-F _lazaret") && stdout(&complete).trim_end().ends_with(" lazaret"), "{}", stderr(&complete));
    assert!(share.join(zsh_dir).join("_lazaret").is_file(), "zsh completion");
    assert!(share.join("fish/vendor_completions.d/lazaret.fish").is_file(), "fish completion");
}

fn assert_static(path: &Path) {
    let file = Command::new("file").arg("-b").arg(path).output().expect("file");
    let description = stdout(&file);
    assert!(
        !description.contains("dynamically linked") && (description.contains("statically linked") || description.contains("static-pie")),
        "{}: {description}",
        path.display()
    );
}

#[test]
fn the_debian_package_installs_the_cli_its_helpers_man_pages_and_completions() {
    let Some(deb) = std::env::var_os("LAZARET_TEST_DEB").map(PathBuf::from) else {
        missing_requirement("LAZARET_TEST_DEB, the package tests/run builds with scripts/package-deb");
        return;
    };
    let field = |name: &str| stdout(&Command::new("dpkg-deb").arg("-f").arg(&deb).arg(name).output().expect("dpkg-deb"));
    assert_eq!(field("Package").trim(), "lazaret");
    assert_eq!(field("Version").trim(), env!("CARGO_PKG_VERSION"));
    let depends = field("Depends");
    for runtime in
        ["podman", "catatonit", "runsc", "runc", "fuse-overlayfs", "uidmap", "slirp4netns | passt", "git", "containernetworking-plugins"]
    {
        assert!(depends.split(',').any(|entry| entry.trim().starts_with(runtime)), "Depends names {runtime}: {depends}");
    }
    let root = tempfile::tempdir().expect("tempdir");
    let unpack = Command::new("dpkg-deb").arg("-x").arg(&deb).arg(root.path()).output().expect("dpkg-deb -x");
    assert!(unpack.status.success(), "{}", stderr(&unpack));
    let usr = root.path().join("usr");
    let lazaret = usr.join("bin/lazaret");
    let version = Command::new(&lazaret).arg("--version").output().expect("lazaret --version");
    assert_eq!(stdout(&version).trim(), expected_version());
    for helper in ["lazaret-escalate", "lazaret-sidecar"] {
        assert_static(&usr.join("lib/lazaret").join(helper));
    }
    assert_doctor_finds_installed_helpers(&lazaret, &usr.join("lib/lazaret"));
    assert_man_and_completions(&usr.join("share"), "zsh/vendor-completions");
    assert!(usr.join("share/doc/lazaret/copyright").is_file());
    // Nothing outside /usr, and every file is root's in the archive.
    let listing = stdout(&Command::new("dpkg-deb").arg("-c").arg(&deb).output().expect("dpkg-deb -c"));
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.get(1), Some(&"root/root"), "{line}");
        let path = fields.last().expect("path");
        assert!(*path == "./" || path.starts_with("./usr/"), "{line}");
    }
}

#[test]
fn scripts_install_lays_out_a_prefix_and_uninstall_removes_exactly_that() {
    if std::env::var_os("LAZARET_TEST_DEB").is_none() {
        missing_requirement("the release build tests/run makes for the package (LAZARET_TEST_DEB)");
        return;
    }
    let prefix = tempfile::tempdir().expect("tempdir");
    // Something of the user's already under the prefix stays untouched.
    std::fs::create_dir_all(prefix.path().join("bin")).expect("mkdir");
    std::fs::write(prefix.path().join("bin/users-tool"), "#!/bin/sh\n").expect("write");
    let before = tree(prefix.path());
    let install = Command::new(repository_root().join("scripts/install"))
        .arg("--prefix")
        .arg(prefix.path())
        .arg("--no-build")
        .output()
        .expect("install");
    assert!(install.status.success(), "{}", stderr(&install));
    let lazaret = prefix.path().join("bin/lazaret");
    assert_eq!(stdout(&Command::new(&lazaret).arg("--version").output().expect("version")).trim(), expected_version());
    assert_doctor_finds_installed_helpers(&lazaret, &prefix.path().join("lib/lazaret"));
    assert_man_and_completions(&prefix.path().join("share"), "zsh/site-functions");
    // Installing again (an upgrade) is fine, and uninstall still removes all of it.
    let again = Command::new(repository_root().join("scripts/install"))
        .arg("--prefix")
        .arg(prefix.path())
        .arg("--no-build")
        .output()
        .expect("install");
    assert!(again.status.success(), "{}", stderr(&again));
    let uninstall = Command::new(repository_root().join("scripts/install"))
        .arg("--prefix")
        .arg(prefix.path())
        .arg("--uninstall")
        .output()
        .expect("uninstall");
    assert!(uninstall.status.success(), "{}", stderr(&uninstall));
    assert_eq!(tree(prefix.path()), before, "uninstall leaves the prefix as it was");
}

/// Every path under `root`, relative, sorted.
fn tree(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            paths.push(path.strip_prefix(root).expect("prefix").display().to_string());
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
            }
        }
    }
    paths.sort();
    paths
}
