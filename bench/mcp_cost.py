"""The mcp workload's figures: a fan-out whose sub-agents call shared MCP servers, against
the same fan-out without them (report.py's table and headline key)."""

from __future__ import annotations

import statistics
from typing import Any

N = 32


def _pairs(workload: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(no MCP, shared MCP) rows at N, pair by pair, in the order they ran."""

    def rows(variant: str) -> list[dict[str, Any] | None]:
        return [
            next((row for row in r.get("rows", []) if row["n"] == N and row["ok"]), None)
            for r in workload["results"]
            if r.get("variant") == variant
        ]

    return [
        (a, b)
        for a, b in zip(rows("no MCP"), rows("shared MCP"), strict=False)
        if a is not None and b is not None
    ]


def figures(results: dict[str, Any]) -> dict[str, float | None]:
    """``mcp_32_x_no_mcp``: the median over the pairs of wall with ÷ without;
    ``mcp_32_startup_s``: the median start-up with the servers (they start there)."""
    entry = next((w for w in results["workloads"] if w["name"] == "mcp"), None)
    pairs = _pairs(entry) if entry is not None else []
    if not pairs:
        return {"mcp_32_x_no_mcp": None, "mcp_32_startup_s": None}
    return {
        "mcp_32_x_no_mcp": statistics.median(b["wall_s"] / a["wall_s"] for a, b in pairs),
        "mcp_32_startup_s": statistics.median(b.get("startup_s", 0.0) for _, b in pairs),
    }


def table(workload: dict[str, Any]) -> str:
    pairs = _pairs(workload)
    if not pairs:
        return "No pair completed."
    lines = [
        "| pair | wall, no MCP (s) | wall, shared MCP (s) | ratio | start-up, no MCP (s) "
        "| start-up, shared MCP (s) |",
        "|---|---|---|---|---|---|",
    ]
    for i, (a, b) in enumerate(pairs, 1):
        lines.append(
            f"| {i} | {a['wall_s']:.2f} | {b['wall_s']:.2f} | {b['wall_s'] / a['wall_s']:.3f} "
            f"| {a.get('startup_s', 0):.2f} | {b.get('startup_s', 0):.2f} |"
        )
    found = figures({"workloads": [workload | {"name": "mcp"}]})
    lines += ["", f"Median ratio: {found['mcp_32_x_no_mcp']:.3f} (target ≤ 1.5)."]
    return "\n".join(lines)
