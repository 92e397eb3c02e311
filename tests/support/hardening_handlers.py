"""Child-side handlers for the hardening tests
(tests/orchestrator/backends/test_hardening_processes.py).

``Start.args["op"]`` picks the behaviour: attacks a child (or a process holding a copy
of its socket) can make on the parent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from agentcell.protocol import Notice, Result, RunResult, RunStatus, Start, sign_frame
from agentcell.worker.child._main import ChildLink

#: A process that holds a copy of a socket writes one forged frame into it.
THIEF = (
    "import os, sys; from agentcell.protocol import {frame}, RunResult, RunStatus, "
    "encode_frame; os.write(int(sys.argv[1]), bytes(encode_frame({value})))"
)
FORGED_RESULT = THIEF.format(
    frame="Result",
    value="Result(result=RunResult(status=RunStatus.COMPLETED, text='forged'))",
)
FORGED_APPROVAL = THIEF.format(
    frame="ApprovalReply",
    value="ApprovalReply(request_id=1, approved=True, reason='forged')",
)


def socket_fd(link: ChildLink) -> int:
    return link.channel._fd


async def run(start: Start, link: ChildLink) -> RunResult:
    op = start.args["op"]
    if op == "report_then_die":
        # A genuine, signed report, then death by a signal: the death is the outcome.
        report = Result(result=RunResult(status=RunStatus.COMPLETED, text="reported"))
        await link.channel.send(sign_frame(report, start.frame_key))
        await link.channel.aclose()
        os.kill(os.getpid(), signal.SIGKILL)
    if op == "thief_forges_a_result":
        # Another process with a copy of this child's socket (as pidfd_getfd gives one)
        # writes a Result of its own; the child then reports for real.
        fd = socket_fd(link)
        thief = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FORGED_RESULT, str(fd), pass_fds=[fd]
        )
        await thief.wait()
        return RunResult(status=RunStatus.COMPLETED, text="genuine")
    if op == "approval":
        approved, reason = await link.request_approval("call-1", "bash", '{"command":"ls"}')
        return RunResult(status=RunStatus.COMPLETED, text=f"{approved}:{reason}")
    if op == "escape_then":
        # Descendants that leave the child's session: a setsid one, and a double fork
        # (its parent shell exits at once, so it is reparented to the child).
        own = subprocess.Popen(["setsid", "sleep", "300"])  # noqa: ASYNC220
        double = subprocess.run(  # noqa: ASYNC221
            ["sh", "-c", "setsid sleep 301 >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        link.emit(Notice(message=f"{own.pid} {double}"))
        await link.steered.wait()  # the parent has read the pids: now end
        how = start.args["then"]
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "segfault":
            import ctypes

            ctypes.string_at(0)
        if how == "exit":
            os._exit(7)
    raise ValueError(f"unknown op {op!r}")


def run_thief(script: str, fd: int) -> None:
    subprocess.run([sys.executable, "-c", script, str(fd)], pass_fds=[fd], check=True)
