"""Issue 23's targets, each read off results.json's headline: the figure and whether it
is met. Printed at the top of report.md."""

from __future__ import annotations

import dataclasses
import math
from typing import Any


@dataclasses.dataclass(frozen=True)
class Target:
    what: str
    key: str  # the headline figure
    limit: float | str  # at most this; or the headline key the figure must stay below
    digits: int = 2

    def bound(self, headline: dict[str, Any]) -> float | None:
        return _number(headline.get(self.limit) if isinstance(self.limit, str) else self.limit)

    def met(self, headline: dict[str, Any]) -> bool | None:
        """True or False; None when the figure (or its bound) was not measured."""
        value, bound = _number(headline.get(self.key)), self.bound(headline)
        if value is None or bound is None:
            return None
        return value < bound if isinstance(self.limit, str) else value <= bound


def _number(value: Any) -> float | None:
    """A finite figure as a float; None for null, NaN or anything else."""
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def _finite(value: Any) -> bool:
    return _number(value) is not None


TARGETS = (
    Target("io, N=32: agentcell ÷ fastest peer", "io_32_x_fastest_peer", 0.60),
    Target("analysis, N=32: agentcell ÷ fastest peer", "analysis_32_x_fastest_peer", 0.50),
    Target("io, N=128: agentcell ÷ in-process engine", "io_128_x_inprocess", 1.5),
    Target("io, N=128: children's CPU ÷ in-process engine's", "child_cpu_x_inprocess_io_128", 3.0),
    Target(
        "io, N=128: total CPU (children + fork servers + parent) ÷ in-process engine's",
        "total_cpu_x_inprocess_io_128",
        4.0,
    ),
    Target("dispatch, N=1: warm p50 ÷ forkserver floor", "dispatch_warm_p50_x_floor_1", 1.5),
    Target("dispatch, N=8: warm p50 ÷ forkserver floor", "dispatch_warm_p50_x_floor_8", 3.0),
    Target("https-io, N=32: agentcell ÷ fastest peer", "https_io_32_x_fastest_peer", 0.70),
    Target("memory: child USS, MiB", "child_uss_mib", 8.0, 1),
    Target("journal, io N=128: wall with the journal ÷ without", "journal_overhead_io_128", 1.05),
    Target("messages, N=8: delivery p50, ms", "message_delivery_p50_ms_8", 50.0, 1),
    Target("messages, N=32: delivery p50, ms", "message_delivery_p50_ms_32", 50.0, 1),
    Target(
        "ratelimit, N=32: agentcell's 429s (with its limiter) < every peer's",
        "ratelimit_429s_agentcell",
        "ratelimit_429s_fewest_peer",
        0,
    ),
)


def rows(headline: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(target, figure, bound, met) as text, one per target."""
    out = []
    for target in TARGETS:
        value, bound, met = headline.get(target.key), target.bound(headline), target.met(headline)
        figure = f"{value:.{target.digits}f}" if _finite(value) else "not measured"
        if isinstance(target.limit, str):
            limit = f"< {bound:.0f} (fewest of a peer)" if bound is not None else "< (no peer ran)"
        else:
            limit = f"≤ {target.limit:.2f}"
        verdict = "—" if met is None else "yes" if met else "**no**"
        out.append((target.what, figure, limit, verdict))
    return out


def table(headline: dict[str, Any]) -> str:
    """The targets as a markdown table (with how many are met)."""
    body = rows(headline)
    met = sum(1 for r in body if r[3] == "yes")
    measured = sum(1 for r in body if r[3] != "—")
    lines = [
        "## Targets (issue 23)",
        "",
        f"{met} of {len(body)} targets met"
        + (f" ({len(body) - measured} not measured)" if measured < len(body) else "")
        + "; one run of each cell, so noisy.",
        "",
        "| target | this run | bound | met |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in body]
    return "\n".join(lines + floors(headline))


def floors(headline: dict[str, Any]) -> list[str]:
    """Below the table: the lowest "÷ fastest peer" any system could reach in this run."""
    found = []
    for target in TARGETS:
        ideal = _number(headline.get(target.key.replace("_x_", "_ideal_x_")))
        if target.key.endswith("_x_fastest_peer") and ideal is not None:
            found.append(f"{target.what.split(':')[0]} {ideal:.2f}")
    if not found:
        return []
    return [
        "",
        'The lowest "÷ fastest peer" any system could reach in this run (the workload\'s '
        "ideal wall — its model latency alone — ÷ the fastest peer's wall): "
        + "; ".join(found)
        + ".",
    ]
