"""A sub-agent's first model request, sent by the parent while the child's process starts.

A sub-agent's process takes milliseconds of CPU to fork, boot and wall itself before it
sends its first model request; at a fan-out of dozens on a small machine, the starts
queue and the last sub-agent's first request leaves hundreds of milliseconds after the
task call. But that first request is fixed by the spec (``worker/engine/_first_call.py``), so
the parent builds it, checks it as it checks a child's, and sends it at once, with its
own key, from its pools (never under a provider's limits: see ``Runner._call_ahead``;
its permit is the limiter's bookkeeping alone). ``CallAhead`` holds the request
until the child's own first ``ModelCall`` arrives: the same bytes, and the relay serves
that call from the answer under way (its body still in the connection, read and relayed
as for any call); other bytes, and the one sent ahead is cancelled and the child's sent.
A child that never asks (it died, it was cancelled) has it cancelled when its relay ends.

Only the head is waited for here: the body stays in the socket until the relay reads it,
so nothing of a server's answer is buffered in the parent, and the child still parses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from agentcell.orchestrator.model_relay._limiter import ModelPermit, ProviderLimiter
from agentcell.protocol import AgentSpec
from agentcell.worker.models import ModelTransport, TransportResponse, estimate_tokens

log = logging.getLogger("agentcell.orchestrator")


class CallAhead:
    """The first request of one sub-agent, sent: ``take`` gives its permit and response
    to the relay serving the child's identical call; ``aclose`` cancels it otherwise."""

    def __init__(
        self,
        spec: AgentSpec,
        body: bytes,
        transport: ModelTransport,
        secrets: list[bytes],
        *,
        limiter: ProviderLimiter,
        start: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        shard: int = 0,
        on_done: Callable[[], None] | None = None,
        tokens_left: int | None = None,
    ) -> None:
        """``shard``: the pool shard it is sent from; ``on_done`` gives it back (unless a
        relay ``adopt``s it); ``tokens_left``: the run's token budget left when it was
        checked (None: no budget)."""
        self.spec = spec
        self.body = body
        self.tokens_left = tokens_left
        self.transport = transport
        self.secrets = secrets
        self._estimate = estimate_tokens(body)
        self._permit: ModelPermit | None = None
        self._response: TransportResponse | None = None
        self._taken = False
        self.shard = shard
        self._on_done = on_done
        self._error: Exception | None = None
        self._task = start(self._send(transport, limiter))  # in the run's task group

    async def _send(self, transport: ModelTransport, limiter: ProviderLimiter) -> None:
        # Never raises (its group would cancel the run): the error waits for ``take``.
        try:
            self._permit = await limiter.acquire(self.spec.model, self._estimate)
            self._response = await transport.open(self.body)
        except Exception as exc:
            self._error = exc
        except asyncio.CancelledError:  # whoever cancelled it may never close it
            self._release(tokens=0)
            raise

    async def take(self) -> tuple[ModelPermit, TransportResponse]:
        """The permit and the response (its head in), for the child's identical call;
        raises what sending raised (``Retry``, ``ModelError``), its permit released. A
        cancelled take cancels the request (awaiting the task passes the cancel on) and
        closes an answer that came in meanwhile."""
        self._taken = True
        try:
            await self._task
        except BaseException:
            await self._drop(tokens=0)  # no answer was had (or none is wanted now)
            raise
        if self._error is not None:
            self._release(tokens=0)
            raise self._error
        assert self._permit is not None and self._response is not None
        return self._permit, self._response

    async def aclose(self) -> None:
        """Not taken: cancel the request upstream and release its permit. Idempotent;
        what it holds is given back before its first wait, so a cancelled close still
        gives back the permit and the shard."""
        if self._taken:
            return
        self._taken = True
        self._give_back()
        self._task.cancel()
        try:
            await asyncio.wait([self._task])
        finally:
            if self._response is not None:
                log.info(
                    "%s: the first model request sent ahead was not used: cancelled",
                    self.spec.agent_id,
                )
            await self._drop(tokens=self._estimate)

    async def _drop(self, *, tokens: int) -> None:
        """The permit back (``tokens``: what it is charged) and the answer closed."""
        self._release(tokens=tokens)
        response, self._response = self._response, None
        if response is not None:
            with contextlib.suppress(Exception):
                await response.aclose()

    def _release(self, *, tokens: int) -> None:
        # A cancelled answer's cost is unknown: the limiter is charged the estimate.
        if self._permit is not None:
            self._permit.release(tokens=tokens)
            self._permit = None

    def adopt(self) -> None:
        """The child's relay now owns the pool shard (and the transport) this request
        was sent from: sub-agents one after another keep one open connection."""
        self._on_done = None

    def _give_back(self) -> None:
        if self._on_done is not None:
            done, self._on_done = self._on_done, None
            done()
