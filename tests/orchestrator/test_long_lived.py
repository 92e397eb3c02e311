"""A long-lived orchestrator does not grow: 5,000 short sub-agents through one
``Orchestrator``, in waves, on a bounded pool.

Each wave is one main-agent run that starts 100 background sub-agents through the
``task`` tool (tracker records, ledger rows, events) and one ``map`` of 400 more. After
the warm-up waves the parent's resident memory and every internal table the
orchestrator keeps stay flat. The figures are printed (``pytest -s``) and recorded in
docs/reliability.md.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import child_models
import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator._orchestrator import LEDGER_ROWS
from agentcell.orchestrator.config._settings import Budgets
from agentcell.protocol import Message, RunStatus, ToolMessage
from agentcell.worker.models import ToolSpec
from agentcell.worker.models._base import ModelResponse
from conftest import SpawnRecorder

from agentcell.testing import FunctionModel, reply, tool_call

WAVES = 10
BACKGROUND = 100  # per wave, through the task tool
MAPPED = 400  # per wave, through map()
WARM_UP = 3  # waves before the baseline is taken
MAX_WORKERS = 8
RSS_GROWTH_MIB = 12.0  # allowed after warm-up (allocator noise), for 3,500 more sub-agents


def main_agent() -> FunctionModel:
    def fn(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply(
                "",
                *(
                    tool_call("task", subagent_type="fine", prompt=f"bg {i}", background=True)
                    for i in range(BACKGROUND)
                ),
            )
        return "wave done"

    return FunctionModel(fn, name="function:main")


def tables(orch: Orchestrator) -> dict[str, int]:
    """The sizes of everything the orchestrator keeps between calls."""
    pool = orch.pool
    return {
        "ledger rows": len(orch.ledger.agents),
        "tracker records": len(orch.tracker.records()),
        "handles": len(orch._direct.handles),
        "engines": len(orch._main.engines),
        "event listeners": len(orch.bus._listeners),
        "event streams": len(orch.bus._streams),
        "runner blobs": len(orch.runner.prepare._blobs),
        "pool workers": len(pool._workers),
        "pool tasks": len(pool._tasks),
        "pool idle queue": len(pool.queue.spares),
        "pool waiters": len(pool.queue.waiters),
        "model calls kept": len(orch.model_objects["function:fine"].calls),
    }


@pytest.mark.soak
async def test_five_thousand_subagents_leave_memory_and_tables_flat(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    fine = FunctionModel(child_models.answer_prompt, name="function:fine")
    main = main_agent()
    orch = Orchestrator(
        model=main,
        agents=[AgentDefinition(name="fine", description="d", tools=[], model="function:fine")],
        models={"function:fine": fine},
        settings=Settings(
            approval="allow",
            max_workers=MAX_WORKERS,
            warm_spares=4,
            budgets=Budgets(max_subagents=None),  # thousands: past the default of 256
        ),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )
    me = psutil.Process()
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    async with orch:
        for wave in range(WAVES):
            # The test doubles record every call they get: that memory is the test's own.
            fine.calls.clear()
            main.calls.clear()
            report = await orch.run(f"wave {wave}")
            assert report.status is RunStatus.COMPLETED, report.error
            assert len(report.subagents) == BACKGROUND and all(r.ok for r in report.subagents)
            mapped = await orch.map("fine", [f"w{wave} {i}" for i in range(MAPPED)], concurrency=8)
            assert all(r.ok for r in mapped)
            del report, mapped  # returned to the caller: the orchestrator keeps none of it
            gc.collect()
            rows.append({"rss": me.memory_info().rss, **tables(orch)})
        total = orch.ledger.subagents
        wall = time.perf_counter() - started
    closed = time.perf_counter() - started - wall

    print(
        f"\n{WAVES * (BACKGROUND + MAPPED)} sub-agents in {wall:.1f} s (close {closed:.1f} s), "
        f"max_workers {MAX_WORKERS}"
    )
    for wave, row in enumerate(rows, 1):
        rss = row.pop("rss")
        print(f"  after {wave * (BACKGROUND + MAPPED):>5}: RSS {rss / 2**20:6.1f} MiB  {row}")
        row["rss"] = rss
    assert total == WAVES * (BACKGROUND + MAPPED)  # the lifetime totals count everyone
    baseline, last = rows[WARM_UP - 1], rows[-1]
    growth = (last["rss"] - baseline["rss"]) / 2**20
    assert growth < RSS_GROWTH_MIB, f"RSS grew {growth:.1f} MiB after warm-up"
    for name in baseline:
        if name == "rss":
            continue
        assert max(row[name] for row in rows[WARM_UP - 1 :]) == baseline[name] or name.startswith(
            ("pool", "tracker")
        ), (name, [row[name] for row in rows])
    assert baseline["ledger rows"] == LEDGER_ROWS  # full, and folding from then on
    assert last["tracker records"] <= BACKGROUND  # the last run's, until the next starts
    assert last["handles"] == last["engines"] == last["event streams"] == 0
    assert last["pool workers"] <= MAX_WORKERS and last["pool waiters"] == 0
