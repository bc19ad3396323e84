"""Connection handling against real coordinators: the plugin rejoins a domain
whose coordinator was replaced, and :LazaretNet reports a domain without
network clearly."""

from helpers import escalate, finish
from lzenv import LazaretEnv


def test_the_plugin_rejoins_a_domain_whose_coordinator_was_replaced(editor_factory):
    env = LazaretEnv()
    try:
        repo = env.repository()
        keeper, socket = env.start_domain(repo)
        editor = editor_factory(env, repo)
        assert editor.wait("#require('lazaret.domains').connected() == 1", 10)
        keeper.terminate()
        keeper.communicate(timeout=30)
        assert editor.wait("#require('lazaret.domains').connected() == 0", 20), "the plugin saw the coordinator go"
        env.start_domain(repo)
        assert editor.wait("#require('lazaret.domains').connected() == 1", 10), "and joined the new one"
        process, _ = escalate(env, repo, ["touch", "after-restart"])
        assert editor.wait("#require('lazaret').pending() == 1", 5), "events flow from the new coordinator"
        editor.lua("local d = require('lazaret.domains'); d.respond(d.queue:list()[1].key, 'approve')")
        out, _ = finish(process)
        assert "status=0" in out and (repo / "after-restart").exists()
    finally:
        env.close()
    assert not env.leftovers, env.leftovers


def test_lazaret_net_show_explains_a_domain_without_network(domain, editor_factory):
    env, repo, _ = domain
    editor = editor_factory(env, repo)
    editor.nvim.command("LazaretNet show")
    assert editor.wait("#_G.lazaret_test_notes > 0", 10)
    note = editor.lua("return _G.lazaret_test_notes[#_G.lazaret_test_notes]")
    assert "has no Network Sidecar" in note["msg"] and note["level"] == 4, note
    editor.lua("pcall(vim.cmd, 'LazaretNet allow')")
    assert editor.wait("#_G.lazaret_test_notes > 1", 5)
    assert "needs a RULE" in editor.lua("return _G.lazaret_test_notes[#_G.lazaret_test_notes].msg")
