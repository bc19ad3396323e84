"""An escalation from a pod on the real test cluster, answered in a real
Neovim (issue 32): a cluster profile's domain (started by `tests/cluster/run`,
which sets LAZARET_TEST_KUBECONFIG and LAZARET_TEST_CLUSTER_IMAGE), a
request made in the pod through the relay appears in :LazaretPending, and
`a` runs it on the host, audited as the editor's answer. Not part of
`tests/nvim/run` (which needs no cluster): `tests/cluster/run` runs it."""

import os
import secrets
import signal
import subprocess

import pytest

from helpers import confirm, escalate, finish, press
from lzenv import LazaretEnv, wait_until


def kubectl(*args):
    return subprocess.run(
        ["kubectl", "--kubeconfig", os.environ["LAZARET_TEST_KUBECONFIG"], *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def cluster_domain():
    namespace = f"lzn-{secrets.token_hex(4)}"
    assert kubectl("create", "namespace", namespace).returncode == 0
    wait_until(30, lambda: kubectl("-n", namespace, "get", "serviceaccount", "default").returncode == 0, 0.1)
    env = LazaretEnv(approval_timeout=120)
    repo = env.repository()
    try:
        with env.config_file.open("a") as config:
            config.write(
                "\n[profiles.default]\n"
                f"image = \"{os.environ.get('LAZARET_TEST_CLUSTER_IMAGE', 'localhost/lazaret-default:1')}\"\n"
                "persistent_dirs = []\n"
                f"backend = {{ kubernetes = {{ kubeconfig = \"{os.environ['LAZARET_TEST_KUBECONFIG']}\", "
                f"namespace = \"{namespace}\", egress = \"none\" }} }}\n"
            )
        env.start_domain(repo)
        yield env, repo, namespace
    finally:
        for process in env.sessions:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
            process.communicate(timeout=60)
        # The coordinator suspends the Sandbox while it holds the domain
        # lock (after its socket went): `domain rm` is refused until then.
        attempts = []
        wait_until(120, lambda: attempts.append(env.lazaret("domain", "rm", "--workspace", repo, check=False)) or attempts[-1].returncode == 0, 0.5)
        removed = attempts[-1]
        env.close()
        kubectl("delete", "namespace", namespace, "--wait=false")
        assert removed.returncode == 0, removed.stderr


def test_a_request_from_a_pod_is_approved_in_neovim(cluster_domain, editor_factory):
    env, repo, namespace = cluster_domain
    editor = editor_factory(env, repo)
    assert editor.wait("#require('lazaret.domains').connected() == 1", 10), "the plugin connected to the cluster domain"
    assert editor.wait("not require('lazaret.domains').settling()", 10)
    # The session runs in the domain's pod.
    pods = kubectl("-n", namespace, "get", "pods", "-o", "name").stdout.split()
    assert pods == [f"pod/lazaret-{env.domain(repo)['domain_hash']}"], pods
    editor.nvim.command("LazaretPending")
    assert editor.wait("require('lazaret.approvals').is_open()", 5)
    process, _ = escalate(env, repo, ["touch", "approved-from-the-pod"], "made in a pod")
    text_of = "local a = require('lazaret.approvals'); return table.concat(vim.api.nvim_buf_get_lines(a.buf, 0, -1, false), '\\n')"
    assert wait_until(30, lambda: "touch approved-from-the-pod" in editor.lua(text_of), 0.05), editor.lua(text_of)
    assert not (repo / "approved-from-the-pod").exists(), "nothing runs before the answer"
    # Onto the request, then a deliberate answer once the window is armed (D20).
    press(editor, "<Tab>")
    confirm(editor, "a")
    out, err = finish(process)
    assert "status=0" in out, (out, err)
    assert (repo / "approved-from-the-pod").exists(), "it ran on the host"
    records = [r for r in env.audit(repo) if "approved-from-the-pod" in " ".join(r.get("requestedArgv") or [])]
    assert len(records) == 1, records
    assert (records[0]["outcome"], records[0]["decidedBy"]) == ("approved", "rpc:neovim"), records[0]
