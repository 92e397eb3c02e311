"""What one process start costs, from the bare floor up to an agentcell child.

    python -m bench.start_cost [--n 200] [--rounds 3]

All three rows fork from the same warmed template — agentcell's fork server, with its
preloads, its rehearsal and ``gc.freeze`` — one child at a time (no contention):

* **bare os.fork()**: a forkserver child forks ``n`` children itself, each writing one
  record from its first line and leaving (``os._exit``); its whole life is read with
  ``wait4``. This is the floor of "one fresh process per sub-agent" with this template.
* **multiprocess forkserver**: ``Process.start()`` from this process, the child's target
  writing the same record and leaving: the fork server's own per-child work (the request
  over its socket, the pickled preparation data and Process object, ``_bootstrap``).
* **agentcell's start request**: the same, with the request agentcell's pool sends
  (``encode_request``: one small stdlib pickle instead of the preparation data and the
  dill-pickled Process object).
* **agentcell child, noop run**: a ``WorkerPool`` lease (no spare) running the ``noop``
  handler: everything agentcell's child does around a run (hardening, Hello, Start,
  Result, exit), no agent.

Per row: wall from the start request to the child's first line, the child's CPU and
minor page faults by then, and over its whole life (for forkserver children: the fork
server's reaped-children time, divided by ``n``; ticks of 10 ms, so ``n`` must be large).
Medians over ``rounds`` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import multiprocess
import multiprocess.forkserver
import psutil
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._starters import forkserver_pid
from agentcell.protocol import PROTOCOL_VERSION, Start
from agentcell.worker.process import encode_request

from bench.start_probe import RECORD, bare_forks, report_start

OUT = Path(__file__).resolve().parent / "out"
_NAME = "agentcell-child-probe"  # named like the pool's children: no re-run of __main__


def _reaped_cpu(pid: int) -> tuple[float, float]:
    t = psutil.Process(pid).cpu_times()
    return t.children_user, t.children_system


def forkserver_row(n: int) -> dict[str, float]:
    ctx = multiprocess.get_context("forkserver")
    fs = forkserver_pid()
    assert fs is not None
    user0, system0 = _reaped_cpu(fs)
    to_first, cpu_first, faults_first, parent_cpu = [], [], [], []
    for _ in range(n):
        a, b = ctx.Pipe(duplex=False)
        p = ctx.Process(target=report_start, args=(b,), name=_NAME)
        c0 = time.thread_time()
        t0 = time.monotonic_ns()
        p.start()
        parent_cpu.append(time.thread_time() - c0)
        b.close()
        t, user, system, faults = RECORD.unpack(a.recv_bytes())
        p.join()
        a.close()
        to_first.append((t - t0) / 1e6)
        cpu_first.append((user + system) / 1e3)
        faults_first.append(faults)
    user1, system1 = _reaped_cpu(fs)
    return {
        "first_line_ms": statistics.median(to_first),
        "cpu_at_first_line_ms": statistics.median(cpu_first),
        "faults_at_first_line": statistics.median(faults_first),
        "life_cpu_ms": (user1 - user0 + system1 - system0) / n * 1e3,
        "life_user_ms": (user1 - user0) / n * 1e3,
        "life_system_ms": (system1 - system0) / n * 1e3,
        "starter_cpu_ms": statistics.median(parent_cpu) * 1e3,
    }


def lean_row(n: int) -> dict[str, float]:
    """As ``forkserver_row``, with the start request agentcell's pool sends."""
    fs = forkserver_pid()
    assert fs is not None
    server = multiprocess.forkserver._forkserver
    ctx = multiprocess.get_context("forkserver")
    user0, system0 = _reaped_cpu(fs)
    to_first, cpu_first, faults_first, parent_cpu = [], [], [], []
    for _ in range(n):
        a, b = ctx.Pipe(duplex=False)
        c0 = time.thread_time()
        t0 = time.monotonic_ns()
        request = encode_request(report_start, (), _NAME)
        sentinel, data = server.connect_to_new_process([b.fileno()])
        with open(data, "wb") as pipe:
            pipe.write(request)
        multiprocess.forkserver.read_signed(sentinel)
        parent_cpu.append(time.thread_time() - c0)
        b.close()
        t, user, system, faults = RECORD.unpack(a.recv_bytes())
        multiprocess.forkserver.read_signed(sentinel)  # its exit code: it is reaped
        os.close(sentinel)
        a.close()
        to_first.append((t - t0) / 1e6)
        cpu_first.append((user + system) / 1e3)
        faults_first.append(faults)
    user1, system1 = _reaped_cpu(fs)
    return {
        "first_line_ms": statistics.median(to_first),
        "cpu_at_first_line_ms": statistics.median(cpu_first),
        "faults_at_first_line": statistics.median(faults_first),
        "life_cpu_ms": (user1 - user0 + system1 - system0) / n * 1e3,
        "life_user_ms": (user1 - user0) / n * 1e3,
        "life_system_ms": (system1 - system0) / n * 1e3,
        "starter_cpu_ms": statistics.median(parent_cpu) * 1e3,
    }


def bare_fork_row(n: int) -> dict[str, float]:
    ctx = multiprocess.get_context("forkserver")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=bare_forks, args=(b, n), name=_NAME)
    p.start()
    b.close()
    records: list[tuple[int, ...]] = a.recv()
    p.join()
    a.close()
    first = [(r[1] - r[0]) / 1e6 for r in records]
    cpu_first = [(r[2] + r[3]) / 1e3 for r in records]
    whole = [(r[5] - r[0]) / 1e6 for r in records]
    return {
        "first_line_ms": statistics.median(first),
        "cpu_at_first_line_ms": statistics.median(cpu_first),
        "faults_at_first_line": statistics.median(r[4] for r in records),
        "life_cpu_ms": statistics.fmean(r[6] + r[7] for r in records) / 1e3,
        "life_user_ms": statistics.fmean(r[6] for r in records) / 1e3,
        "life_system_ms": statistics.fmean(r[7] for r in records) / 1e3,
        "life_faults": statistics.median(r[8] for r in records),
        "fork_to_reaped_ms": statistics.median(whole),
    }


async def agentcell_row(pool: WorkerPool, n: int) -> dict[str, float]:
    fs = forkserver_pid()
    assert fs is not None
    user0, system0 = _reaped_cpu(fs)
    walls = []
    start = Start(protocol_version=PROTOCOL_VERSION, run_id="b", handler="bench.handlers:noop")
    for _ in range(n):
        t0 = time.perf_counter()
        async with pool.lease() as lease:
            await lease.send(start)
            await lease.recv()
        walls.append((time.perf_counter() - t0) * 1e3)
    user1, system1 = _reaped_cpu(fs)
    return {
        "lease_to_reaped_ms": statistics.median(walls),
        "life_cpu_ms": (user1 - user0 + system1 - system0) / n * 1e3,
        "life_user_ms": (user1 - user0) / n * 1e3,
        "life_system_ms": (system1 - system0) / n * 1e3,
    }


def _median_rows(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


async def amain(n: int, rounds: int) -> dict[str, Any]:
    rows: dict[str, list[dict[str, float]]] = {
        "bare": [],
        "forkserver": [],
        "lean": [],
        "agentcell": [],
    }
    # The pool starts (and holds) agentcell's fork server, with the probes preloaded.
    async with WorkerPool(
        max_workers=1, warm=0, preload=["bench.start_probe", "bench.handlers"]
    ) as pool:
        for _ in range(rounds):
            rows["bare"].append(bare_fork_row(n))
            rows["forkserver"].append(forkserver_row(n))
            rows["lean"].append(lean_row(n))
            rows["agentcell"].append(await agentcell_row(pool, n))
    return {k: _median_rows(v) for k, v in rows.items()}


def render(result: dict[str, Any], n: int, rounds: int) -> str:
    bare, fs, ac = result["bare"], result["forkserver"], result["agentcell"]
    lean = result["lean"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"process start cost, {n} children × {rounds} rounds, one at a time "
        f"(medians of rounds); load average {load}; {os.cpu_count()} CPUs",
        "",
        "| start | to first line ms | CPU by first line ms | faults by first line "
        "| whole-life CPU ms (user + sys) |",
        "|---|---|---|---|---|",
        f"| bare os.fork() of the template | {bare['first_line_ms']:.2f} "
        f"| {bare['cpu_at_first_line_ms']:.2f} | {bare['faults_at_first_line']:.0f} "
        f"| {bare['life_cpu_ms']:.2f} ({bare['life_user_ms']:.2f} + "
        f"{bare['life_system_ms']:.2f}) |",
        f"| multiprocess forkserver | {fs['first_line_ms']:.2f} "
        f"| {fs['cpu_at_first_line_ms']:.2f} | {fs['faults_at_first_line']:.0f} "
        f"| {fs['life_cpu_ms']:.2f} ({fs['life_user_ms']:.2f} + {fs['life_system_ms']:.2f}) |",
        f"| agentcell's start request (same fork server) | {lean['first_line_ms']:.2f} "
        f"| {lean['cpu_at_first_line_ms']:.2f} | {lean['faults_at_first_line']:.0f} "
        f"| {lean['life_cpu_ms']:.2f} ({lean['life_user_ms']:.2f} + "
        f"{lean['life_system_ms']:.2f}) |",
        f"| agentcell child, noop run | — | — | — "
        f"| {ac['life_cpu_ms']:.2f} ({ac['life_user_ms']:.2f} + {ac['life_system_ms']:.2f}) |",
        "",
        f"forkserver − bare: {fs['first_line_ms'] - bare['first_line_ms']:.2f} ms to the "
        f"first line, {fs['life_cpu_ms'] - bare['life_cpu_ms']:.2f} ms CPU per child "
        f"(+ {fs['starter_cpu_ms']:.2f} ms in the starting thread of the parent)",
        f"agentcell's request − bare: {lean['first_line_ms'] - bare['first_line_ms']:.2f} ms "
        f"to the first line, {lean['life_cpu_ms'] - bare['life_cpu_ms']:.2f} ms CPU per child "
        f"(+ {lean['starter_cpu_ms']:.2f} ms in the starting thread)",
        f"agentcell noop − forkserver: {ac['life_cpu_ms'] - fs['life_cpu_ms']:.2f} ms CPU "
        f"per child; lease → reaped {ac['lease_to_reaped_ms']:.2f} ms wall",
        f"bare fork → reaped: {bare['fork_to_reaped_ms']:.2f} ms wall; "
        f"{bare['life_faults']:.0f} minor faults in its life",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="children per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = asyncio.run(amain(args.n, args.rounds))
    text = render(result, args.n, args.rounds)
    out = args.out or OUT / time.strftime("start-cost-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / "start_cost.json").write_text(json.dumps(result, indent=1))
    (out / "start_cost.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
