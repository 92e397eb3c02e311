"""The wide fan-out (the io-1000 workload): its headline figures, its table, and the
pictures of wall time and parent memory against N up to 1,000; and the MCP fan-out
picture, drawn for any ``mcp`` workload whose results exist (report.py calls these)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.measure import percentile
from bench.workloads import WIDE_N

MiB = 2**20
WORKLOAD = f"io-{WIDE_N}"
KEYS = (
    "io_1000_x_fastest_peer",
    "io_1000_results_delivered",
    "io_1000_parent_peak_mib",
    "io_1000_dispatch_p50_ms",
    "io_1000_dispatch_p99_ms",
)


def _entry(results: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((w for w in results["workloads"] if w["name"] == name), None)


def _rows(entry: dict[str, Any] | None, system: str) -> list[dict[str, Any]]:
    for result in (entry or {}).get("results", []):
        if result["system"] == system and not result.get("variant"):
            return [r for r in result.get("rows", []) if r["n"] == WIDE_N]
    return []


def peer_of(entry: dict[str, Any] | None) -> str:
    """The peer the ratio is to: the first that completed the wide fan-out in this run
    (the fastest at io N=128, or the next one where that one failed); else the first
    that ran it ("" if none did)."""
    results = [r for r in (entry or {}).get("results", []) if r["system"] != "agentcell"]
    done = [r for r in results if any(row.get("ok") for row in r.get("rows", []))]
    return next((r["system"] for r in done or results), "")


def figures(results: dict[str, Any]) -> dict[str, float | None]:
    """agentcell at N=1,000: its wall ÷ the peer's (both completed), the results it
    delivered (counted even when the run failed), the parent's peak RSS and the
    dispatch wait's p50 and p99 (server clock)."""
    found: dict[str, float | None] = dict.fromkeys(KEYS)
    entry = _entry(results, WORKLOAD)
    ours = _rows(entry, "agentcell")
    if not ours:
        return found
    row = ours[0]
    found["io_1000_results_delivered"] = float(row.get("completed", 0))
    if row.get("parent_peak_rss"):
        found["io_1000_parent_peak_mib"] = row["parent_peak_rss"] / MiB
    waits = sorted(row.get("dispatch_s") or [])
    if waits:
        found["io_1000_dispatch_p50_ms"] = percentile(waits, 50) * 1e3
        found["io_1000_dispatch_p99_ms"] = percentile(waits, 99) * 1e3
    theirs = _rows(entry, peer_of(entry))
    if row.get("ok") and theirs and theirs[0].get("ok"):
        found["io_1000_x_fastest_peer"] = row["wall_s"] / theirs[0]["wall_s"]
    return found


def table(workload: dict[str, Any]) -> str:
    """One row per system: wall, results delivered, parent CPU and peak RSS, dispatch."""
    header = [
        "system",
        "N",
        "wall s",
        "results delivered",
        "parent CPU s",
        "children CPU s",
        "peak parent RSS MiB",
        "peak in flight",
        "dispatch p50 ms",
        "dispatch p99 ms",
        "note",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in workload["results"]:
        if result.get("unavailable"):
            lines.append(f"| {result['system']} | — | not available: {result['unavailable']} |")
            continue
        for row in result.get("rows", []):
            waits = sorted(row.get("dispatch_s") or [])
            cells = [
                result["system"],
                str(row["n"]),
                _f(row.get("wall_s")),
                f"{row.get('completed', 0)} of {row['n']}",
                _f(row.get("parent_cpu_s")),
                _f(row.get("children_cpu_s")),
                _f((row.get("parent_peak_rss") or math.nan) / MiB, 0),
                _f(row.get("peak_in_flight"), 0),
                _f(percentile(waits, 50) * 1e3, 0) if waits else "—",
                _f(percentile(waits, 99) * 1e3, 0) if waits else "—",
                "" if row.get("ok") else f"FAILED: {str(row.get('detail', ''))[:200]}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _f(value: Any, digits: int = 2) -> str:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value:.{digits}f}"


def _points(results: dict[str, Any], system: str, key: str) -> list[tuple[int, float]]:
    """(N, value) of ``system``'s completed io runs and its wide fan-out (medians by N)."""
    from bench.report import by_n

    points: dict[int, float] = {}
    for name in ("io", WORKLOAD):
        for result in (_entry(results, name) or {}).get("results", []):
            if result["system"] == system and not result.get("variant"):
                for n, agg in by_n(result).items():
                    if agg["ok"] and math.isfinite(agg[key]):
                        points[n] = agg[key]
    return sorted(points.items())


def plot(results: dict[str, Any], out: Path, plt: Any) -> list[str]:
    """``fanout.png``: wall time and the parent's peak RSS against N, 1 to 1,000, for
    agentcell and the peer that ran N=1,000 (the other systems up to 128)."""
    entry = _entry(results, WORKLOAD)
    if entry is None:
        return []
    fig, (wall_ax, rss_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    systems = ["agentcell", peer_of(entry), "in-process engine"]
    drawn = False
    for system in [s for s in systems if s]:
        walls = _points(results, system, "wall_s")
        rss = [(n, v / MiB) for n, v in _points(results, system, "parent_peak_rss")]
        for ax, points in ((wall_ax, walls), (rss_ax, rss)):
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=system)
                drawn = True
    wall_ax.set(xscale="log", yscale="log", xlabel="fan-out N", ylabel="wall time (s)")
    rss_ax.set(xscale="log", xlabel="fan-out N", ylabel="parent peak RSS (MiB)")
    rss_ax.axhline(300, color="k", ls="--", lw=0.8, label="target (300 MiB)")
    for ax in (wall_ax, rss_ax):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"io workload up to N={WIDE_N:,}", fontsize=10)
    fig.tight_layout()
    made = []
    if drawn:
        fig.savefig(out / "fanout.png", dpi=110)
        made.append("fanout.png")
    plt.close(fig)
    return made


def plot_mcp(results: dict[str, Any], out: Path, plt: Any) -> list[str]:
    """``mcp.png``, the MCP fan-out picture: wall time of each system and variant of a
    workload named ``mcp`` (N=32 with and without shared MCP servers), one bar each.
    Drawn for whatever rows that workload has; nothing while it does not exist."""
    from bench.report import _label, by_n

    entry = _entry(results, "mcp")
    if entry is None:
        return []
    bars = [
        (f"{_label(result)}, N={n}", agg["wall_s"])
        for result in entry["results"]
        for n, agg in by_n(result).items()
        if agg["ok"] and math.isfinite(agg["wall_s"])
    ]
    if not bars:
        return []
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(bars)))
    ax.barh([b[0] for b in bars], [b[1] for b in bars])
    ax.invert_yaxis()
    ax.set(xlabel="wall time (s)", title=entry.get("title", "mcp"))
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "mcp.png", dpi=110)
    plt.close(fig)
    return ["mcp.png"]
