"""Run a step in a forked child of this process and get its answer back: for what
changes its caller for good (a capability drop, a seccomp filter, a user namespace)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def in_child(steps: Callable[[], Any]) -> dict[str, Any]:
    """``{"value": steps()}`` (JSON-able), or ``{"raised": "Type: message"}``; the child
    is reaped and must have exited 0."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            try:
                answer = {"value": steps()}
            except Exception as exc:
                answer = {"raised": f"{type(exc).__name__}: {exc}"}
            os.write(write_end, json.dumps(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    answer: dict[str, Any] = json.loads(text)
    return answer
