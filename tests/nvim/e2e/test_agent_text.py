"""Agent text is data in Neovim (issue 26: the hostile corpus through every
surface, item 5's bidi/control characters; item 1 alone: test_winbar.py),
in a real Neovim against a real coordinator and gVisor sandbox.

The agent (inside the sandbox) commits a file for every entry of
tests/hostile/strings.json (and a directory with an `.envrc` for every
entry, so the D4 warnings name them too), leaves an uncommitted file for
every entry, and asks the host to run commands whose argv words and
justifications are the entries. Every Neovim surface that shows them is
checked: the review list, both window bars (evaluated with
nvim_eval_statusline), buffer names, the quickfix list, notifications,
vim.ui.select/input prompts and defaults, the pending window and its
whole-request view, the status window and the statusline component.
Each check: the marker file stays absent (nothing ran), no raw unsafe
character reached the surface, and the UI stays usable (a normal request is
listed and answered while the hostile ones stay listed).

As a file name an entry is made valid: `/` becomes `_` and it is cut to 200
bytes. Its @MARKER@ is then a name relative to Neovim's working directory
(the workspace), so a name that got evaluated would create
`<workspace>/hostile-marker`: the test checks that file and that the
workspace has no new file at all. The issue's own file name is there too,
with its slashes (directories) and an absolute marker."""

import subprocess
import time

import pytest

from helpers import (assert_inert, confirm, corpus, corpus_entries, create_files_script, escalate, file_name, finish, inert, press,
                     raw_unsafe, selection)
from lzenv import LazaretEnv, wait_until

BRANCH = "refs/heads/lazaret/agent-default"
NAME_MARKER = "hostile-marker"


class Hostile:
    pass


@pytest.fixture(scope="module")
def hostile():
    env = LazaretEnv(approval_timeout=900)
    h = Hostile()
    h.env = env
    try:
        h.repo = repo = env.repository()
        env.start_domain(repo)
        h.marker = env.root / "marker"
        h.winbar_marker = env.root / "winbar-marker"
        h.wip_marker = env.root / "wip-winbar-marker"
        h.entries = corpus(str(h.marker))
        names = corpus(NAME_MARKER)
        # The issue's attack, committed and uncommitted.
        h.issue_path = "docs/notes.md" + " " * 60 + "%{system('id > " + str(h.winbar_marker) + "')[0:-1]}"
        h.issue_wip = "wip/notes.md" + " " * 60 + "%{system('id > " + str(h.wip_marker) + "')[0:-1]}"
        h.committed = [f"c{i:02d}-{file_name(text)}" for i, (_, text) in enumerate(names)]
        h.warned = [f"w{i:02d}-{file_name(text)}/.envrc" for i, (_, text) in enumerate(names)]
        h.uncommitted = [f"u{i:02d}-{file_name(text)}" for i, (_, text) in enumerate(names)] + [h.issue_wip]
        script = (create_files_script(h.committed + h.warned + [h.issue_path])
                  + "git add -A && git commit -qm 'hostile names'\n"
                  + create_files_script(h.uncommitted))
        result = env.exec_in(repo, script)
        assert result.returncode == 0, result
        assert wait_until(20, lambda: env.git(repo, "for-each-ref", BRANCH).strip(), 0.1), "the agent commit reached the host"
        h.host_files = set(env.git(repo, "ls-files", "-z", "--others", "--cached").split("\0"))
        yield h
    finally:
        env.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"


@pytest.fixture(scope="module")
def requests(hostile):
    """The hostile requests, made after the review's tests (an editor
    connecting while they wait is announced them at once)."""
    h = hostile
    env, repo = h.env, h.repo
    short = [text for _, text in h.entries if len(text.encode()) < 1000]
    long_line = dict(h.entries)["long-line"]
    long_words = dict(h.entries)["long-words"]
    h.argv_a = short  # the program itself is the statusline entry
    h.why_a = " ¦ ".join(short)
    h.argv_b = ["rm", long_words]
    h.why_b = long_line[:4096]
    h.argv_d = ["printf", "%s", "x"]
    h.why_d = long_words[:4096]
    h.sessions = [escalate(env, repo, h.argv_a, h.why_a)[0], escalate(env, repo, h.argv_b, h.why_b)[0],
                  escalate(env, repo, h.argv_d, h.why_d)[0]]
    # 64 KiB as one argument is over the coordinator's limit: refused
    # (a valid outcome); the entry is a justification (cut) and a file name.
    refused, _ = escalate(env, repo, ["touch", long_line])
    out, err = finish(refused)
    assert "status=99" in out, (out, err)
    assert wait_until(20, lambda: len(env.pending()) == 3, 0.2), env.pending()
    return h


def nothing_ran(h):
    for marker in (h.marker, h.winbar_marker, h.wip_marker, h.repo / NAME_MARKER):
        assert not marker.exists(), f"{marker} exists: agent text ran on the host ({marker.read_text()!r})"
    now = set(h.env.git(h.repo, "ls-files", "-z", "--others", "--cached").split("\0"))
    assert now == h.host_files, f"new files in the workspace: {sorted(now - h.host_files)[:5]}"


@pytest.fixture
def editor(hostile, editor_factory):
    editor = editor_factory(hostile.env, hostile.repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
    time.sleep(0.5)
    return editor


def open_review(editor):
    editor.nvim.command("LazaretDiff")
    assert editor.wait("require('lazaret.diff').view ~= nil and require('lazaret.diff').view.diff ~= nil", 20), "the review loaded"


def list_lines(editor):
    return editor.lua("return vim.api.nvim_buf_get_lines(require('lazaret.diff').view.list_buf, 0, -1, false)")


SHOW_ROW = """
local row = ...
local v = require('lazaret.diff').view
v.shown = nil
vim.api.nvim_set_current_win(v.list_win)
vim.api.nvim_win_set_cursor(v.list_win, { row, 0 })
"""

PANES = """
local v = require('lazaret.diff').view
local out = {}
for _, win in ipairs({ v.left_win, v.right_win }) do
  local bar = vim.wo[win].winbar
  out[#out + 1] = {
    winbar = vim.api.nvim_eval_statusline(bar, { winid = win, use_winbar = true, maxwidth = 100000 }).str,
    name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)),
  }
end
return out
"""


def show_row(editor, row):
    editor.lua(SHOW_ROW, row)
    editor.nvim.input("<CR>")
    assert editor.wait("require('lazaret.diff').view.shown ~= nil", 15), f"row {row} shown"
    return editor.lua(PANES)


def test_the_review_shows_every_hostile_file_name_inert(hostile, editor):
    h = hostile
    open_review(editor)
    lines = list_lines(editor)
    assert_inert("the review list", lines)
    text = "\n".join(lines)
    for path in h.committed + h.uncommitted + h.warned:
        assert inert(path) in text, f"{inert(path)[:80]!r} listed"
    rows = editor.lua("local out = {} for row, f in pairs(require('lazaret.diff').view.rows) do out[#out + 1] = { row, f.path, f.uncommitted } end return out")
    seen = set()
    for row, path, uncommitted in sorted(rows):
        if (path, uncommitted) in seen:
            continue
        seen.add((path, uncommitted))
        for pane in show_row(editor, row):
            assert_inert(f"the window bar of {path[:40]!r}", pane["winbar"])
            assert_inert("a review buffer name", pane["name"])
            assert inert(path)[:60] in pane["winbar"], (path, pane["winbar"])
    assert len(seen) >= len(h.committed) + len(h.warned) + len(h.uncommitted)
    qf = editor.lua("return vim.tbl_map(function(i) return { text = i.text, name = i.bufnr > 0 and vim.api.nvim_buf_get_name(i.bufnr) or '' } end, vim.fn.getqflist())")
    assert len(qf) >= len(h.committed) * 2 + len(h.uncommitted)
    for item in qf:
        assert_inert("a quickfix item", [item["text"], item["name"]])
    assert_inert("the quickfix title", editor.lua("return vim.fn.getqflist({ title = 1 }).title"))
    notes = [n["msg"] for n in editor.notes()]
    for note in notes:
        assert_inert("a notification", note.split("\n"))
    assert any("contains control characters" in note for note in notes), "a name with control characters cannot be shown: said, escaped"
    nothing_ran(h)


def test_the_merge_confirmation_of_hostile_names_is_inert(hostile, editor):
    h = hostile
    head = h.env.git(h.repo, "rev-parse", "HEAD")
    asked = len(editor.prompts())
    editor.nvim.command("LazaretMerge")
    # The confirmation is longer than the screen: Neovim pages it (-- More --)
    # and answers no other request meanwhile; nvim_get_mode and nvim_input
    # are answered. `q` ends the paging and cancels the choice.
    assert wait_until(20, lambda: editor.nvim.api.get_mode()["blocking"], 0.1), "the confirmation is up"
    for _ in range(10):
        if not editor.nvim.api.get_mode()["blocking"]:
            break
        editor.nvim.api.input("q")
        time.sleep(0.3)
    assert not editor.nvim.api.get_mode()["blocking"]
    prompt = editor.prompts()[asked]
    assert prompt["kind"] == "select", prompt
    lines = prompt["prompt"].split("\n")
    assert_inert("the merge confirmation", lines)
    assert lines[0].startswith("Merge lazaret/agent-default at commit "), lines[0]
    assert lines[1] == f"WARNING: {len(h.warned)} files that make hosts run code:", lines[1]
    warnings = [line for line in lines if line.startswith("  ! ")]
    assert len(warnings) == len(h.warned), "every warning of the commit, one line each"
    assert h.env.git(h.repo, "rev-parse", "HEAD") == head, "nothing merged"
    nothing_ran(h)


def pending_lines(editor):
    return editor.lua("local a = require('lazaret.approvals'); return a.win and vim.api.nvim_win_is_valid(a.win) "
                      "and vim.api.nvim_buf_get_lines(a.buf, 0, -1, false) or {}")


def cursor_to(editor, needle):
    row = next(i for i, line in enumerate(pending_lines(editor), 1) if needle in line)
    editor.lua("vim.api.nvim_win_set_cursor(require('lazaret.approvals').win, { ..., 0 })", row)


def full_view(editor, needle):
    cursor_to(editor, needle)
    press(editor, "<CR>")
    assert editor.wait("require('lazaret.approvals').full_win ~= nil", 5), "the whole request opened"
    lines = editor.lua("return vim.api.nvim_buf_get_lines(require('lazaret.approvals').full_buf, 0, -1, false)")
    editor.nvim.input("q")
    assert editor.wait("require('lazaret.approvals').full_win == nil", 5)
    return lines


def test_hostile_requests_are_inert_in_every_pending_surface_and_the_ui_stays_usable(requests, editor_factory):
    h = requests
    editor = editor_factory(h.env, h.repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
    env, repo = h.env, h.repo
    # The announcements (one per request), one inert line each.
    assert editor.wait("#_G.lazaret_test_notes >= 3", 10), editor.notes()
    for note in editor.notes():
        assert_inert("a notification", note["msg"])
    editor.nvim.command("LazaretPending")
    assert wait_until(10, lambda: "Lazaret: 3 pending escalations" in pending_lines(editor), 0.1), pending_lines(editor)
    lines = pending_lines(editor)
    assert_inert("the pending window", lines)
    text = "\n".join(lines)
    assert "[1] $'docs/notes.md" in text or "[1] 'docs/notes.md" in text, text[:800]
    assert "[2] rm 'rm -rf / rm -rf /" in text and "more characters)" in text, text[:1500]
    assert editor.lua("return require('lazaret').statusline()") == "⛨ 3 pending"
    # The whole requests: every word on its own line, escaped, nothing cut.
    full_a = full_view(editor, "[1] ")
    assert_inert("the whole request", full_a)
    for i, word in enumerate(h.argv_a, 1):
        assert f"  [{i}] {inert(word)}" in full_a, f"word {i} ({word[:30]!r}) shown whole"
    assert "why      " + inert(h.why_a) in full_a
    full_b = full_view(editor, "[2] rm ")
    assert "  [2] " + inert(h.argv_b[1]) in full_b and "why      " + inert(h.why_b) in full_b
    assert_inert("the whole request", full_b)
    # The edit prompt: its default is inert and splits back to the argv.
    asked = len(editor.prompts())
    cursor_to(editor, "[1] ")
    press(editor, "e")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5), "the edit prompt is open"
    prompt = editor.prompts()[asked]
    assert_inert("the edit prompt", [prompt["prompt"], prompt["default"], editor.lua("return vim.fn.getcmdline()")])
    assert editor.lua("return require('lazaret.shell').split(...)", prompt["default"]) == h.argv_a, "kept as it is, the same argv"
    editor.nvim.input("<CR>")
    # The confirmation is in the window: the edited command named, inert.
    assert wait_until(5, lambda: selection(editor), 0.05), "the edited command is selected"
    lines = pending_lines(editor)
    assert any(line.startswith("  run on the host INSTEAD of the request") for line in lines), lines[:12]
    assert_inert("the edit confirmation", lines)
    editor.nvim.input("<Esc>")  # any other key than <CR> cancels
    assert wait_until(5, lambda: not selection(editor), 0.05), "cancelled"
    # The deny prompt, cancelled.
    cursor_to(editor, "[1] ")
    press(editor, "d")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5)
    editor.nvim.input("<Esc>")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'n'", 5)
    assert len(env.pending()) == 3, "nothing was answered"
    # The status window: the sessions' commands are the hostile scripts.
    editor.nvim.command("Lazaret")
    assert editor.wait("require('lazaret.status').win ~= nil", 5)
    status = editor.lua("return vim.api.nvim_buf_get_lines(require('lazaret.status').buf, 0, -1, false)")
    assert_inert("the status window", status)
    assert "    pending    3" in status, status
    editor.nvim.input("q")
    # Usable: a normal request is listed next to them and answered.
    process, _ = escalate(env, repo, ["touch", "normal-marker"], "a normal request")
    assert wait_until(10, lambda: "Lazaret: 4 pending escalations" in pending_lines(editor), 0.1), pending_lines(editor)
    editor.lua("vim.api.nvim_set_current_win(require('lazaret.approvals').win)")
    cursor_to(editor, "touch normal-marker")
    confirm(editor, "a")
    out, _ = finish(process)
    assert "status=0" in out and (repo / "normal-marker").exists(), out
    (repo / "normal-marker").unlink()
    assert wait_until(10, lambda: "Lazaret: 3 pending escalations" in pending_lines(editor), 0.1), pending_lines(editor)
    assert len(env.pending()) == 3, "the hostile requests are still pending"
    for note in editor.notes():
        assert not raw_unsafe(note["msg"]), note["msg"][:200]
    nothing_ran(h)


@pytest.fixture(scope="module")
def long_name():
    """A domain with `[network] ask = true` whose sandbox asks once, as a
    DNS name, for the corpus entry marked `network` (253 characters that
    start like a trusted API and end in the part that decides who controls
    the name). The only resolver is a loopback one where nothing listens."""
    entry = next(e for e in corpus_entries() if e.get("network"))
    env = LazaretEnv(approval_timeout=120)
    try:
        with env.config_file.open("a") as config:
            config.write('\n[network]\nask = true\nask_hold_seconds = 1\ndns_upstream = ["127.0.0.1:9"]\n')
        repo = env.repository()
        # The name is read from the workspace: the session's command (which
        # :Lazaret lists, cut from its start as commands are) does not hold it.
        (repo / "name.txt").write_text(entry["text"])
        env.git(repo, "add", "name.txt")
        env.git(repo, "commit", "--quiet", "-m", "the name to ask for")
        keeper, _ = env.start_domain(repo, 'busybox nslookup "$(cat /workspace/name.txt)" >/dev/null 2>&1; echo looked-up=$?; exec sleep 600')
        yield env, repo, keeper, entry
    finally:
        env.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"


def test_a_long_name_asked_by_the_sandbox_shows_its_end_on_every_surface_and_stays_inert(long_name, editor_factory):
    """D19: every surface that shows the request (or its grant) cuts the
    name in the middle and shows its end, `x.typeahead.test`, inert; no
    surface shows its start without its end."""
    env, repo, keeper, entry = long_name
    name, tail = entry["text"], entry["tail"]
    assert len(name) == 253 and name.endswith("." + tail)
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15), "the plugin connected to the domain"
    editor.nvim.command("LazaretPending")
    lines = wait_until(30, lambda: (lambda ls: any(tail in line for line in ls) and ls)(pending_lines(editor)), 0.1)
    assert lines, "the request is listed with its end:\n" + "\n".join(pending_lines(editor))
    surfaces = {"the pending window": lines}
    header = next(line for line in lines if line.startswith("[1] network  "))
    width = editor.lua("return vim.api.nvim_win_get_width(require('lazaret.approvals').win)")
    assert header.startswith("[1] network  api.") and header.endswith("." + tail), header
    assert "characters cut)…" in header and len(header) < len(name), header
    assert editor.lua("return vim.fn.strdisplaywidth(...)", header) <= width, "the header fits the window"
    # The whole request: the name uncut.
    full = full_view(editor, "[1] network  ")
    assert "destination  " + name in full, full
    surfaces["the whole request"] = full
    # The statusline and the notifications name no destination.
    assert editor.lua("return require('lazaret').statusline()") == "⛨ 1 pending"
    notes = [n["msg"] for n in editor.notes()]
    assert notes and not [n for n in notes if "typeahead" in n or "anthropic" in n], notes
    # Selected: the window names the name by its end; <CR> allows it.
    cursor_to(editor, "[1] network  ")
    press(editor, "a")
    assert wait_until(5, lambda: selection(editor), 0.05), "the allow is selected"
    lines = pending_lines(editor)
    named = [line for line in lines if line.startswith("  allow api.")]
    assert named and named[0].endswith("." + tail) and "characters cut)…" in named[0], lines[:10]
    surfaces["the selection"] = lines
    editor.nvim.input("<CR>")
    assert wait_until(10, lambda: name in env.lazaret("rules", "--json").stdout, 0.2), "granted"
    # The rules window and the revoke confirmation.
    editor.nvim.command("LazaretRules")
    rules = wait_until(10, lambda: (lambda ls: any(tail in line for line in ls) and ls)(
        editor.lua("local r = require('lazaret.rules'); return r.is_open() and vim.api.nvim_buf_get_lines(r.buf, 0, -1, false) or {}")), 0.1)
    assert rules, "the grant is listed"
    grant = next(line for line in rules if line.startswith("    allow  "))
    assert grant.startswith("    allow  api.") and grant.endswith("." + tail) and "characters cut)…" in grant, grant
    surfaces["the rules window"] = rules
    row = next(i for i, line in enumerate(rules, 1) if line.startswith("    allow  "))
    editor.lua("local r = require('lazaret.rules'); vim.api.nvim_set_current_win(r.win); vim.api.nvim_win_set_cursor(r.win, { ..., 0 })", row)
    asked = len(editor.prompts())
    editor.nvim.input("x")
    prompt = editor.wait_prompt("select", asked)
    assert "." + tail + " (this session)?" in prompt["prompt"], prompt
    surfaces["the revoke confirmation"] = [prompt["prompt"]]
    editor.nvim.input("2<CR>")  # Cancel
    # :Lazaret and :LazaretNet show, where the policy may list it.
    editor.nvim.command("Lazaret")
    assert editor.wait("require('lazaret.status').win ~= nil", 5)
    surfaces[":Lazaret"] = editor.lua("return vim.api.nvim_buf_get_lines(require('lazaret.status').buf, 0, -1, false)")
    editor.nvim.input("q")
    told = len(editor.notes())
    editor.nvim.command("LazaretNet show")
    assert editor.wait(f"#_G.lazaret_test_notes > {told}", 10)
    surfaces[":LazaretNet show"] = editor.notes()[-1]["msg"].split("\n")
    # Everywhere: inert, and never the start of the name without its end.
    for surface, shown in surfaces.items():
        assert_inert(surface, shown)
        for line in shown:
            if "api.anthrop" in line:
                assert "." + tail in line, f"{surface} shows the start of the name without its end: {line!r}"
    print("# the pending window's line: " + header)
    print("# the rules window's line:   " + grant)
    # Revoked again: the sandbox keeps no grant from this test.
    editor.lua("local r = require('lazaret.rules'); vim.api.nvim_set_current_win(r.win); vim.api.nvim_win_set_cursor(r.win, { ..., 0 })", row)
    asked = len(editor.prompts())
    editor.nvim.input("x")
    editor.wait_prompt("select", asked)
    editor.nvim.input("1<CR>")  # Revoke it
    assert wait_until(10, lambda: name not in env.lazaret("rules", "--json").stdout, 0.2), "revoked"
    assert keeper.poll() is None
