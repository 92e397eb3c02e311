"""The benchmark still runs: the tiniest io configuration of agentcell, end to end.

Real load server process, real orchestrator with child processes, the runner's
measurements and the report; only the result's structure is checked, never timings.
"""

from __future__ import annotations

import math

import pytest
from conftest import SpawnRecorder

from bench import report, runner
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
