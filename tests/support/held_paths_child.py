"""A sub-agent process target that records which paths its Landlock set-up opened.

Given to ``WorkerPool(target=...)``: it wraps agentcell's own ``child_main``, counts
every ``os.open`` with ``O_PATH`` made while the child builds its ruleset (before its
Hello, ``_sandbox_spare.prepare``, and at the sandbox's entry), and writes
the list (JSON, one line) to ``report`` through a descriptor opened before the sandbox.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from agentcell.worker.process import child_main


def counting_child(report: str, use_held: bool, conn: Any, *args: Any) -> None:
    from agentcell.worker.sandbox import _apply as _sandbox
    from agentcell.worker.sandbox import _landlock_held
    from agentcell.worker.sandbox import _spare as _sandbox_spare

    if not use_held:
        _landlock_held.forget()  # the control: every path opened here, as before
    real_open = os.open
    out = real_open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    opened: list[str] = []
    restrict = _sandbox._restrict_process

    def counting_open(path: Any, flags: int, *rest: Any, **kwargs: Any) -> int:
        if flags & os.O_PATH and not isinstance(path, int):
            opened.append(os.fsdecode(path))
        return real_open(path, flags, *rest, **kwargs)

    def counted_restrict(*a: Any, **k: Any) -> None:
        os.open = counting_open  # type: ignore[assignment]
        try:
            restrict(*a, **k)
        finally:
            os.open = real_open  # type: ignore[assignment]
            held = _landlock_held._held.values()
            report = {
                "opened": opened,
                "held": _landlock_held.held_paths(),
                # Inherited open, but closed by any exec (os.exec*, a launcher's).
                "cloexec": all(fcntl.fcntl(h.fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC for h in held),
            }
            os.write(out, json.dumps(report).encode() + b"\n")

    def counted_prepare() -> None:  # a spare adds the shared rules before its Hello
        os.open = counting_open  # type: ignore[assignment]
        try:
            prepare()
        finally:
            os.open = real_open  # type: ignore[assignment]

    prepare = _sandbox_spare.prepare
    _sandbox_spare.prepare = counted_prepare  # type: ignore[assignment]
    _sandbox._restrict_process = counted_restrict  # type: ignore[assignment]
    child_main(conn, *args)
