"""Pending approvals in a real Neovim against a real coordinator and a real
gVisor sandbox: a request made inside the sandbox appears in :LazaretPending,
`a`, `e` and `d` answer it (audited as client neovim), an answer given with
`lazaret approve` removes it, and the plugin never steals focus."""

import time

import pytest

from helpers import confirm, escalate, finish, now_ms, press



@pytest.fixture
def editor(domain, editor_factory):
    env, repo, _ = domain
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10), "the plugin connected to the domain"
    assert editor.wait("not require('lazaret.domains').settling()", 10), "and listed its requests"
    return editor


def open_pending(editor):
    editor.nvim.command("LazaretPending")
    assert editor.wait("require('lazaret.approvals').is_open()", 5)


def pending_text(editor):
    return editor.lua("local a = require('lazaret.approvals'); return a.is_open() and table.concat(vim.api.nvim_buf_get_lines(a.buf, 0, -1, false), '\\n') or ''")


def wait_for_text(editor, needle, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = pending_text(editor)
        if needle in text:
            return now_ms(), text
        time.sleep(0.02)
    raise AssertionError(f"{needle!r} not shown; window:\n{pending_text(editor)}")


def audit_of(env, repo, marker):
    records = [r for r in env.audit(repo) if marker in " ".join(r.get("requestedArgv") or [])]
    assert len(records) == 1, records
    return records[0]


def test_a_request_appears_and_a_runs_it_on_the_host(domain, editor):
    """Latency is measured by tests/nvim/bench, never asserted here."""
    env, repo, _ = domain
    open_pending(editor)
    assert "no pending escalations" in pending_text(editor)
    process, t0 = escalate(env, repo, ["touch", "approved-marker"], "create the marker")
    seen, text = wait_for_text(editor, "touch approved-marker")
    for expected in ["why      create the marker", f"cwd      {repo}", "reasons  ", "risk     ", "stay pending"]:
        assert expected in text, f"{expected!r} in\n{text}"
    notes = editor.lua("return _G.lazaret_test_notes")
    note = [n for n in notes if "touch approved-marker" in n["msg"]]
    assert note and ":LazaretPending" in note[0]["msg"], notes
    assert editor.lua("return require('lazaret').statusline()") == "⛨ 1 pending"
    assert not (repo / "approved-marker").exists(), "nothing runs before the answer"
    # The request arrived in the open window: the cursor stays where it was
    # (on the title) until the user moves onto the request; `a` selects,
    # <CR> confirms (DECISIONS D20).
    press(editor, "<Tab>")
    confirm(editor, "a")
    out, err = finish(process)
    assert "status=0" in out, (out, err)
    assert (repo / "approved-marker").exists(), "it ran on the host"
    record = audit_of(env, repo, "approved-marker")
    assert (record["outcome"], record["decidedBy"]) == ("approved", "rpc:neovim"), record
    assert editor.wait("require('lazaret').statusline() == ''", 5)
    assert "no pending escalations" in pending_text(editor)


def test_e_runs_the_edited_argv_after_showing_it_back(domain, editor):
    env, repo, _ = domain
    open_pending(editor)
    process, _ = escalate(env, repo, ["touch", "requested marker"])
    wait_for_text(editor, "touch 'requested marker'")
    press(editor, "<Tab>")
    press(editor, "e")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5), "the edit prompt is open"
    assert editor.lua("return vim.fn.getcmdline()") == "touch 'requested marker'", "prefilled with the shell-quoted argv"
    editor.nvim.input("<C-u>touch 'edited marker' second<CR>")
    # The window names the edited command; <CR> runs it.
    _, text = wait_for_text(editor, "run on the host INSTEAD of the request, in ")
    assert "\n    touch 'edited marker' second\n" in text, text
    time.sleep(0.5)
    assert not (repo / "edited marker").exists(), "nothing runs before the confirmation"
    editor.nvim.input("<CR>")
    out, err = finish(process)
    assert "status=0" in out, (out, err)
    assert (repo / "edited marker").exists() and (repo / "second").exists(), "the edited argv ran"
    assert not (repo / "requested marker").exists()
    record = audit_of(env, repo, "requested marker")
    assert (record["outcome"], record["decidedBy"]) == ("edited", "rpc:neovim"), record
    assert record["executedArgv"][1:] == ["edited marker", "second"], record


def test_d_denies_with_the_reason_given(domain, editor):
    env, repo, _ = domain
    open_pending(editor)
    process, _ = escalate(env, repo, ["touch", "denied-marker"])
    wait_for_text(editor, "touch denied-marker")
    press(editor, "<Tab>")
    press(editor, "d")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5), "the reason prompt is open"
    editor.nvim.input("not today<CR>")
    out, err = finish(process)
    assert "status=97" in out, (out, err)
    assert "denied: not today" in err, err
    assert not (repo / "denied-marker").exists()
    record = audit_of(env, repo, "denied-marker")
    assert (record["outcome"], record["decidedBy"], record["reason"]) == ("denied", "rpc:neovim", "not today"), record


def test_an_answer_given_with_lazaret_approve_removes_the_request(domain, editor):
    env, repo, _ = domain
    open_pending(editor)
    process, _ = escalate(env, repo, ["touch", "cli-marker"])
    wait_for_text(editor, "touch cli-marker")
    request_id = editor.lua("return require('lazaret').pending()[1].requestId")
    env.lazaret("approve", request_id[:8])
    answered = now_ms()
    assert editor.wait("require('lazaret').statusline() == ''", 30), "the request left the queue"
    gone, _ = wait_for_text(editor, "no pending escalations")
    print(f"answered with lazaret approve -> gone from the window: {gone - answered} ms")
    out, _ = finish(process)
    assert "status=0" in out
    assert audit_of(env, repo, "cli-marker")["decidedBy"] == "rpc:cli"


def test_no_focus_is_stolen_while_typing_and_closing_leaves_the_request_pending(domain, editor_factory):
    env, repo, _ = domain
    editor = editor_factory(env, repo)
    editor.lua("require('lazaret').setup({ auto_open = true })")
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
    editor.nvim.command(f"edit {repo / 'README.md'}")
    editor.nvim.command("split")  # a window of the user's
    before_windows = editor.lua("return vim.api.nvim_list_wins()")
    before_window = editor.lua("return vim.api.nvim_get_current_win()")
    user_buffer = editor.lua("return vim.api.nvim_get_current_buf()")
    editor.nvim.input("Ohello ")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'i'", 5)
    process, _ = escalate(env, repo, ["touch", "typing-marker"])
    assert editor.wait("#require('lazaret').pending() == 1", 10)
    assert editor.wait("#_G.lazaret_test_notes > 0", 5), "the user is notified"
    time.sleep(0.3)
    assert editor.lua("return vim.api.nvim_get_mode().mode") == "i", "still typing"
    assert editor.lua("return vim.api.nvim_get_current_win()") == before_window, "focus stays"
    assert not editor.lua("return require('lazaret.approvals').is_open()"), "the window waits for normal mode"
    editor.nvim.input("world<Esc>")
    assert editor.wait("require('lazaret.approvals').is_open()", 5), "opened once the user left insert mode"
    assert editor.lua("return vim.api.nvim_buf_get_lines(..., 0, 1, false)[1]", user_buffer) == "hello world", "every typed key reached the user's buffer"
    assert "touch typing-marker" in pending_text(editor)
    press(editor, "q")
    assert editor.wait("not require('lazaret.approvals').is_open()", 5)
    assert editor.lua("return vim.api.nvim_list_wins()") == before_windows, "only the plugin's window was closed"
    time.sleep(0.3)
    assert [p["argv"] for p in env.pending()] == [["touch", "typing-marker"]], "closing answered nothing"
    assert process.poll() is None, "the request still waits"
    request_id = editor.lua("return require('lazaret').pending()[1].requestId")
    env.lazaret("deny", request_id)
    out, err = finish(process)
    assert "status=97" in out, (out, err)


def test_status_window_and_statusline(domain, editor):
    env, repo, _ = domain
    editor.nvim.command("Lazaret")
    assert editor.wait("require('lazaret.status').win ~= nil", 5)
    text = editor.lua("return table.concat(vim.api.nvim_buf_get_lines(require('lazaret.status').buf, 0, -1, false), '\\n')")
    hash_ = env.domain(repo)["domain_hash"]
    for expected in [f"default @ {repo} ({hash_})  [working directory]", "container  lazaret-default-", " running",
                     "sessions   1", "sh -c 'echo lazaret-ready; sleep 600'", "branch     lazaret/agent-default",
                     "network    no network (no Network Sidecar)", "pending    0"]:
        assert expected in text, f"{expected!r} in\n{text}"
    assert editor.lua("return require('lazaret').statusline()") == ""


def test_checkhealth_reports_ok(domain, editor, tmp_path):
    env, repo, _ = domain
    out = tmp_path / "health.txt"
    editor.nvim.command("checkhealth lazaret")
    editor.nvim.command(f"silent write! {out}")
    text = out.read_text()
    assert "ERROR" not in text, text
    hash_ = env.domain(repo)["domain_hash"]
    # The coordinator's version must be the one the plugin was generated for.
    api = editor.lua("return require('lazaret.protocol').API_VERSION")
    for expected in ["OK Neovim 0.11.4", f"OK binary: {env.binary}", "OK version: lazaret ", f"OK API version {api} (the plugin expects {api})",
                     f"OK socket directory: {env.socket_dir} (mode 0700)", f"OK domain default @ {repo} ({hash_}) reachable: container running"]:
        assert expected in text, f"{expected!r} in\n{text}"
