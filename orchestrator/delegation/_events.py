"""Live events of a whole orchestrator run: every agent's progress, tagged with who it is.

Publishing is a loop over the listeners — the parent handles every child's events, so
the cost of one event must stay tiny when nobody listens.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable

from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import AgentEvent


@dataclasses.dataclass(frozen=True, slots=True)
class SubAgentStarted:
    agent_id: str
    agent_type: str
    description: str
    background: bool
    depth: int
    parent_id: str
    task_id: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class SubAgentProcess:
    """The sub-agent got its process (it may have waited for a free slot)."""

    agent_id: str
    pid: int
    node: str = ""  # where it runs: "" for this machine, else the backend's node id


@dataclasses.dataclass(frozen=True, slots=True)
class SubAgentEnded:
    agent_id: str
    result: SubAgentResult


@dataclasses.dataclass(frozen=True, slots=True)
class AgentActivity:
    """One engine event of an agent (``agent_id`` "main" for the main agent)."""

    agent_id: str
    event: AgentEvent
    call_id: str = ""  # the parent's tool call that started this sub-agent


OrchestratorEvent = SubAgentStarted | SubAgentProcess | SubAgentEnded | AgentActivity
Listener = Callable[[OrchestratorEvent], None]


class EventBus:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for every event; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def publish(self, event: OrchestratorEvent) -> None:
        for listener in self._listeners:
            listener(event)

    async def stream(self) -> AsyncIterator[OrchestratorEvent]:
        """Every event from now on, as an async iterator (stop iterating to unsubscribe)."""
        queue: asyncio.Queue[OrchestratorEvent] = asyncio.Queue()
        unsubscribe = self.subscribe(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            unsubscribe()
