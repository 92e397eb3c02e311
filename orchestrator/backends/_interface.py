"""What the runner needs from a process backend: a lease on one fresh worker per run.

Two backends implement it: the local fork-server pool (``WorkerPool``) and Ray
(``RayBackend``). A lease carries frames both ways, ends in exactly one ``ChildOutcome``,
and can be given a deadline, cancelled politely or killed.
"""

from __future__ import annotations

from typing import Protocol

from agentcell.orchestrator.backends._outcome import ChildOutcome
from agentcell.protocol import Frame, Hello


class WorkerLease(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def node(self) -> str: ...

    @property
    def hello(self) -> Hello | None: ...

    @property
    def outcome(self) -> ChildOutcome | None: ...

    async def send(self, frame: Frame) -> None: ...

    def send_nowait(self, frame: Frame) -> None: ...

    async def recv(self) -> Frame | None: ...

    async def wait(self) -> ChildOutcome: ...

    def set_deadline(
        self, seconds: float, *, cancel_grace: float = 2.0, term_grace: float = 2.0
    ) -> None: ...

    def set_memory_limit(self, limit_bytes: int) -> None: ...

    def set_cpu_limit(self, seconds: float) -> None: ...

    def cancel(self, reason: str = "cancelled", *, grace: float = 2.0) -> None: ...

    def kill(self, reason: str = "killed by the caller") -> None: ...

    async def release(self) -> ChildOutcome: ...


class Backend(Protocol):
    """Where sub-agent processes come from."""

    async def acquire(self) -> WorkerLease: ...

    async def close(self) -> None: ...
