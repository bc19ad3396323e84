"""Fixtures of the Neovim end-to-end tests: a real Lazaret domain (real
coordinator, podman, gVisor) in a throwaway environment, and a real headless
Neovim (`nvim --embed`, driven with pynvim) with the plugin installed as a
start package and its working directory in the domain's workspace."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvim
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from lzenv import LazaretEnv, wait_until  # noqa: E402

REPO_ROOT = HERE.parents[2]
# LAZARET_NVIM_PLUGIN: another copy of the plugin (e.g. the last commit's, in
# a `git worktree`) to see a test fail against the code before a change.
PLUGIN = Path(os.environ.get("LAZARET_NVIM_PLUGIN") or REPO_ROOT / "editors/nvim").resolve()
NVIM = os.environ.get("LAZARET_NVIM") or shutil.which("nvim") or "nvim"


@pytest.fixture(scope="session")
def packpath():
    root = Path(tempfile.mkdtemp(prefix="lzn-pack", dir="/tmp"))
    start = root / "pack/lazaret/start"
    start.mkdir(parents=True)
    (start / "lazaret").symlink_to(PLUGIN)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def image():
    env = LazaretEnv()
    try:
        env.ensure_image()
    finally:
        env.close()


class Editor:
    """A real Neovim with the plugin, for one test."""

    def __init__(self, env, cwd, packpath, extra_env=None):
        variables = env.environ()
        variables["LAZARET_TEST_PACKPATH"] = str(packpath)
        variables["LAZARET_BIN"] = env.binary
        variables.update(extra_env or {})
        argv = ["env", "-C", str(cwd)] + [f"{k}={v}" for k, v in variables.items() if k in PASSED or k.startswith(("XDG_", "LAZARET_"))]
        argv += [NVIM, "--embed", "--headless", "-u", str(HERE.parent / "init.lua"), "-i", "NONE", "-n"]
        self.nvim = pynvim.attach("child", argv=argv)

    def lua(self, code, *args):
        return self.nvim.exec_lua(code, *args)

    def wait(self, expression, timeout=10.0, interval=0.05):
        """Polls a Lua expression until it is truthy; returns its last value."""
        return wait_until(timeout, lambda: self.lua("return " + expression), interval)

    def buffer_text(self, buf=0):
        return "\n".join(self.lua("return vim.api.nvim_buf_get_lines(...,0,-1,false)", buf))

    def notes(self):
        """Every vim.notify message so far (recorded by tests/nvim/init.lua)."""
        return self.lua("return _G.lazaret_test_notes")

    def prompts(self):
        """Every vim.ui.input/select call so far: kind, prompt, default, items."""
        return self.lua("return _G.lazaret_test_prompts")

    def wait_prompt(self, kind, count_before, timeout=10.0):
        """Waits for a new vim.ui prompt of KIND; returns it."""
        found = self.wait(f"#_G.lazaret_test_prompts > {count_before} and _G.lazaret_test_prompts[#_G.lazaret_test_prompts].kind == '{kind}'", timeout)
        assert found, f"no {kind} prompt; prompts: {self.prompts()[count_before:]}"
        return self.prompts()[-1]

    def close(self):
        try:
            self.nvim.close()
        except Exception:
            pass


PASSED = {"PATH", "HOME", "USER", "LANG", "TERM"}


@pytest.fixture
def editor_factory(packpath):
    editors = []

    def make(env, cwd, extra_env=None):
        editor = Editor(env, cwd, packpath, extra_env)
        editors.append(editor)
        return editor

    yield make
    for editor in editors:
        editor.close()


@pytest.fixture(scope="module")
def domain():
    """One running domain (kept up by a `sleep` session) for a test module."""
    env = LazaretEnv(approval_timeout=120)
    try:
        repo = env.repository()
        keeper, socket = env.start_domain(repo)
        yield env, repo, socket
    finally:
        env.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"
