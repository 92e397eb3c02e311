"""Turn results into markdown tables (printed and saved) and PNG plots."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from bench import child_cost, fanout, journal_cost, mcp_cost, message_cost, targets
from bench.measure import percentile
from bench.workloads import HEADLINE_RUNS

MiB = 2**20


# -- aggregation -------------------------------------------------------------------------


def by_n(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Rows of one system grouped by N: medians over the repeats (dispatch samples pooled)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for row in result.get("rows", []):
        groups.setdefault(row["n"], []).append(row)
    out = {}
    for n, rows in sorted(groups.items()):
        good = [r for r in rows if r.get("ok")]
        use = good or rows
        agg: dict[str, Any] = {"n": n, "ok": len(good) == len(rows), "reps": len(rows)}
        agg["detail"] = next((r["detail"] for r in rows if not r.get("ok")), "")
        for key in (
            "wall_s",
            "parent_cpu_s",
            "children_cpu_s",
            "server_cpu_s",
            "parent_peak_rss",
            "parent_rss_before",
            "others_cpu_s",
            "peak_in_flight",
            "events",
            "chars",
            "startup_s",
            "rejected",
            "requests",
            "direct_children_cpu_s",
        ):
            values = [r[key] for r in use if key in r]
            agg[key] = statistics.median(values) if values else math.nan
        agg["dispatch_s"] = sorted(x for r in use for x in r.get("dispatch_s", []))
        sizes = [r["request_bytes"] for r in use if r.get("request_bytes")]
        if sizes:
            agg["request_bytes"] = sizes[len(sizes) // 2]
        memories = [r["memory"] for r in use if r.get("memory")]
        if memories:
            agg["memory"] = memories[len(memories) // 2]
        out[n] = agg
    return out


def memory_figures(agg: dict[str, Any]) -> dict[str, float]:
    """MiB: parent RSS growth, median child RSS/USS, Σ USS, and the total per sub-agent."""
    snap = agg.get("memory")
    if not snap:
        return {}
    children = snap["children"]
    uss = [c[1] for c in children]
    growth = snap["parent_rss"] - agg["parent_rss_before"]
    figures = {
        "parent_rss": snap["parent_rss"] / MiB,
        "parent_growth": growth / MiB,
        "children": len(children),
        "child_rss": statistics.median(c[0] for c in children) / MiB if children else 0.0,
        "child_uss": statistics.median(uss) / MiB if children else 0.0,
        "sum_uss": sum(uss) / MiB,
    }
    figures["per_agent"] = (growth + sum(uss)) / MiB / agg["n"]
    return figures


# -- tables ------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    return (
        "—"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.{digits}f}"
    )


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _label(result: dict[str, Any]) -> str:
    variant = result.get("variant") or ""
    return f"{result['system']} ({variant})" if variant else result["system"]


def _unavailable(result: dict[str, Any], width: int) -> list[str]:
    return [_label(result), "—", f"not available: {result['unavailable']}"] + [""] * (width - 3)


def _failed(agg: dict[str, Any]) -> str:
    return "" if agg["ok"] else f"FAILED: {agg['detail'][:240]}"


def wall_table(workload: dict[str, Any], ideal: dict[int, float]) -> str:
    """io and cpu: rows system × N."""
    results = workload["results"]
    ours = next((by_n(r) for r in results if r["system"] == "agentcell"), {})
    header = [
        "system",
        "N",
        "wall s",
        "× ideal",
        "× agentcell",
        "parent CPU s",
        "children CPU s",
        "server CPU s",
        "others CPU s",
        "peak parent RSS MiB",
        "peak in flight",
        "start-up s",
        "note",
    ]
    rows = []
    for result in results:
        if result.get("unavailable"):
            rows.append(_unavailable(result, len(header)))
            continue
        for n, agg in by_n(result).items():
            wall = agg["wall_s"]
            ref = ours.get(n, {}).get("wall_s", math.nan)
            rows.append(
                [
                    _label(result),
                    str(n),
                    _f(wall),
                    _f(wall / ideal[n]) if n in ideal else "—",
                    _f(wall / ref),
                    _f(agg["parent_cpu_s"]),
                    _f(agg["children_cpu_s"]),
                    _f(agg["server_cpu_s"]),
                    _f(agg["others_cpu_s"]),
                    _f(agg["parent_peak_rss"] / MiB, 0),
                    _f(agg["peak_in_flight"], 0),
                    _f(agg["startup_s"]),
                    _failed(agg),
                ]
            )
    return _table(header, rows)


def ratelimit_table(workload: dict[str, Any]) -> str:
    """Wall time and the 429s each system provoked from the rate-limited server."""
    header = ["system", "N", "wall s", "429s", "requests", "peak in flight", "note"]
    rows = []
    for result in workload["results"]:
        if result.get("unavailable"):
            rows.append(_unavailable(result, len(header)))
            continue
        for n, agg in by_n(result).items():
            rows.append(
                [
                    _label(result),
                    str(n),
                    _f(agg["wall_s"]),
                    _f(agg["rejected"], 0),
                    _f(agg["requests"], 0),
                    _f(agg["peak_in_flight"], 0),
                    _failed(agg),
                ]
            )
    return _table(header, rows)


def dispatch_table(workload: dict[str, Any], floor_p50: float) -> str:
    header = ["system", "N", "p50 ms", "p99 ms", "max ms", "p50 ÷ raw floor", "wall s", "note"]
    rows = []
    for result in workload["results"]:
        if result.get("unavailable"):
            rows.append(_unavailable(result, len(header)))
            continue
        for n, agg in by_n(result).items():
            d = agg["dispatch_s"]
            p50 = percentile(d, 50)
            rows.append(
                [
                    _label(result),
                    str(n),
                    _f(p50 * 1e3, 1),
                    _f(percentile(d, 99) * 1e3, 1),
                    _f(max(d) * 1e3 if d else math.nan, 1),
                    _f(p50 / floor_p50, 1),
                    _f(agg["wall_s"]),
                    _failed(agg),
                ]
            )
    return _table(header, rows)


def io_dispatch_table(workload: dict[str, Any]) -> str:
    """Dispatch latency of every system, read off the io workload's runs."""
    header = ["system", "N", "p50 ms", "p99 ms"]
    rows = []
    for result in workload["results"]:
        for n, agg in by_n(result).items() if not result.get("unavailable") else []:
            d = agg["dispatch_s"]
            rows.append(
                [
                    _label(result),
                    str(n),
                    _f(percentile(d, 50) * 1e3, 1),
                    _f(percentile(d, 99) * 1e3, 1),
                ]
            )
    return _table(header, rows)


def request_size_table(workload: dict[str, Any]) -> str:
    """KB (1000 bytes) per sub-agent request as the server received it, per system × N."""
    header = ["system", "N", "requests", "median KB", "min KB", "max KB"]
    rows = []
    for result in workload["results"]:
        for n, agg in by_n(result).items() if not result.get("unavailable") else []:
            sizes = agg.get("request_bytes") or {}
            kb = [_f(sizes[k] / 1000, 1) if k in sizes else "—" for k in ("median", "min", "max")]
            rows.append([_label(result), str(n), _f(agg["requests"], 0), *kb])
    return _table(header, rows)


def memory_table(workload: dict[str, Any]) -> str:
    header = [
        "system",
        "N",
        "parent RSS MiB",
        "parent growth MiB",
        "child processes",
        "child RSS MiB (median)",
        "child USS MiB (median)",
        "Σ child USS MiB",
        "MiB per sub-agent",
        "note",
    ]
    rows = []
    for result in workload["results"]:
        if result.get("unavailable"):
            rows.append(_unavailable(result, len(header)))
            continue
        for n, agg in by_n(result).items():
            m = memory_figures(agg)
            if not m:
                rows.append([_label(result), str(n), "no sample", *[""] * 6, _failed(agg)])
                continue
            rows.append(
                [
                    _label(result),
                    str(n),
                    _f(m["parent_rss"], 0),
                    _f(m["parent_growth"], 1),
                    str(m["children"]),
                    _f(m["child_rss"], 1),
                    _f(m["child_uss"], 1),
                    _f(m["sum_uss"], 0),
                    _f(m["per_agent"], 2),
                    _failed(agg),
                ]
            )
    return _table(header, rows)


def events_table(workload: dict[str, Any]) -> str:
    answer = int(workload["spec"].get("answer", 1))
    header = [
        "system",
        "N",
        "model deltas",
        "parent events",
        "text complete",
        "wall s",
        "parent CPU s",
        "parent CPU µs / delta",
        "note",
    ]
    rows = []
    for result in workload["results"]:
        if result.get("unavailable"):
            rows.append(_unavailable(result, len(header)))
            continue
        for n, agg in by_n(result).items():
            deltas = n * answer
            # "job i done." then (answer - 1) × " tok"
            expected = sum(len(f"job {i} done.") for i in range(n)) + n * (answer - 1) * 4
            rows.append(
                [
                    _label(result),
                    str(n),
                    str(deltas),
                    _f(agg["events"], 0),
                    "yes" if agg["chars"] == expected else f"{_f(agg['chars'], 0)}/{expected}",
                    _f(agg["wall_s"]),
                    _f(agg["parent_cpu_s"]),
                    _f(agg["parent_cpu_s"] / deltas * 1e6, 1),
                    _failed(agg),
                ]
            )
    return _table(header, rows)


def _wall(results: dict[str, Any], workload: str, system: str, n: int, variant: str = "") -> float:
    for entry in results["workloads"]:
        if entry["name"] != workload:
            continue
        for result in entry["results"]:
            if result["system"] == system and (result.get("variant") or "") == variant:
                agg = by_n(result).get(n)
                if agg and agg["ok"]:
                    return float(agg["wall_s"])
    return math.nan


PEER_NAMES = ("deepagents", "openai-agents", "pydantic-ai")

#: The keys of results.json's "headline" object, in order (issue 14 asks for these, and
#: issue 23 the last four).
HEADLINE_KEYS = (
    "io_128_x_ideal",
    "io_128_x_inprocess",
    "io_32_x_fastest_peer",
    "https_io_32_x_fastest_peer",
    "child_cpu_ms_io_128",
    "child_cpu_x_inprocess_io_128",
    "dispatch_warm_p50_x_floor_1",
    "dispatch_warm_p50_x_floor_8",
    "child_uss_mib",
    "ratelimit_429s_agentcell",
    "ratelimit_429s_fastest_peer",
    "analysis_32_x_fastest_peer",
    "total_cpu_x_inprocess_io_128",
    "fork_server_cpu_ms_io_128",
    "ratelimit_429s_fewest_peer",
    # The lowest "÷ fastest peer" any system could reach: the workload's ideal wall (its
    # model latency alone, nothing else costing anything) ÷ the fastest peer's.
    "io_32_ideal_x_fastest_peer",
    "https_io_32_ideal_x_fastest_peer",
    "analysis_32_ideal_x_fastest_peer",
    # What journaling a run costs (the journal workload): wall with ÷ without, and bytes.
    "journal_overhead_io_128",
    "journal_cpu_overhead_io_128",
    # How soon a message reaches a sub-agent busy in a 200 ms tool (the messages workload).
    "message_delivery_p50_ms_8",
    "message_delivery_p50_ms_32",
    "journal_bytes_per_turn_io_128",
    # Issue 43: the peers at N=128 and at 1,000 sub-agents, the child against a bare
    # fork, what run records cost, and MCP fan-out (the mcp workload, mcp_cost.py).
    "io_128_x_fastest_peer",
    *fanout.KEYS,
    "child_cpu_x_limit_io_128",
    "records_overhead_io_128",
    "mcp_32_x_no_mcp",
    "mcp_32_startup_s",
)


def _agg(
    results: dict[str, Any],
    workload: str,
    system: str,
    n: int,
    variant: str = "",
    *,
    failed_too: bool = False,
) -> dict[str, Any] | None:
    """One system's aggregate at N in a workload, if it ran and every repeat was ok (or,
    with ``failed_too``, if it ran at all)."""
    for entry in results["workloads"]:
        if entry["name"] != workload:
            continue
        for result in entry["results"]:
            if result["system"] == system and (result.get("variant") or "") == variant:
                agg = by_n(result).get(n)
                if agg and (agg["ok"] or failed_too):
                    return agg
    return None


def _fastest_peer(results: dict[str, Any], workload: str, n: int) -> dict[str, Any] | None:
    walls = [a for p in PEER_NAMES if (a := _agg(results, workload, p, n)) is not None]
    return min(walls, key=lambda a: a["wall_s"]) if walls else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or b == 0:
        return None
    return float(a / b)


def _ideal_s(results: dict[str, Any], workload: str, n: int) -> float | None:
    entry = next((w for w in results["workloads"] if w["name"] == workload), None)
    ideal = {int(k): v for k, v in entry.get("ideal_s", {}).items()} if entry else {}
    return ideal.get(n)


def headline_figures(results: dict[str, Any]) -> dict[str, float | None]:
    """The "headline" object of results.json: floats from this run, None where a figure
    was not measured (its workload or system did not run, or failed)."""
    figures: dict[str, float | None] = dict.fromkeys(HEADLINE_KEYS)
    ours = _agg(results, "io", "agentcell", 128)
    engine = _agg(results, "io", "in-process engine", 128)
    io_entry = next((w for w in results["workloads"] if w["name"] == "io"), None)
    ideal = {int(k): v for k, v in io_entry["ideal_s"].items()} if io_entry else {}
    if ours is not None:
        figures["io_128_x_ideal"] = _ratio(ours["wall_s"], ideal.get(128))
        figures.update(_cpu_figures(ours, engine))
        if engine is not None:
            figures["io_128_x_inprocess"] = _ratio(ours["wall_s"], engine["wall_s"])
    for key, workload, n in (
        ("io_32_x_fastest_peer", "io", 32),
        ("io_128_x_fastest_peer", "io", 128),
        ("https_io_32_x_fastest_peer", "https-io", 32),
        ("analysis_32_x_fastest_peer", "analysis", 32),
    ):
        mine, peer = _agg(results, workload, "agentcell", n), _fastest_peer(results, workload, n)
        if mine is not None and peer is not None:
            figures[key] = _ratio(mine["wall_s"], peer["wall_s"])
        if peer is not None and n == 32:
            ideal = _ideal_s(results, workload, 32)
            figures[key.replace("_x_", "_ideal_x_")] = _ratio(ideal, peer["wall_s"])
    # With call_ahead = true (opt-in): the same ratios, reported beside, not as targets.
    ahead, peer = (
        _agg(results, "io", "agentcell", 32, "call ahead"),
        _fastest_peer(results, "io", 32),
    )
    if ahead is not None and peer is not None:
        figures["io_32_call_ahead_x_fastest_peer"] = _ratio(ahead["wall_s"], peer["wall_s"])
    floor = results.get("raw_floor", {}).get("p50_s")
    for n in (1, 8):
        for variant, key in (("warm spares", "warm"), ("call ahead", "call_ahead")):
            row = _agg(results, "dispatch", "agentcell", n, variant)
            if row is not None and row["dispatch_s"]:
                figures[f"dispatch_{key}_p50_x_floor_{n}"] = _ratio(
                    percentile(row["dispatch_s"], 50), floor
                )
    memory_entry = next((w for w in results["workloads"] if w["name"] == "memory"), None)
    if memory_entry is not None:
        for result in memory_entry["results"]:
            if result["system"] == "agentcell" and not result.get("variant"):
                sizes = by_n(result)
                if sizes:
                    m = memory_figures(sizes[max(sizes)])
                    figures["child_uss_mib"] = float(m["child_uss"]) if m else None
    limited = _agg(results, "ratelimit", "agentcell", 32, "limiter")
    if limited is not None:
        figures["ratelimit_429s_agentcell"] = float(limited["rejected"])
    # The fastest peer is the one fastest at io N=32 (else at the rate-limited run itself);
    # its 429s count whether or not it got through (peers give up after a few retries).
    fastest = _fastest_peer_name(results, "io", 32) or _fastest_peer_name(
        results, "ratelimit", 32, failed_too=True
    )
    peer = _agg(results, "ratelimit", fastest, 32, failed_too=True) if fastest else None
    if peer is not None and math.isfinite(peer["rejected"]):
        figures["ratelimit_429s_fastest_peer"] = float(peer["rejected"])
    figures["ratelimit_429s_fewest_peer"] = _fewest_429s(results)
    figures.update(journal_cost.figures(results))
    figures.update(mcp_cost.figures(results))
    figures.update(message_cost.figures(results))
    figures.update(fanout.figures(results))
    figures.update(child_cost.figures(results, figures["child_cpu_ms_io_128"]))
    off = _agg(results, "io", "agentcell", 128, "records off")
    if ours is not None and off is not None:
        figures["records_overhead_io_128"] = _ratio(ours["wall_s"], off["wall_s"])
    return figures


def _cpu_figures(ours: dict[str, Any], engine: dict[str, Any] | None) -> dict[str, float | None]:
    """agentcell's CPU at io N=128 against the in-process engine's. The runner's
    children CPU holds the sub-agent processes and their fork servers' own work (read
    apart as ``direct_children_cpu_s``); the in-process engine's parent CPU is all of its
    sub-agents' and main agent's work."""
    starters = ours.get("direct_children_cpu_s", math.nan)
    starters = float(starters) if math.isfinite(starters) else 0.0  # older rows: not read
    children = float(ours["children_cpu_s"]) - starters
    inprocess = engine["parent_cpu_s"] if engine is not None else None
    return {
        "child_cpu_ms_io_128": children / 128 * 1e3,
        "fork_server_cpu_ms_io_128": starters / 128 * 1e3,
        "child_cpu_x_inprocess_io_128": _ratio(children, inprocess),
        "total_cpu_x_inprocess_io_128": _ratio(
            float(ours["children_cpu_s"]) + float(ours["parent_cpu_s"]), inprocess
        ),
    }


def _fewest_429s(results: dict[str, Any]) -> float | None:
    """The fewest 429s any peer provoked at the rate-limited run (given up or not)."""
    counts = [
        float(a["rejected"])
        for p in PEER_NAMES
        if (a := _agg(results, "ratelimit", p, 32, failed_too=True))
        and math.isfinite(a["rejected"])
    ]
    return min(counts) if counts else None


def _fastest_peer_name(
    results: dict[str, Any], workload: str, n: int, *, failed_too: bool = False
) -> str:
    walls = {
        p: a["wall_s"]
        for p in PEER_NAMES
        if (a := _agg(results, workload, p, n, failed_too=failed_too))
        and math.isfinite(a["wall_s"])
    }
    return min(walls, key=walls.__getitem__) if walls else ""


def headline(results: dict[str, Any]) -> str:
    """The ratios asked of every run, from this run only."""
    lines = ["## Headline ratios (this run)", ""]
    entries = {w["name"]: w for w in results["workloads"]}
    ours_io = _wall(results, "io", "agentcell", 128)
    if "io" in entries and "128" in {str(k) for k in entries["io"]["ideal_s"]}:
        ideal = {int(k): v for k, v in entries["io"]["ideal_s"].items()}[128]
        lines.append(f"- io, N=128: agentcell wall ÷ ideal = {_f(ours_io / ideal)}")
        engine = _wall(results, "io", "in-process engine", 128)
        lines.append(f"- io, N=128: agentcell ÷ in-process engine = {_f(ours_io / engine)}")
    cpu8 = _wall(results, "cpu", "agentcell", 8) / _wall(results, "cpu", "in-process engine", 8)
    lines.append(f"- cpu, N=8: agentcell ÷ in-process engine = {_f(cpu8)}")
    for peer in ("deepagents", "openai-agents", "pydantic-ai"):
        ratio = _wall(results, "io", "agentcell", 32) / _wall(results, "io", peer, 32)
        lines.append(f"- io, N=32: agentcell ÷ {peer} = {_f(ratio)}")
    for workload in ("https-io", "analysis"):
        for peer in PEER_NAMES:
            ratio = _wall(results, workload, "agentcell", 32) / _wall(results, workload, peer, 32)
            lines.append(f"- {workload}, N=32: agentcell ÷ {peer} = {_f(ratio)}")
    for label, variant in (("with its limiter", "limiter"), ("without", "")):
        agg = _agg(results, "ratelimit", "agentcell", 32, variant)
        if agg is not None:
            lines.append(
                f"- ratelimit, N=32: agentcell {label}: {_f(agg['wall_s'])} s, "
                f"{_f(agg['rejected'], 0)} × 429"
            )
    floor = results["raw_floor"]["p50_s"]
    for entry in results["workloads"]:
        if entry["name"] != "dispatch":
            continue
        for result in entry["results"]:
            for n, agg in by_n(result).items():
                if result.get("variant") == "warm spares" and n in (1, 8, 128):
                    p50 = percentile(agg["dispatch_s"], 50)
                    lines.append(
                        f"- dispatch, warm spares, N={n}: p50 {_f(p50 * 1e3, 1)} ms ÷ raw floor "
                        f"{_f(floor * 1e3, 1)} ms = {_f(p50 / floor, 1)}"
                    )
    for entry in results["workloads"]:
        if entry["name"] != "memory":
            continue
        for result in entry["results"]:
            if result["system"] == "agentcell":
                for n, agg in by_n(result).items():
                    m = memory_figures(agg)
                    if m:
                        lines.append(
                            f"- memory, N={n}: agentcell child USS {_f(m['child_uss'], 1)} MiB "
                            f"(RSS {_f(m['child_rss'], 1)} MiB), {m['children']} children alive"
                        )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    config = results["config"]
    machine = results["machine"]
    floor_p50 = results["raw_floor"]["p50_s"]
    server = results["server"]
    parts = [
        f"# agentcell fan-out benchmark ({'quick' if config['quick'] else 'full'})",
        "",
        f"{machine['cpus']} cores, {machine['memory_gib']:.0f} GiB, Python {machine['python']}, "
        f"{machine['platform']}; model latency {config['latency_ms']:g} ms; "
        f"median of {config['repeats']} run(s) per cell"
        + (
            f" (the headline cells — io N=32 and 128, https-io and analysis N=32 — of "
            f"{HEADLINE_RUNS} interleaved runs for agentcell and every peer); "
            if config["repeats"] < HEADLINE_RUNS
            else "; "
        )
        + f"crunch = {config['tool_cpu_s'] * 1e3:.0f} ms CPU; load server used "
        f"{server['cpu_s']:.1f} s CPU in all ({server['requests']} requests, "
        f"peak {server['peak_in_flight']} in flight, loop {server['loop']}).",
        "",
        "× ideal: wall ÷ ideal wall time. × agentcell: wall ÷ agentcell's wall at the same N "
        "(above 1: slower than agentcell). Parent CPU: the process running the main agent, "
        "during the run. Children CPU: its sub-agent processes during the run and until "
        "they are reaped (not the fork server's start). Others CPU: the rest of the machine "
        "during the run (other users' processes; the children CPU of a run also lands after "
        "it ends, so a small excess is normal): a large value marks a noisy row.",
        "",
        targets.table(results.get("headline") or headline_figures(results)),
        "",
        headline(results),
    ]
    for workload in results["workloads"]:
        parts += ["", f"## {workload['title']}", "", workload["what"], ""]
        name = workload["name"]
        if name in ("io", "cpu", "https-io", "analysis"):
            ideal = {int(k): v for k, v in workload["ideal_s"].items()}
            parts.append(wall_table(workload, ideal))
        if name == "analysis":
            parts += ["", "Request sizes (the sub-agents' request bodies):", ""]
            parts.append(request_size_table(workload))
        elif name == "dispatch":
            parts.append(
                f"Raw floor (forkserver start + one frame each way): p50 {floor_p50 * 1e3:.1f} ms."
            )
            parts += ["", dispatch_table(workload, floor_p50)]
        elif name == "memory":
            parts.append(memory_table(workload))
        elif name == "events":
            parts.append(events_table(workload))
        elif name == "ratelimit":
            parts.append(ratelimit_table(workload))
        elif name == "journal":
            parts.append(journal_cost.table(workload))
        elif name == "mcp":
            parts.append(mcp_cost.table(workload))
        elif name == "messages":
            parts.append(message_cost.table(workload))
        elif name == fanout.WORKLOAD:
            parts.append(fanout.table(workload))
        if name == "io":
            parts += [
                "",
                "Dispatch latency in this workload (server clock):",
                "",
                io_dispatch_table(workload),
            ]
    if results.get("child_cost"):
        ratio = (results.get("headline") or {}).get("child_cpu_x_limit_io_128")
        parts += ["", child_cost.section(results, ratio)]
    return "\n".join(parts) + "\n"


# -- plots -------------------------------------------------------------------------------


def plots(results: dict[str, Any], out: Path) -> list[str]:
    """PNG files: wall time vs N, memory per sub-agent vs N, dispatch latency CDFs."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    for workload in results["workloads"]:
        name = workload["name"]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        drawn = False
        if name in ("io", "cpu", "events", "analysis"):
            for result in workload["results"]:
                points = [(n, a["wall_s"]) for n, a in by_n(result).items() if a["ok"]]
                if points:
                    ax.plot(*zip(*points, strict=True), marker="o", label=_label(result))
                    drawn = True
            if name in ("io", "cpu", "https-io", "analysis"):
                ideal = sorted((int(k), v) for k, v in workload["ideal_s"].items())
                ax.plot(*zip(*ideal, strict=True), "k--", label="ideal")
            ax.set(xscale="log", yscale="log", xlabel="fan-out N", ylabel="wall time (s)")
        elif name == "memory":
            for result in workload["results"]:
                points = [(n, memory_figures(a).get("per_agent")) for n, a in by_n(result).items()]
                points = [(n, v) for n, v in points if v is not None]
                if points:
                    ax.plot(*zip(*points, strict=True), marker="o", label=_label(result))
                    drawn = True
            ax.set(xscale="log", xlabel="fan-out N", ylabel="MiB per sub-agent")
        elif name == "dispatch":
            # One panel per N (the curves of different N share no scale), variants as lines.
            plt.close(fig)
            ns = sorted({n for r in workload["results"] for n in by_n(r)})
            fig, axes = plt.subplots(1, len(ns), figsize=(3.2 * len(ns), 3.8), sharey=True)
            for ax, n in zip(list(getattr(axes, "flat", [axes])), ns, strict=True):
                for result in workload["results"]:
                    d = by_n(result).get(n, {}).get("dispatch_s") or []
                    if d:
                        ys = [(i + 1) / len(d) for i in range(len(d))]
                        ax.step(
                            [x * 1e3 for x in d],
                            ys,
                            where="post",
                            marker=".",
                            label=result["variant"],
                        )
                        drawn = True
                ax.axvline(
                    results["raw_floor"]["p50_s"] * 1e3, color="k", ls="--", label="raw floor"
                )
                ax.set(xscale="log", title=f"N={n}", xlabel="ms")
                ax.grid(True, which="both", alpha=0.3)
            axes.flat[0].set_ylabel("fraction of sub-agents")
            axes.flat[0].legend(fontsize=6, loc="upper left")
            if drawn:
                fig.suptitle(workload["title"], fontsize=10)
                fig.tight_layout()
                path = out / f"{name}.png"
                fig.savefig(path, dpi=110)
                made.append(path.name)
            plt.close(fig)
            continue
        if drawn:
            ax.set_title(workload["title"], fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            path = out / f"{name}.png"
            fig.savefig(path, dpi=110)
            made.append(path.name)
        plt.close(fig)
    made += fanout.plot(results, out, plt)
    made += child_cost.plot(results, out, plt)
    # The MCP fan-out picture (the lead's mcp workload: N=32 with and without shared MCP
    # servers): drawn generically from whatever rows that workload has.
    made += fanout.plot_mcp(results, out, plt)
    return made
