"""Process target for ``bench.wall_cost`` (a module of its own: the fork server imports it
by name, as it does agentcell's own target).

``wall_forks`` runs in a forkserver child — a copy of agentcell's warmed fork server,
with its held descriptors, prepared rules and filters — and forks ``n`` children one
after the other; each puts up one set of walls with agentcell's own ``_sandbox.apply``
and leaves (``os._exit``). ``wait4`` gives each child's whole life: the set-up and what
the kernel spends tearing it down at exit (namespaces, mounts, the cgroup).
"""

from __future__ import annotations

import os
from typing import Any

#: name -> the arguments of ``_sandbox.apply`` (besides the workdir), cumulative walls.
VARIANTS: dict[str, dict[str, Any]] = {
    "fork + exit, no walls": {"mode": "off"},
    "+ Landlock + seccomp (read-only)": {"mode": "read-only", "cap_processes": False},
    "+ mount namespace, read-only binds (workspace)": {
        "mode": "workspace",
        "cap_processes": False,
    },
    "+ tmp cap (tmpfs, 512 MiB)": {"mode": "workspace", "cap_processes": False, "tmp_mb": 512},
    "+ cgroup pids cap (all of a bash sub-agent's walls)": {
        "mode": "workspace",
        "cap_processes": True,
        "tmp_mb": 512,
    },
}


def wall_forks(conn: Any, workdir: str, variant: str, n: int) -> None:
    """Fork ``n`` children that put up ``variant``'s walls; send their (user µs,
    system µs, minor faults) lives, then leave."""
    from agentcell.worker import _sandbox

    walls = VARIANTS[variant]
    out = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _sandbox.apply(
                    walls["mode"],
                    workdir=workdir,
                    cap_processes=walls.get("cap_processes", False),
                    tmp_size_mb=walls.get("tmp_mb", 0),
                )
                code = 0
            finally:
                os._exit(code)
        _, status, usage = os.wait4(pid, 0)
        _sandbox.release(pid)  # its cgroup and temp folder, as the pool does
        if os.waitstatus_to_exitcode(status) != 0:
            conn.send(f"a child failed to put up {variant!r}")
            os._exit(1)
        out.append((int(usage.ru_utime * 1e6), int(usage.ru_stime * 1e6), usage.ru_minflt))
    conn.send(out)
    os._exit(0)
