"""The bench tools as agentcell tools (used by agentcell and the baselines on its engine)."""

from __future__ import annotations

from agentcell.protocol import RunResult
from agentcell.worker import Engine, Limits
from agentcell.worker.models import OpenAIChatModel
from agentcell.worker.tools import Tool, builtin_tools, function_tool

from bench.systems._base import MAIN_PROMPT
from bench.tools import crunch, hold, probe

PROBE: Tool = function_tool(probe, read_only=True, concurrency_safe=True)
CRUNCH: Tool = function_tool(crunch, read_only=True, concurrency_safe=True)
HOLD: Tool = function_tool(hold, read_only=True, concurrency_safe=True)
TOOLS: list[Tool] = [PROBE, CRUNCH, HOLD]


async def run_main_agent(task: Tool, workdir: str, prompt: str) -> RunResult:
    """The main agent on agentcell's engine, in this process, with ``task`` as its
    delegation tool and the tool list agentcell's main agent sees."""
    model = OpenAIChatModel("bench")
    try:
        engine = Engine(
            model,
            [*builtin_tools(), *TOOLS, task],
            system_prompt=MAIN_PROMPT,
            limits=Limits(max_turns=8),
            workdir=workdir,
        )
        return await engine.run(prompt)
    finally:
        await model.aclose()
