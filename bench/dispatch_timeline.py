"""Where a fan-out's dispatch goes: marks in the parent against the server's clock.

    python -m bench.dispatch_timeline [--n 32] [--runs 2] [--warm K]

agentcell's bench system against the load server, the dispatch workload's shape (one
model turn per sub-agent). The parent's steps are marked as they happen — the runner
taking a task call, asking the pool for a process, the Start sent, the child's first
model call reaching the relay — and every mark is printed in ms after the end of the
main agent's reply carrying the task calls, with the server's first request of each
sub-agent: min, quartiles and max over the N sub-agents of each run. Both clocks are the
same monotonic clock (one machine), so the rows can be read against each other.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentcell.orchestrator.delegation import _runner
from agentcell.orchestrator.model_relay import _relay as _model_relay

from bench.runner import configure_environment
from bench.script import Spec
from bench.server_handle import LoadServer
from bench.systems._base import Options
from bench.systems.agentcell import Agentcell

#: (label, owner, method, when): the parent's steps, in the order they happen.
STEPS: tuple[tuple[str, Any, str, str], ...] = (
    ("runner takes the task call", _runner.Runner, "run", "before"),
    ("asks the pool for a process", _runner.Runner, "_start_on_a_live_process", "before"),
    ("Start sent", _runner.Runner, "_start_on_a_live_process", "after"),
    ("child's model call at the relay", _model_relay.ModelRelay, "on_call", "before"),
)


def instrument(marks: dict[str, list[float]]) -> None:
    """Wrap each step's method so that it records ``time.monotonic()`` in ``marks``."""
    by_method: dict[tuple[Any, str], list[tuple[str, str]]] = {}
    for label, owner, name, when in STEPS:
        by_method.setdefault((owner, name), []).append((label, when))
    for (owner, name), labels in by_method.items():
        setattr(owner, name, _marked(getattr(owner, name), labels, marks))


def _marked(
    func: Callable[..., Any], labels: list[tuple[str, str]], marks: dict[str, list[float]]
) -> Callable[..., Any]:
    def note(when: str) -> None:
        for label, at in labels:
            if at == when:
                marks.setdefault(label, []).append(time.monotonic())

    if asyncio.iscoroutinefunction(func):

        async def marked_async(*args: Any, **kwargs: Any) -> Any:
            note("before")
            result = await func(*args, **kwargs)
            note("after")
            return result

        return marked_async

    def marked(*args: Any, **kwargs: Any) -> Any:
        note("before")
        result = func(*args, **kwargs)
        note("after")
        return result

    return marked


def _quartiles(values: list[float]) -> str:
    values = sorted(values)
    picks = [values[0], values[len(values) // 4], values[len(values) // 2]]
    picks += [values[3 * len(values) // 4], values[-1]]
    return " ".join(f"{v * 1000:8.1f}" for v in picks)


async def timeline(n: int, runs: int, warm: int | None) -> None:
    marks: dict[str, list[float]] = {}
    instrument(marks)
    with LoadServer(latency_ms=100) as server:
        configure_environment(server.port)
        system = Agentcell()
        await system.open(n, Options(warm=warm))
        try:
            for run in range(runs):
                marks.clear()
                run_id = f"timeline-{run}"
                result = await system.run(Spec(run=run_id, n=n, turns=1, tool="probe", lat=100))
                if not result.ok:
                    raise SystemExit(f"run {run} failed: {result.detail}")
                requests = server.run_log(run_id)["requests"]
                sent = next(row[1] for row in requests if row[2] == "main" and row[3] == 0)
                first: dict[str, float] = {}
                for arrival, _done, role, *_ in requests:
                    if role != "main":
                        first[role] = min(first.get(role, arrival), arrival)
                marks["the server's first request"] = list(first.values())
                print(f"run {run} (N={n}): ms after the main reply's end: min, quartiles, max")
                for label, times in marks.items():
                    print(f"  {label:34} {_quartiles([t - sent for t in times])}")
                await asyncio.sleep(1.0)  # the spares back up between runs
        finally:
            await system.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--warm", type=int, default=None, help="warm spares (default: agentcell's)")
    args = parser.parse_args()
    asyncio.run(timeline(args.n, args.runs, args.warm))


if __name__ == "__main__":
    main()
