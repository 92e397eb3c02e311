"""Runs one system through one workload's sweep, in a process of its own.

    echo '{"system": "agentcell", "ns": [1, 8], "spec": {...}, "port": 8000}' \
        | python -m bench.runner

A fresh process per (system, workload) keeps the measurements apart: the parent's CPU
and peak memory are this process's, and only the framework under test is imported.
It prints one JSON document: the system's versions (or why it is not available) and a
row per run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
import traceback
from typing import Any

from bench import analysis, measure, message_cost
from bench.script import Spec
from bench.server_handle import get_json, wait_for_jobs

WARMUP_N = 2  # one untimed run first: lazy imports and first connections are not measured


def configure_environment(port: int, tls_port: int = 0, ca_file: str = "") -> None:
    """Point every OpenAI client (ours, the peers', children's) at the load server: its
    HTTPS port when given, with its test CA trusted through SSL_CERT_FILE (which httpx,
    and so every system here, reads)."""
    if tls_port:
        os.environ["OPENAI_BASE_URL"] = f"https://127.0.0.1:{tls_port}/v1"
        os.environ["SSL_CERT_FILE"] = ca_file
    else:
        os.environ["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
    os.environ["OPENAI_API_KEY"] = "sk-bench-not-a-real-key"
    os.environ["AGENTCELL_BLOCK_REAL_MODELS"] = "1"  # loopback only, whatever happens
    os.environ["LANGSMITH_TRACING"] = "false"
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"


async def run_job(job: dict[str, Any]) -> dict[str, Any]:
    from bench.systems import Options, load

    system = load(job["system"])
    doc: dict[str, Any] = {"system": system.name, "versions": system.versions(), "rows": []}
    why_not = system.available()
    if job.get("count_events") and system.no_events:
        why_not = system.no_events
    if why_not:
        doc["unavailable"] = why_not
        return doc
    options = Options(
        count_events=bool(job.get("count_events")),
        limits=job.get("limits"),
        prestart=bool(job.get("prestart")),
        analysis=job["spec"].get("tool") == analysis.FILES,
        call_ahead=bool(job.get("call_ahead")),
        # As shipped: run records and the journal on, unless the job says otherwise.
        record=bool(job.get("record", True)),
        journal=bool(job.get("journal", True)),
        mcp=int(job.get("mcp", 0)),
    )
    base = Spec(run="", **job["spec"])
    prefix = job["run_prefix"]
    await _one(system, options, base, prefix + "-warmup", WARMUP_N, job, memory=False)
    for n in job["ns"]:
        for rep in range(job.get("repeats", 1)):
            if job.get("warm") == "n":
                options.warm = n
            elif job.get("warm") is not None:
                options.warm = int(job["warm"])
            row = await _one(
                system, options, base, f"{prefix}-n{n}-r{rep}", n, job, memory=job.get("memory")
            )
            row["rep"] = rep
            doc["rows"].append(row)
    return doc


async def _one(
    system: Any, options: Any, base: Spec, run_id: str, n: int, job: dict[str, Any], *, memory: Any
) -> dict[str, Any]:
    spec = dataclasses.replace(base, run=run_id, n=n)
    row: dict[str, Any] = {"n": n, "run": run_id, "ok": False, "detail": ""}
    children_before = 0.0
    rss_before = measure.rss_self()
    snapshot: asyncio.Task[dict[str, Any]] | None = None
    try:
        opened = time.perf_counter()
        await system.open(n, options)
        # Outside the timed run for every system: process pools and warm spares start
        # here, so their start-up is reported on its own (startup_s).
        row["startup_s"] = time.perf_counter() - opened
        # From here: not the fork server's start nor the warm spares made in open().
        children_before = measure.cpu_descendants()
        direct_before = measure.cpu_direct_children()
        if memory:
            snapshot = asyncio.create_task(_snapshot(system, job["port"], run_id, n))
        cpu0, machine0 = measure.cpu_self(), measure.cpu_machine()
        with measure.PeakRSS() as peak:
            t0 = time.perf_counter()
            result = await _bounded(system.run(spec), job.get("timeout_s", 120), row)
            wall = time.perf_counter() - t0
        cpu1, machine1 = measure.cpu_self(), measure.cpu_machine()
        # Before close(), which may end them (their own time then merges into what we reap).
        row["direct_children_cpu_s"] = measure.cpu_direct_children() - direct_before
        row.update(
            ok=result.ok,
            completed=result.completed,
            detail=result.detail,
            wall_s=wall,
            parent_cpu_s=cpu1 - cpu0,
            machine_cpu_s=machine1 - machine0,
            parent_rss_before=rss_before,
            parent_peak_rss=peak.peak,
            events=result.events,
            chars=result.chars,
            **result.extra,
            **system.after_run(),
        )
        if snapshot is not None:
            # Taken long before the run ends, unless some sub-agent never asked the model.
            await asyncio.wait([snapshot], timeout=1)
            row["memory"] = snapshot.result() if snapshot.done() else None
    except TimeoutError:
        row["detail"] = f"timed out after {job.get('timeout_s', 120):g} s"
        if row.get("hung_at"):
            where, count = row["hung_at"][0]
            row["detail"] += f", {count} tasks waiting at {where}"
    except Exception as exc:  # a failing system is a row saying why, not a crashed bench
        row["detail"] = f"{type(exc).__name__}: {exc}"
        row["traceback"] = traceback.format_exc(limit=8)
    finally:
        if snapshot is not None and not snapshot.done():
            snapshot.cancel()
        await system.close()
    row["children_cpu_s"] = measure.cpu_descendants() - children_before if children_before else 0.0
    log = get_json(job["port"], f"/bench/run/{run_id}")  # (blocking, but the run is over)
    row["server_cpu_s"] = log.get("server_cpu_s", 0.0)
    row["peak_in_flight"] = log.get("peak_in_flight", 0)
    row["rejected"] = log.get("rejected", 0)  # 429s the server answered (rate-limited runs)
    row["requests"] = len(log.get("requests") or [])
    row["dispatch_s"] = measure.dispatch_latencies(log)
    if spec.msg:  # the messages workload: each message's latency, from the server's rows
        row["message_ms"] = message_cost.latencies(log, n)
    row["request_bytes"] = analysis.request_sizes(log.get("requests") or [])
    if "machine_cpu_s" in row:
        # What the rest of the machine (other users' processes) took during the run: a
        # shared 2-core machine is noisy, and this says which rows to distrust.
        ours = row["parent_cpu_s"] + row["children_cpu_s"] + row["server_cpu_s"]
        row["others_cpu_s"] = max(0.0, row["machine_cpu_s"] - ours)
    expected = n * spec.turns + 2  # every sub-agent's turns and the main agent's two
    if not row["ok"] and row["requests"] != expected:
        row["detail"] += f" (the server saw {row['requests']} of {expected} model requests)"
    return row


async def _bounded(run: Any, limit_s: float, row: dict[str, Any]) -> Any:
    """Await ``run`` for at most ``limit_s`` seconds. On a timeout, note where the run's
    tasks were waiting (the innermost frame of each, most common first) before
    cancelling them: a hung framework says where it hangs."""
    task = asyncio.ensure_future(run)
    done, _ = await asyncio.wait({task}, timeout=limit_s)
    if done:
        return task.result()
    waiting: dict[str, int] = {}
    for other in asyncio.all_tasks():
        frames = other.get_stack()
        if other is not asyncio.current_task() and frames:
            frame = frames[-1]
            where = f"{frame.f_code.co_filename.rsplit('site-packages/', 1)[-1]}:"
            where += f"{frame.f_lineno} {frame.f_code.co_name}"
            waiting[where] = waiting.get(where, 0) + 1
    row["hung_at"] = sorted(waiting.items(), key=lambda kv: -kv[1])[:5]
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    raise TimeoutError


async def _snapshot(system: Any, port: int, run_id: str, n: int) -> dict[str, Any]:
    """Memory while every sub-agent is alive: once all N have sent their first request."""
    seen = await wait_for_jobs(port, run_id, n)
    snap = measure.memory_snapshot(system.child_pids())
    snap["seen"] = seen.get("seen", 0)
    return snap


def raw_floor_job(samples: int) -> dict[str, Any]:
    """bench.pool_micro's raw floor: forkserver process start + one msgspec frame each way.

    As in pool_micro, a pool runs first, so that the fork server the raw children come
    from has agentcell's preloaded modules: the floor is a warm process start.
    """
    from agentcell.orchestrator.backends._forkserver import WorkerPool

    from bench.pool_micro import raw_floor

    async def preload() -> None:
        async with WorkerPool(max_workers=1, warm=0):
            pass

    asyncio.run(preload())
    raw_floor(3)  # the fork server's first start is not what a run pays
    return {"system": "raw floor", "samples_s": raw_floor(samples)}


def main() -> None:
    job = json.loads(sys.stdin.read())
    configure_environment(job["port"], job.get("tls_port", 0), job.get("ca_file", ""))
    if job.get("kind") == "raw_floor":
        doc = raw_floor_job(int(job.get("samples", 30)))
    else:
        doc = asyncio.run(run_job(job))
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
