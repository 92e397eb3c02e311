"""Child-side handlers that exercise the pool before (and apart from) the agent engine.

``Start.args["op"]`` picks the behaviour. This is the pool's test fixture, not a feature.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys

from agentcell.protocol import Notice, RunResult, RunStatus, Start
from agentcell.worker.child._main import ChildLink


async def run(start: Start, link: ChildLink) -> RunResult:
    args = start.args
    op = args["op"]
    if op == "echo":
        for i in range(int(args.get("events", 0))):
            link.emit(Notice(message=f"event {i}"))
        return RunResult(status=RunStatus.COMPLETED, text=str(args.get("text", "")))
    if op == "flood":  # as many events as asked, each sent only when the pipe takes it
        for i in range(int(args["events"])):
            link.emit(Notice(message=f"event {i}"))
            await link.writable()
        return RunResult(status=RunStatus.COMPLETED, text="flooded")
    if op == "wait_for_cancel":
        link.emit(Notice(message="waiting"))
        await link.cancel_requested.wait()
        return RunResult(status=RunStatus.CANCELLED, text="saw cancel")
    if op == "wait_for_steer":
        link.emit(Notice(message="waiting"))
        await link.steered.wait()
        texts = link.take_steering()
        return RunResult(status=RunStatus.COMPLETED, text="|".join(texts))
    if op == "approval":
        approved, reason = await link.request_approval("call-1", "bash", '{"command":"ls"}')
        return RunResult(status=RunStatus.COMPLETED, text=f"{approved}:{reason}")
    if op == "raise":
        raise ValueError("boom from the child")
    if op == "sys_exit":
        sys.exit(0)
    if op == "os_exit":
        os._exit(int(args.get("code", 3)))
    if op == "segfault":
        ctypes.string_at(0)
    if op == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if op == "abort":
        os.abort()
    if op == "memory_error":
        raise MemoryError("simulated allocation failure")
    if op == "allocate":
        hog = bytearray(int(args["bytes"]))
        return RunResult(status=RunStatus.COMPLETED, text=str(len(hog)))
    if op == "hang":
        link.emit(Notice(message="hanging"))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL will do
        while True:  # noqa: ASYNC110 - a deliberate hang
            await asyncio.sleep(3600)
    if op == "block_loop":
        link.emit(Notice(message="blocking"))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        import time

        time.sleep(3600)  # noqa: ASYNC251 - blocks the loop on purpose
    if op == "grandchild":
        proc = subprocess.Popen(  # noqa: ASYNC220
            ["sleep", "300"], process_group=0 if args.get("own_group") else None
        )
        link.emit(Notice(message=f"grandchild {proc.pid}"))
        if args.get("then") == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if args.get("then") == "hang":
            await asyncio.sleep(3600)
        return RunResult(status=RunStatus.COMPLETED, text=str(proc.pid))
    if op == "oversize":
        link.channel._protocol.transport.write((64 * 1024 * 1024).to_bytes(4, "big"))
        await asyncio.sleep(3600)
    if op == "garbage":
        link.channel._protocol.transport.write(b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1")
        await asyncio.sleep(3600)
    if op == "half_frame":
        link.channel._protocol.transport.write(b"\x00\x00\x01\x00abc")  # written at once
        os._exit(0)
    if op == "modules":
        # Everything this child imported itself (its fork server had not preloaded it).
        from agentcell.worker.child import _main as _child

        fresh = sorted(
            m for m in sys.modules if m not in _child.INHERITED_MODULES and m != __name__
        )
        inherited = sorted(m for m in ("bashlex", "httpx") if m in _child.INHERITED_MODULES)
        return RunResult(
            status=RunStatus.COMPLETED, data={"imported": fresh, "inherited": inherited}
        )
    raise ValueError(f"unknown op {op!r}")


def child_with_wrong_version(conn: object, boot: object) -> None:
    """A process target that speaks a future protocol version."""
    from agentcell.protocol import Hello
    from agentcell.protocol._codec import encode_body

    conn.send_bytes(encode_body(Hello(protocol_version=999, pid=os.getpid())))  # type: ignore[attr-defined]
    conn.recv_bytes()  # type: ignore[attr-defined]  # until the parent kills us


def child_that_never_greets(conn: object, boot: object) -> None:
    """A process target that never sends its Hello (a start that hangs)."""
    conn.recv_bytes()  # type: ignore[attr-defined]  # until the parent kills us


async def agent_then_modules(start: Start, link: ChildLink) -> RunResult:
    """Run the real agent handler, then report what this child imported by itself."""
    from agentcell.worker.child import _main as _child
    from agentcell.worker.child._agent import run_agent

    result = await run_agent(start, link)
    result.data["imported"] = sorted(
        m for m in sys.modules if m not in _child.INHERITED_MODULES and m != __name__
    )
    return result
