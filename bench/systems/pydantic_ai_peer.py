"""pydantic-ai: agent delegation, the worker agent run inside the main agent's ``task`` tool.

``usage=ctx.usage`` shares the usage across agents as its docs show; the default
``UsageLimits(request_limit=50)`` would then fail from N=17, so the limit is lifted.
"""

# No ``from __future__ import annotations`` here: the tool below is declared inside a
# method, and pydantic-ai reads its annotations (RunContext, a local name) at run time.
import os
import shutil
from typing import Any

from bench import analysis
from bench.script import Spec
from bench.systems._base import (
    MAIN_PROMPT,
    Options,
    Outcome,
    System,
    analysis_tree,
    outcome,
    worker_prompt,
)
from bench.tools import crunch, probe


class PydanticAI(System):
    name = "pydantic-ai"
    packages = ("pydantic-ai-slim", "openai")

    def __init__(self) -> None:
        self.main: Any = None
        self.answers: list[str] = []
        self.tree = ""
        self.events = 0
        self.chars = 0

    def available(self) -> str:
        try:
            import pydantic_ai  # noqa: F401
            from pydantic_ai.models.openai import OpenAIChatModel  # noqa: F401
        except ImportError as exc:
            return f"not installed ({exc.name}): pip install 'pydantic-ai-slim[openai]'"
        return ""

    async def open(self, n: int, options: Options) -> None:
        from pydantic_ai import Agent, RunContext, Tool
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider
        from pydantic_ai.usage import UsageLimits

        provider = OpenAIProvider(
            base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
        )
        model = OpenAIChatModel("bench", provider=provider)
        tools = [Tool(probe), Tool(crunch)]
        self.tree = analysis_tree(options)
        if self.tree:  # the analysis workload: plain functions over the tree
            tools = [Tool(f) for f in analysis.PEER_TOOLS]
        worker = Agent(model, instructions=worker_prompt(options), tools=tools)
        self.limits = UsageLimits(request_limit=None)
        self.main = Agent(model, instructions=MAIN_PROMPT)
        handler = self._on_events if options.count_events else None

        @self.main.tool
        async def task(ctx: RunContext[None], prompt: str) -> str:
            """Delegate a task to the worker sub-agent."""
            result = await worker.run(
                prompt, usage=ctx.usage, usage_limits=self.limits, event_stream_handler=handler
            )
            self.answers.append(str(result.output))
            return str(result.output)

    async def _on_events(self, ctx: Any, stream: Any) -> None:
        from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

        async for event in stream:
            text = ""
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                text = event.part.content  # a text part starts with its first delta
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                text = event.delta.content_delta
            if text:
                self.events += 1
                self.chars += len(text)

    async def run(self, spec: Spec) -> Outcome:
        self.answers, self.events, self.chars = [], 0, 0
        result = await self.main.run(spec.prompt(), usage_limits=self.limits)
        answer = outcome(spec.n, self.answers, main_ok=str(result.output).startswith("All"))
        answer.events, answer.chars = self.events, self.chars
        return answer

    async def close(self) -> None:
        if self.tree:
            shutil.rmtree(self.tree, ignore_errors=True)
