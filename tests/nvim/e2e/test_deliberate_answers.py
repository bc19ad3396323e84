"""Deliberate answers in Neovim (issue 45 finding 1, DECISIONS D20), in a real
Neovim against a real coordinator and gVisor sandbox.

The agent sees every key the user types and can time its requests so that
the user's next words answer them: with `auto_open`, the pending window takes
the keyboard in the middle of a sentence ("ok run it again and please add a
test": `a` once approved a host command, `p` allowed a name for good). The
window now starts disarmed: every key typed into it is discarded, counted
and said, and restarts the 1 s delay; armed, an approval is `a` then <CR>;
another request moving under the cursor disarms it again.

Nothing is sent off the machine: the domain's only resolver is a loopback
one (`dns_upstream = ["127.0.0.1:9"]`, where nothing listens) and every
name asked is refused (nothing is ever allowed here)."""

import json
import time

import pytest

from helpers import escalate, finish, press, select_answer, selection
from lzenv import LazaretEnv, wait_until

# Typed at 150 ms a key. Only keys that keep Vim in normal mode in a
# read-only buffer (no `q`, `:`, `v`, `Z`), so that before the window opens
# they do nothing; `a`, `d`, `p`, `t`, `e` and the final <CR> are all there.
SENTENCE = "ok run it again and please add a test for the parser and then the network part too\r"
NAME = "typed.test"

# Counts the keys typed (vim.on_key sees them before the plugin's guard
# discards them) and at which one the pending window was first open, and
# the name request first queued.
TYPING = """
_G.typing = { keys = 0, in_window = 0 }
vim.on_key(function(_, typed)
  if typed == '' then
    return
  end
  local t = _G.typing
  t.keys = t.keys + 1
  local a = package.loaded['lazaret.approvals']
  if a and a.is_open() and vim.api.nvim_get_current_win() == a.win then
    t.opened_at = t.opened_at or t.keys
    t.in_window = t.in_window + 1
  end
  if not t.network_at and #require('lazaret').network_requests() > 0 then
    t.network_at = t.keys
  end
end)
"""


@pytest.fixture(scope="module")
def ask_domain():
    """A domain with `[network] ask = true` (the name questions held 1 s,
    then refused), kept up by a sleeping session."""
    env = LazaretEnv(approval_timeout=300)
    try:
        with env.config_file.open("a") as config:
            config.write('\n[network]\nask = true\nask_hold_seconds = 1\ndns_upstream = ["127.0.0.1:9"]\n')
        repo = env.repository()
        env.start_domain(repo)
        yield env, repo
    finally:
        env.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"


def window_text(editor):
    return editor.lua("local a = require('lazaret.approvals'); return a.is_open() and "
                      "table.concat(vim.api.nvim_buf_get_lines(a.buf, 0, -1, false), '\\n') or ''")


def wait_text(editor, needle, timeout=30.0):
    text = wait_until(timeout, lambda: (lambda t: needle in t and t)(window_text(editor)), 0.05)
    assert text, f"{needle!r} not shown; window:\n{window_text(editor)}"
    return text


def cursor_to(editor, needle):
    lines = window_text(editor).split("\n")
    row = next(i for i, line in enumerate(lines, 1) if needle in line)
    editor.lua("local a = require('lazaret.approvals'); vim.api.nvim_set_current_win(a.win); "
               "vim.api.nvim_win_set_cursor(a.win, { ..., 0 })", row)


def grants(env):
    return [g for rules in json.loads(env.lazaret("rules", "--json").stdout).values() for g in rules["network"]]


def outcomes(env, repo):
    return [(r.get("outcome"), r.get("decidedBy")) for r in env.audit(repo)]


def discarded(editor):
    return editor.lua("local a = require('lazaret.approvals'); return a.state and a.state.discarded or -1")


def test_a_sentence_typed_while_the_agent_asks_answers_nothing(ask_domain, editor_factory):
    """(a) The user types a sentence at 150 ms a key in normal mode (in a
    read-only buffer: the keys do nothing there); the agent asks to run
    `touch PWNED` on the host and for a name, so that both arrive
    mid-sentence and the window opens by itself and takes the keyboard.
    Nothing is approved, nothing granted, and the window says how many keys
    it discarded."""
    env, repo = ask_domain
    editor = editor_factory(env, repo)
    editor.lua("require('lazaret').setup({ auto_open = true })")
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15), "the plugin connected to the domain"
    assert editor.wait("not require('lazaret.domains').settling()", 10)
    editor.lua("local b = vim.api.nvim_create_buf(true, true); vim.api.nvim_set_current_buf(b); "
               "vim.api.nvim_buf_set_lines(b, 0, -1, false, { 'the agent is working', 'on the parser' }); vim.bo[b].modifiable = false")
    user_window = editor.lua("return vim.api.nvim_get_current_win()")
    # Counted inside Neovim: between keys it may be waiting for the rest of
    # a command (`r`, `t`, `f`, `g` take a character) and answers no request.
    editor.lua(TYPING)
    # The agent times both requests to land while the sentence is typed.
    command = env.spawn(repo, "sleep 2; lazaret-escalate --justification 'run it again' -- touch PWNED; echo status=$?")
    name = env.spawn(repo, f"sleep 4; busybox nslookup {NAME} >/dev/null 2>&1; echo looked-up=$?; exec sleep 300")
    for key in SENTENCE:
        editor.nvim.input("<CR>" if key == "\r" else ("<Space>" if key == " " else key))
        time.sleep(0.15)
    if editor.nvim.api.get_mode()["blocking"]:
        editor.nvim.input("<Esc>")  # only when the window never took the keys (a failure below)
    typing = editor.lua("return _G.typing")
    opened_at, network_at = typing.get("opened_at"), typing.get("network_at")
    assert typing["keys"] == len(SENTENCE), typing
    typed_after = len(SENTENCE) - (opened_at or len(SENTENCE)) + 1
    print(f"# the window opened at key {opened_at} of {len(SENTENCE)}; the name request came at key {network_at}")
    assert opened_at is not None and typed_after >= 10, \
        f"the window opened mid-sentence ({opened_at} of {len(SENTENCE)}); sessions: {command.poll()} {name.poll()}"
    assert typing["in_window"] == typed_after, f"every key from then on went to the window: {typing}"
    assert network_at is not None and network_at < len(SENTENCE) - 5, f"the name request came mid-sentence ({network_at})"
    assert editor.lua("return vim.api.nvim_get_current_win() == require('lazaret.approvals').win"), "the window took the keyboard"
    assert editor.lua("return vim.api.nvim_get_current_win()") != user_window
    # What the window says right after the last key (it restarted the delay).
    text, count = window_text(editor), discarded(editor)
    # Nothing answered: the host command never ran, nothing was granted.
    assert not (repo / "PWNED").exists(), "the host command ran"
    assert command.poll() is None, "the command request still waits"
    pending = env.pending()
    assert sorted(p.get("kind", "command") for p in pending) == ["command", "network"], pending
    assert not [o for o in outcomes(env, repo) if o[0] in ("approved", "edited", "denied", "networkGranted", "networkRefused")], outcomes(env, repo)
    assert grants(env) == [], "nothing granted"
    # The window said it, disarmed: every key typed into it was discarded and counted.
    assert count == typed_after, f"every key typed into the window was discarded and counted: {count} of {typed_after}"
    assert f"\nDISARMED: keys are discarded until 1 s without a key ({count} keys discarded)\n" in text, text[:600]
    assert editor.lua("return vim.api.nvim_get_mode().mode") == "n", "no key reached insert or command-line mode"
    assert discarded(editor) == count, "nothing more was discarded"
    # A second after the last key it arms, and says so.
    wait_text(editor, f"\nARMED: keys answer the request under the cursor ({count} keys discarded)\n", 5)
    print("# window after the sentence:\n" + "\n".join(text.split("\n")[:8]))
    # Deliberately now: a denial each (one key once armed).
    cursor_to(editor, "touch PWNED")
    press(editor, "d")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5), "the reason prompt"
    editor.nvim.input("<CR>")
    out, _ = finish(command)
    assert "status=97" in out, out
    cursor_to(editor, f"network  {NAME}")
    press(editor, "d")
    assert wait_until(10, lambda: ("networkRefused", "rpc:neovim") in outcomes(env, repo), 0.2), outcomes(env, repo)
    assert not (repo / "PWNED").exists()
    name.kill()
    name.communicate()


def test_armed_a_then_enter_approves_once_and_a_then_another_key_answers_nothing(ask_domain, editor_factory):
    """(b) Armed, `a` selects: the window names the command and nothing runs
    yet; <CR> runs it, once. `a` then any other key answers nothing and
    disarms the window."""
    env, repo = ask_domain
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15)
    editor.nvim.command("LazaretPending")
    process, _ = escalate(env, repo, ["sh", "-c", "echo ran >> once-marker"], "count the runs")
    wait_text(editor, "] sh -c 'echo ran >> once-marker'")
    cursor_to(editor, "] sh -c 'echo ran >> once-marker'")
    press(editor, "a")
    time.sleep(1.0)
    assert not (repo / "once-marker").exists(), "a alone runs nothing"
    text = wait_text(editor, "CONFIRM with <CR>", 5)
    assert f"  approve: run on the host, in {repo}:\n    sh -c 'echo ran >> once-marker'\n" in text, text[:800]
    editor.nvim.input("<CR>")
    out, _ = finish(process)
    assert "status=0" in out, out
    assert (repo / "once-marker").read_text() == "ran\n", "it ran once"
    assert [o for o in outcomes(env, repo) if o[0] == "approved"] == [("approved", "rpc:neovim")], outcomes(env, repo)
    # a, then another key: cancelled, nothing runs, the window disarms.
    process, _ = escalate(env, repo, ["touch", "cancelled-marker"])
    wait_text(editor, "touch cancelled-marker")
    cursor_to(editor, "touch cancelled-marker")
    select_answer(editor, "a")
    before = discarded(editor)
    editor.nvim.input("x")
    assert wait_until(5, lambda: not selection(editor), 0.05), "cancelled"
    wait_text(editor, "DISARMED", 5)
    assert discarded(editor) == before + 1, "the cancelling key is counted"
    editor.nvim.input("<CR>")  # the <CR> meant for the selection: disarmed, discarded
    time.sleep(1.0)
    assert not (repo / "cancelled-marker").exists(), "nothing ran"
    assert process.poll() is None and len(env.pending()) == 1, env.pending()
    assert [o for o in outcomes(env, repo) if o[0] == "approved"] == [("approved", "rpc:neovim")], "no second approval"
    press(editor, "d")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5)
    editor.nvim.input("<CR>")
    out, _ = finish(process)
    assert "status=97" in out, out
    assert (repo / "once-marker").read_text() == "ran\n"
    (repo / "once-marker").unlink()


def test_a_request_withdrawn_under_a_key_moves_the_next_in_disarmed(ask_domain, editor_factory):
    """(c) Two requests wait; the user selects the first (`a`) and the agent
    withdraws it (kills its client) just before the <CR> lands, so the
    second moves into its place: the window shows it disarmed, and the <CR>
    and the keys after it answer nothing."""
    env, repo = ask_domain
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15)
    editor.nvim.command("LazaretPending")
    env.exec_in(repo, "rm -f /tmp/first-client")
    first = env.spawn(repo, "lazaret-escalate -- touch first-marker & echo $! > /tmp/first-client; wait; echo first-done")
    wait_text(editor, "touch first-marker")
    second, _ = escalate(env, repo, ["touch", "second-marker"])
    wait_text(editor, "] touch second-marker")
    cursor_to(editor, "] touch first-marker")
    press(editor, "a")
    time.sleep(0.5)
    assert not (repo / "first-marker").exists(), "a alone ran the first"
    assert wait_until(5, lambda: selection(editor), 0.05), "the window selected an answer"
    assert "    touch first-marker" in window_text(editor), "the first is named"
    before = discarded(editor)
    killed = env.exec_in(repo, "kill -9 $(cat /tmp/first-client)")
    assert killed.returncode == 0, killed
    text = wait_until(15, lambda: (lambda t: "touch first-marker" not in t and t)(window_text(editor)), 0.02)
    assert text, "the first request was withdrawn"
    assert "] touch second-marker" in text, text
    assert "DISARMED" in text and "CONFIRM" not in text, "the next request is shown disarmed, nothing selected: " + text[:500]
    # The <CR> meant for the first, and what the user typed on.
    for key in ["<CR>", "a", "<CR>", "<Tab>", "a", "<CR>"]:
        editor.nvim.input(key)
        time.sleep(0.15)
    time.sleep(1.0)
    assert not (repo / "second-marker").exists() and not (repo / "first-marker").exists(), "nothing ran"
    assert [p["argv"] for p in env.pending()] == [["touch", "second-marker"]], env.pending()
    answered = [(r.get("outcome"), r.get("requestedArgv")) for r in env.audit(repo)
                 if any("-marker" in word for word in r.get("requestedArgv") or []) and "once-marker" not in " ".join(r["requestedArgv"])]
    assert not [a for a in answered if a[0] in ("approved", "edited")], answered
    assert ("denied", ["touch", "first-marker"]) in answered, f"the first was withdrawn (its requester went away): {answered}"
    assert discarded(editor) == before + 6, "every key was discarded and counted"
    assert f"({before + 6} keys discarded)" in window_text(editor), window_text(editor)[:400]
    # Deliberately: a denial of the second, once armed.
    cursor_to(editor, "] touch second-marker")
    press(editor, "d")
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5)
    editor.nvim.input("<CR>")
    out, _ = finish(second)
    assert "status=97" in out, out
    first.communicate(timeout=30)
    assert not (repo / "second-marker").exists() and not (repo / "first-marker").exists()
