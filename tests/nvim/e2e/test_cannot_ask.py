"""A client that could not ask never says nothing is pending (issue 26, Deliver
5), in a real Neovim against a real coordinator and gVisor sandbox, with a
request really waiting:

- a misspelt option in setup{} and no lazaret binary (the issue's new user:
  :LazaretPending said "no pending escalations" while one waited): the
  warning names the key, the window and the statusline name the missing
  binary and the fix, :checkhealth names the key; fixing `binary` shows the
  request;
- a coordinator that does not answer (stopped): said as such, not an empty
  queue; once it answers again, the request is listed."""

import json
import os
import signal
from helpers import escalate, finish, press
from lzenv import LazaretEnv, wait_until


def pending_text(editor):
    return editor.lua("local a = require('lazaret.approvals'); return a.win and vim.api.nvim_win_is_valid(a.win) "
                      "and table.concat(vim.api.nvim_buf_get_lines(a.buf, 0, -1, false), '\\n') or ''")


def test_no_binary_and_a_misspelt_option_say_so_with_the_fix(domain, editor_factory, tmp_path):
    env, repo, _ = domain
    process, _ = escalate(env, repo, ["touch", "no-binary-marker"])
    assert wait_until(10, lambda: len(env.pending()) == 1), "a request is waiting"
    editor = editor_factory(env, repo, extra_env={"LAZARET_BIN": "/nonexistent/lazaret"})
    editor.lua(f"require('lazaret').setup({{ bianry = '{env.binary}' }})")
    editor.nvim.command("LazaretPending")
    assert editor.wait("require('lazaret.approvals').is_open()", 5)
    assert wait_until(10, lambda: "cannot find the lazaret binary" in pending_text(editor), 0.1), pending_text(editor)
    text = pending_text(editor)
    assert "no pending escalations" not in text, text
    assert "`/nonexistent/lazaret`" in text and "set `binary` in setup{}" in text, text
    assert editor.lua("return require('lazaret').statusline()") == "⛨ cannot ask: no lazaret binary"
    warnings = [n for n in editor.notes() if "bianry" in n["msg"]]
    assert warnings and warnings[0]["level"] == 3, f"setup{{}} names the unknown key: {editor.notes()}"
    out = tmp_path / "health.txt"
    editor.nvim.command("checkhealth lazaret")
    editor.nvim.command(f"silent write! {out}")
    health = out.read_text()
    assert "WARNING Lazaret: setup{} ignored unknown option `bianry`" in health, health
    assert "ERROR `/nonexistent/lazaret` not found or not executable" in health, health
    editor.nvim.command("tabclose")
    # The fix: the request shows up (discovery is retried).
    editor.lua(f"require('lazaret').setup({{ binary = '{env.binary}' }})")
    editor.nvim.command("LazaretPending")
    assert wait_until(15, lambda: "touch no-binary-marker" in pending_text(editor), 0.1), pending_text(editor)
    assert editor.lua("return require('lazaret').statusline()") == "⛨ 1 pending"
    env.lazaret("deny", env.pending()[0]["requestId"])
    finish(process)


def test_a_coordinator_that_does_not_answer_is_not_an_empty_queue(editor_factory):
    env = LazaretEnv(approval_timeout=120)
    coordinator = None
    try:
        repo = env.repository()
        env.start_domain(repo)
        process, _ = escalate(env, repo, ["touch", "stopped-marker"])
        assert wait_until(10, lambda: len(env.pending()) == 1)
        report = json.loads(env.lazaret("status", "--json", "--workspace", repo).stdout)
        coordinator = report["status"]["coordinatorPid"]
        os.kill(coordinator, signal.SIGSTOP)
        editor = editor_factory(env, repo)
        editor.nvim.command("LazaretPending")
        assert editor.wait("require('lazaret.approvals').is_open()", 5)
        # Stopped before the editor connects: its first question (domain/status, the API version) gets no answer.
        assert wait_until(20, lambda: "did not answer domain/status" in pending_text(editor), 0.2), pending_text(editor)
        text = pending_text(editor)
        assert "no pending escalations" not in text and "cannot tell what is pending" in text, text
        assert editor.lua("return require('lazaret').statusline()") == "⛨ cannot ask: coordinator not answering"
        os.kill(coordinator, signal.SIGCONT)
        coordinator = None
        assert wait_until(15, lambda: "touch stopped-marker" in pending_text(editor), 0.2), pending_text(editor)
        assert "did not answer" not in pending_text(editor)
        press(editor, "<Tab>")
        press(editor, "d")
        assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5)
        editor.nvim.input("<CR>")
        out, _ = finish(process)
        assert "status=97" in out, out
    finally:
        if coordinator:
            os.kill(coordinator, signal.SIGCONT)
        env.close()
    assert not env.leftovers, env.leftovers
