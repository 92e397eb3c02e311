"""The fan-out benchmark: agentcell next to its baselines and peers, on one load server.

    python -m bench.run --quick     # N ∈ {1, 8, 32, 128}, one run per cell (< 5 min)
    python -m bench.run --full      # N up to 256, median of 3 runs per cell

Starts the load model server (``bench.load_server``) in its own process, then runs each
system through each workload in a fresh process (``bench.runner``), one after the other.
Writes results.json, report.md and PNG plots to bench/out/<timestamp>/ and prints the
tables. See bench/README.md for how to read them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import child_cost, machine, report
from bench.server_handle import LoadServer
from bench.tools import crunch
from bench.workloads import FASTEST_PEER, HEADLINE_RUNS, PEERS, Workload, workloads

OUT = Path(__file__).resolve().parent / "out"
ROOT = Path(__file__).resolve().parent.parent


def run_runner(job: dict[str, Any], timeout: float, log: Path | None) -> dict[str, Any]:
    """One ``bench.runner`` process; a runner that fails is reported, not raised."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.runner"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"rows": [], "unavailable": f"the runner took over {timeout:.0f} s and was stopped"}
    if log is not None and done.stderr.strip():
        log.write_text(done.stderr)
    try:
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return {"rows": [], "unavailable": f"the runner failed: {tail[0][:200]}"}


@contextlib.contextmanager
def ray_head_for(only: set[str]) -> Iterator[None]:
    """A loopback Ray head for the Ray rows, started before any clock runs (the runners
    inherit its address); none when those rows are not selected or Ray is missing."""
    from bench.systems.agentcell_ray import ADDRESS_ENV
    from bench.workloads import RAY

    if (only and RAY not in only) or importlib.util.find_spec("ray") is None:
        yield
        return
    from agentcell.orchestrator.backends.ray._local import local_ray_head

    with local_ray_head() as head:
        saved = dict(os.environ)
        os.environ.update({k: v for k, v in head.env.items() if k.startswith("RAY_")})
        os.environ[ADDRESS_ENV] = head.address
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def tool_cpu_s() -> float:
    """What one crunch costs here (median of 3): the cpu workload's ideal is built on it."""
    times = []
    for i in range(3):
        t0 = time.process_time()
        crunch(f"calibrate/{i}")
        times.append(time.process_time() - t0)
    return statistics.median(times)


def sweep(
    workload: Workload,
    ns: list[int],
    repeats: int,
    server: LoadServer,
    only: set[str],
    out: Path,
) -> list[dict[str, Any]]:
    results = []
    runs = [(s, label, fields) for s in workload.systems for label, fields in workload.variants]
    runs *= workload.pairs  # interleaved: a, b, a, b, …
    for system, label, fields in [*runs, *workload.extra]:
        if only and system not in only:
            continue
        ns_here = [n for n in ns if n <= fields.get("max_n", n)]
        results.append(_one_runner(workload, system, label, fields, ns_here, repeats, server, out))
    return results


def _one_runner(
    workload: Workload,
    system: str,
    label: str,
    fields: dict[str, Any],
    ns: list[int],
    repeats: int,
    server: LoadServer,
    out: Path,
    round_: int = 0,
) -> dict[str, Any]:
    tag = f"{workload.name}-{system}" + (f"-{label}" if label else "")
    tag += f"-round{round_}" if round_ else ""
    job = {
        "system": system,
        "ns": ns,
        "repeats": repeats,
        "spec": workload.spec,
        "port": server.port,
        "run_prefix": tag.replace(" ", "_").replace(",", ""),
        "memory": workload.memory,
        "count_events": workload.count_events,
        "timeout_s": workload.timeout_s * (3 if 256 in ns else 1),  # N=256 takes longer
        **fields,
    }
    if workload.tls:
        job.update(tls_port=server.tls_port, ca_file=server.ca_file)
    started = time.perf_counter()
    result = run_runner(job, 600, out / f"{job['run_prefix']}.stderr.log")
    result.setdefault("system", system)
    result["variant"] = label
    _progress(
        workload.name + (f" round {round_ + 1}" if round_ else ""),
        result,
        time.perf_counter() - started,
    )
    return result


def headline_rounds(
    workload: Workload,
    ran_ns: list[int],
    results: list[dict[str, Any]],
    server: LoadServer,
    out: Path,
) -> None:
    """The headline cells run HEADLINE_RUNS times in all: after the sweep, rounds of
    agentcell and of every peer that ran, interleaved (a peer run once could otherwise
    be the "fastest" on one lucky run); each round's rows join its system's result,
    whose by-N medians the headline reads."""
    ns = [n for n in workload.headline_ns if n in ran_ns]
    primary = {r["system"]: r for r in results if not r.get("variant") and not r.get("unavailable")}
    if "agentcell" not in primary or not ns:
        return
    systems = ["agentcell", *(p for p in PEERS if p in primary)]
    for round_ in range(1, HEADLINE_RUNS):
        for system in systems:
            extra = _one_runner(workload, system, "", {}, ns, 1, server, out, round_)
            for row in extra.get("rows", []):
                row["rep"] = round_
                primary[system]["rows"].append(row)


def peers_by_speed(results: dict[str, Any], workload: str, n: int) -> list[str]:
    """The peers that completed N in a workload this run has done, fastest (lowest
    median wall) first."""
    walls = {
        peer: agg["wall_s"]
        for peer in PEERS
        if (agg := report._agg(results, workload, peer, n)) is not None
    }
    return sorted(walls, key=walls.__getitem__)


def wide_fallback(
    workload: Workload,
    ns: list[int],
    results: dict[str, Any],
    wide: list[dict[str, Any]],
    server: LoadServer,
    out: Path,
) -> None:
    """The wide fan-out's peer failed it (openai-agents hangs at N=128 and above, see
    "Known issues"): the next fastest peer at io N=128 runs it too, once, so that the
    ratio is to a peer that completed N=1,000 (the failed row stays in the table)."""
    ran = {r["system"] for r in wide}
    if any(r["system"] in PEERS and _all_ok(r) for r in wide):
        return
    following = [p for p in peers_by_speed(results, "io", 128) if p not in ran]
    if any(r["system"] in PEERS for r in wide) and following:
        wide.append(_one_runner(workload, following[0], "", {}, ns, 1, server, out))


def _all_ok(result: dict[str, Any]) -> bool:
    rows = result.get("rows") or []
    return bool(rows) and all(row.get("ok") for row in rows)


def _progress(name: str, result: dict[str, Any], took: float) -> None:
    label = result["system"] + (f" ({result['variant']})" if result.get("variant") else "")
    if result.get("unavailable"):
        line = f"not available: {result['unavailable']}"
    else:
        line = "  ".join(
            f"N={r['n']}: {r.get('wall_s', float('nan')):.2f}s" + ("" if r["ok"] else " FAILED")
            for r in result["rows"]
        )
    print(f"[{name}] {label}: {line}  ({took:.0f} s)", file=sys.stderr, flush=True)


def _with_fastest_peer(workload: Workload, results: dict[str, Any]) -> Workload:
    """``workload`` with FASTEST_PEER replaced by the peer fastest at io N=128 so far in
    this run (dropped if no peer completed it: the row then says so)."""
    peer = next(iter(peers_by_speed(results, "io", 128)), "")
    systems = [peer if s == FASTEST_PEER else s for s in workload.systems]
    return dataclasses.replace(workload, systems=[s for s in systems if s])


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the default: one run per cell")
    size.add_argument("--full", action="store_true", help="N up to 256, median of 3 runs")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="model latency per reply")
    parser.add_argument("--repeats", type=int, help="runs per cell (default: 1 quick, 3 full)")
    parser.add_argument("--systems", default="", help="comma-separated subset of systems")
    parser.add_argument("--workloads", default="", help="comma-separated subset of workloads")
    parser.add_argument("--out", type=Path, help="output folder (default bench/out/<timestamp>)")
    args = parser.parse_args(argv)
    quick = not args.full
    repeats = args.repeats or (1 if quick else 3)
    only_systems = {s.strip() for s in args.systems.split(",") if s.strip()}
    only_workloads = {w.strip() for w in args.workloads.split(",") if w.strip()}
    out = args.out or OUT / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine.describe(),
        "config": {
            "quick": quick,
            "latency_ms": args.latency_ms,
            "repeats": repeats,
            "tool_cpu_s": tool_cpu_s(),
        },
        "workloads": [],
    }
    cores = results["machine"]["cpus"] or 1
    with LoadServer(latency_ms=args.latency_ms, tls=True) as server, ray_head_for(only_systems):
        floor = run_runner(
            {"kind": "raw_floor", "samples": 30 if quick else 100, "port": server.port}, 300, None
        )
        samples = floor.get("samples_s") or [float("nan")]
        results["raw_floor"] = {"samples_s": samples, "p50_s": statistics.median(samples)}
        for workload in workloads(args.latency_ms, quick):
            if only_workloads and workload.name not in only_workloads:
                continue
            ns = list(workload.quick_ns if quick else workload.full_ns)
            wide = FASTEST_PEER in workload.systems
            if wide:
                workload = _with_fastest_peer(workload, results)
            entry = {
                "name": workload.name,
                "title": workload.title,
                "what": workload.what,
                "spec": workload.spec,
                "ideal_s": {
                    n: workload.ideal_s(
                        n, args.latency_ms / 1000, results["config"]["tool_cpu_s"], cores
                    )
                    for n in ns
                },
                "results": sweep(workload, ns, repeats, server, only_systems, out),
            }
            if wide:
                wide_fallback(workload, ns, results, entry["results"], server, out)
            if workload.headline_ns and repeats < HEADLINE_RUNS:
                headline_rounds(workload, ns, entry["results"], server, out)
            results["workloads"].append(entry)
        results["server"] = server.stats()
    if not only_workloads or "io" in only_workloads:
        results["child_cost"] = child_cost.measure(out)  # after the load: a quiet machine
    results["duration_s"] = time.perf_counter() - started
    results["headline"] = report.headline_figures(results)

    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = report.markdown(results)
    (out / "report.md").write_text(text)
    images = report.plots(results, out)
    print(text)
    took = results["duration_s"]
    print(f"\n{len(images)} plots, results.json and report.md in {out} ({took:.0f} s)")
    return out


if __name__ == "__main__":
    main()
