"""Requests are keyed by (domain, request id) (issue 26, item 7), in a real
Neovim next to a real coordinator and gVisor sandbox.

Request ids are now minted by each coordinator (32 random hex digits), so
two real domains cannot be made to hand out the same id: the second domain
is the plugin's fake coordinator (tests/nvim/unit/fake_coordinator.lua, a
Unix-socket JSON-RPC server in the same Neovim) in the same socket
directory, serving a request with the real request's id. Both must be
listed, each under its own domain, and answering one must not answer (or
hide) the other. The same fake serves hostile text on the surfaces a real
sandbox cannot reach without network: learned DNS names (:LazaretNet show),
a container error and session commands (:Lazaret)."""

import time
from pathlib import Path

import pytest

from helpers import assert_inert, confirm, corpus, escalate, finish, inert
from lzenv import wait_until

FAKE = Path(__file__).resolve().parents[1] / "unit/fake_coordinator.lua"
FAKE_HASH = "fa4e0000d0e5"

START_FAKE = """
local fake_path, socket, id, hostile = ...
local Fake = dofile(fake_path)
_G.fake_answers = {}
local pending = {}
if id ~= vim.NIL then
  pending[1] = { requestId = id, argv = { 'touch', 'fake-domain-request' }, display = 'touch fake-domain-request',
    profile = 'fake', domainHash = '""" + FAKE_HASH + """', cwd = '/fake/workspace', reasons = {}, riskNotes = {},
    receivedAtMs = 4102444800000, expiresAtMs = 4102444920000, sessionId = 's' }
end
local learned = {}
for i, text in ipairs(hostile) do
  learned[i] = { address = '10.0.0.' .. i, names = { text, 'x.' .. text }, expiresInSeconds = 30 }
end
_G.fake = Fake.new(socket, {
  ['pending/list'] = function() return pending end,
  ['domain/status'] = function()
    return { apiVersion = require('lazaret.protocol').API_VERSION, domainHash = '""" + FAKE_HASH + """', profile = 'fake', workspace = '/fake/workspace',
      containerName = 'fake', containerState = 'failed', containerError = table.concat(hostile, ' | '),
      sessions = { { client = hostile[1], pid = 7, sessionId = 's', startedAtMs = 1, command = hostile } },
      agentBranch = 'lazaret/agent-fake', coordinatorPid = 1, image = 'x', startedAtMs = 1 }
  end,
  ['network/show'] = function()
    return { allow = hostile, deny = { hostile[2] }, learned = learned, upstreams = { hostile[3] }, rules = 3, privateAnswers = 'refuse' }
  end,
  ['escalation/respond'] = function(params)
    table.insert(_G.fake_answers, params)
    pending = {}
    vim.schedule(function()
      _G.fake:event({ kind = 'escalationResolved', requestId = params.requestId, outcome = 'approved', decidedBy = 'rpc:neovim' })
    end)
    return true
  end,
})
"""


@pytest.fixture
def fake_domain(domain):
    """The fake coordinator's socket in the real socket directory; removed
    afterwards (the environment waits for every socket to go)."""
    env, _, _ = domain
    directory = env.socket_dir / FAKE_HASH
    directory.mkdir(mode=0o700, exist_ok=True)
    socket = directory / "control.sock"
    yield socket
    socket.unlink(missing_ok=True)
    directory.rmdir()


def window_lines(editor):
    return editor.lua("local a = require('lazaret.approvals'); return a.win and vim.api.nvim_win_is_valid(a.win) "
                      "and vim.api.nvim_buf_get_lines(a.buf, 0, -1, false) or {}")


def cursor_to(editor, needle):
    row = next(i for i, line in enumerate(window_lines(editor), 1) if needle in line)
    editor.lua("vim.api.nvim_win_set_cursor(require('lazaret.approvals').win, { ..., 0 })", row)


def test_the_same_request_id_in_two_domains_is_two_requests(domain, fake_domain, editor_factory):
    env, repo, _ = domain
    process, _ = escalate(env, repo, ["touch", "two-domains-real"])
    assert wait_until(10, lambda: len(env.pending()) == 1)
    real_id = env.pending()[0]["requestId"]
    editor = editor_factory(env, repo)
    try:
        editor.lua(START_FAKE, str(FAKE), str(fake_domain), real_id, [])
        editor.nvim.command("LazaretPending")
        real_domain = f"    domain   default @ {repo} ({env.domain(repo)['domain_hash']})"
        fake_domain_line = f"    domain   fake @ /fake/workspace ({FAKE_HASH})"

        def both_listed():
            lines = window_lines(editor)
            return ("Lazaret: 2 pending escalations" in lines and real_domain in lines and fake_domain_line in lines) and lines

        lines = wait_until(15, both_listed, 0.1)
        assert lines, "\n".join(window_lines(editor))
        real_at = next(i for i, line in enumerate(lines) if "touch two-domains-real" in line)
        fake_at = next(i for i, line in enumerate(lines) if "touch fake-domain-request" in line)
        assert lines[real_at + 1] == real_domain, "the real request under its domain"
        assert lines[fake_at + 1] == fake_domain_line, "the fake's under its own"
        assert sum(line == f"    id       {real_id}" for line in lines) == 2, lines
        # Approve the fake domain's request: only the fake is answered.
        cursor_to(editor, "touch fake-domain-request")
        confirm(editor, "a")
        assert editor.wait("#_G.fake_answers == 1", 5)
        assert editor.lua("return _G.fake_answers[1].requestId") == real_id
        time.sleep(0.5)
        assert [p["argv"] for p in env.pending()] == [["touch", "two-domains-real"]], "the real request is still pending"
        assert process.poll() is None
        assert wait_until(5, lambda: "Lazaret: 1 pending escalation" in window_lines(editor), 0.1), "\n".join(window_lines(editor))
        text = "\n".join(window_lines(editor))
        assert "touch two-domains-real" in text and "fake-domain-request" not in text, text
        # The real one, answered in its own domain.
        cursor_to(editor, "touch two-domains-real")
        confirm(editor, "a")
        out, _ = finish(process)
        assert "status=0" in out and (repo / "two-domains-real").exists(), out
    finally:
        editor.lua("if _G.fake then _G.fake:close() end")


def test_a_second_coordinators_hostile_names_stay_inert(domain, fake_domain, editor_factory):
    env, repo, _ = domain
    marker = env.root / "fake-marker"
    hostile = [text for _, text in corpus(str(marker)) if len(text) < 1000]
    editor = editor_factory(env, repo)
    try:
        editor.lua(START_FAKE, str(FAKE), str(fake_domain), None, hostile)
        assert editor.wait(f"require('lazaret.domains').domains['{fake_domain}'] ~= nil and "
                           f"require('lazaret.domains').domains['{fake_domain}'].policy ~= nil", 15)
        told = len(editor.notes())
        editor.nvim.command(f"LazaretNet show {FAKE_HASH}")
        assert editor.wait(f"#_G.lazaret_test_notes > {told}", 10)
        note = editor.notes()[-1]["msg"]
        assert note.startswith("Egress policy of fake @ /fake/workspace"), note
        # The plugin's own lines (no agent newline made another one), each inert.
        lines = note.split("\n")
        assert_inert(":LazaretNet show", lines)
        assert all(line.startswith(("allow    ", "deny     ", "learned  ", "         ", "dns      ", "rules    ")) for line in lines[1:]), lines
        assert len(lines) == 1 + 2 + 6 + 2, lines
        assert inert(hostile[1]) in note, "the names are shown, escaped"
        editor.nvim.command("Lazaret")
        assert editor.wait("require('lazaret.status').win ~= nil", 5)
        lines = editor.lua("return vim.api.nvim_buf_get_lines(require('lazaret.status').buf, 0, -1, false)")
        assert_inert(":Lazaret", lines)
        text = "\n".join(lines)
        assert "● fake @ /fake/workspace" in text and "container  fake failed: " in text, text
        assert editor.lua("return require('lazaret').statusline()") == ""
        assert not marker.exists(), "nothing ran"
    finally:
        editor.lua("if _G.fake then _G.fake:close() end")
