"""Merges pinned to the reviewed commit (issue 26, item 3), in a real Neovim
against a real coordinator and gVisor sandbox: the agent commits while the
merge confirmation is up (the attack review saw both editors fast-forward to
an `.envrc` nobody reviewed); nothing is merged, the user is told the branch
moved and offered the review again. The review's file buffers show the
commit the review names, not a newer head; a merge from the review merges
exactly that commit, its D4 warnings in the confirmation."""

import pytest

from lzenv import LazaretEnv, wait_until

BRANCH = "refs/heads/lazaret/agent-default"


@pytest.fixture(scope="module")
def merge_domain():
    env = LazaretEnv(approval_timeout=120)
    try:
        repo = env.repository()
        env.start_domain(repo)
        yield env, repo
    finally:
        env.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"


def branch_head(env, repo):
    result = env.git(repo, "for-each-ref", "--format=%(objectname)", BRANCH).strip()
    return result or None


def agent_commit(env, repo, script, message):
    before = branch_head(env, repo)
    result = env.exec_in(repo, f"cd /workspace && {script} && git add -A && git commit -qm {message}")
    assert result.returncode == 0, result
    assert wait_until(15, lambda: branch_head(env, repo) not in (None, before), 0.1), "the agent commit reached the host"
    return branch_head(env, repo)


def host_head(env, repo):
    return env.git(repo, "rev-parse", "HEAD").strip()


def notes_text(editor):
    return "\n".join(note["msg"] for note in editor.notes())


@pytest.fixture
def editor(merge_domain, editor_factory):
    env, repo = merge_domain
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
    return editor


def test_the_branch_moving_while_the_confirmation_is_up_merges_nothing(merge_domain, editor):
    env, repo = merge_domain
    start = host_head(env, repo)
    reviewed = agent_commit(env, repo, "echo one > a.txt", "one")
    asked = len(editor.prompts())
    editor.nvim.command("LazaretMerge")
    prompt = editor.wait_prompt("select", asked)
    assert reviewed[:7] in prompt["prompt"], f"the confirmation names the commit: {prompt}"
    # With the confirmation up, the agent adds a file hosts run.
    moved_to = agent_commit(env, repo, "echo 'touch /tmp/pwned' > .envrc && echo two > a.txt", "envrc")
    assert moved_to != reviewed
    asked, told = len(editor.prompts()), len(editor.notes())
    editor.nvim.input("1<CR>")  # Merge
    assert editor.wait(f"#_G.lazaret_test_prompts > {asked} or #_G.lazaret_test_notes > {told}", 15), "an answer"
    assert host_head(env, repo) == start, f"nothing was merged: {notes_text(editor)}"
    assert not (repo / ".envrc").exists() and not (repo / "a.txt").exists()
    offer = editor.wait_prompt("select", asked)
    assert reviewed[:12] in prompt["prompt"] and "a.txt" in prompt["prompt"], f"the confirmation named the commit and its files: {prompt}"
    assert "moved since the review" in offer["prompt"] and reviewed[:12] in offer["prompt"], offer
    assert offer["items"][0] == "Review it again", offer
    assert "moved since the review" in notes_text(editor)
    assert "Nothing was merged" in notes_text(editor)
    editor.nvim.input("1<CR>")  # Review it again
    assert editor.wait("require('lazaret.diff').view ~= nil and require('lazaret.diff').view.diff ~= nil", 10), "the review opened"
    assert editor.lua("return require('lazaret.diff').view.diff.head") == moved_to, "at the new head"


def test_the_review_shows_and_merges_exactly_the_commit_it_names(merge_domain, editor):
    env, repo = merge_domain
    start = host_head(env, repo)
    agent_commit(env, repo, "echo two > a.txt && echo 'touch /tmp/pwned2' > .envrc", "two")
    editor.nvim.command("LazaretDiff")
    assert editor.wait("require('lazaret.diff').view ~= nil and require('lazaret.diff').view.diff ~= nil", 10)
    reviewed = editor.lua("return require('lazaret.diff').view.diff.head")
    assert reviewed == branch_head(env, repo)

    def show_a_txt():
        lines = editor.buffer_text(editor.lua("return require('lazaret.diff').view.list_buf")).split("\n")
        row = next(i for i, line in enumerate(lines, 1) if line.startswith("  A  a.txt"))
        editor.lua("require('lazaret.diff').view.shown = nil; vim.api.nvim_set_current_win(require('lazaret.diff').view.list_win); "
                   "vim.api.nvim_win_set_cursor(0, { ..., 0 })", row)
        editor.nvim.input("<CR>")
        assert editor.wait("require('lazaret.diff').view.shown ~= nil", 10)
        return editor.buffer_text(editor.lua("return vim.api.nvim_win_get_buf(require('lazaret.diff').view.right_win)"))

    newer = agent_commit(env, repo, "echo three > a.txt", "three")
    assert show_a_txt() == "two", "the review shows the commit it names, not the newer head"
    assert show_a_txt() == "two", "and shows it again"
    # A merge from the review is pinned to it: the branch moved, nothing merged.
    asked = len(editor.prompts())
    editor.nvim.command("LazaretMerge")
    offer = editor.wait_prompt("select", asked)
    assert "moved since the review" in offer["prompt"] and reviewed[:12] in offer["prompt"] and newer[:12] in offer["prompt"], offer
    editor.nvim.input("2<CR>")  # Not now
    assert host_head(env, repo) == start
    # Reviewed again (R), merged: exactly that commit, after its warnings.
    editor.lua("vim.api.nvim_set_current_win(require('lazaret.diff').view.list_win)")
    editor.nvim.input("R")
    assert editor.wait(f"require('lazaret.diff').view.diff.head == '{newer}'", 10)
    asked = len(editor.prompts())
    editor.nvim.command("LazaretMerge")
    prompt = editor.wait_prompt("select", asked)
    assert f"at commit {newer[:12]}" in prompt["prompt"], prompt
    assert "! .envrc: direnv runs this file" in prompt["prompt"], "the D4 warning of that commit"
    editor.nvim.input("1<CR>")
    assert wait_until(15, lambda: host_head(env, repo) != start, 0.1), notes_text(editor)
    assert host_head(env, repo) == newer, "exactly the reviewed commit"
    assert (repo / "a.txt").read_text() == "three\n" and (repo / ".envrc").exists()
    assert editor.wait("#_G.lazaret_test_notes > 0", 5)
    assert wait_until(5, lambda: f"merged lazaret/agent-default at {newer[:12]}" in notes_text(editor)), notes_text(editor)
