"""The bench's targets (issue 23's, re-anchored by issue 43 on agentcell as shipped:
run records and journal on), each read off results.json's headline: the figure and
whether it is met. Printed at the top of report.md.

Issue 43 took these off the targets (their figures stay in the headline, reported):
io_32 ≤ 0.60 and https_io_32 ≤ 0.70 (now < 1.0), analysis_32 ≤ 0.50 (now ≤ 0.6),
io_128_x_inprocess ≤ 1.5, child_cpu_x_inprocess_io_128 ≤ 3.0,
total_cpu_x_inprocess_io_128 ≤ 4.0 and both dispatch_warm_p50_x_floor_*."""

from __future__ import annotations

import dataclasses
import math
from typing import Any


@dataclasses.dataclass(frozen=True)
class Target:
    what: str
    key: str  # the headline figure
    limit: float | str  # the bound; or the headline key the figure must stay below
    digits: int = 2
    strict: bool = False  # below the bound (<), not at most (≤); a key's bound is always <

    def bound(self, headline: dict[str, Any]) -> float | None:
        return _number(headline.get(self.limit) if isinstance(self.limit, str) else self.limit)

    def met(self, headline: dict[str, Any]) -> bool | None:
        """True or False; None when the figure (or its bound) was not measured."""
        value, bound = _number(headline.get(self.key)), self.bound(headline)
        if value is None or bound is None:
            return None
        return value < bound if self.strict or isinstance(self.limit, str) else value <= bound

    def bound_text(self, headline: dict[str, Any]) -> str:
        """The bound as the table shows it: "< 1.00", "≤ 0.60", "< 24 (fewest of a peer)"."""
        if isinstance(self.limit, str):
            bound = self.bound(headline)
            return f"< {bound:.0f} (fewest of a peer)" if bound is not None else "< (no peer ran)"
        return f"{'<' if self.strict else '≤'} {self.limit:.2f}"


def _number(value: Any) -> float | None:
    """A finite figure as a float; None for null, NaN or anything else."""
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def _finite(value: Any) -> bool:
    return _number(value) is not None


TARGETS = (
    Target("io, N=32: agentcell ÷ fastest peer", "io_32_x_fastest_peer", 1.0, strict=True),
    Target("io, N=128: agentcell ÷ fastest peer", "io_128_x_fastest_peer", 1.0, strict=True),
    Target(
        "https-io, N=32: agentcell ÷ fastest peer", "https_io_32_x_fastest_peer", 1.0, strict=True
    ),
    Target("analysis, N=32: agentcell ÷ fastest peer", "analysis_32_x_fastest_peer", 0.60),
    Target(
        "ratelimit, N=32: agentcell's 429s (with its limiter) < every peer's",
        "ratelimit_429s_agentcell",
        "ratelimit_429s_fewest_peer",
        0,
    ),
    Target("memory: child USS, MiB", "child_uss_mib", 8.0, 1),
    Target("mcp, N=32: wall with shared MCP servers ÷ without", "mcp_32_x_no_mcp", 1.5),
    Target(
        "io, N=1,000: agentcell ÷ fastest peer (at io N=128; completed)",
        "io_1000_x_fastest_peer",
        1.0,
        strict=True,
    ),
    Target("io, N=1,000: parent's peak RSS, MiB", "io_1000_parent_peak_mib", 300.0, 0),
    Target("journal, io N=128: wall with the journal ÷ without", "journal_overhead_io_128", 1.05),
    Target("messages, N=8: delivery p50, ms", "message_delivery_p50_ms_8", 50.0, 1),
    Target("messages, N=32: delivery p50, ms", "message_delivery_p50_ms_32", 50.0, 1),
)


def rows(headline: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(target, figure, bound, met) as text, one per target."""
    out = []
    for target in TARGETS:
        value, met = headline.get(target.key), target.met(headline)
        figure = f"{value:.{target.digits}f}" if _finite(value) else "not measured"
        limit = target.bound_text(headline)
        verdict = "—" if met is None else "yes" if met else "**no**"
        out.append((target.what, figure, limit, verdict))
    return out


def table(headline: dict[str, Any]) -> str:
    """The targets as a markdown table (with how many are met)."""
    body = rows(headline)
    met = sum(1 for r in body if r[3] == "yes")
    measured = sum(1 for r in body if r[3] != "—")
    lines = [
        "## Targets (issues 23 and 43)",
        "",
        f"{met} of {len(body)} targets met"
        + (f" ({len(body) - measured} not measured)" if measured < len(body) else "")
        + "; a ratio to the fastest peer at N=32 or 128 is the median of 3 interleaved runs "
        "(one run in a subset or at N=1,000), the others one run: noisy.",
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
