"""A main agent that delegates to a scripted sub-agent, for the task-ownership tests."""

from __future__ import annotations

from agentcell.orchestrator import AgentDefinition

#: A guard, not a synchronisation: without containment the broken run never ends.
GUARD_S = 120


def agent(name: str, tools: list[str]) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=f"{name} test agent",
        system_prompt=f"You are {name}.",
        tools=tools,
        model=f"function:{name}",
        source="test",
    )
