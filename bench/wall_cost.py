"""What each wall of a sub-agent process costs, set-up and teardown, one child at a time.

    python -m bench.wall_cost [--n 200] [--rounds 3]

Every row forks ``n`` children from the same copy of agentcell's warmed fork server
(``bench.wall_probe``), each putting up a cumulative set of walls with agentcell's own
``_sandbox.apply`` and leaving at once; its whole life (``wait4``: the set-up, and the
kernel tearing the namespaces, mounts and cgroup down at exit) is the row's CPU. The
difference between two rows is the cost of the wall the lower one adds. No agent runs,
so the figures are the walls alone; ``bench.profile --phases`` shows them inside a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import multiprocess
from agentcell.orchestrator.backends._forkserver import WorkerPool

from bench.wall_probe import SECTIONS, VARIANTS, wall_forks

OUT = Path(__file__).resolve().parent / "out"
#: The variant whose set-up is shown part by part.
_INSIDE = "+ Landlock + seccomp (read-only)"
_NAME = "agentcell-child-probe"  # named like the pool's children: no re-run of __main__


def variant_row(workdir: str, variant: str, n: int) -> dict[str, float]:
    ctx = multiprocess.get_context("forkserver")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=wall_forks, args=(b, workdir, variant, n), name=_NAME)
    p.start()
    b.close()
    answer: Any = a.recv()
    p.join()
    a.close()
    if isinstance(answer, str):
        raise SystemExit(answer)
    lives: list[tuple[int, int, int]] = answer[0]
    sections = {f"{label} ms": ms for label, (ms, _) in answer[1].items()}
    sections |= {f"{label} faults": faults for label, (_, faults) in answer[1].items()}
    return {
        **sections,
        "life_cpu_ms": statistics.fmean(u + s for u, s, _ in lives) / 1e3,
        "life_user_ms": statistics.fmean(u for u, _, _ in lives) / 1e3,
        "life_system_ms": statistics.fmean(s for _, s, _ in lives) / 1e3,
        "life_faults": statistics.median(f for _, _, f in lives),
    }


async def amain(workdir: str, n: int, rounds: int) -> dict[str, dict[str, float]]:
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    # The pool starts (and holds) agentcell's fork server, with the probe preloaded.
    async with WorkerPool(max_workers=1, warm=0, preload=["bench.wall_probe"]):
        for _ in range(rounds):
            for name in VARIANTS:  # interleaved: load changes hit every row alike
                rows[name].append(variant_row(workdir, name, n))
    return {
        name: {key: statistics.median(r[key] for r in runs if key in r) for key in runs[0]}
        for name, runs in rows.items()
    }


def render(result: dict[str, dict[str, float]], n: int, rounds: int) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"walls of one sub-agent process, {n} children × {rounds} rounds, one at a time "
        f"(load average {load}); whole life per child, set-up + exit",
        "",
        "| walls | CPU ms | of which system | Δ CPU ms | minor faults |",
        "|---|---|---|---|---|",
    ]
    previous: float | None = None
    for name, row in result.items():
        delta = "—" if previous is None else f"{row['life_cpu_ms'] - previous:+.2f}"
        lines.append(
            f"| {name} | {row['life_cpu_ms']:.2f} | {row['life_system_ms']:.2f} | {delta} "
            f"| {row['life_faults']:.0f} |"
        )
        previous = row["life_cpu_ms"]
    inside = result.get(_INSIDE, {})
    lines += [
        "",
        f"inside _sandbox.apply, {_INSIDE} (median of the rounds' means; nested rows indented):",
        "",
        "| part | CPU ms | minor faults |",
        "|---|---|---|",
    ]
    for _module, _attr, label in SECTIONS:
        if f"{label} ms" in inside:
            lines.append(
                f"| {label} | {inside[f'{label} ms']:.3f} | {inside[f'{label} faults']:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="children per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentcell-wall-cost-") as folder:
        workdir = str(Path(folder).resolve())
        result: dict[str, Any] = asyncio.run(amain(workdir, args.n, args.rounds))
    text = render(result, args.n, args.rounds)
    out = args.out or OUT / time.strftime("wall-cost-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / "wall_cost.json").write_text(json.dumps(result, indent=1))
    (out / "wall_cost.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
