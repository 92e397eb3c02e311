"""Process target for ``bench.wall_cost`` (a module of its own: the fork server imports it
by name, as it does agentcell's own target).

``wall_forks`` runs in a forkserver child — a copy of agentcell's warmed fork server,
with its held descriptors, prepared rules and filters — and forks ``n`` children one
after the other; each puts up one set of walls with agentcell's own ``_sandbox.apply``
and leaves (``os._exit``). ``wait4`` gives each child's whole life: the set-up and what
the kernel spends tearing it down at exit (namespaces, mounts, the cgroup).
"""

from __future__ import annotations

import json
import os
import resource
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


#: The parts of ``_sandbox.apply`` timed inside each child (module, attribute, label).
#: These children are forked here, not spares: nothing is made before the walls
#: (``_sandbox_spare.prepare``), so every part is on the clock.
SECTIONS = (
    ("sandbox._apply", "apply", "sandbox._apply.apply (all)"),
    ("sandbox._apply", "_restrict_process", "  Landlock ruleset (with the mounts)"),
    ("sandbox._apply", "_read_paths", "    read paths worked out"),
    ("sandbox._landlock_rules", "allow", "    rules from held descriptors (~165)"),
    ("sandbox._apply", "_grant_folders", "    grants (+ mount namespace, tmp cap)"),
    ("sandbox._apply", "_install_seccomp", "  seccomp filter (check + install)"),
)


def _usage() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_minflt


def _timed(sections: dict[str, list[float]]) -> None:
    """Wrap each of ``SECTIONS`` (in this child only) to add up into ``sections`` its
    CPU seconds and minor faults."""
    import importlib

    for module_name, attr, label in SECTIONS:
        module = importlib.import_module(f"agentcell.worker.{module_name}")
        func = getattr(module, attr)

        def timed(*a: Any, _func: Any = func, _label: str = label, **k: Any) -> Any:
            cpu0, faults0 = _usage()
            try:
                return _func(*a, **k)
            finally:
                cpu1, faults1 = _usage()
                row = sections.setdefault(_label, [0.0, 0])
                row[0] += cpu1 - cpu0
                row[1] += faults1 - faults0

        setattr(module, attr, timed)


def wall_forks(conn: Any, workdir: str, variant: str, n: int) -> None:
    """Fork ``n`` children that put up ``variant``'s walls; send their (user µs,
    system µs, minor faults) lives and the sections' means (ms, faults), then leave."""
    from agentcell.worker.sandbox import _apply as _sandbox

    walls = VARIANTS[variant]
    out = []
    totals: dict[str, list[float]] = {}
    read_end, write_end = os.pipe()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                sections: dict[str, list[float]] = {}
                _timed(sections)
                _sandbox.apply(
                    walls["mode"],
                    workdir=workdir,
                    cap_processes=walls.get("cap_processes", False),
                    tmp_size_mb=walls.get("tmp_mb", 0),
                )
                os.write(write_end, json.dumps(sections).encode() + b"\n")
                code = 0
            finally:
                os._exit(code)
        _, status, usage = os.wait4(pid, 0)
        _sandbox.release(pid)  # its cgroup and temp folder, as the pool does
        if os.waitstatus_to_exitcode(status) != 0:
            conn.send(f"a child failed to put up {variant!r}")
            os._exit(1)
        line = b""
        while not line.endswith(b"\n"):
            line += os.read(read_end, 1 << 16)
        for label, (cpu, faults) in json.loads(line).items():
            row = totals.setdefault(label, [0.0, 0])
            row[0] += cpu
            row[1] += faults
        out.append((int(usage.ru_utime * 1e6), int(usage.ru_stime * 1e6), usage.ru_minflt))
    means = {label: (cpu / n * 1e3, faults / n) for label, (cpu, faults) in totals.items()}
    conn.send((out, means))
    os._exit(0)
