"""What starting processes while the main model streams its task calls is worth.

    python -m bench.start_ahead [--n 8 32 128] [--repeats 3]

agentcell against the load server, the main model streaming its N task calls at a
model's pace (``tps`` deltas per second, so the calls arrive over most of a second, as
from a real model), once with ``start_ahead`` (the default) and once without. Each
cell: a warm-up run, then the median wall of ``repeats`` runs, the spares back up
between runs. Without start-ahead the fan-out waits, after the stream ends, for up to
N − warm process starts; with it, those starts overlap the stream.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from agentcell.orchestrator import Settings

from bench.runner import configure_environment
from bench.script import Spec
from bench.server_handle import LoadServer
from bench.systems._base import Options
from bench.systems.agentcell import Agentcell


class _Agentcell(Agentcell):
    def __init__(self, start_ahead: bool) -> None:
        super().__init__()
        self.start_ahead = start_ahead

    def settings(self, n: int, options: Options) -> Settings:
        settings = super().settings(n, options)
        settings.start_ahead = self.start_ahead
        return settings


def _pace(n: int) -> float:
    """Deltas per second for the main model: its N calls take about a second."""
    return 40.0 if n <= 32 else 160.0


async def _cell(port: int, n: int, start_ahead: bool, repeats: int) -> float:
    configure_environment(port)
    system = _Agentcell(start_ahead)
    await system.open(n, Options())
    walls = []
    try:
        for r in range(repeats + 1):
            spec = Spec(run=f"sa{int(start_ahead)}-{n}-{r}", n=n, tps=_pace(n))
            began = time.perf_counter()
            out = await system.run(spec)
            walls.append(time.perf_counter() - began)
            if not out.ok:
                raise SystemExit(f"start_ahead={start_ahead} n={n}: {out.detail}")
            assert system.orch is not None
            await system.orch.pool.warmed()
    finally:
        await system.close()
    return statistics.median(walls[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| N | main model's pace | wall, start-ahead on | wall, off | on ÷ off |")
    print("|---|---|---|---|---|")
    with LoadServer(latency_ms=100, tps=0) as server:
        for n in args.n:
            on = asyncio.run(_cell(server.port, n, True, args.repeats))
            off = asyncio.run(_cell(server.port, n, False, args.repeats))
            print(f"| {n} | {_pace(n):g} deltas/s | {on:.2f} s | {off:.2f} s | {on / off:.2f} |")


if __name__ == "__main__":
    main()
