"""deepagents: ``create_deep_agent`` with a ``worker`` sub-agent behind its ``task`` tool.

Sub-agents are LangGraph graphs run inside the parent's event loop. The model is
langchain-openai's ``ChatOpenAI`` on Chat Completions (not the Responses API), one
instance (one client, one connection pool) shared by every agent, as in its docs.
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


class DeepAgents(System):
    name = "deepagents"
    packages = ("deepagents", "langchain", "langgraph", "langchain-openai", "openai")

    def __init__(self) -> None:
        self.agent: Any = None
        self.count_events = False
        self.tree = ""

    def available(self) -> str:
        try:
            import deepagents  # noqa: F401
            import langchain_openai  # noqa: F401
        except ImportError as exc:
            return f"not installed ({exc.name}): pip install deepagents langchain-openai"
        return ""

    async def open(self, n: int, options: Options) -> None:
        from deepagents import create_deep_agent
        from langchain_core.tools import StructuredTool
        from langchain_openai import ChatOpenAI

        tools = [
            StructuredTool.from_function(coroutine=probe, name="probe"),
            StructuredTool.from_function(func=crunch, name="crunch"),
        ]
        self.tree = analysis_tree(options)
        if self.tree:  # the analysis workload: plain functions over the tree
            tools = [StructuredTool.from_function(func=f) for f in analysis.PEER_TOOLS]
        model = ChatOpenAI(
            model="bench",
            base_url=os.environ["OPENAI_BASE_URL"],
            api_key=os.environ["OPENAI_API_KEY"],
            use_responses_api=False,
            max_retries=0,
        )
        worker = {
            "name": "worker",
            "description": WORKER_DESCRIPTION,
            "system_prompt": worker_prompt(options),
            "tools": tools,
        }
        self.agent = create_deep_agent(model=model, system_prompt=MAIN_PROMPT, subagents=[worker])
        self.count_events = options.count_events

    async def run(self, spec: Spec) -> Outcome:
        from langchain_core.messages import ToolMessage

        state = {"messages": [{"role": "user", "content": spec.prompt()}]}
        config = {"recursion_limit": 10_000}
        events = chars = 0
        if self.count_events:
            # Sub-agent tokens reach the parent only through the graph's message stream.
            final: dict[str, Any] = {}
            async for namespace, mode, payload in self.agent.astream(
                state, config, stream_mode=["messages", "values"], subgraphs=True
            ):
                if mode == "values" and not namespace:
                    final = payload
                elif mode == "messages" and namespace:
                    text = getattr(payload[0], "content", "")
                    if isinstance(text, str) and text:
                        events += 1
                        chars += len(text)
            result = final
        else:
            result = await self.agent.ainvoke(state, config)
        messages = result.get("messages", [])
        answers = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        last = str(messages[-1].content) if messages else ""
        answer = outcome(spec.n, answers, main_ok=last.startswith("All"))
        answer.events, answer.chars = events, chars
        return answer

    async def close(self) -> None:
        if self.tree:
            shutil.rmtree(self.tree, ignore_errors=True)
