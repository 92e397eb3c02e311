"""A child-side handler whose process hangs after its report: it sends its own signed
Result, then stops itself (SIGSTOP), as a child stuck in its exit would be — no exit, no
heartbeat. The pool's test fixture, not a feature."""

from __future__ import annotations

import os
import signal

from agentcell.protocol import Result, RunResult, RunStatus, Start, sign_frame
from agentcell.worker.child._main import ChildLink


async def report_then_hang(start: Start, link: ChildLink) -> RunResult:
    answer = RunResult(status=RunStatus.COMPLETED, text="the answer")
    await link.channel.send(sign_frame(Result(result=answer), start.frame_key))
    os.kill(os.getpid(), signal.SIGSTOP)
    return answer  # not reached while stopped; the parent ends the process
