"""The agent-branch review in a real Neovim: an agent commit made inside the
real sandbox reaches the host's `lazaret/agent-default`, :LazaretDiff lists
the file and its D4 warning (first, highlighted, also in the quickfix list),
shows base against agent head from branch/fileContents, and :LazaretMerge
merges after a confirmation that repeats the warning."""

import time

import pytest

from lzenv import wait_until


@pytest.fixture(scope="module")
def agent_commit(domain):
    env, repo, _ = domain
    script = ("cd /workspace && printf 'pub fn answer() -> u32 { 43 }\\n' > src/lib.rs && echo hi > new.txt && "
              "mkdir -p .vscode && echo '{}' > .vscode/tasks.json && git add -A && git commit -qm agent && "
              "echo scratch > notes.txt")
    result = env.exec_in(repo, script)
    assert result.returncode == 0, result
    assert wait_until(10, lambda: env.git(repo, "for-each-ref", "refs/heads/lazaret/agent-default").strip(), 0.1), \
        "the agent commit reached the host"
    return env, repo


@pytest.fixture
def review(agent_commit, editor_factory):
    env, repo = agent_commit
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
    editor.nvim.command("LazaretDiff")
    assert editor.wait("require('lazaret.diff').view ~= nil and require('lazaret.diff').view.diff ~= nil", 10), "the review tab loaded"
    return env, repo, editor


def list_text(editor):
    return editor.lua("local v = require('lazaret.diff').view; return table.concat(vim.api.nvim_buf_get_lines(v.list_buf, 0, -1, false), '\\n')")


def test_lazaret_diff_lists_the_agent_files_and_the_warning_first(review):
    env, repo, editor = review
    assert editor.lua("return #vim.api.nvim_list_tabpages()") == 2, "a new tab"
    lines = list_text(editor).split("\n")
    warning = lines.index("  ! .vscode/tasks.json: VS Code runs tasks and honours settings from this file when the folder is opened")
    committed = next(i for i, line in enumerate(lines) if line.startswith("  M  src/lib.rs"))
    assert warning < committed, lines
    assert "  A  new.txt  +1 -0" in lines and "  A  .vscode/tasks.json  +1 -0  !" in lines, lines
    uncommitted = lines.index("Uncommitted in the sandbox: 1 file")
    assert lines[uncommitted + 1].startswith("  ?? notes.txt"), lines
    groups = editor.lua("""
        local v = require('lazaret.diff').view
        local ns = vim.api.nvim_get_namespaces()['lazaret.diff']
        local out = {}
        for _, m in ipairs(vim.api.nvim_buf_get_extmarks(v.list_buf, ns, 0, -1, { details = true })) do
          out[#out + 1] = { m[2], m[4].hl_group }
        end
        return out""")
    assert [warning, "LazaretWarning"] in groups, groups
    qf = editor.lua("local l = vim.fn.getqflist({ items = 1, title = 1 }); return { title = l.title, items = vim.tbl_map(function(i) return { vim.api.nvim_buf_get_name(i.bufnr), i.type, i.text } end, l.items) }")
    assert qf["title"] == "Lazaret: agent changes (lazaret/agent-default)"
    assert qf["items"][0] == [str(repo / ".vscode/tasks.json"), "W", "warning: VS Code runs tasks and honours settings from this file when the folder is opened"], qf
    assert [str(repo / "notes.txt"), "", "?? uncommitted in the sandbox"] in qf["items"], qf


def test_selecting_a_file_shows_base_against_agent_head_in_diff_mode(review):
    """Uses branch/fileContents."""
    env, repo, editor = review
    row = next(i for i, line in enumerate(list_text(editor).split("\n"), 1) if line.startswith("  M  src/lib.rs"))
    editor.lua("vim.api.nvim_win_set_cursor(require('lazaret.diff').view.list_win, { ..., 0 })", row)
    editor.nvim.input("<CR>")
    assert editor.wait("require('lazaret.diff').view.shown ~= nil", 10)
    panes = editor.lua("""
        local v = require('lazaret.diff').view
        local out = {}
        for _, win in ipairs({ v.left_win, v.right_win }) do
          local buf = vim.api.nvim_win_get_buf(win)
          out[#out + 1] = { name = vim.api.nvim_buf_get_name(buf), text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\\n'),
            diff = vim.wo[win].diff, modifiable = vim.bo[buf].modifiable, buftype = vim.bo[buf].buftype, ft = vim.bo[buf].filetype }
        end
        return out""")
    left, right = panes
    assert left["text"] == "pub fn answer() -> u32 { 42 }", panes
    assert right["text"] == "pub fn answer() -> u32 { 43 }", panes
    assert left["name"].endswith("/base/src/lib.rs") and right["name"].endswith("/head/src/lib.rs"), panes
    for pane in panes:
        assert pane["diff"] and not pane["modifiable"] and pane["buftype"] == "nofile" and pane["ft"] == "rust", pane


def test_lazaret_merge_repeats_the_warning_then_merges(review):
    env, repo, editor = review
    editor.nvim.command("LazaretMerge")
    assert editor.wait("#_G.lazaret_test_prompts > 0 and _G.lazaret_test_prompts[#_G.lazaret_test_prompts].kind == 'select'", 10)
    prompt = editor.lua("return _G.lazaret_test_prompts[#_G.lazaret_test_prompts]")
    assert "Merge lazaret/agent-default" in prompt["prompt"], prompt
    assert "! .vscode/tasks.json: VS Code runs tasks" in prompt["prompt"], prompt
    assert not (repo / "new.txt").exists(), "nothing merged before the confirmation"
    editor.nvim.input("1<CR>")
    assert wait_until(10, lambda: (repo / "new.txt").exists(), 0.1), "merged into the workspace"
    assert (repo / "src/lib.rs").read_text() == "pub fn answer() -> u32 { 43 }\n"
    assert env.git(repo, "rev-parse", "HEAD").strip() == env.git(repo, "rev-parse", "lazaret/agent-default").strip()
    assert not (repo / "notes.txt").exists(), "uncommitted sandbox changes are not merged"
    notes = editor.lua("return _G.lazaret_test_notes")
    assert any("merged lazaret/agent-default" in n["msg"] for n in notes), notes
