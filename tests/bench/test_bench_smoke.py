"""The benchmark still runs: the tiniest io configuration of agentcell, end to end.

Real load server process, real orchestrator with child processes, the runner's
measurements and the report; only the result's structure is checked, never timings.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import SpawnRecorder

from bench import journal_cost, report, runner
from bench.server_handle import LoadServer
from bench.systems import SYSTEMS
from bench.workloads import workloads


async def test_io_workload_for_agentcell_end_to_end(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LoadServer(latency_ms=5) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bench-not-a-real-key")
        job = {
            "system": "agentcell",
            "ns": [2],
            "spec": {"turns": 1, "tool": "probe", "lat": 5},
            "port": server.port,
            "run_prefix": "smoke",
            "timeout_s": 60,
        }
        doc = await runner.run_job(job)
        stats = server.stats()

    assert doc["system"] == "agentcell"
    assert "unavailable" not in doc
    assert doc["versions"]["agentcell"]
    [row] = doc["rows"]
    assert row["ok"], row
    assert row["n"] == 2
    assert row["completed"] == 2
    assert row["requests"] == 2 * 1 + 2  # one turn per sub-agent, two for the main agent
    assert len(row["dispatch_s"]) == 2
    for key in ("wall_s", "parent_cpu_s", "children_cpu_s", "server_cpu_s", "parent_peak_rss"):
        assert isinstance(row[key], int | float) and not math.isnan(row[key]), key
    assert row["peak_in_flight"] >= 1
    assert stats["requests"] >= row["requests"]
    # The fork server's own CPU, read apart from the children's (within theirs).
    assert 0.0 <= row["direct_children_cpu_s"] <= row["children_cpu_s"]
    # agentcell as shipped: run records and the journal on (read after the clock).
    assert row["journal_turns"] == 2 * 1 and row["journal_bytes"] > 0

    # The report renders the io table from such a row.
    io = next(w for w in workloads(5, quick=True) if w.name == "io")
    results = {
        "machine": {"cpus": 2, "memory_gib": 1.0, "python": "3", "platform": "test"},
        "config": {"quick": True, "latency_ms": 5, "repeats": 1, "tool_cpu_s": 0.1},
        "server": stats,
        "raw_floor": {"samples_s": [0.005], "p50_s": 0.005},
        "workloads": [
            {
                "name": "io",
                "title": io.title,
                "what": io.what,
                "spec": job["spec"],
                "ideal_s": {"2": io.ideal_s(2, 0.005, 0.1, 2)},
                "results": [{**doc, "variant": ""}],
            }
        ],
    }
    text = report.markdown(results)
    assert "| agentcell | 2 |" in text
    assert set(SYSTEMS) >= {"agentcell", "in-process engine", "deepagents"}


async def test_io_over_https_with_the_test_ca(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load server's TLS port, trusted through SSL_CERT_FILE: parent and children
    alike speak HTTPS to it (the plain port would have recorded nothing for the run)."""
    with LoadServer(latency_ms=5, tls=True) as server:
        assert server.tls_port and server.tls_port != server.port
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bench-not-a-real-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.tls_base_url)
        monkeypatch.setenv("SSL_CERT_FILE", server.ca_file)
        job = {
            "system": "agentcell",
            "ns": [2],
            "spec": {"turns": 1, "tool": "probe", "lat": 5},
            "port": server.port,
            "run_prefix": "tls",
            "timeout_s": 60,
        }
        doc = await runner.run_job(job)
    [row] = doc["rows"]
    assert row["ok"], row
    assert row["requests"] == 2 * 1 + 2


async def test_the_rate_limited_server_and_agentcells_limiter(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server admits 1 request in flight and answers 429 + Retry-After past it;
    agentcell with max_concurrent=1 never goes past it, so it provokes no 429 at all."""
    with LoadServer(latency_ms=20) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bench-not-a-real-key")
        job = {
            "system": "agentcell",
            "ns": [4],
            "spec": {"turns": 2, "tool": "probe", "lat": 20, "rl_k": 1},
            "port": server.port,
            "run_prefix": "rl",
            "timeout_s": 60,
            "limits": {"max_concurrent": 1},
        }
        doc = await runner.run_job(job)
    [row] = doc["rows"]
    assert row["ok"], row
    assert row["rejected"] == 0
    assert row["peak_in_flight"] == 1
    assert row["requests"] == 4 * 2 + 2
    assert row["startup_s"] >= 0


def test_the_headline_has_exactly_the_keys_asked_for() -> None:
    def result(system: str, n: int, variant: str = "", **row: object) -> dict[str, object]:
        base = {
            "n": n,
            "ok": True,
            "detail": "",
            "wall_s": 1.0,
            "parent_cpu_s": 0.5,
            "children_cpu_s": 0.0,
        }
        return {"system": system, "variant": variant, "rows": [{**base, **row}]}

    results = {
        "raw_floor": {"p50_s": 0.004},
        "workloads": [
            {
                "name": "io",
                "ideal_s": {"128": 0.5, "32": 0.5},
                "results": [
                    result("agentcell", 128, wall_s=1.0, children_cpu_s=2.56),
                    result("in-process engine", 128, wall_s=0.8, parent_cpu_s=0.64),
                    result("agentcell", 32, wall_s=0.6),
                    result("openai-agents", 32, wall_s=1.2),
                    result("pydantic-ai", 32, wall_s=1.0),
                ],
            },
            {
                "name": "ratelimit",
                "ideal_s": {"32": 0.5},
                "results": [
                    result("agentcell", 32, "limiter", rejected=0),
                    result("pydantic-ai", 32, ok=False, wall_s=float("nan"), rejected=40),
                    result("deepagents", 32, wall_s=4.0, rejected=10),
                ],
            },
        ],
    }
    figures = report.headline_figures(results)
    assert list(figures) == [
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
        "io_32_ideal_x_fastest_peer",
        "https_io_32_ideal_x_fastest_peer",
        "analysis_32_ideal_x_fastest_peer",
        "journal_overhead_io_128",
        "journal_cpu_overhead_io_128",
        "message_delivery_p50_ms_8",
        "message_delivery_p50_ms_32",
        "journal_bytes_per_turn_io_128",
        "io_128_x_fastest_peer",
        "io_1000_x_fastest_peer",
        "io_1000_results_delivered",
        "io_1000_parent_peak_mib",
        "io_1000_dispatch_p50_ms",
        "io_1000_dispatch_p99_ms",
        "child_cpu_x_limit_io_128",
        "records_overhead_io_128",
        "mcp_32_x_no_mcp",
        "mcp_32_startup_s",
    ]
    assert figures["io_128_x_ideal"] == 2.0
    assert figures["io_128_x_inprocess"] == 1.25
    assert figures["io_32_x_fastest_peer"] == 0.6  # pydantic-ai was the fastest peer
    assert figures["child_cpu_ms_io_128"] == 20.0
    assert figures["child_cpu_x_inprocess_io_128"] == 4.0
    assert figures["ratelimit_429s_agentcell"] == 0.0
    # pydantic-ai, the fastest peer at io N=32: its 429s count though it gave up
    assert figures["ratelimit_429s_fastest_peer"] == 40.0
    # What did not run is null, never a made-up number.
    for key in ("https_io_32_x_fastest_peer", "dispatch_warm_p50_x_floor_1", "child_uss_mib"):
        assert figures[key] is None
    assert figures["journal_overhead_io_128"] is None


async def test_the_journal_workload_measures_a_journaled_run_against_records_alone(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two runs of a pair (records only, then journaled) through the runner, as the
    journal workload makes them; then the headline's two keys from three such pairs."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    rows = {}
    with LoadServer(latency_ms=5) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bench-not-a-real-key")
        for label, journal in (("records only", False), ("journal", True)):
            job = {
                "system": "agentcell",
                "ns": [2],
                "spec": {"turns": 3, "tool": "probe", "lat": 5},
                "port": server.port,
                "run_prefix": f"journal-{journal}",
                "timeout_s": 60,
                "record": True,
                "journal": journal,
            }
            [rows[label]] = (await runner.run_job(job))["rows"]
    assert rows["records only"]["ok"] and rows["journal"]["ok"]
    assert rows["records only"]["journal_bytes"] == 0  # the switch really turns it off
    journaled = rows["journal"]
    assert journaled["journal_turns"] == 2 * 3  # every sub-agent request, relayed
    first, *later = journaled["journal_ask_bytes_by_turn"]
    assert len(later) == 2 and max(later) < first  # the first holds the tools, once
    assert abs(later[1] - later[0]) < 64  # each later one what its turn added
    assert not list((tmp_path / "state" / "agentcell" / "journal").iterdir())  # cleaned up

    def pair(off: float, on: float) -> list[dict[str, object]]:
        cpu = {"parent_cpu_s": 0.5, "children_cpu_s": 1.5}  # 2.0 s, so 2 × the wall
        rows = [
            {"n": 128, "ok": True, "wall_s": off, "journal_bytes": 0, "journal_turns": 0},
            {"n": 128, "ok": True, "wall_s": on, "journal_bytes": 3000, "journal_turns": 3},
        ]
        rows = [row | {k: v * row["wall_s"] / 2 for k, v in cpu.items()} for row in rows]
        return [
            {"system": "agentcell", "variant": "records only", "rows": [rows[0]]},
            {"system": "agentcell", "variant": "journal", "rows": [rows[1]]},
        ]

    results = {
        "raw_floor": {"p50_s": 0.004},
        "workloads": [
            {"name": "journal", "results": [*pair(2.0, 2.1), *pair(2.0, 2.0), *pair(1.0, 1.2)]}
        ],
    }
    figures = report.headline_figures(results)
    assert figures["journal_overhead_io_128"] == 1.05  # the median of 1.05, 1.0 and 1.2
    assert figures["journal_cpu_overhead_io_128"] == pytest.approx(1.05)  # the CPU's, alike
    assert "of the run's own CPU (parent and sub-agents): 1.050" in journal_cost.table(
        results["workloads"][0]
    )
    assert figures["journal_bytes_per_turn_io_128"] == 1000


def test_the_mcp_workload_calls_each_offered_servers_tool_and_pairs_its_runs() -> None:
    from bench import mcp_cost
    from bench.script import Spec, respond

    spec = Spec(run="r", n=1, turns=3, tool="mcp", i=0)
    offered = [{"type": "function", "function": {"name": n}} for n in ("mcp__slow2__echo",
               "probe", "mcp__slow1__echo")]  # fmt: skip
    asked = [{"role": "user", "content": spec.prompt("bench-job")}]
    calls = []
    for turn in range(2):
        body = {"messages": asked + [{"role": "tool", "content": "x"}] * turn, "tools": offered}
        calls += [(name, json.loads(args)) for _, name, args in respond(body).calls]
    assert calls == [
        ("mcp__slow1__echo", {"text": "r/0/0"}),
        ("mcp__slow2__echo", {"text": "r/0/1"}),
    ]
    without = {"messages": asked, "tools": offered[1:2]}
    assert [name for _, name, _ in respond(without).calls] == ["probe"]

    def run(variant: str, wall: float) -> dict[str, object]:
        row = {"n": 32, "ok": True, "wall_s": wall, "startup_s": 2.0}
        return {"system": "agentcell", "variant": variant, "rows": [row]}

    pairs = [run("no MCP", 1.0), run("shared MCP", 1.2), run("no MCP", 1.0), run("shared MCP", 1.5)]
    pairs += [run("no MCP", 2.0), run("shared MCP", 2.2)]
    found = mcp_cost.figures({"workloads": [{"name": "mcp", "results": pairs}]})
    assert found["mcp_32_x_no_mcp"] == 1.2 and found["mcp_32_startup_s"] == 2.0
