"""Issue 26, item 1, in a real Neovim against a real coordinator and gVisor
sandbox: the agent commits a file named `docs/notes.md` + 60 spaces +
`%{system('id > MARKER')[0:-1]}` (and leaves the same under `wip/`
uncommitted); the user opens :LazaretDiff and presses Enter on its row. The
window bars have statusline syntax: they must show the name as text (every
`%` doubled), and nothing may run (the marker held `uid=0(root)`)."""

import pytest

from helpers import assert_inert, create_files_script
from lzenv import LazaretEnv, wait_until

BRANCH = "refs/heads/lazaret/agent-default"

PANES = """
local v = require('lazaret.diff').view
local out = {}
for _, win in ipairs({ v.left_win, v.right_win }) do
  out[#out + 1] = {
    option = vim.wo[win].winbar,
    winbar = vim.api.nvim_eval_statusline(vim.wo[win].winbar, { winid = win, use_winbar = true, maxwidth = 100000 }).str,
    name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)),
  }
end
return out
"""


@pytest.fixture(scope="module")
def attack():
    env = LazaretEnv()
    try:
        repo = env.repository()
        env.start_domain(repo)
        markers = {"committed": env.root / "winbar-marker", "uncommitted": env.root / "wip-winbar-marker"}
        paths = {
            "committed": "docs/notes.md" + " " * 60 + "%{system('id > " + str(markers["committed"]) + "')[0:-1]}",
            "uncommitted": "wip/notes.md" + " " * 60 + "%{system('id > " + str(markers["uncommitted"]) + "')[0:-1]}",
        }
        script = (create_files_script([paths["committed"]], lambda _: "notes\n") + "git add -A && git commit -qm notes\n"
                  + create_files_script([paths["uncommitted"]], lambda _: "more notes\n"))
        result = env.exec_in(repo, script)
        assert result.returncode == 0, result
        assert wait_until(20, lambda: env.git(repo, "for-each-ref", BRANCH).strip(), 0.1), "the agent commit reached the host"
        yield env, repo, paths, markers
    finally:
        env.close()
    assert not env.leftovers, env.leftovers


@pytest.mark.parametrize("side", ["committed", "uncommitted"])
def test_enter_on_the_row_shows_the_name_and_runs_nothing(attack, editor_factory, side):
    env, repo, paths, markers = attack
    path, marker = paths[side], markers[side]
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
    editor.nvim.command("LazaretDiff")
    assert editor.wait("require('lazaret.diff').view ~= nil and require('lazaret.diff').view.diff ~= nil", 20), "the review loaded"
    lines = editor.lua("return vim.api.nvim_buf_get_lines(require('lazaret.diff').view.list_buf, 0, -1, false)")
    row = next(i for i, line in enumerate(lines, 1) if path in line)
    editor.lua("local v = require('lazaret.diff').view; vim.api.nvim_set_current_win(v.list_win); vim.api.nvim_win_set_cursor(v.list_win, { ..., 0 })", row)
    editor.nvim.input("<CR>")
    assert editor.wait("require('lazaret.diff').view.shown ~= nil", 15), "the file is shown"
    panes = editor.lua(PANES)
    editor.nvim.command("redraw!")
    for pane in panes:
        assert not marker.exists(), f"the window bar ran the agent's code: {marker.read_text()!r}"
        assert path in pane["winbar"], f"the name shown as text: {pane['winbar']!r}"
        assert "%%{system(" in pane["option"], pane["option"]
        assert_inert("the window bar", pane["winbar"])
    right = editor.lua("return vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(require('lazaret.diff').view.right_win), 0, -1, false)")
    assert right == (["notes"] if side == "committed" else ["more notes"]), right
    assert not marker.exists()
