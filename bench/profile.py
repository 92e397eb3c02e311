"""Where agentcell's time goes at large fan-out: the parent and every child, profiled.

    python -m bench.profile [--n 128] [--top 20]

One io run (3 turns of 100 ms per sub-agent) against the load server, after a warm-up:

* the parent's event loop thread under cProfile, its CPU split by package, and the CPU of
  each of its threads (the process-start thread is not seen by cProfile);
* every child under cProfile too — the pool is given a process target that wraps
  agentcell's own (``WorkerPool(target=...)``) — with each child's CPU split into what it
  spent before its target ran (fork server → child start-up) and in it, and its page
  faults (copy-on-write after the fork shows up there).

Writes parent.prof, children.prof and summary.json to bench/out/profile-<timestamp>/.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import glob
import io
import json
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._starters import forkserver_pid
from agentcell.worker import ChildBoot

from bench.profiled_child import profiled_child
from bench.runner import configure_environment
from bench.script import Spec
from bench.server_handle import LoadServer
from bench.systems._base import WORKER_DESCRIPTION, WORKER_PROMPT
from bench.systems._engine_tools import TOOLS

OUT = Path(__file__).resolve().parent / "out"


_GROUPS = (
    ("orchestrator/", "agentcell orchestrator"),
    ("protocol/", "agentcell protocol"),
    ("worker/", "agentcell worker (engine, models, tools)"),
    ("asyncio/", "asyncio"),
    ("httpx/", "httpx/httpcore"),
    ("httpcore/", "httpx/httpcore"),
    ("h11/", "httpx/httpcore"),
    ("anyio/", "httpx/httpcore"),
    ("multiprocess/", "multiprocess/dill"),
    ("dill/", "multiprocess/dill"),
    ("pickle", "multiprocess/dill"),
    ("bench/", "bench (tools, script)"),
)


def by_package(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Own time (tottime) summed per package, largest first."""
    totals: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        group = next((g for key, g in _GROUPS if key in filename), None)
        if group is None:
            group = f"builtin: {name}" if filename == "~" else "other Python"
        totals[group] = totals.get(group, 0.0) + tottime
    return sorted(totals.items(), key=lambda kv: -kv[1])


def top(stats: pstats.Stats, sort: str, count: int) -> str:
    buffer = io.StringIO()
    stats.stream = buffer  # type: ignore[attr-defined]
    stats.files = []  # type: ignore[attr-defined]  # (one header line per merged file)
    stats.sort_stats(sort).print_stats(count)
    return buffer.getvalue()


def _reaped_cpu_s() -> float:
    """CPU of every child the fork server has reaped so far (their whole lives, exit
    included: what a child's own counters cannot see)."""
    fs = forkserver_pid()
    if fs is None:
        return 0.0
    t = psutil.Process(fs).cpu_times()
    return float(t.children_user + t.children_system)


async def profile_run(
    n: int, out: Path, port: int, children_profiled: bool, phases: bool = False
) -> dict[str, Any]:
    worker = AgentDefinition(
        name="worker",
        description=WORKER_DESCRIPTION,
        system_prompt=WORKER_PROMPT,
        tools=[t.name for t in TOOLS],
        model="inherit",
    )
    settings = Settings(model="openai:bench", approval="allow", max_workers=n, max_turns=8)
    if settings.budgets.max_subagents is not None:  # a wide --n: raised as a user would
        settings.budgets.max_subagents = max(settings.budgets.max_subagents, n)
    workdir = tempfile.mkdtemp(prefix="agentcell-profile-")
    child_dir = out / "children"
    child_dir.mkdir()
    pool = WorkerPool(
        max_workers=n,
        warm=settings.warm_spares,
        target=functools.partial(profiled_child, str(child_dir), children_profiled, phases=phases),
        # The wrapper is a child's own code: imported once, like agentcell's modules.
        preload=["bench.profiled_child", "bench.phases"],
        # As the Orchestrator's own pool: no connection ahead (the parent sends the
        # children's model requests).
        boot=ChildBoot(),
    )
    parent = cProfile.Profile()
    try:
        async with pool:
            orch = Orchestrator(
                settings=settings,
                workdir=workdir,
                load_agent_files=False,
                record=False,
                agents=[worker],
                tools=TOOLS,
                pool=pool,
            )
            await orch.run(Spec(run="profile-warmup", n=2).prompt())
            await pool.warmed()
            for path in child_dir.iterdir():  # the warm-up's children are not counted
                path.unlink()
            me = psutil.Process()
            threads_before = {t.id: t.user_time + t.system_time for t in me.threads()}
            reaped0 = _reaped_cpu_s()
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            parent.enable()
            report = await orch.run(Spec(run="profile", n=n).prompt())
            parent.disable()
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            await pool.warmed()  # the run's own children are reaped by now
            reaped = _reaped_cpu_s() - reaped0
            threads = {
                t.id: t.user_time + t.system_time - threads_before.get(t.id, 0.0)
                for t in me.threads()
            }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    parent.dump_stats(str(out / "parent.prof"))
    ok = sum(1 for r in report.subagents if r.ok)
    main_tid = threading_main_native_id()
    return {
        "n": n,
        "ok": report.ok and ok == n,
        "wall_s": wall,
        "parent_cpu_s": cpu,
        # Children reaped during the run: its n sub-agents (spares started for the next
        # run are alive still, and the warm-up's were reaped before).
        "children_life_cpu_s": reaped,
        "parent_threads_cpu_s": {
            ("event loop (main thread)" if tid == main_tid else f"thread {tid}"): round(s, 3)
            for tid, s in sorted(threads.items(), key=lambda kv: -kv[1])
            if s > 0.001
        },
    }


def threading_main_native_id() -> int:
    import threading

    return threading.main_thread().native_id or 0


def summarize(out: Path, run: dict[str, Any], count: int) -> str:
    parent = pstats.Stats(str(out / "parent.prof"))
    child_profiles = [
        p
        for p in sorted(glob.glob(str(out / "children" / "child-*.prof")))
        if Path(p).stat().st_size
    ]
    # (a spare still alive for a next run has written nothing yet)
    texts = [Path(p).read_text() for p in glob.glob(str(out / "children" / "*.json"))]
    accounts = [json.loads(text) for text in texts if text]
    lines = [
        f"agentcell profile: io workload, N={run['n']}, ok={run['ok']}",
        f"wall {run['wall_s']:.2f} s; parent CPU {run['parent_cpu_s']:.2f} s "
        f"({run['parent_cpu_s'] / run['n'] * 1e3:.2f} ms per sub-agent); by thread: "
        f"{run['parent_threads_cpu_s']}",
        "",
        "parent event loop, own time by package:",
    ]
    parent_total = sum(s for _, s in by_package(parent)) or 1.0
    for group, seconds in by_package(parent)[:10]:
        lines.append(f"  {seconds:7.3f} s  {100 * seconds / parent_total:4.1f}%  {group}")
    lines += ["", top(parent, "tottime", count)]
    if accounts:

        def median_ms(key: str) -> float:
            return statistics.fmean(a[key] for a in accounts) * 1e3

        faults = statistics.fmean(
            a["faults_before_target"] + a["faults_in_target"] for a in accounts
        )
        faults_before = statistics.fmean(a["faults_before_target"] for a in accounts)
        run["children"] = {
            "count": len(accounts),
            "profiled": bool(child_profiles),
            "cpu_before_target_ms": median_ms("cpu_before_target_s"),
            "user_in_target_ms": median_ms("user_in_target_s"),
            "system_in_target_ms": median_ms("system_in_target_s"),
            "page_faults": faults,
            "page_faults_before_target": faults_before,
            "life_cpu_ms": run["children_life_cpu_s"] / run["n"] * 1e3,
        }
        c = run["children"]
        # What the kernel spends after the child's last own instruction (os._exit): its
        # address space, descriptors and namespaces torn down, the reaping.
        c["exit_cpu_ms"] = c["life_cpu_ms"] - (
            c["cpu_before_target_ms"] + c["user_in_target_ms"] + c["system_in_target_ms"]
        )
        lines += [
            f"children: {len(accounts)}; CPU per child (mean): "
            f"{c['cpu_before_target_ms']:.1f} ms before the target ran (fork server → child "
            f"start-up), then {c['user_in_target_ms']:.1f} ms user + "
            f"{c['system_in_target_ms']:.1f} ms system"
            + (" (under cProfile, which inflates user time)" if child_profiles else "")
            + f"; minor page faults per child: {faults:.0f} ({faults_before:.0f} of them "
            "before the target ran); whole life (the fork server's "
            f"reaped-children CPU ÷ N, exit included): {c['life_cpu_ms']:.1f} ms",
        ]
        imported = sorted({m for a in accounts for m in a.get("imported_in_target", [])})
        run["children"]["imported_in_target"] = imported
        lines.append(
            "modules a child imported itself (not inherited from the fork server): "
            + (", ".join(imported) or "none")
        )
        phase_rows = _phase_table(accounts)
        if phase_rows:
            run["children"]["phases"] = phase_rows
            lines += [
                "",
                "phases of a child's life (mean per child; inclusive, nested rows indented):",
                "| phase | CPU ms | wall ms | calls | page faults |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {label} | {cpu:.2f} | {wall:.2f} | {calls:.1f} | {faults:.0f} |"
                for label, cpu, wall, calls, faults in phase_rows
            ]
            lines.append(
                f"| exit and reaping (whole life − fork server start-up − target) | "
                f"{c['exit_cpu_ms']:.2f} | — | — | — |"
            )
    if child_profiles:
        children = pstats.Stats(*child_profiles)
        children.dump_stats(str(out / "children.prof"))
        child_total = sum(s for _, s in by_package(children)) or 1.0
        lines += ["", "children (all together), own time by package:"]
        for group, seconds in by_package(children)[:12]:
            lines.append(f"  {seconds:7.3f} s  {100 * seconds / child_total:4.1f}%  {group}")
        lines += ["", top(children, "tottime", count), top(children, "cumulative", count)]
    shutil.rmtree(out / "children", ignore_errors=True)
    (out / "summary.json").write_text(json.dumps(run, indent=1))
    return "\n".join(lines)


def _phase_table(
    accounts: list[dict[str, Any]],
) -> list[tuple[str, float, float, float, float]]:
    from bench.phases import PHASES

    rows = []
    for label, _module, _path in PHASES:
        found = [a["phases"].get(label, [0.0, 0.0, 0]) for a in accounts if a.get("phases")]
        if not found or not any(f[2] for f in found):
            continue
        rows.append(
            (
                label,
                statistics.fmean(f[0] for f in found) * 1e3,
                statistics.fmean(f[1] for f in found) * 1e3,
                statistics.fmean(f[2] for f in found),
                statistics.fmean(f[3] if len(f) > 3 else 0 for f in found),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument(
        "--no-child-profile",
        action="store_true",
        help="count the children's CPU and page faults without cProfile's overhead",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="no cProfile in the children: CPU and wall time per phase of their lives instead",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = args.out or OUT / time.strftime("profile-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    with LoadServer() as server:
        configure_environment(server.port)
        profiled = not (args.no_child_profile or args.phases)
        run = asyncio.run(profile_run(args.n, out, server.port, profiled, args.phases))
    text = summarize(out, run, args.top)
    (out / "profile.txt").write_text(text)
    print(text)
    print(f"\nprofiles in {out}")


if __name__ == "__main__":
    main()
