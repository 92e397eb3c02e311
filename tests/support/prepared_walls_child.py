"""A sub-agent process target that records how its walls went up (test_walls_prepared).

Given to ``WorkerPool(target=...)``: it wraps agentcell's own ``child_main`` and writes,
through a descriptor opened before the sandbox, one JSON line: whether the seccomp
availability was probed again here, the filter state the kernel reports for this
process once the walls are up, and how many descriptors the terminal check asked about.
With ``use_prepared`` false (the control) the fork server's prepared filters and its
list of held O_PATH descriptors are dropped first: all is worked out here, as before.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agentcell.worker.process import child_main


def _status(*names: str) -> dict[str, str]:
    with open("/proc/self/status") as status:
        lines = dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)
    return {name: lines.get(name, "").strip() for name in names}


def recording_child(report: str, use_prepared: bool, conn: Any, *args: Any) -> None:
    from agentcell.worker.sandbox import _apply as _sandbox
    from agentcell.worker.sandbox import _landlock_held, _seccomp

    if not use_prepared:
        _seccomp._prepared = None
        _landlock_held._opened.clear()
    out = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    counts = {"probed": 0, "isatty": 0}

    def counting(name: str, func: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            counts[name] += 1
            return func(*a, **k)

        return call

    _seccomp.unavailable = counting("probed", _seccomp.unavailable)
    os.isatty = counting("isatty", os.isatty)
    install = _sandbox._install_seccomp

    def recorded_install(*a: Any, **k: Any) -> None:
        install(*a, **k)
        kernel = _status("Seccomp", "Seccomp_filters", "NoNewPrivs")
        os.write(out, json.dumps({**counts, **kernel}).encode() + b"\n")

    _sandbox._install_seccomp = recorded_install  # type: ignore[assignment]
    child_main(conn, *args)
