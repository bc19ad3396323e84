"""Memory of running domains for `tests/bench many`: the proportional set
size (PSS, shared pages divided among the processes that map them) of every
host process that belongs to them.

A container's processes are its conmon and conmon's descendants (the
runsc sandbox, gofer and, for a sidecar, its processes: conmon is their
subreaper). A Lazaret domain also has its coordinator and the coordinator's
descendants (a session's `runsc exec`), found by the coordinator's command
line (`lazaret coordinator ...` with MARKER in it)."""

import os
import subprocess


def read(path):
    """The bytes of PATH (a /proc file), or none if it is gone."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def pss_kib(pid):
    for line in read(f"/proc/{pid}/smaps_rollup").decode(errors="replace").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def rss_kib(pid):
    for line in read(f"/proc/{pid}/status").decode(errors="replace").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def processes():
    """{pid: (ppid, argv)} of every process now."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = read(f"/proc/{name}/stat").decode(errors="replace")
        if ")" not in stat:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        argv = [a.decode(errors="replace") for a in read(f"/proc/{name}/cmdline").split(b"\0") if a]
        found[int(name)] = (ppid, argv)
    return found


def descendants(table, roots):
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in out or pid not in table:
            continue
        out.add(pid)
        todo.extend(children.get(pid, []))
    return out


def part(pid, argv, coordinators):
    text = " ".join(argv)
    if pid in coordinators:
        return "coordinator"
    if "runsc-sandbox" in text:
        return "sentry"
    if "runsc-gofer" in text:
        return "gofer"
    if argv and os.path.basename(argv[0]) == "conmon":
        return "conmon"
    if "lazaret-sidecar" in text:
        return "sidecar"
    if " exec " in f" {text} " and "runsc" in text:
        return "runsc exec (sessions)"
    return "other (systrap stubs)"


def pss_of_domains(containers_per_domain, coordinator_marker=None):
    """Total PSS (KiB) of the domains' processes, by part, and the largest
    coordinator's RSS. CONTAINERS_PER_DOMAIN: a list of container-name lists."""
    table = processes()
    roots = []
    for names in containers_per_domain:
        for name in names:
            result = subprocess.run(["podman", "inspect", "--format", "{{.State.ConmonPid}}", name], capture_output=True, text=True)
            if result.returncode == 0 and result.stdout.strip().isdigit():
                roots.append(int(result.stdout.strip()))
    coordinators = []
    if coordinator_marker:
        for pid, (_, argv) in table.items():
            if len(argv) > 1 and argv[1] == "coordinator" and os.path.basename(argv[0]) == "lazaret" and any(coordinator_marker in a for a in argv):
                roots.append(pid)
                coordinators.append(pid)
    by_part, total = {}, 0
    for pid in descendants(table, roots):
        kib = pss_kib(pid)
        name = part(pid, table[pid][1], coordinators)
        by_part[name] = by_part.get(name, 0) + kib
        total += kib
    return {
        "total_kib": total,
        "by_part_kib": by_part,
        "coordinator_rss_max_kib": max((rss_kib(pid) for pid in coordinators), default=0),
        "coordinators": len(coordinators),
        "roots": len(roots),
    }
