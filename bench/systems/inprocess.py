"""agentcell's engine with every sub-agent as an asyncio task in the parent: no processes.

The difference to ``agentcell`` is the price of isolation: process start, the pipe, the
parent relaying frames. Each sub-agent gets its own model client (as a child would).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import msgspec
from agentcell.protocol import RunStatus, TextDelta
from agentcell.worker import Engine, Limits
from agentcell.worker.engine._loop import ToolSetting
from agentcell.worker.models import OpenAIChatModel
from agentcell.worker.tools import Tool, ToolContext, ToolOutput, builtin_tools

from bench import analysis
from bench.script import Spec
from bench.systems._base import WORKER_PROMPT, Options, Outcome, System, outcome
from bench.systems._engine_tools import TOOLS, run_main_agent


class TaskArgs(msgspec.Struct, kw_only=True):
    subagent_type: str
    prompt: str


async def run_subagent(
    prompt: str, on_event: Callable[[Any], None] | None = None, tree: str = ""
) -> str:
    """One sub-agent on agentcell's engine; its answer, or its error as text. With a
    ``tree`` (the analysis workload): the built-in file tools over it, and its guide."""
    model = OpenAIChatModel("bench")
    tools, system_prompt, workdir = TOOLS, WORKER_PROMPT, "."
    if tree:
        tools = [t for t in builtin_tools() if t.name in analysis.TOOL_NAMES]
        system_prompt, workdir = analysis.guide(), tree
    try:
        engine = Engine(
            model,
            tools,
            system_prompt=system_prompt,
            limits=Limits(max_turns=16),
            workdir=workdir,
            setting=ToolSetting(agent_id="sub"),
        )
        result = await engine.run(prompt, on_event=on_event)
    finally:
        await model.aclose()
    if result.status is RunStatus.COMPLETED:
        return result.text
    return f"{result.status.value}: {result.error}"


class InProcessTask(Tool):
    name = "task"
    description = "Delegate a task to a sub-agent (an asyncio task in this process)."
    Args = TaskArgs
    concurrency_safe = True
    read_only = True
    long_running = True

    def __init__(self, on_event: Callable[[Any], None] | None, tree: str = "") -> None:
        self.on_event = on_event
        self.tree = tree
        self.answers: list[str] = []

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput:
        text = await run_subagent(args.prompt, self.on_event, self.tree)
        self.answers.append(text)
        return ToolOutput(text)


class InProcessEngine(System):
    name = "in-process engine"
    packages = ("agentcell", "httpx")

    def __init__(self) -> None:
        self.workdir = ""
        self.count_events = False
        self.tree = ""
        self.events = 0
        self.chars = 0

    async def open(self, n: int, options: Options) -> None:
        self.workdir = tempfile.mkdtemp(prefix="agentcell-bench-")
        self.count_events = options.count_events
        self.tree = ""
        if options.analysis:  # the tree in the workdir, as agentcell's children see it
            analysis.corpus_into(self.workdir)
            self.tree = self.workdir

    def _on_event(self, event: Any) -> None:
        if isinstance(event, TextDelta):
            self.events += 1
            self.chars += len(event.text)

    async def run(self, spec: Spec) -> Outcome:
        self.events = self.chars = 0
        task = InProcessTask(self._on_event if self.count_events else None, self.tree)
        result = await run_main_agent(task, self.workdir, spec.prompt())
        ok = result.status is RunStatus.COMPLETED
        answer = outcome(spec.n, task.answers, main_ok=ok, detail="" if ok else result.error)
        answer.events, answer.chars = self.events, self.chars
        return answer

    async def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
