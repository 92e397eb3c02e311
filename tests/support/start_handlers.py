"""Child-side handlers and targets for tests/worker/child/test_fork_request.py."""

from __future__ import annotations

import os
from typing import Any

import multiprocess
from agentcell.protocol import RunResult, RunStatus, Start
from agentcell.worker.child._main import ChildLink


async def describe(start: Start, link: ChildLink) -> RunResult:
    """How this child was started: its working directory and its multiprocess identity."""
    current = multiprocess.current_process()
    return RunResult(
        status=RunStatus.COMPLETED,
        data={
            "cwd": os.getcwd(),
            "name": current.name,
            "started_as_process_object": isinstance(current, multiprocess.Process),
        },
    )


def say_hello(conn: Any) -> None:
    """A target started with multiprocess's own ``Process.start()``."""
    conn.send_bytes(b"hello from " + str(os.getpid()).encode())
    conn.close()
