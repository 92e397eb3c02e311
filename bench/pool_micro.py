"""Micro-benchmark of the pool and the pipe, each next to a raw baseline from the same run.

    python -m bench.pool_micro [--quick]

Rows: lease latency with warm spares vs a cold start; one frame each way (round trip);
child-to-parent frames/s for small and 64 KiB frames. Baselines: a bare
``multiprocess`` forkserver child speaking msgspec through ``Connection.send_bytes``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import multiprocess
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.protocol import (
    PROTOCOL_VERSION,
    ApprovalReply,
    ApprovalRequest,
    Heartbeat,
    Start,
    decode_body,
)
from agentcell.protocol._codec import encode_body

H = "bench.handlers"


def _start(handler: str, **args: object) -> Start:
    return Start(
        protocol_version=PROTOCOL_VERSION, run_id="bench", handler=f"{H}:{handler}", args=args
    )


async def lease_latency(samples: int, warm: int) -> list[float]:
    """Seconds from acquire() until the child's answer (its Result) to a Start arrives."""
    out = []
    async with WorkerPool(max_workers=4, warm=warm) as pool:
        await pool.warmed()
        for _ in range(samples):
            if warm:
                await pool.warmed()  # measure the warm path: a spare is idle
            t0 = time.perf_counter()
            async with pool.lease() as lease:
                await lease.send(_start("noop"))
                await lease.recv()  # its Result: the child got the run and answered
                out.append(time.perf_counter() - t0)
    return out


async def round_trip(n: int) -> float:
    async with WorkerPool(max_workers=1, warm=1) as pool, pool.lease() as lease:
        await lease.send(_start("approval_loop", n=n))
        t0 = time.perf_counter()
        count = 0
        async for frame in lease:
            if isinstance(frame, ApprovalRequest):
                count += 1
                lease.send_nowait(ApprovalReply(request_id=frame.request_id, approved=True))
        elapsed = time.perf_counter() - t0
    assert count == n
    return elapsed / n


async def stream_rate(n: int, size: int) -> float:
    async with WorkerPool(max_workers=1, warm=1) as pool, pool.lease() as lease:
        await lease.send(_start("stream", n=n, size=size))
        t0 = time.perf_counter()
        count = 0
        async for _frame in lease:
            count += 1
        elapsed = time.perf_counter() - t0
    assert count == n + 1  # the events and the Result
    return n / elapsed


def raw_floor(samples: int) -> list[float]:
    """Bare forkserver process start + one msgspec frame each way."""
    from bench.handlers import raw_echo

    ctx = multiprocess.get_context("forkserver")
    out = []
    for _ in range(samples):
        a, b = ctx.Pipe()
        t0 = time.perf_counter()
        # Named like the pool's children so that it, too, skips re-running __main__.
        p = ctx.Process(target=raw_echo, args=(b, "hello", 0, 0), name="agentcell-child-raw")
        p.start()
        b.close()
        decode_body(a.recv_bytes())
        a.send_bytes(encode_body(Heartbeat(seq=1)))
        out.append(time.perf_counter() - t0)
        p.join()
        a.close()
    return out


def raw_round_trip(n: int) -> float:
    from bench.handlers import raw_echo

    ctx = multiprocess.get_context("forkserver")
    a, b = ctx.Pipe()
    p = ctx.Process(target=raw_echo, args=(b, "echo", n, 0))
    p.start()
    b.close()
    body = encode_body(ApprovalReply(request_id=1, approved=True))
    t0 = time.perf_counter()
    for _ in range(n):
        a.send_bytes(body)
        decode_body(a.recv_bytes())
    elapsed = time.perf_counter() - t0
    p.join()
    a.close()
    return elapsed / n


def raw_stream_rate(n: int, size: int) -> float:
    from bench.handlers import raw_echo

    ctx = multiprocess.get_context("forkserver")
    a, b = ctx.Pipe()
    p = ctx.Process(target=raw_echo, args=(b, "stream", n, size))
    p.start()
    b.close()
    t0 = time.perf_counter()
    for _ in range(n):
        decode_body(a.recv_bytes())
    elapsed = time.perf_counter() - t0
    a.send_bytes(b"")
    p.join()
    a.close()
    return n / elapsed


def _ms(xs: list[float]) -> str:
    return f"p50 {statistics.median(xs) * 1e3:7.2f} ms   p90 {_pct(xs, 0.9) * 1e3:7.2f} ms"


def _pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))]


async def amain(quick: bool) -> None:
    samples = 20 if quick else 100
    n_rt = 2000 if quick else 10000
    n_small = 20000 if quick else 100000
    n_big = 500 if quick else 2000

    warm = await lease_latency(samples, warm=2)
    cold = await lease_latency(samples, warm=0)
    floor = raw_floor(samples)
    rt = await round_trip(n_rt)
    raw_rt = raw_round_trip(n_rt)
    small = await stream_rate(n_small, 16)
    raw_small = raw_stream_rate(n_small, 16)
    big = await stream_rate(n_big, 64 * 1024)
    raw_big = raw_stream_rate(n_big, 64 * 1024)

    print("agentcell pool micro-benchmark (baselines measured in the same run)\n")
    print(f"lease → Start → Result, warm spares   {_ms(warm)}")
    print(f"lease → Start → Result, cold start    {_ms(cold)}")
    print(f"raw floor: forkserver start + 1 frame each way   {_ms(floor)}")
    print(f"  warm ÷ raw floor: {statistics.median(warm) / statistics.median(floor):.2f}×")
    print()
    print(f"frame round trip (approval ask/answer)  {rt * 1e6:8.1f} µs")
    print(
        f"raw Pipe + msgspec round trip           {raw_rt * 1e6:8.1f} µs   ratio {rt / raw_rt:.2f}×"
    )
    print()
    print(f"child→parent small frames   {small:10.0f} frames/s")
    print(
        f"raw Pipe + msgspec          {raw_small:10.0f} frames/s   ratio {small / raw_small:.2f}×"
    )
    print(f"child→parent 64 KiB frames  {big:10.0f} frames/s  ({big * 64 / 1024:.0f} MiB/s)")
    print(f"raw Pipe + msgspec          {raw_big:10.0f} frames/s   ratio {big / raw_big:.2f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    asyncio.run(amain(args.quick))


if __name__ == "__main__":
    main()
