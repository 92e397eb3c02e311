"""The request gate: a permit before each model request, where someone keeps the limits.

A provider's limits (concurrent requests, requests and tokens per minute) hold for the
account, across every process that uses it. So the orchestrator owns one limiter per
model and every HTTP model call asks it first: in the parent directly, in a child over
its pipe (``PermitRequest``). Which gate applies is a context variable, set by whoever
runs the engine; unset (the default) means no limits and costs one lookup per request.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

#: Roughly how many bytes of a request body make one token (for a tokens-per-minute
#: estimate before the request; the real count comes back with the answer).
BYTES_PER_TOKEN = 4


class Permit(Protocol):
    """Leave to send one request; ``release`` once it is over, however it ended."""

    def release(self, *, tokens: int = 0, retry_after: float | None = None) -> None:
        """Hand the permit back: ``tokens`` is what the request really cost, and
        ``retry_after`` the pause the server asked for (it holds every sibling too)."""
        ...


class RequestGate(Protocol):
    async def acquire(self, model: str, tokens: int) -> Permit:
        """Wait until one request to ``model`` (``provider:name``) is within the limits."""
        ...


#: The gate of the engine running in this context (None: no limits are kept).
request_gate: ContextVar[RequestGate | None] = ContextVar("agentcell_request_gate", default=None)


def estimate_tokens(body: bytes) -> int:
    """A request's token cost guessed from its body, before it is sent."""
    return len(body) // BYTES_PER_TOKEN + 1
