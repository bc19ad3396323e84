"""The pending window under agent text (issue 26, items 4 and "long text"),
in a real Neovim against a real coordinator and gVisor sandbox:

- a justification or argv with newlines renders (nvim_buf_set_lines threw on
  them: the window froze at "no pending" while two were pending, and in that
  empty-looking window `a` approved the oldest request);
- the answering keys act only on the request under the cursor: with the
  cursor on no request (the title of an empty window a request arrived in)
  `a` answers nothing;
- a 500-word argv and a 4 KiB justification show the program and the start
  first, say they were cut, and `<CR>` opens the whole request read-only."""

import time

import pytest

from helpers import assert_inert, confirm, escalate, finish, press
from lzenv import wait_until


@pytest.fixture
def editor(domain, editor_factory):
    env, repo, _ = domain
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10), "the plugin connected to the domain"
    time.sleep(0.5)  # the first escalation/list has answered
    return editor


def window_lines(editor):
    return editor.lua("local a = require('lazaret.approvals'); return a.win and vim.api.nvim_win_is_valid(a.win) "
                      "and vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(a.win), 0, -1, false) or {}")


def wait_lines(editor, needle, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = window_lines(editor)
        if any(needle in line for line in lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} not shown; window:\n" + "\n".join(window_lines(editor)))


def cursor_to(editor, needle):
    """Puts the pending window's cursor on the line holding NEEDLE."""
    lines = window_lines(editor)
    row = next(i for i, line in enumerate(lines, 1) if needle in line)
    editor.lua("vim.api.nvim_win_set_cursor(require('lazaret.approvals').win, { ..., 0 })", row)


def test_newlines_render_and_keys_act_only_on_the_request_under_the_cursor(domain, editor):
    env, repo, _ = domain
    editor.nvim.command("LazaretPending")
    wait_lines(editor, "no pending escalations")
    first, _ = escalate(env, repo, ["touch", "nl-first-marker"], "first line\nsecond line\r\nthird")
    second, _ = escalate(env, repo, ["printf", "a\nb", "nl-second-marker"], "why\n\nnot")
    assert wait_until(10, lambda: len(env.pending()) == 2), env.pending()
    lines = wait_lines(editor, "2 pending escalations")
    text = "\n".join(lines)
    assert "why      first line\\nsecond line\\r\\nthird" in text, text
    assert "printf $'a\\nb' nl-second-marker" in text, text
    assert_inert("the pending window", lines)
    assert editor.lua("return require('lazaret').statusline()") == "⛨ 2 pending"
    # The cursor stayed on the title: `a` there answers nothing.
    assert editor.lua("return vim.api.nvim_win_get_cursor(require('lazaret.approvals').win)[1]") == 1
    press(editor, "a")
    time.sleep(1.0)
    assert len(env.pending()) == 2, "nothing was answered"
    assert not (repo / "nl-first-marker").exists(), "the oldest request did not run"
    assert any("no request under the cursor" in n["msg"] for n in editor.notes()), editor.notes()
    # On a blank line between requests: nothing either.
    blank = next(i for i, line in enumerate(window_lines(editor), 1) if i > 3 and line == "")
    editor.lua("vim.api.nvim_win_set_cursor(require('lazaret.approvals').win, { ..., 0 })", blank)
    press(editor, "a")
    time.sleep(0.5)
    assert len(env.pending()) == 2
    # On the second request's justification line: that request, and only it.
    cursor_to(editor, "why      why\\n\\nnot")
    press(editor, "d")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5), "the reason prompt is open"
    editor.nvim.input("no<CR>")
    out, _ = finish(second)
    assert "status=97" in out, out
    assert [p["argv"] for p in env.pending()] == [["touch", "nl-first-marker"]]
    lines = wait_lines(editor, "1 pending escalation")
    # The answered request's place: the cursor is on no request now.
    press(editor, "a")
    time.sleep(0.5)
    assert len(env.pending()) == 1, "a repeated key answered nothing it did not show"
    press(editor, "<Tab>")
    confirm(editor, "a")
    out, _ = finish(first)
    assert "status=0" in out, out
    assert (repo / "nl-first-marker").exists()
    wait_lines(editor, "no pending escalations")


def test_long_argv_shows_program_first_says_it_was_cut_and_opens_in_full(domain, editor):
    env, repo, _ = domain
    argv = ["rm", "-rf", "/"] + [f"word{i:03d}" for i in range(500)]
    justification = "start of the reason " + "x" * 4000
    process, _ = escalate(env, repo, argv, justification)
    editor.nvim.command("LazaretPending")
    lines = wait_lines(editor, "[1] rm -rf / word000 word001")
    width = editor.lua("return vim.api.nvim_win_get_width(require('lazaret.approvals').win)")
    command = next(line for line in lines if line.startswith("[1] "))
    why = next(line for line in lines if line.startswith("    why      "))
    assert "… (cut: " in command and "more characters)" in command, command
    assert why.startswith("    why      start of the reason xxx") and "… (cut: " in why, why
    for line in (command, why):
        assert editor.lua("return vim.fn.strdisplaywidth(...)", line) <= width, f"the cut note is inside the window: {line!r}"
    assert any(line.startswith("    (cut)    <CR> opens the whole request") for line in lines), lines
    cursor_to(editor, "[1] rm -rf /")
    press(editor, "<CR>")
    assert editor.wait("require('lazaret.approvals').full_win ~= nil", 5), "the whole request opened"
    full = editor.lua("local a = require('lazaret.approvals'); return { lines = vim.api.nvim_buf_get_lines(a.full_buf, 0, -1, false), "
                      "modifiable = vim.bo[a.full_buf].modifiable, buftype = vim.bo[a.full_buf].buftype }")
    assert not full["modifiable"] and full["buftype"] == "nofile", full
    text = "\n".join(full["lines"])
    assert "program  rm" in text and "argv     503 words:" in text, text[:500]
    assert "  [503] word499" in full["lines"], "every word, nothing cut"
    assert "why      " + justification in full["lines"]
    assert_inert("the whole request", full["lines"])
    editor.nvim.input("q")
    assert editor.wait("require('lazaret.approvals').full_win == nil and vim.api.nvim_get_current_win() == require('lazaret.approvals').win", 5)
    cursor_to(editor, "[1] rm -rf /")
    press(editor, "d")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5)
    editor.nvim.input("too long<CR>")
    out, _ = finish(process)
    assert "status=97" in out, out
