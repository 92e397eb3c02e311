"""Load: 1,000 background sub-agents through the ``task`` tool, on a bounded pool.

A main agent (a FunctionModel in this process) issues 1,000 ``task`` calls with
``background=True`` in one message; each sub-agent (``child_models.answer_prompt``, in its
own process) answers at once. Results reach the main agent by all three ways there are:
``task_wait`` (for one task), injection at a turn boundary (what had finished by then),
and the finish hook (the stragglers, before the run may end). Checked:

* every one of the 1,000 results reaches the main model exactly once (counted in the
  messages of its last model call), and the tracker agrees (each task completed and
  delivered);
* the pool stays within ``max_workers``, and once the work is done the only processes
  under this one are the fork server and the pool's idle spares;
* after the orchestrator is closed: no process left (the ``spawned`` fixture checks the
  same), no file descriptor left (``/proc/self/fd``, a small allowance for the event
  loop), and the parent's resident memory back near where it started (after a warm-up
  run and ``gc.collect``).

The figures are printed (``pytest -s tests/orchestrator/backends/test_load.py``).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import re
import time
from pathlib import Path
from typing import Any

import child_models
import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings, SubAgentProcess
from agentcell.orchestrator.backends._starters import forkserver_pids
from agentcell.orchestrator.backends._workers import WorkerState
from agentcell.orchestrator.config._settings import Budgets
from agentcell.orchestrator.task_tools._tracker import TaskState
from agentcell.protocol import Message, RunStatus, ToolMessage, UserMessage
from agentcell.worker.models import ToolSpec
from agentcell.worker.models._base import ModelResponse
from conftest import SpawnRecorder
from multiprocess import resource_tracker

from agentcell.testing import FunctionModel, reply, tool_call

TASKS = 1_000
MAX_WORKERS = 8
WARM_SPARES = 2
FD_ALLOWANCE = 8  # the event loop, its self-pipe, a selector: a few fds may come and go
RSS_BOUND = 1.5  # after ÷ before

ANSWER = re.compile(r"answer to: (job-\d{4})\b")


def main_agent(count: int) -> FunctionModel:
    """Turn 1: ``count`` background tasks in one message. Turn 2: ``task_wait`` for the
    middle one only (its result comes back as the tool result). Turn 3: answers with what
    it has, having been handed at that turn boundary whatever else had finished by then.
    The finish hook then waits for the rest and gives it one more turn with them."""

    def fn(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if not results:
            return reply(
                "starting",
                *(
                    tool_call(
                        "task",
                        subagent_type="fine",
                        prompt=f"job-{i:04d}",
                        description=f"job {i}",
                        background=True,
                    )
                    for i in range(count)
                ),
            )
        if len(results) == count:  # the task calls' results, in call order
            match = re.search(r"task (a\d+) started", results[count // 2].content)
            assert match, results[count // 2].content
            return reply("", tool_call("task_wait", task_ids=[match.group(1)], timeout_s=120))
        return f"have {len(delivered_answers(messages))} answers"

    return FunctionModel(fn, name="function:main")


def delivered_answers(messages: list[Message]) -> list[str]:
    """Every sub-agent answer the main model was given: in ``task_wait``'s result, or in a
    user message (injected at a turn boundary, or by the finish hook)."""
    found: list[str] = []
    for message in messages:
        if (isinstance(message, UserMessage) and "Background task results" in message.content) or (
            isinstance(message, ToolMessage) and message.name == "task_wait"
        ):
            found.extend(ANSWER.findall(message.content))
    return found


def delivery_batches(messages: list[Message]) -> list[int]:
    """How many answers each delivery carried, in order."""
    return [
        len(ANSWER.findall(m.content))
        for m in messages
        if (isinstance(m, UserMessage) and "Background task results" in m.content)
        or (isinstance(m, ToolMessage) and m.name == "task_wait")
    ]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def live_descendants() -> dict[int, str]:
    found = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                found[proc.pid] = proc.name()
        except psutil.NoSuchProcess:
            pass
    return found


async def fan_out(count: int, tmp_path: Path) -> dict[str, Any]:
    """One main-agent run with ``count`` background sub-agents; returns what was seen."""
    main = main_agent(count)
    orch = Orchestrator(
        model=main,
        agents=[
            AgentDefinition(
                name="fine",
                description="answers at once",
                tools=[],
                model="function:fine",
                source="test",
            )
        ],
        models={"function:fine": FunctionModel(child_models.answer_prompt, name="function:fine")},
        settings=Settings(
            approval="allow",
            max_workers=MAX_WORKERS,
            warm_spares=WARM_SPARES,
            max_turns=10,
            budgets=Budgets(max_subagents=None),  # a thousand: past the default of 256
        ),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )
    peak = 0
    processes = 0  # SubAgentProcess events: one per run that got a process

    def watch(event: Any) -> None:
        nonlocal peak, processes
        if isinstance(event, SubAgentProcess):
            processes += 1
        peak = max(peak, orch.pool.live)

    async with orch:
        orch.bus.subscribe(watch)
        report = await asyncio.wait_for(orch.run("fan out"), 300)
        await asyncio.wait_for(orch.pool.warmed(), 60)  # replenished: the spares are idle
        # While open, after the work: the fork server (and multiprocess's resource
        # tracker, if it runs) and the idle spares — nothing else.
        helpers = {*forkserver_pids(), resource_tracker._resource_tracker._pid}
        idle = {p for p in orch.pool.pids() if orch.pool._workers[p].state is WorkerState.IDLE}
        unexpected = {p: n for p, n in live_descendants().items() if p not in helpers | idle}
    final = main.calls[-1].messages
    return {
        "status": report.status,
        "error": report.error,
        "final_text": report.final_text,
        "runs": len(report.subagents),
        "answers": delivered_answers(final),
        "batches": delivery_batches(final),
        "records": [(r.state, r.delivered) for r in orch.tracker.records()],
        "peak_live": peak,
        "processes": processes,
        "idle": len(idle),
        "unexpected": unexpected,
    }


@pytest.mark.soak  # (11 s: make test keeps to its 10 minutes; CI runs make soak after it)
async def test_a_thousand_background_subagents(spawned: SpawnRecorder, tmp_path: Path) -> None:
    me = psutil.Process()
    # Warm-up: imports, lazily built state, the allocator's first arenas — not measured.
    await fan_out(10, tmp_path)
    gc.collect()
    fds_before = open_fds()
    rss_before = me.memory_info().rss

    started = time.perf_counter()
    seen = await fan_out(TASKS, tmp_path)
    wall = time.perf_counter() - started

    answers = seen.pop("answers")
    counts = collections.Counter(answers)
    missing = sorted({f"job-{i:04d}" for i in range(TASKS)} - counts.keys())
    repeated = sorted(a for a, n in counts.items() if n > 1)
    gc.collect()
    fds_after = open_fds()
    rss_after = me.memory_info().rss
    leaked = live_descendants()

    print(
        f"\nload: {TASKS} background sub-agents through the task tool, "
        f"max_workers={MAX_WORKERS}, warm_spares={WARM_SPARES}\n"
        f"  results delivered to the main model: {len(answers)} "
        f"({len(counts)} distinct, {len(missing)} missing, {len(repeated)} more than once; "
        f"delivered in batches of {seen['batches']})\n"
        f"  sub-agent processes: {seen['processes']}, at most {seen['peak_live']} live at once\n"
        f"  processes left: {len(seen['unexpected'])} beyond the {seen['idle']} idle spares "
        f"while open, {len(leaked)} after close\n"
        f"  file descriptors: {fds_before} before, {fds_after} after "
        f"({fds_after - fds_before:+d})\n"
        f"  parent RSS: {rss_before / 2**20:.1f} MiB before, {rss_after / 2**20:.1f} MiB "
        f"after (x{rss_after / rss_before:.2f})\n"
        f"  wall time: {wall:.1f} s ({TASKS / wall:.0f} sub-agents/s)"
    )
    assert seen["status"] is RunStatus.COMPLETED, seen["error"]
    assert not missing and not repeated, (missing[:5], repeated[:5])
    assert seen["final_text"] == f"have {TASKS} answers"
    assert len(seen["batches"]) >= 2 and seen["batches"][0] == 1  # task_wait's one result
    assert seen["runs"] == len(seen["records"]) == TASKS
    assert all(state is TaskState.COMPLETED and done for state, done in seen["records"])
    assert seen["processes"] == TASKS  # every run got a process (each serves one run)
    assert seen["peak_live"] <= MAX_WORKERS
    assert not seen["unexpected"], seen["unexpected"]
    assert not leaked, leaked
    assert forkserver_pids() == []
    assert fds_after - fds_before <= FD_ALLOWANCE, (fds_before, fds_after)
    assert rss_after / rss_before < RSS_BOUND, (rss_before, rss_after)
