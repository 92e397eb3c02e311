"""The messages workload runs: the main agent messages two sub-agents busy in their 200 ms
tool, through a real load server and real children, and each message's latency is read
from the server's rows; then the headline's two keys, from rows of both sizes. Only the
structure is checked, never timings."""

from __future__ import annotations

import pytest
from conftest import SpawnRecorder

from bench import message_cost, report, runner
from bench.server_handle import LoadServer


async def test_the_messages_workload_measures_each_message_once(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LoadServer(latency_ms=5) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bench-not-a-real-key")
        job = {
            "system": "agentcell",
            "ns": [2],
            "spec": {"turns": 2, "tool": "hold", "lat": 5, "msg": 1},
            "port": server.port,
            "run_prefix": "messages",
            "timeout_s": 60,
        }
        [row] = (await runner.run_job(job))["rows"]
    assert row["ok"], row
    assert len(row["message_ms"]) == 2  # each sub-agent read its message once
    assert all(ms >= 0 for ms in row["message_ms"])


def test_the_headline_takes_the_median_at_8_and_32() -> None:
    def result(n: int, values: list[float]) -> dict[str, object]:
        return {"system": "agentcell", "rows": [{"n": n, "ok": True, "message_ms": values}]}

    eight = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 90.0]
    results = {
        "raw_floor": {"p50_s": 0.004},
        "workloads": [{"name": "messages", "results": [result(8, eight), result(32, [1.0])]}],
    }
    figures = report.headline_figures(results)
    assert figures["message_delivery_p50_ms_8"] == 4.5
    assert figures["message_delivery_p50_ms_32"] is None  # 1 of 32 read: no figure
    table = message_cost.table(results["workloads"][0])  # type: ignore[index]
    assert "| 8 | 8 of 8 | 4.5 |" in table and "| 32 | 1 of 32 |" in table


def test_latency_is_from_the_later_of_sending_and_the_tool_end() -> None:
    rows = [
        [0.0, 1.0, "main", 2, True, 10],  # the reply with the send_message calls ends at 1.0
        [1.2, 1.3, "0", 1, True, 10, True, 1.1],  # tool ended after the send: from 1.1
        [0.5, 0.6, "1", 0, True, 10, False, 0.0],
        [1.05, 1.1, "1", 1, True, 10, True, 0.9],  # tool ended before: from the send, 1.0
    ]
    assert [round(ms) for ms in message_cost.latencies({"requests": rows}, 2)] == [100, 50]
