"""openai-agents: the worker agent exposed to the main agent with ``Agent.as_tool``.

Both agents use ``OpenAIChatCompletionsModel`` on one ``AsyncOpenAI`` client (the SDK's
default connection pool). Tracing is off (it would export to OpenAI). As-tool sub-agents
run non-streamed unless ``on_stream`` is given, which the events workload does.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from bench import analysis
from bench.script import Spec
from bench.systems._base import (
    MAIN_PROMPT,
    WORKER_DESCRIPTION,
    Options,
    Outcome,
    System,
    analysis_tree,
    outcome,
    worker_prompt,
)
from bench.tools import crunch, probe


class OpenAIAgents(System):
    name = "openai-agents"
    packages = ("openai-agents", "openai")

    def __init__(self) -> None:
        self.main: Any = None
        self.answers: list[str] = []
        self.tree = ""
        self.events = 0
        self.chars = 0

    def available(self) -> str:
        try:
            import agents  # noqa: F401
        except ImportError as exc:
            return f"not installed ({exc.name}): pip install openai-agents"
        return ""

    async def open(self, n: int, options: Options) -> None:
        from agents import (
            Agent,
            OpenAIChatCompletionsModel,
            RunResult,
            function_tool,
            set_tracing_disabled,
        )
        from openai import AsyncOpenAI

        set_tracing_disabled(True)
        client = AsyncOpenAI(
            base_url=os.environ["OPENAI_BASE_URL"],
            api_key=os.environ["OPENAI_API_KEY"],
            max_retries=0,
        )
        model = OpenAIChatCompletionsModel(model="bench", openai_client=client)
        tools = [function_tool(probe), function_tool(crunch)]
        self.tree = analysis_tree(options)
        if self.tree:  # the analysis workload: plain functions over the tree
            tools = [function_tool(f) for f in analysis.PEER_TOOLS]
        worker = Agent(
            name="worker",
            instructions=worker_prompt(options),
            model=model,
            tools=tools,
        )

        async def collect(result: RunResult) -> str:
            self.answers.append(str(result.final_output))
            return str(result.final_output)

        task = worker.as_tool(
            tool_name="task",
            tool_description=WORKER_DESCRIPTION,
            custom_output_extractor=collect,
            max_turns=16,
            on_stream=self._on_stream if options.count_events else None,
            on_stream_max_pending_events=None,
        )
        self.main = Agent(name="main", instructions=MAIN_PROMPT, model=model, tools=[task])

    def _on_stream(self, event: Any) -> None:
        data = getattr(event["event"], "data", None)  # a raw response event, or None
        if getattr(data, "type", "") == "response.output_text.delta":
            self.events += 1
            self.chars += len(data.delta)

    async def run(self, spec: Spec) -> Outcome:
        from agents import Runner

        self.answers, self.events, self.chars = [], 0, 0
        result = await Runner.run(self.main, spec.prompt(), max_turns=8)
        answer = outcome(spec.n, self.answers, main_ok=str(result.final_output).startswith("All"))
        answer.events, answer.chars = self.events, self.chars
        return answer

    async def close(self) -> None:
        if self.tree:
            shutil.rmtree(self.tree, ignore_errors=True)
