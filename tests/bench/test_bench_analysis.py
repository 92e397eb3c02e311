"""The bench's analysis workload and the headline/targets it feeds (issue 23, item 4).

The script's file-tool plan, the request sizes it leads to (through the real load server
and agentcell's engine with its built-in file tools, and offline with the peers' plain
functions), and the headline figures and targets table computed from results. No peer
framework is needed; nothing here asserts a timing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from agentcell.worker.tools import function_tool
from conftest import SpawnRecorder

from bench import analysis, report, runner, targets
from bench.script import JOB, Spec, respond
from bench.server_handle import LoadServer
from bench.workloads import ANALYSIS_TURNS, workloads

KB = 1000


def _job_spec(i: int = 0) -> Spec:
    return Spec(run="t", n=1, turns=ANALYSIS_TURNS, tool=analysis.FILES, i=i)


def _peer_tool(name: str, arguments: str) -> str:
    tool = {f.__name__: f for f in analysis.PEER_TOOLS}[name]
    return str(tool(**json.loads(arguments)))


def _conversation(tree: Path, i: int) -> list[int]:
    """Play one sub-agent's whole conversation against the script, the tools being the
    peers' plain functions over ``tree``; the size of each request body, in order."""
    analysis.set_root(tree)
    specs = [function_tool(f).spec() for f in analysis.PEER_TOOLS]  # as a client sends them
    schemas = [
        {
            "type": "function",
            "function": {"name": s.name, "description": s.description, "parameters": s.parameters},
        }
        for s in specs
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": analysis.guide()},
        {"role": "user", "content": _job_spec(i).prompt(JOB)},
    ]
    sizes = []
    while True:
        body = {"model": "bench", "messages": messages, "tools": schemas, "stream": True}
        sizes.append(len(json.dumps(body).encode()))
        reply = respond(body)
        if not reply.calls:
            return sizes
        [(call_id, name, arguments)] = reply.calls
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": _peer_tool(name, arguments)}
        )


# The corpus is worker/ as it was at bench/analysis.py's CORPUS_COMMIT: the paths below
# are that commit's (worker/_engine.py), not today's.
@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tree")
    info = analysis.corpus_into(folder)
    assert info["files"] > 20 and info["bytes"] > 100_000
    return folder


def test_the_plan_is_glob_grep_then_reads_of_globbed_files(tree: Path) -> None:
    analysis.set_root(tree)
    listing = analysis.glob("**/*.py", "worker")
    files = listing.splitlines()
    assert "worker/_engine.py" in files and all(f.endswith(".py") for f in files)
    assert analysis.call(0, 0, [])[0] == "glob"
    assert analysis.call(0, 1, [])[0] == "grep"
    conversation = [{"role": "user", "content": "x"}, {"role": "tool", "content": listing}]
    reads = [analysis.call(3, turn, conversation) for turn in range(2, ANALYSIS_TURNS - 1)]
    assert {name for name, _ in reads} == {"read_file"}
    paths = [args["path"] for _, args in reads]
    assert set(paths) <= set(files)
    assert len(set(paths)) == len(paths) == ANALYSIS_TURNS - 3  # seven different files
    # Another sub-agent reads other files (the same way).
    other = {analysis.call(4, turn, conversation)[1]["path"] for turn in range(2, 9)}
    assert other != set(paths)


def test_every_request_of_the_script_carries_20_to_40_kb(tree: Path) -> None:
    for i in range(8):
        sizes = _conversation(tree, i)
        assert len(sizes) == ANALYSIS_TURNS
        assert sizes == sorted(sizes)  # the tool results grow the conversation
        assert sizes[0] >= 20 * KB and sizes[-1] <= 40 * KB, (i, sizes)


def test_the_peer_tools_read_like_agentcells(tree: Path) -> None:
    analysis.set_root(tree)
    text = analysis.read_file("worker/_engine.py", 1, 3)
    first = text.splitlines()[0]
    assert first.startswith("     1\t")
    assert "[showing lines 1-3 of" in text
    hits = analysis.grep(r"^class Engine\b", "worker", "*.py").splitlines()
    assert "worker/_engine.py:109:class Engine:" in hits
    with pytest.raises(ValueError, match="outside"):
        analysis.read_file("../../etc/passwd")


async def test_agentcell_engine_with_its_file_tools_through_the_load_server(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-process engine runs the workload with agentcell's built-in read_file, grep
    and glob over the tree; the load server records each request's size."""
    with LoadServer(latency_ms=1) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bench-not-a-real-key")
        job = {
            "system": "in-process engine",
            "ns": [2],
            "spec": {"turns": ANALYSIS_TURNS, "tool": analysis.FILES, "lat": 1},
            "port": server.port,
            "run_prefix": "analysis",
            "timeout_s": 60,
        }
        doc = await runner.run_job(job)
    [row] = doc["rows"]
    assert row["ok"], row
    assert row["requests"] == 2 * ANALYSIS_TURNS + 2
    sizes = row["request_bytes"]
    assert 20 * KB <= sizes["min"] <= sizes["median"] <= sizes["max"] <= 40 * KB, sizes
    assert sizes["max"] - sizes["min"] > 10 * KB  # the tools' results grew the conversation


def test_request_sizes_leave_out_the_main_agent() -> None:
    rows = [
        [0.0, 0.1, "main", 0, True, 500],
        [0.1, 0.2, "0", 0, True, 20_000],
        [0.1, 0.2, "1", 0, True, 30_000],
        [0.2, 0.3, "0", 1, True, 35_000],
        [0.2, 0.3, "1", 1, True, 39_000],
    ]
    assert analysis.request_sizes(rows) == {"median": 32_500.0, "min": 20_000.0, "max": 39_000.0}
    assert analysis.request_sizes([[0.0, 0.1, "main", 0, True]]) == {}


def test_the_workload_runs_for_agentcell_the_engine_and_the_peers() -> None:
    quick = next(w for w in workloads(100, quick=True) if w.name == "analysis")
    full = next(w for w in workloads(100, quick=False) if w.name == "analysis")
    assert quick.systems == ["agentcell", "in-process engine", *report.PEER_NAMES]
    assert quick.quick_ns == (1, 8, 32) and max(full.full_ns) == 128
    # Ten sub-agent turns and the main agent's two, at 100 ms each.
    assert math.isclose(quick.ideal_s(32, 0.1, 0.0, 2), (ANALYSIS_TURNS + 2) * 0.1)


def _result(system: str, n: int, variant: str = "", **row: object) -> dict[str, object]:
    base = {"n": n, "ok": True, "detail": "", "wall_s": 1.0, "parent_cpu_s": 0.5}
    return {"system": system, "variant": variant, "rows": [{**base, "children_cpu_s": 0.0, **row}]}


def _results() -> dict[str, Any]:
    return {
        "raw_floor": {"p50_s": 0.004},
        "workloads": [
            {
                "name": "io",
                "ideal_s": {"128": 0.5},
                "results": [
                    _result(
                        "agentcell",
                        128,
                        wall_s=1.0,
                        parent_cpu_s=0.3,
                        children_cpu_s=2.56,
                        direct_children_cpu_s=0.256,
                    ),
                    _result("in-process engine", 128, wall_s=0.8, parent_cpu_s=0.64),
                ],
            },
            {
                "name": "analysis",
                "ideal_s": {"32": 1.2},
                "results": [
                    _result("agentcell", 32, wall_s=1.8),
                    _result("in-process engine", 32, wall_s=1.4),  # not a peer
                    _result("deepagents", 32, wall_s=5.0),
                    _result("openai-agents", 32, wall_s=3.0),
                    _result("pydantic-ai", 32, ok=False, wall_s=0.5),  # failed: not counted
                ],
            },
            {
                "name": "ratelimit",
                "ideal_s": {"32": 0.5},
                "results": [
                    _result("agentcell", 32, "limiter", rejected=0),
                    _result("pydantic-ai", 32, ok=False, wall_s=float("nan"), rejected=40),
                    _result("deepagents", 32, wall_s=4.0, rejected=10),
                ],
            },
        ],
    }


def test_the_new_headline_figures() -> None:
    figures = report.headline_figures(_results())
    assert figures["analysis_32_x_fastest_peer"] == pytest.approx(0.6)  # 1.8 ÷ openai-agents
    # Children CPU without the fork servers' own 0.256 s, over the engine's 0.64 s.
    assert figures["child_cpu_x_inprocess_io_128"] == pytest.approx(2.304 / 0.64)
    assert figures["child_cpu_ms_io_128"] == pytest.approx(18.0)
    assert figures["fork_server_cpu_ms_io_128"] == pytest.approx(2.0)
    # Children + fork servers + parent.
    assert figures["total_cpu_x_inprocess_io_128"] == pytest.approx((2.56 + 0.3) / 0.64)
    assert figures["ratelimit_429s_fewest_peer"] == 10.0
    assert figures["ratelimit_429s_agentcell"] == 0.0
    # The lowest ratio any system could reach: the ideal 1.2 s ÷ openai-agents' 3.0 s.
    assert figures["analysis_32_ideal_x_fastest_peer"] == pytest.approx(0.4)
    assert figures["io_32_ideal_x_fastest_peer"] is None  # no peer ran io at N=32


def test_the_targets_table_says_which_are_met() -> None:
    figures = report.headline_figures(_results())
    rows = {row[0]: row for row in targets.rows(figures)}
    assert len(rows) == len(targets.TARGETS) == 12
    # At most 0.60 (≤), where the ratios to the fastest peer at io are below 1.0 (<).
    assert rows["analysis, N=32: agentcell ÷ fastest peer"][1:] == ("0.60", "≤ 0.60", "yes")
    assert rows["io, N=128: agentcell ÷ fastest peer"][1:] == ("not measured", "< 1.00", "—")
    # Issue 43 took these off the targets; their figures stay in the headline.
    assert not any("in-process" in what for what in rows)
    assert figures["total_cpu_x_inprocess_io_128"] == pytest.approx((2.56 + 0.3) / 0.64)
    assert "could reach in this run" in targets.table(figures)
    assert targets.table(figures).endswith("analysis, N=32 0.40.")
    ratelimit = next(r for k, r in rows.items() if k.startswith("ratelimit"))
    assert ratelimit[1:] == ("0", "< 10 (fewest of a peer)", "yes")
    # Not measured is said so, never counted as met or missed.
    assert rows["memory: child USS, MiB"][1:] == ("not measured", "≤ 8.00", "—")
    text = targets.table(figures)
    assert "2 of 12 targets met (10 not measured)" in text
    journal = rows["journal, io N=128: wall with the journal ÷ without"]
    assert journal[1:] == ("not measured", "≤ 1.05", "—")  # no journal workload here


def test_the_report_renders_the_analysis_tables() -> None:
    results = _results()
    analysis_entry = results["workloads"][1]
    for result in analysis_entry["results"]:
        result["rows"][0]["request_bytes"] = {"median": 30_000, "min": 21_000, "max": 39_500}
        result["rows"][0]["requests"] = 322
    text = report.request_size_table(analysis_entry)
    assert "| agentcell | 32 | 322 | 30.0 | 21.0 | 39.5 |" in text


def test_the_call_ahead_rows_are_reported_beside_the_default_ones() -> None:
    results = _results()
    io = results["workloads"][0]["results"]
    io += [
        _result("agentcell", 32, wall_s=0.7),
        _result("agentcell", 32, "call ahead", wall_s=0.6),
        _result("openai-agents", 32, wall_s=0.8),
    ]
    results["workloads"].append(
        {
            "name": "dispatch",
            "ideal_s": {},
            "results": [
                _result("agentcell", 1, "warm spares", dispatch_s=[0.008]),
                _result("agentcell", 1, "call ahead", dispatch_s=[0.002, 0.004, 0.006]),
            ],
        }
    )
    figures = report.headline_figures(results)
    assert figures["io_32_x_fastest_peer"] == pytest.approx(0.7 / 0.8)
    assert figures["io_32_call_ahead_x_fastest_peer"] == pytest.approx(0.6 / 0.8)
    assert figures["dispatch_warm_p50_x_floor_1"] == pytest.approx(2.0)
    assert figures["dispatch_call_ahead_p50_x_floor_1"] == pytest.approx(1.0)
    assert "dispatch_call_ahead_p50_x_floor_8" not in figures  # not run at N=8
    assert "io_32_call_ahead_x_fastest_peer" not in {t.key for t in targets.TARGETS}
