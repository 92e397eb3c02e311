"""Child-side handlers and process targets used by the benchmarks."""

from __future__ import annotations

from typing import Any

from agentcell.protocol import RunResult, RunStatus, Start, TextDelta, decode_body
from agentcell.protocol._codec import encode_body
from agentcell.worker.child._main import ChildLink


async def approval_loop(start: Start, link: ChildLink) -> RunResult:
    """Ask the parent ``n`` questions in a row: each is one frame each way."""
    for i in range(int(start.args["n"])):
        await link.request_approval(str(i), "bench", "{}")
    return RunResult(status=RunStatus.COMPLETED)


async def stream(start: Start, link: ChildLink) -> RunResult:
    """Emit ``n`` text events of ``size`` bytes as fast as the pipe takes them."""
    text = "x" * int(start.args["size"])
    event = TextDelta(text=text)
    channel = link.channel
    for i in range(int(start.args["n"])):
        link.emit(event)
        if i % 64 == 0:
            await channel._protocol.writable()  # respect backpressure
    return RunResult(status=RunStatus.COMPLETED)


async def noop(start: Start, link: ChildLink) -> RunResult:
    return RunResult(status=RunStatus.COMPLETED)


def raw_echo(conn: Any, mode: str, n: int, size: int) -> None:
    """Baseline target: a bare multiprocess child speaking msgspec over Connection."""
    from agentcell.protocol import Heartbeat

    if mode == "hello":
        conn.send_bytes(encode_body(Heartbeat(seq=0)))
        decode_body(conn.recv_bytes())
    elif mode == "echo":
        for _ in range(n):
            conn.send_bytes(conn.recv_bytes())
    elif mode == "stream":
        from agentcell.protocol import Event

        body = encode_body(Event(event=TextDelta(text="x" * size)))
        for _ in range(n):
            conn.send_bytes(body)
        conn.recv_bytes()
