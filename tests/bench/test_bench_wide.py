"""Issue 43 in the bench: the io workload at 1,000 sub-agents against the fastest peer,
the headline cells as medians of interleaved runs, the child against a bare fork, the
strict targets, and the pictures. All offline, from made-up results: no runner, no
process, no timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import child_cost, fanout, report, run, targets
from bench.workloads import FASTEST_PEER, HEADLINE_RUNS, WIDE_N, workloads

MiB = 2**20


def _result(system: str, n: int, variant: str = "", **row: Any) -> dict[str, Any]:
    base = {"n": n, "ok": True, "detail": "", "wall_s": 1.0, "parent_cpu_s": 0.5}
    return {"system": system, "variant": variant, "rows": [{**base, "children_cpu_s": 0.0, **row}]}


def _wide(ours: dict[str, Any], peer: dict[str, Any] | None = None) -> dict[str, Any]:
    results = [_result("agentcell", WIDE_N, **ours)]
    if peer is not None:
        results.append(_result("pydantic-ai", WIDE_N, **peer))
    return {"name": fanout.WORKLOAD, "ideal_s": {}, "results": results}


def test_the_wide_fan_out_figures() -> None:
    waits = [i / 1000 for i in range(1, 1001)]  # 1 ms … 1 s
    results = {
        "raw_floor": {"p50_s": 0.004},
        "workloads": [
            _wide(
                {
                    "wall_s": 9.0,
                    "completed": WIDE_N,
                    "parent_peak_rss": 120 * MiB,
                    "dispatch_s": waits,
                },
                {"wall_s": 12.0, "completed": WIDE_N},
            )
        ],
    }
    figures = report.headline_figures(results)
    assert figures["io_1000_x_fastest_peer"] == pytest.approx(0.75)
    assert figures["io_1000_results_delivered"] == WIDE_N
    assert figures["io_1000_parent_peak_mib"] == pytest.approx(120.0)
    assert figures["io_1000_dispatch_p50_ms"] == pytest.approx(500, abs=1)
    assert figures["io_1000_dispatch_p99_ms"] == pytest.approx(990, abs=1)
    rows = {row[0]: row for row in targets.rows(figures)}
    assert rows["io, N=1,000: agentcell ÷ fastest peer (at io N=128; completed)"][2:] == (
        "< 1.00",
        "yes",
    )
    assert rows["io, N=1,000: parent's peak RSS, MiB"][1:] == ("120", "≤ 300.00", "yes")
    # The MCP row is there, unmeasured, until its workload exists.
    assert rows["mcp, N=32: wall with shared MCP servers ÷ without"][1] == "not measured"


def test_a_failed_wide_run_counts_what_it_delivered_and_has_no_ratio() -> None:
    results = {
        "raw_floor": {"p50_s": 0.004},
        "workloads": [
            _wide(
                {"ok": False, "wall_s": 9.0, "completed": 256, "detail": "budget"},
                {"wall_s": 12.0, "completed": WIDE_N},
            )
        ],
    }
    figures = fanout.figures(results)
    assert figures["io_1000_results_delivered"] == 256
    assert figures["io_1000_x_fastest_peer"] is None
    table = fanout.table(results["workloads"][0])
    assert "| agentcell | 1000 | 9.00 | 256 of 1000 |" in table and "FAILED: budget" in table


def test_the_wide_workload_runs_agentcell_and_the_peer_fastest_at_io_128() -> None:
    wide = next(w for w in workloads(100, quick=True) if w.name == fanout.WORKLOAD)
    assert wide.quick_ns == (WIDE_N,) and wide.systems == ["agentcell", FASTEST_PEER]
    results = {
        "workloads": [
            {
                "name": "io",
                "results": [
                    _result("deepagents", 128, wall_s=3.0),
                    _result("openai-agents", 128, ok=False, wall_s=1.0),  # hung: not fastest
                    _result("pydantic-ai", 128, wall_s=2.0),
                ],
            }
        ]
    }
    assert run._with_fastest_peer(wide, results).systems == ["agentcell", "pydantic-ai"]
    assert run._with_fastest_peer(wide, {"workloads": []}).systems == ["agentcell"]


def test_a_peer_failing_the_wide_fan_out_gives_way_to_the_next_fastest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    io = {
        "name": "io",
        "results": [
            _result("deepagents", 128, wall_s=3.0),
            _result("openai-agents", 128, wall_s=1.0),
            _result("pydantic-ai", 128, wall_s=2.0),
        ],
    }
    calls: list[str] = []

    def fake_runner(workload: Any, system: str, *rest: Any) -> dict[str, Any]:
        calls.append(system)
        return _result(system, WIDE_N, wall_s=12.0)

    monkeypatch.setattr(run, "_one_runner", fake_runner)
    wide = [
        _result("agentcell", WIDE_N, wall_s=9.0),
        _result("openai-agents", WIDE_N, ok=False, wall_s=60.0, detail="timed out"),
    ]
    run.wide_fallback(None, [WIDE_N], {"workloads": [io]}, wide, None, Path())  # type: ignore[arg-type]
    assert calls == ["pydantic-ai"]
    entry = {"name": fanout.WORKLOAD, "results": wide}
    assert fanout.peer_of(entry) == "pydantic-ai"
    assert fanout.figures({"workloads": [entry]})["io_1000_x_fastest_peer"] == 0.75
    run.wide_fallback(None, [WIDE_N], {"workloads": [io]}, wide, None, Path())  # type: ignore[arg-type]
    assert calls == ["pydantic-ai"]  # a peer completed it: nothing more runs


def test_strict_targets_are_missed_at_the_bound() -> None:
    strict = targets.Target("t", "x", 1.0, strict=True)
    at_most = targets.Target("t", "x", 1.0)
    assert strict.met({"x": 1.0}) is False and strict.met({"x": 0.99}) is True
    assert at_most.met({"x": 1.0}) is True
    assert strict.bound_text({}) == "< 1.00" and at_most.bound_text({}) == "≤ 1.00"
    strict_keys = {t.key for t in targets.TARGETS if t.strict}
    assert strict_keys == {
        "io_32_x_fastest_peer",
        "io_128_x_fastest_peer",
        "https_io_32_x_fastest_peer",
        "io_1000_x_fastest_peer",
    }


def test_headline_rounds_interleave_agentcell_and_every_peer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    io = next(w for w in workloads(100, quick=True) if w.name == "io")
    assert io.headline_ns == (32, 128)
    first = [
        _result("agentcell", 32, wall_s=0.9),
        _result("in-process engine", 32, wall_s=0.5),  # not a peer: not run again
        _result("deepagents", 32, wall_s=2.0),
        {"system": "openai-agents", "variant": "", "unavailable": "not installed", "rows": []},
        _result("pydantic-ai", 32, wall_s=1.0),  # the fastest on its first run
    ]
    walls = iter([0.7, 1.9, 1.3, 0.8, 2.1, 1.4])  # round 2, then round 3
    calls: list[tuple[str, list[int], int]] = []

    def fake_runner(
        workload: Any, system: str, label: str, fields: Any, ns: list[int], *rest: Any
    ) -> dict[str, Any]:
        calls.append((system, ns, rest[-1]))
        return _result(system, 32, wall_s=next(walls))

    monkeypatch.setattr(run, "_one_runner", fake_runner)
    run.headline_rounds(io, [1, 8, 32], first, None, Path())  # type: ignore[arg-type]
    systems = ["agentcell", "deepagents", "pydantic-ai"]
    assert calls == [(s, [32], r) for r in range(1, HEADLINE_RUNS) for s in systems]
    results = {"raw_floor": {}, "workloads": [{"name": "io", "ideal_s": {}, "results": first}]}
    # Medians of 3: agentcell 0.8 s, pydantic-ai 1.3 s (its lucky 1.0 s first run aside).
    assert report.headline_figures(results)["io_32_x_fastest_peer"] == pytest.approx(0.8 / 1.3)


def test_the_child_against_a_bare_fork_and_its_phase_table() -> None:
    phases = [("engine.run (3 model turns + tools)", 3.0, 400.0, 1.0, 196.0)]
    results: dict[str, Any] = {
        "child_cost": {"bare_fork_life_cpu_ms": 1.25, "phases": phases, "phase_exit_cpu_ms": 1.4},
        "raw_floor": {"p50_s": 0.004},
        "workloads": [],
    }
    assert child_cost.figures(results, 15.0) == {"child_cpu_x_limit_io_128": pytest.approx(12.0)}
    assert child_cost.figures(results, None) == {"child_cpu_x_limit_io_128": None}
    above = child_cost.section(results, 12.0)
    assert "| engine.run (3 model turns + tools) | 3.00 | 400.00 | 1.0 | 196 |" in above
    assert "engine.run" not in child_cost.section(results, 2.0)  # at or under 2.5: no table
    assert child_cost.bars(results) == [("engine.run", 3.0), ("exit and reaping", 1.4)]


def test_the_pictures(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    io = {
        "name": "io",
        "ideal_s": {},
        "results": [_result("agentcell", 128, wall_s=1.5, parent_peak_rss=60 * MiB)],
    }
    results: dict[str, Any] = {
        "workloads": [
            io,
            _wide({"wall_s": 9.0, "completed": WIDE_N, "parent_peak_rss": 90 * MiB}),
            {"name": "mcp", "title": "mcp", "results": [_result("agentcell", 32, "shared")]},
        ],
        "child_cost": {"phases": [("open the pipe", 0.4, 0.4, 1.0, 80.0)]},
    }
    made = fanout.plot(results, tmp_path, plt) + child_cost.plot(results, tmp_path, plt)
    made += fanout.plot_mcp(results, tmp_path, plt)
    assert made == ["fanout.png", "phases.png", "mcp.png"]
    assert all((tmp_path / name).stat().st_size > 1000 for name in made)
    del results["workloads"][2]
    assert fanout.plot_mcp(results, tmp_path, plt) == []  # no mcp workload: no picture
