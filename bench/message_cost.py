"""The messages workload's figures: how long a message takes to reach its recipient's model.

The main agent starts N sub-agents in the background by name; each holds a 200 ms tool,
again and again, until its message has come. Once every sub-agent has asked for its first
reply, the main agent messages them all (one ``send_message`` to ``"*"``). A message's
latency is the arrival at the model server of the recipient's request carrying its
envelope, minus the later of when it was sent and when the tool the recipient was running
ended. "Sent" is when the server finished the main agent's reply holding the call: a
little before the orchestrator posts it, so the latency is if anything overstated.
"""

from __future__ import annotations

import statistics
from typing import Any

NS = (8, 32)


def latencies(log: dict[str, Any], n: int) -> list[float]:
    """Each sub-agent's message latency, ms, from the server's rows of one run
    ([arrival, done, role, turn, stream, bytes, carried, tool_end])."""
    rows = log.get("requests") or []
    sent = [row[1] for row in rows if row[2] == "main" and row[3] == n]
    if not sent:
        return []
    found = []
    for i in range(n):
        carrying = [row for row in rows if row[2] == str(i) and len(row) > 7 and row[6]]
        if carrying:
            row = min(carrying, key=lambda r: r[0])
            found.append((row[0] - max(sent[0], row[7])) * 1000)
    return found


def figures(results: dict[str, Any]) -> dict[str, float | None]:
    """``message_delivery_p50_ms_8`` and ``_32``: the median latency at that N."""
    entry = next((w for w in results["workloads"] if w["name"] == "messages"), None)
    found: dict[str, float | None] = {f"message_delivery_p50_ms_{n}": None for n in NS}
    for result in entry["results"] if entry is not None else []:
        for row in result.get("rows", []):
            values = row.get("message_ms") or []
            if row.get("ok") and row["n"] in NS and len(values) == row["n"]:
                found[f"message_delivery_p50_ms_{row['n']}"] = statistics.median(values)
    return found


def table(workload: dict[str, Any]) -> str:
    lines = [
        "| N | messages read | p50 (ms) | p90 (ms) | max (ms) | wall (s) |",
        "|---|---|---|---|---|---|",
    ]
    for result in workload["results"]:
        for row in result.get("rows", []):
            values = sorted(row.get("message_ms") or [])
            if not values:
                lines.append(f"| {row['n']} | 0 | — | — | — | {row.get('detail', '')} |")
                continue
            p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
            lines.append(
                f"| {row['n']} | {len(values)} of {row['n']} | {statistics.median(values):.1f} "
                f"| {p90:.1f} | {values[-1]:.1f} | {row.get('wall_s', 0):.2f} |"
            )
    return "\n".join(lines)
