"""Child-side handlers for tests/mutants/test_mutation_kills.py: frames forged with a WRONG
signature (not only none), and a second genuine report.

``Start.args["op"]`` picks the behaviour."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from agentcell.protocol import Result, RunResult, RunStatus, Start, sign_frame
from agentcell.worker.child._main import ChildLink

#: A process holding a copy of a socket writes frames with a MAC of the right length
#: that is wrong: sixteen zero bytes, and one made under another key.
WRONG_MAC_THIEF = """
import os, sys
import msgspec
from agentcell.protocol import {frame}, RunResult, RunStatus, encode_frame, new_frame_key
from agentcell.protocol import sign_frame
frame = {value}
for forged in (msgspec.structs.replace(frame, mac=bytes(16)), sign_frame(frame, new_frame_key())):
    assert len(forged.mac) == 16
    os.write(int(sys.argv[1]), bytes(encode_frame(forged)))
"""
FORGED_RESULT = WRONG_MAC_THIEF.format(
    frame="Result", value="Result(result=RunResult(status=RunStatus.COMPLETED, text='forged'))"
)
FORGED_APPROVAL = WRONG_MAC_THIEF.format(
    frame="ApprovalReply", value="ApprovalReply(request_id=1, approved=True, reason='forged')"
)


async def run(start: Start, link: ChildLink) -> RunResult:
    op = start.args["op"]
    if op == "thief_forges_wrongly_signed_results":
        fd = link.channel._fd
        thief = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FORGED_RESULT, str(fd), pass_fds=[fd]
        )
        assert await thief.wait() == 0
        return RunResult(status=RunStatus.COMPLETED, text="genuine")
    if op == "two_results":
        # A genuine, signed report, then a second one (the run's own): the first counts.
        first = Result(result=RunResult(status=RunStatus.COMPLETED, text="first"))
        await link.channel.send(sign_frame(first, start.frame_key))
        return RunResult(status=RunStatus.COMPLETED, text="second")
    if op == "approval":
        approved, reason = await link.request_approval("call-1", "bash", '{"command":"ls"}')
        return RunResult(status=RunStatus.COMPLETED, text=f"{approved}:{reason}")
    raise ValueError(f"unknown op {op!r}")


def run_thief(script: str, fd: int) -> None:
    subprocess.run([sys.executable, "-c", script, str(fd)], pass_fds=[fd], check=True)
