"""``concurrent.futures.ProcessPoolExecutor`` running agentcell's engine per task.

The stock answer to "use the other cores": the main agent's ``task`` tool submits each
sub-agent to the executor, whose worker runs a fresh engine in ``asyncio.run``. Workers
are started on demand by the executor (its default), and it has no channel for live
events or approvals, and one crashed worker breaks the whole pool (``BrokenProcessPool``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
from typing import Any

from agentcell.protocol import RunStatus
from agentcell.worker.tools import Tool, ToolContext, ToolOutput

from bench.script import Spec
from bench.systems._base import Options, Outcome, System, outcome
from bench.systems._engine_tools import run_main_agent
from bench.systems.inprocess import TaskArgs, run_subagent


def subagent_in_worker(prompt: str) -> str:
    """The executor's job: one sub-agent, on a fresh event loop in the worker process."""
    return asyncio.run(run_subagent(prompt))


class PoolTask(Tool):
    name = "task"
    description = "Delegate a task to a sub-agent (a ProcessPoolExecutor job)."
    Args = TaskArgs
    concurrency_safe = True
    read_only = True
    long_running = True

    def __init__(self, executor: concurrent.futures.ProcessPoolExecutor) -> None:
        self.executor = executor
        self.answers: list[str] = []

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput:
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(self.executor, subagent_in_worker, args.prompt)
        self.answers.append(text)
        return ToolOutput(text)


class ProcessPool(System):
    name = "ProcessPoolExecutor"
    packages = ("agentcell", "httpx")
    processes = True
    no_events = "a ProcessPoolExecutor job has no channel for live events"

    def __init__(self) -> None:
        self.executor: concurrent.futures.ProcessPoolExecutor | None = None
        self.workdir = ""

    async def open(self, n: int, options: Options) -> None:
        self.workdir = tempfile.mkdtemp(prefix="agentcell-bench-")
        self.executor = concurrent.futures.ProcessPoolExecutor(max_workers=max(1, n))
        if options.prestart:
            # Every worker up before the clock starts, as agentcell's spares are: the
            # executor starts one per job submitted while none is idle.
            loop = asyncio.get_running_loop()
            started = [loop.run_in_executor(self.executor, os.getpid) for _ in range(max(1, n))]
            await asyncio.gather(*started)

    async def run(self, spec: Spec) -> Outcome:
        assert self.executor is not None
        task = PoolTask(self.executor)
        result = await run_main_agent(task, self.workdir, spec.prompt())
        ok = result.status is RunStatus.COMPLETED
        return outcome(spec.n, task.answers, main_ok=ok, detail="" if ok else result.error)

    async def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def child_pids(self) -> list[int]:
        processes = getattr(self.executor, "_processes", None) or {}
        return list(processes)
