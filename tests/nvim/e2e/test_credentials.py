"""API keys in the Network Sidecar (issue 30) in a real Neovim against a real
coordinator, sidecar and gVisor sandbox: the domain's profile names a
credential for an HTTPS origin of the test's own; the sandbox sends one
request through the sidecar's endpoint, which adds the key; `:LazaretNet
show` lists the endpoint (origin, port, header, counts) and `:Lazaret` counts
it, and the key itself is nowhere in the editor: not in a notification, a
buffer, a message or an option.

Nothing leaves this machine: the origin (`lazaret-testhost https-api`, a
certificate from `lazaret-testhost test-certs`) and the domain's only DNS
server (`lazaret-testhost dns`) are on a podman network of the test's own,
created `--internal`."""

import os
import time

import pytest

from helpers import assert_inert
from lzenv import InternalNetwork, LazaretEnv, static_helper, wait_until

ORIGIN = "api.keys.test"
LINE = f"keys     https://{ORIGIN} via 127.0.0.1:17400, x-api-key added; 1 request, 0 refused"


@pytest.fixture(scope="module")
def key_domain():
    """A domain whose profile has a credential for https://ORIGIN, kept up
    by a session that sent one request through the endpoint (with a key
    of its own, which the sidecar replaces) and printed the answer."""
    env = LazaretEnv(approval_timeout=120)
    network = InternalNetwork("keys")
    key = f"lzt-editor-key-{os.getpid()}-{time.time_ns():x}"
    try:
        tls = env.root / "tls"
        certs = [str(static_helper("lazaret-testhost")), "test-certs", str(tls), ORIGIN]
        assert os.spawnv(os.P_WAIT, certs[0], certs) == 0, "the test certificates"
        network.start_testhost(53, ["dns", "53", f"{ORIGIN}={network.address(21)}"])
        network.start_testhost(
            21, ["https-api", "443", f"/tls/{ORIGIN}.pem", f"/tls/{ORIGIN}.key", "x-api-key", key], volumes=[f"{tls}:/tls:ro"])
        for host in (53, 21):
            assert wait_until(10, lambda: "listening" in network.log(host), 0.1), f"test host .{host}: {network.log(host)}"
        with env.config_file.open("a") as config:
            config.write(
                f'\n[network]\npodman_network = "{network.name}"\ndns_upstream = ["{network.address(53)}"]\n'
                f'private_answers = "allow"\nca_bundle = "{tls / "ca.pem"}"\nallow_egress = ["{ORIGIN}"]\n\n'
                '[profiles.default]\nimage = "localhost/lazaret-default:1"\n'
                'env = { LZT_API_KEY = "lazaret-injected" }\n'
                f'credentials = [{{ origin = "https://{ORIGIN}", header = "x-api-key", value = "env:LZT_API_KEY", '
                'base_url_env = "API_BASE" }]\n')
        env.shell["LZT_API_KEY"] = key
        repo = env.repository()
        keeper, _ = env.start_domain(
            repo, "answer=$(busybox wget -q -O - --header 'x-api-key: agent-own' \"$API_BASE/v1/messages\"); "
                  "echo \"fetched=$? key=$LZT_API_KEY $answer\"; exec sleep 600")
        yield env, repo, keeper, network, key
    finally:
        env.close()
        network.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"


def everything_shown(editor):
    """Every text the editor holds that a user can see: notifications,
    every buffer's lines, :messages, the status line and the winbar."""
    notes = [note["msg"] for note in editor.notes()]
    buffers = editor.lua("local out = {} for _, b in ipairs(vim.api.nvim_list_bufs()) do "
                         "vim.list_extend(out, vim.api.nvim_buf_get_lines(b, 0, -1, false)) end return out")
    messages = editor.lua("return vim.api.nvim_exec2('messages', { output = true }).output")
    bars = [editor.lua("return require('lazaret').statusline()"), editor.lua("return vim.o.statusline .. vim.o.winbar")]
    return "\n".join([*notes, *buffers, messages, *bars])


def test_the_credential_endpoint_is_listed_with_its_counts_and_the_key_is_never_shown(key_domain, editor_factory):
    env, repo, keeper, network, key = key_domain
    # The sandbox's request reached the origin through the endpoint with the
    # real key, once, whatever the sandbox sent itself.
    line = keeper.stdout.readline()
    assert line.startswith("fetched=0 key=lazaret-injected ") and "LAZARET-OK" in line, line
    log = [entry for entry in network.log(21).splitlines() if entry.startswith("request ")]
    assert log == [f"request conn=1 GET /v1/messages host={ORIGIN} key=ok copies=1 body=0"], log
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15), "the plugin connected to the domain"
    before = len(editor.notes())
    editor.nvim.command("LazaretNet show")
    assert editor.wait(f"#_G.lazaret_test_notes > {before}", 10), "the policy was shown"
    shown = editor.notes()[-1]["msg"].split("\n")
    assert shown[0].startswith("Egress policy of "), shown
    assert LINE in shown, "\n".join(shown)
    assert f"allow    {ORIGIN}" in shown, "\n".join(shown)
    assert_inert(":LazaretNet show", shown)
    # `:Lazaret` counts the endpoint on the domain's network line.
    editor.nvim.command("Lazaret")
    status = editor.wait("(function() local l = vim.api.nvim_buf_get_lines(0, 0, -1, false) "
                         "for _, x in ipairs(l) do if x:find('1 API key endpoint', 1, true) then return l end end end)()", 10)
    assert status, editor.buffer_text()
    network_line = next(x for x in status if x.lstrip().startswith("network"))
    # (The sidecar's own question for the origin is learned like any other.)
    expected = f"network    allow {ORIGIN}; 1 learned address; 1 API key endpoint (:LazaretNet show)"
    assert network_line.strip() == expected, network_line
    assert key not in everything_shown(editor), "the key reached the editor"
    # The key never left the sidecar: not in the coordinator's answer either.
    assert key not in env.lazaret("net", "show", "--workspace", repo).stdout
