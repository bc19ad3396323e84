//! Shared helpers of the end-to-end suites: an isolated configuration and
//! data directory per test, the real `lazaret` binary, and the real podman.
#![allow(dead_code)] // each suite uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

pub const DEFAULT_IMAGE: &str = "localhost/lazaret-default:1";

/// A throwaway home for one test: its own XDG config, data and runtime dirs.
pub struct TestEnv {
    pub root: tempfile::TempDir,
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let root = tempfile::Builder::new().prefix("lzt").tempdir_in("/tmp").expect("tempdir");
        for dir in ["config/lazaret", "data", "run"] {
            std::fs::create_dir_all(root.path().join(dir)).expect("mkdir");
        }
        std::fs::set_permissions(root.path().join("run"), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
        TestEnv { root }
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    pub fn config_file(&self) -> PathBuf {
        self.path().join("config/lazaret/config.toml")
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(self.config_file(), text).expect("write config");
    }

    /// The real `lazaret` binary with this environment.
    pub fn lazaret(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lazaret"));
        command
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .env("XDG_DATA_HOME", self.path().join("data"))
            .env("XDG_RUNTIME_DIR", self.path().join("run"))
            .env_remove("LAZARET_LOG");
        command
    }

    pub fn workspace(&self, name: &str) -> PathBuf {
        let dir = self.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir workspace");
        dir
    }
}

pub fn run(command: &mut Command) -> Output {
    command.output().expect("spawn")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `target/` of this build, found from the binary under test.
pub fn target_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_lazaret"));
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}

/// Where the static helpers are built (`tests/run` builds them first).
pub fn static_helper(name: &str) -> PathBuf {
    target_dir().join("x86_64-unknown-linux-musl/static").join(name)
}

static IMAGE: Once = Once::new();

/// Builds the default image through the CLI (cached after the first build).
pub fn ensure_default_image() {
    IMAGE.call_once(|| {
        let env = TestEnv::new();
        let output = run(env.lazaret().args(["image", "build"]));
        assert!(output.status.success(), "lazaret image build failed: {}", stderr(&output));
    });
}

/// Plain podman with the flags these machines need for a runsc container.
pub fn podman_runsc(arguments: &[&str]) -> Output {
    let (nofile, nproc) = ("--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096");
    let mut command = Command::new("podman");
    command.args([
        "run",
        "--rm",
        "--runtime=runsc",
        "--runtime-flag=ignore-cgroups",
        "--network=none",
        "--runtime-flag=network=none",
        nofile,
        nproc,
    ]);
    command.args(arguments);
    command.output().expect("spawn podman")
}
