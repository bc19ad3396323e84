"""Network requests (issue 29, items 3 and 4) in a real Neovim against a real
coordinator and gVisor sandbox: a DNS name the sandbox asks for that no
allow entry covers becomes a request in :LazaretPending; `t` allows it for
15 minutes; it disappears; :LazaretRules shows the grant; `x` revokes it
after the confirmation; it disappears.

Nothing is ever sent to an outside address: the domain's only resolver is
a loopback one (`dns_upstream = ["127.0.0.1:9"]`, in the sidecar's own
namespace, where nothing listens), the one question is asked once, held
1 s (`ask_hold_seconds = 1`) and refused before the answer is given, and
nothing in the sandbox asks the name again afterwards (the session only
sleeps): an allowed name's next question would be forwarded upstream."""

import json
import queue
import shutil
import subprocess
import threading
import time

import pytest

from helpers import assert_inert, press, selection
from lzenv import InternalNetwork, LazaretEnv, static_helper, wait_until

NAME = "grant.test"


def read_line(process, timeout):
    """The next stdout line of PROCESS, or '' after TIMEOUT seconds."""
    lines = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return ""


@pytest.fixture(scope="module")
def ask_domain():
    """A domain with `[network] ask = true` whose keeping session asks
    NAME once (busybox nslookup), says when the answer (a refusal) came,
    then only sleeps."""
    env = LazaretEnv(approval_timeout=120)
    try:
        with env.config_file.open("a") as config:
            config.write('\n[network]\nask = true\nask_hold_seconds = 1\ndns_upstream = ["127.0.0.1:9"]\n')
        repo = env.repository()
        keeper, _ = env.start_domain(repo, f"busybox nslookup {NAME} >/dev/null 2>&1; echo looked-up=$?; exec sleep 600")
        yield env, repo, keeper
    finally:
        env.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"


def window_lines(editor, module):
    return editor.lua(f"local w = require('lazaret.{module}'); return w.win and vim.api.nvim_win_is_valid(w.win) "
                      "and vim.api.nvim_buf_get_lines(w.buf, 0, -1, false) or {}")


def wait_lines(editor, module, condition, what, timeout=20.0):
    lines = wait_until(timeout, lambda: (lambda lines: condition(lines) and lines)(window_lines(editor, module)), 0.1)
    assert lines, f"{what}; window:\n" + "\n".join(window_lines(editor, module))
    return lines


def cursor_to(editor, module, needle):
    lines = window_lines(editor, module)
    row = next(i for i, line in enumerate(lines, 1) if needle in line)
    editor.lua(f"vim.api.nvim_set_current_win(require('lazaret.{module}').win); "
               f"vim.api.nvim_win_set_cursor(require('lazaret.{module}').win, {{ ..., 0 }})", row)


def shown(lines, needle):
    return any(needle in line for line in lines)


def test_a_network_request_is_allowed_for_15_minutes_by_key_then_revoked(ask_domain, editor_factory):
    env, repo, keeper = ask_domain
    # The held question was answered (refused) before anything is allowed.
    line = read_line(keeper, 60)
    assert line.startswith("looked-up="), f"nslookup did not finish: {line!r}"
    time.sleep(1.5)  # more than the 1 s hold
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15), "the plugin connected to the domain"
    editor.nvim.command("LazaretPending")
    lines = wait_lines(editor, "approvals", lambda ls: shown(ls, f"network  {NAME}"), "the network request is listed")
    assert_inert("the pending window", lines)
    text = "\n".join(lines)
    at = next(i for i, l in enumerate(lines) if l.endswith(f"network  {NAME}"))
    request = lines[at:at + 7]
    assert any(l.startswith("    records  A") for l in request), request
    assert any(l.startswith("    asked    ") for l in request), request
    assert "network request" in lines[0], lines[0]
    assert "t allow for minutes" in text, text
    count = editor.lua("return require('lazaret').statusline()")
    networks = editor.lua("return #require('lazaret').network_requests()")
    assert networks >= 1 and count == f"⛨ {networks} pending", (count, networks)
    assert not any(NAME in n["msg"] for n in editor.notes()), "the destination never goes to vim.notify"
    # `t` and 15, then <CR>: allowed for 15 minutes.
    cursor_to(editor, "approvals", f"network  {NAME}")
    asked = len(editor.prompts())
    press(editor, "t")
    prompt = editor.wait_prompt("input", asked)
    assert "1-1440" in prompt["prompt"], prompt
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5), "the minutes prompt is open"
    editor.nvim.input("15<CR>")
    assert wait_until(5, lambda: selection(editor), 0.05), "the answer is selected"
    lines = window_lines(editor, "approvals")
    at = lines.index(f"  allow {NAME}")
    assert lines[at + 1] == "  for 15 minutes", lines
    time.sleep(0.5)
    assert NAME not in env.lazaret("rules", "--json").stdout, "nothing is granted before <CR>"
    editor.nvim.input("<CR>")
    wait_lines(editor, "approvals", lambda ls: ls and not shown(ls, f"network  {NAME}"), "the answered request disappears")
    rules_cli = env.lazaret("rules", "--json").stdout
    assert NAME in rules_cli, rules_cli
    # :LazaretRules shows the grant; `x`, then "Revoke it", revokes it.
    editor.nvim.command("LazaretRules")
    lines = wait_lines(editor, "rules", lambda ls: shown(ls, f"allow  {NAME}"), "the grant is listed")
    assert_inert("the rules window", lines)
    at = next(i for i, l in enumerate(lines) if l.endswith(f"allow  {NAME}"))
    detail = lines[at + 1]
    assert "for 15 min, " in detail and " left;" in detail and "by rpc:neovim" in detail, detail
    cursor_to(editor, "rules", f"allow  {NAME}")
    asked = len(editor.prompts())
    editor.nvim.input("x")
    prompt = editor.wait_prompt("select", asked)
    assert f"Revoke the network grant of {NAME}" in prompt["prompt"], prompt
    editor.nvim.input("1<CR>")  # Revoke it
    wait_lines(editor, "rules", lambda ls: shown(ls, "network (") and not shown(ls, NAME), "the revoked grant disappears")
    assert wait_until(10, lambda: NAME not in env.lazaret("rules", "--json").stdout), env.lazaret("rules", "--json").stdout
    assert keeper.poll() is None, "the session still only sleeps"


@pytest.fixture(scope="module")
def direct_domain():
    """A domain with `ask = true` on a podman network of its own, created
    `--internal`, holding a TCP echo host at .13 port 8081; the workspace
    holds the static test host binary (for `echo-probe` from inside). The
    sandbox asks no name: its only resolver is a loopback one."""
    network = InternalNetwork("direct")
    env = LazaretEnv(approval_timeout=120)
    try:
        network.start_echo(13, 8081)
        with env.config_file.open("a") as config:
            config.write(f'\n[network]\npodman_network = "{network.name}"\nallow_egress = []\nask = true\n'
                         'dns_upstream = ["127.0.0.1:9"]\n')
        repo = env.repository()
        shutil.copy(static_helper("lazaret-testhost"), repo / "lazaret-testhost")
        env.git(repo, "add", "lazaret-testhost")
        env.git(repo, "commit", "--quiet", "-m", "the test host")
        keeper, _ = env.start_domain(repo)
        yield env, repo, network, keeper
    finally:
        env.close()
        network.close()
    assert not env.leftovers, f"containers left behind: {env.leftovers}"


def test_a_direct_connection_is_allowed_by_key_and_revoking_the_grant_cuts_the_flow(direct_domain, editor_factory):
    """Issue 29, from Neovim: a connection straight to an unlisted address is
    refused and listed as a request for its /32; `t` 15 allows it; a flow is
    made; `x` in :LazaretRules revokes the grant and the flow is cut."""
    env, repo, network, keeper = direct_domain
    address = network.address(13)
    destination = f"{address}/32"
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15), "the plugin connected to the domain"
    editor.nvim.command("LazaretPending")
    started = time.monotonic()
    refused = env.exec_in(repo, f"/workspace/lazaret-testhost echo-probe {address} 8081 1")
    refused_ms = (time.monotonic() - started) * 1000
    assert "Connection refused" in refused.stdout + refused.stderr, f"refused at once: {refused}"
    lines = wait_lines(editor, "approvals", lambda ls: shown(ls, f"network  {destination} tcp/8081"), "the address is a network request")
    print(f"# measure: direct connection -> pending window: {(time.monotonic() - started) * 1000:.0f} ms "
          f"(the probe was refused after {refused_ms:.0f} ms)")
    assert_inert("the pending window", lines)
    at = next(i for i, l in enumerate(lines) if l.endswith(f"network  {destination} tcp/8081"))
    assert "    opens    tcp/8081 only (w: every protocol and port of the address)" in lines[at:at + 7], lines[at:at + 7]

    cursor_to(editor, "approvals", f"network  {destination}")
    asked = len(editor.prompts())
    press(editor, "t")
    editor.wait_prompt("input", asked)
    assert editor.wait("vim.api.nvim_get_mode().mode == 'c'", 5), "the minutes prompt is open"
    editor.nvim.input("15<CR>")
    assert wait_until(5, lambda: selection(editor), 0.05), "the answer is selected"
    lines = window_lines(editor, "approvals")
    at = lines.index(f"  allow {destination} tcp/8081 only")
    assert lines[at + 1] == "  for 15 minutes", lines
    editor.nvim.input("<CR>")
    wait_lines(editor, "approvals", lambda ls: ls and not shown(ls, f"network  {destination}"), "the answered request disappears")
    grants = [g for rules in json.loads(env.lazaret("rules", "--json").stdout).values() for g in rules["network"]]
    assert [(g["destination"], g.get("service"), g.get("everyPort")) for g in grants] == [(destination, "tcp/8081", False)], grants

    # A flow through the grant: the probe's byte comes back every 200 ms.
    flow = subprocess.Popen(["podman", "exec", env.container(repo), "/workspace/lazaret-testhost", "echo-probe", address, "8081", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert read_line(flow, 30) == "connected\n", "the grant lets the connection through"
        time.sleep(1)
        assert flow.poll() is None, "the flow is up"
        editor.nvim.command("LazaretRules")
        wait_lines(editor, "rules", lambda ls: any(l.endswith(f"allow  {destination} tcp/8081") for l in ls), "the grant is listed, with its port")
        cursor_to(editor, "rules", f"allow  {destination}")
        asked = len(editor.prompts())
        editor.nvim.input("x")
        prompt = editor.wait_prompt("select", asked)
        assert f"Revoke the network grant of {destination}" in prompt["prompt"], prompt
        revoked = time.monotonic()
        editor.nvim.input("1<CR>")  # Revoke it
        cut = read_line(flow, 30)
        assert cut.startswith("cut after_ms="), f"revoking from Neovim cuts the flow: {cut!r}"
        print(f"# measure: revoke -> flow cut seen by the probe: {(time.monotonic() - revoked) * 1000:.0f} ms")
    finally:
        if flow.poll() is None:
            flow.kill()
        flow.communicate()
    wait_lines(editor, "rules", lambda ls: not shown(ls, destination), "the revoked grant disappears")
    again = env.exec_in(repo, f"/workspace/lazaret-testhost echo-probe {address} 8081 1")
    assert "Connection refused" in again.stdout + again.stderr, f"a new connection is refused again: {again}"
    outcomes = [record.get("outcome") for record in env.audit(repo)]
    assert "networkRevoked" in outcomes, outcomes
    assert keeper.poll() is None, "the session still only sleeps"


def test_every_port_of_an_address_is_its_own_named_answer_and_its_grant_says_so(direct_domain, editor_factory):
    """D19 from Neovim: an address request is one protocol and port; `w`
    makes the allow keys open every protocol and port of the address, the
    window names it so before <CR>, and the grant (rules/list `everyPort`)
    is shown as covering every port."""
    env, repo, network, keeper = direct_domain
    address = network.address(13)
    destination = f"{address}/32"
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 15), "the plugin connected to the domain"
    editor.nvim.command("LazaretPending")
    refused = env.exec_in(repo, f"/workspace/lazaret-testhost echo-probe {address} 8081 1")
    assert "Connection refused" in refused.stdout + refused.stderr, f"refused at once: {refused}"
    wait_lines(editor, "approvals", lambda ls: shown(ls, f"network  {destination} tcp/8081"), "the address is a network request")
    cursor_to(editor, "approvals", f"network  {destination} tcp/8081")
    press(editor, "w")
    lines = wait_lines(editor, "approvals", lambda ls: shown(ls, "    opens    EVERY protocol and port of"), "w switches to every port")
    at = lines.index(f"    opens    EVERY protocol and port of {destination}")
    assert lines[at + 1] == "             (wider than the request: tcp/8081; w: only tcp/8081)", lines
    press(editor, "a")
    assert wait_until(5, lambda: selection(editor), 0.05), "the answer is selected"
    lines = window_lines(editor, "approvals")
    at = lines.index(f"  allow EVERY protocol and port of {destination}")
    assert lines[at + 1:at + 3] == ["        (wider than the request: tcp/8081)", "  for this session (until the sandbox stops)"], lines
    assert_inert("the pending window", lines)
    time.sleep(0.5)
    assert not [g for r in json.loads(env.lazaret("rules", "--json").stdout).values() for g in r["network"]], "nothing before <CR>"
    editor.nvim.input("<CR>")
    wait_lines(editor, "approvals", lambda ls: ls and not shown(ls, f"network  {destination}"), "the answered request disappears")
    grants = [g for r in json.loads(env.lazaret("rules", "--json").stdout).values() for g in r["network"]]
    assert [(g["destination"], g.get("service"), g.get("everyPort"), g["decidedBy"]) for g in grants] == \
        [(destination, None, True, "rpc:neovim")], grants
    # The grant lets the port through, and :LazaretRules says it covers every port.
    probe = env.exec_in(repo, f"/workspace/lazaret-testhost echo-probe {address} 8081 1")
    assert "connected" in probe.stdout, f"the grant lets the connection through: {probe}"
    editor.nvim.command("LazaretRules")
    lines = wait_lines(editor, "rules", lambda ls: shown(ls, f"allow  {destination}"), "the grant is listed")
    assert f"    allow  {destination} every protocol and port" in lines, lines
    cursor_to(editor, "rules", f"allow  {destination}")
    asked = len(editor.prompts())
    editor.nvim.input("x")
    prompt = editor.wait_prompt("select", asked)
    assert f"Revoke the network grant of {destination} every protocol and port (this session)?" in prompt["prompt"], prompt
    editor.nvim.input("1<CR>")  # Revoke it
    wait_lines(editor, "rules", lambda ls: not shown(ls, destination), "the revoked grant disappears")
    assert keeper.poll() is None, "the session still only sleeps"
