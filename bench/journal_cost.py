"""The journal workload's figures: what journaling a run costs in wall time, and how its
bytes grow (report.py's table and headline keys)."""

from __future__ import annotations

import statistics
from typing import Any

N = 128


def _pairs(workload: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(records only, journal) rows at N, pair by pair, in the order they ran."""
    off = [r for r in workload["results"] if r.get("variant") == "records only"]
    on = [r for r in workload["results"] if r.get("variant") == "journal"]
    pairs = []
    for a, b in zip(off, on, strict=False):
        row_a = next((row for row in a.get("rows", []) if row["n"] == N and row["ok"]), None)
        row_b = next((row for row in b.get("rows", []) if row["n"] == N and row["ok"]), None)
        if row_a is not None and row_b is not None:
            pairs.append((row_a, row_b))
    return pairs


def _cpu(row: dict[str, Any]) -> float:
    """The run's own CPU: the parent's and its sub-agents' (not the model server's)."""
    return float(row.get("parent_cpu_s", 0.0)) + float(row.get("children_cpu_s", 0.0))


def figures(results: dict[str, Any]) -> dict[str, float | None]:
    """``journal_overhead_io_128``: the median over the pairs of wall with ÷ without;
    ``journal_cpu_overhead_io_128``: the same of the run's own CPU (what the journal
    costs, without the wall's noise on a shared 2-core machine);
    ``journal_bytes_per_turn_io_128``: the journal's bytes per relayed model request."""
    entry = next((w for w in results["workloads"] if w["name"] == "journal"), None)
    found: dict[str, float | None] = {
        "journal_overhead_io_128": None,
        "journal_cpu_overhead_io_128": None,
        "journal_bytes_per_turn_io_128": None,
    }
    pairs = _pairs(entry) if entry is not None else []
    if pairs:
        found["journal_overhead_io_128"] = statistics.median(
            b["wall_s"] / a["wall_s"] for a, b in pairs
        )
        cpu = [_cpu(b) / _cpu(a) for a, b in pairs if _cpu(a) > 0]
        found["journal_cpu_overhead_io_128"] = statistics.median(cpu) if cpu else None
        per_turn = [
            b["journal_bytes"] / b["journal_turns"] for _, b in pairs if b.get("journal_turns")
        ]
        found["journal_bytes_per_turn_io_128"] = statistics.median(per_turn) if per_turn else None
    return found


def table(workload: dict[str, Any]) -> str:
    pairs = _pairs(workload)
    if not pairs:
        return "No pair completed."
    lines = [
        "| pair | wall, records only (s) | wall, journal (s) | ratio | CPU, records only (s) "
        "| CPU, journal (s) | parent CPU, records only → journal (s) | journal bytes "
        "| model turns | a request's record, bytes, by the sub-agent's turn |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, (a, b) in enumerate(pairs, 1):
        by_turn = " / ".join(f"{size:.0f}" for size in b.get("journal_ask_bytes_by_turn", []))
        parent = f"{a.get('parent_cpu_s', 0):.2f} → {b.get('parent_cpu_s', 0):.2f}"
        lines.append(
            f"| {i} | {a['wall_s']:.2f} | {b['wall_s']:.2f} | {b['wall_s'] / a['wall_s']:.3f} "
            f"| {_cpu(a):.2f} | {_cpu(b):.2f} | {parent} "
            f"| {b.get('journal_bytes', 0):,} | {b.get('journal_turns', 0)} | {by_turn} |"
        )
    found = figures({"workloads": [workload | {"name": "journal"}]})
    cpu = found["journal_cpu_overhead_io_128"]
    lines += [
        "",
        f"Median ratio: {found['journal_overhead_io_128']:.3f} (target ≤ 1.05); of the run's "
        f"own CPU (parent and sub-agents): {cpu:.3f}."
        if cpu is not None
        else "",
    ]
    return "\n".join(lines)
