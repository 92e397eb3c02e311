"""Sub-agent definitions for tests, one way: ``agent("worker", ["read_file"])``."""

from __future__ import annotations

from typing import Any

from agentcell.orchestrator import AgentDefinition


def agent(
    name: str, tools: list[str] | None = None, *, model: str = "openai:test", **fields: Any
) -> AgentDefinition:
    """A definition named ``name`` with these ``tools`` (None: every tool) and ``model``;
    its description and prompt say its name unless ``fields`` give them."""
    fields.setdefault("description", f"{name} test agent")
    fields.setdefault("system_prompt", f"You are {name}.")
    return AgentDefinition(name=name, tools=tools, model=model, source="test", **fields)
