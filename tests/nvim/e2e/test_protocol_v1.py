"""The protocol as docs/rpc.md describes it, against a real coordinator: `lazaret editor-info --workspace`, events with
`seq`. (branch/fileContents is exercised by test_review's diff test.)"""

import json

import pytest

from helpers import escalate, finish


def test_editor_info_names_the_working_directorys_domain(domain, editor_factory):
    """Needs `lazaret editor-info --json --workspace DIR`."""
    env, repo, socket = domain
    result = env.lazaret("editor-info", "--json", "--workspace", repo, check=False)
    assert result.returncode == 0, f"editor-info --workspace is not supported by {env.binary}: {result.stderr}"
    info = json.loads(result.stdout)
    assert info["folders"][0]["controlSocket"] == str(socket) and info["folders"][0]["running"] is True, info
    assert info["version"] and info["defaultProfile"] == "default", info
    editor = editor_factory(env, repo)
    assert editor.wait("require('lazaret.domains').current ~= nil", 10)
    found = editor.lua("local d = require('lazaret.domains'); return { api = d.info.apiVersion, current = d.current.controlSocket, version = d.info.version or vim.NIL, problems = #d.problems() }")
    plugin_api = editor.lua("return require('lazaret.protocol').API_VERSION")
    assert found == {"api": plugin_api, "current": str(socket), "version": info["version"], "problems": 0}, found


def test_events_carry_a_gapless_seq(domain, editor_factory):
    """Needs `seq` on every event."""
    env, repo, socket = domain
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
    editor.lua("""
        _G.seen_seq = {}
        local domains = require('lazaret.domains')
        local d = domains.connected()[1]
        local accept = d.seq.accept
        d.seq.accept = function(self, event) table.insert(_G.seen_seq, event.seq or vim.NIL); return accept(self, event) end""")
    process, _ = escalate(env, repo, ["touch", "seq-marker"])
    assert editor.wait("#require('lazaret').pending() == 1", 10)
    editor.lua("local d = require('lazaret.domains'); d.respond(d.queue:list()[1].key, 'deny')")
    finish(process)
    assert editor.wait("#_G.seen_seq >= 4", 10), editor.lua("return _G.seen_seq")
    seen = editor.lua("return _G.seen_seq")
    assert all(isinstance(s, int) for s in seen), f"events without seq: {seen}"
    assert seen == list(range(seen[0], seen[0] + len(seen))), seen
    assert editor.lua("return require('lazaret.domains').stats.resyncs") == 1, "no gap, no resync beyond the first list"
