"""Live events of a whole orchestrator run: every agent's progress, tagged with who it is.

Publishing is a loop over the listeners — the parent handles every child's events, so
the cost of one event must stay tiny when nobody listens.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import Callable

from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import AgentEvent, RunFinished


@dataclasses.dataclass(frozen=True, slots=True)
class SubAgentStarted:
    agent_id: str
    agent_type: str
    description: str
    background: bool
    depth: int
    parent_id: str
    task_id: str = ""
    color: str = ""  # the definition's display colour (Claude Code's `color`)


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

#: Events an ``EventStream`` holds for a slow reader before it drops agents' progress.
STREAM_BUFFER = 10_000

log = logging.getLogger("agentcell.events")


class EventBus:
    def __init__(self) -> None:
        self._listeners: tuple[Listener, ...] = ()  # replaced, never mutated: safe to iterate
        self._streams: set[EventStream] = set()
        self._failed: set[int] = set()  # listeners that raised (logged once each)
        self.closed = False

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for every event; returns a function that unsubscribes.

        A listener that raises is logged once and kept; it never breaks the run that
        published, nor another listener.
        """
        self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            listeners = list(self._listeners)
            with contextlib.suppress(ValueError):
                listeners.remove(listener)
            self._listeners = tuple(listeners)
            self._failed.discard(id(listener))

        return unsubscribe

    def publish(self, event: OrchestratorEvent) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                if id(listener) not in self._failed:
                    self._failed.add(id(listener))
                    log.exception(
                        "an event listener (%r) raised; it stays subscribed, further errors "
                        "from it are not logged",
                        listener,
                    )

    def stream(self, buffer: int = STREAM_BUFFER) -> EventStream:
        """Every event from now on (subscribed at once), as an async iterator."""
        return EventStream(self, buffer)

    def close(self) -> None:
        """End every stream (after the events they hold); later streams end at once."""
        self.closed = True
        for stream in list(self._streams):
            stream.close()


class EventStream:
    """Events from the moment it was made until ``close()`` or the bus closes.

    ``async for event in stream`` reads them; the loop ends after the last held event.
    The buffer is bounded: past ``buffer`` unread events, agents' progress (text, tool
    calls, notices: what a child sends, as often as it likes) is dropped and counted in
    ``dropped``; the parent's own events (a sub-agent started, got its process, ended
    with its result) and each agent's first ``RunFinished`` are kept, so the terminal
    ones are never lost, and they are bounded by the number of sub-agents.
    """

    def __init__(self, bus: EventBus, buffer: int = STREAM_BUFFER) -> None:
        self.buffer = buffer
        self.dropped = 0
        self._events: collections.deque[OrchestratorEvent] = collections.deque()
        self._finished: set[str] = set()  # agents whose RunFinished got in
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._bus = bus
        if bus.closed:
            self._closed = True
            return
        self._unsubscribe = bus.subscribe(self._put)
        bus._streams.add(self)

    def _put(self, event: OrchestratorEvent) -> None:
        if self._closed:
            return
        if len(self._events) >= self.buffer and self._progress(event):
            self.dropped += 1
            return
        self._events.append(event)
        self._wake()

    def _progress(self, event: OrchestratorEvent) -> bool:
        """An agent's event that a slow reader may miss: all but each one's first end."""
        if not isinstance(event, AgentActivity):
            return False
        if isinstance(event.event, RunFinished) and event.agent_id not in self._finished:
            self._finished.add(event.agent_id)
            return False
        return True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        """Stop receiving; the loop ends once the events already held are read."""
        if self._closed:
            return
        self._closed = True
        self._unsubscribe()
        self._bus._streams.discard(self)
        self._wake()

    @property
    def pending(self) -> int:
        return len(self._events)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> OrchestratorEvent:
        while not self._events:
            if self._closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._events.popleft()

    async def aclose(self) -> None:
        self.close()
