"""Helpers of the end-to-end tests: requests from inside the sandbox."""

import time


def escalate(env, repo, argv, justification=None):
    """A new session whose command asks the host to run ARGV with
    lazaret-escalate. Its first stdout line is the sandbox's clock (ms) just
    before the request; returns (process, t0_ms)."""
    words = " ".join("'" + word.replace("'", "'\\''") + "'" for word in argv)
    why = f"--justification '{justification}' " if justification else ""
    process = env.spawn(repo, f"echo $(( $(date +%s%N) / 1000000 )); lazaret-escalate {why}-- {words}; echo status=$?")
    line = process.stdout.readline()
    assert line.strip().isdigit(), f"no timestamp from the sandbox: {line!r} {process.stderr.read() if process.poll() is not None else ''}"
    return process, int(line)


def finish(process, timeout=30):
    out, err = process.communicate(timeout=timeout)
    return out, err


def now_ms():
    return int(time.time() * 1000)
