"""Provider limits, kept in the parent for the main agent and every sub-agent together.

A provider limits an account (per model): so many requests in flight, per minute, tokens
per minute. A hundred child processes each keeping its own count would exceed them all,
and a 429 seen by one would not stop its siblings from sending into the same wall. So
the parent owns one ``ModelLimiter`` per model and every model request takes a permit
from it first (a child over its pipe: ``PermitRequest``/``PermitGrant``/``PermitDone``,
answered by ``ChildPermits`` in the runner's relay).

Rates use aiolimiter's leaky bucket. Requests per minute are enforced per second, the
way providers quantise them (600/min admits 10 at once, then 10 more each second, not
600 in one burst); tokens per minute over the minute. A ``Retry-After`` reported with a
permit pauses every request to that model until then.

A request that used more tokens than it was admitted with leaves the rest as a debt,
which the next request to the model pays into the bucket before its own tokens: the
release stays synchronous and starts no task, so nothing of the limiter is left
pending when a run is cancelled or the orchestrator closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from agentcell.orchestrator.config._settings import ProviderLimits
from agentcell.protocol import ChannelClosed, Frame, PermitDone, PermitGrant, PermitRequest
from aiolimiter import AsyncLimiter

#: The longest pause one report may impose on every sibling (a model call already
#: gives up on a longer Retry-After), so a bad value cannot stall the run.
MAX_PAUSE_S = 60.0
#: Permit requests one child may have open at once; beyond that it is refused (a model
#: call asks for one at a time, so only a misbehaving child gets near it).
MAX_OPEN_PER_CHILD = 16


@dataclasses.dataclass(slots=True)
class LimiterStats:
    """What a limiter has done so far (for tests, the bench and the run report)."""

    granted: int = 0
    waiting: int = 0  # acquisitions blocked right now
    in_flight: int = 0  # permits held right now
    max_in_flight: int = 0
    pauses: int = 0  # Retry-After reports that paused the model
    tokens: int = 0  # charged by released permits: each its estimate, or its cost if more


class ModelLimiter:
    """The limits of one model: a semaphore for concurrency, buckets for the rates."""

    def __init__(self, model: str, limits: ProviderLimits) -> None:
        self.model = model
        self.limits = limits
        self.stats = LimiterStats()
        self._slots = (
            asyncio.Semaphore(limits.max_concurrent) if limits.max_concurrent is not None else None
        )
        rpm = limits.requests_per_minute
        self._requests = AsyncLimiter(*_per_second(rpm)) if rpm is not None else None
        tpm = limits.tokens_per_minute
        self._tokens = AsyncLimiter(tpm, 60) if tpm is not None else None
        self._resume_at = 0.0  # loop time before which nothing is granted
        self._debt = 0  # tokens used beyond the estimates, not yet in the bucket

    async def acquire(self, tokens: int = 0) -> ModelPermit:
        loop = asyncio.get_running_loop()
        stats = self.stats
        stats.waiting += 1
        try:
            await self._pause(loop)
            if self._slots is not None:
                await self._slots.acquire()
            try:
                if self._requests is not None:
                    await self._requests.acquire()
                if self._tokens is not None:
                    await self._pay_debt()
                    await self._tokens.acquire(self._clamp(tokens))
                # A 429 may have come in while this one queued: nothing goes out in a pause.
                await self._pause(loop)
            except BaseException:
                if self._slots is not None:
                    self._slots.release()
                raise
        finally:
            stats.waiting -= 1
        stats.granted += 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        return ModelPermit(self, tokens)

    def pause(self, seconds: float) -> None:
        """Hold every request to this model for ``seconds`` from now (at most MAX_PAUSE_S)."""
        if not math.isfinite(seconds) or seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        self._resume_at = max(self._resume_at, loop.time() + min(seconds, MAX_PAUSE_S))
        self.stats.pauses += 1

    @property
    def paused_for(self) -> float:
        """Seconds left in the current pause (0 when none)."""
        return max(0.0, self._resume_at - asyncio.get_running_loop().time())

    def _released(self, estimate: int, tokens: int, retry_after: float | None) -> None:
        # The pause first, then the slot: the task the slot wakes must already see it.
        if retry_after is not None:
            self.pause(retry_after)
        self.stats.in_flight -= 1
        self.stats.tokens += max(estimate, tokens)
        if self._tokens is not None and tokens > estimate:
            # The estimate was low: the next request pays the rest first, so it and every
            # later one wait for it.
            self._debt += tokens - estimate
        if self._slots is not None:
            self._slots.release()

    async def _pay_debt(self) -> None:
        # Taken whole before the wait, so two requests never pay the same debt; a wait
        # cancelled before the bucket took it (aiolimiter charges all or nothing) gives
        # it back for the next request.
        assert self._tokens is not None
        debt, self._debt = self._debt, 0
        if debt <= 0:
            return
        try:
            await self._tokens.acquire(self._clamp(debt))
        except BaseException:
            self._debt += debt
            raise

    def _clamp(self, tokens: int) -> float:
        # One request larger than a whole minute's allowance still goes (alone) rather
        # than wait forever.
        assert self._tokens is not None
        return float(min(max(tokens, 0), self._tokens.max_rate))

    async def _pause(self, loop: asyncio.AbstractEventLoop) -> None:
        # The wait is the point (the server asked for it); a later report may lengthen it.
        while (left := self._resume_at - loop.time()) > 0:  # noqa: ASYNC110 - a deadline
            await asyncio.sleep(left)

    def close(self) -> None:
        """Forget the unpaid debt (no request will come to pay it); nothing runs to stop."""
        self._debt = 0


class ModelPermit:
    """Leave for one request. ``release`` once; later calls do nothing."""

    __slots__ = ("_estimate", "_limiter")

    def __init__(self, limiter: ModelLimiter | None, estimate: int) -> None:
        self._limiter = limiter
        self._estimate = estimate

    def release(self, *, tokens: int = 0, retry_after: float | None = None) -> None:
        limiter, self._limiter = self._limiter, None
        if limiter is not None:
            limiter._released(self._estimate, tokens, retry_after)


class ProviderLimiter:
    """Every model's limiter, made on first use from the settings' ``limits`` table.

    It is a ``RequestGate`` (the main agent in this process uses it directly) and the
    authority children's permit requests are answered from."""

    def __init__(self, limits: Mapping[str, ProviderLimits]) -> None:
        self._limits = {key: value for key, value in limits.items() if _any_limit(value)}
        self._models: dict[str, ModelLimiter] = {}

    def limits_for(self, model: str) -> ProviderLimits | None:
        """The model's own table, else its provider's; None if it is not limited."""
        provider = model.partition(":")[0]
        return self._limits.get(model) or self._limits.get(provider)

    def applies(self, model: str) -> bool:
        return self.limits_for(model) is not None

    def model(self, model: str) -> ModelLimiter | None:
        limiter = self._models.get(model)
        if limiter is None:
            limits = self.limits_for(model)
            if limits is None:
                return None
            limiter = self._models[model] = ModelLimiter(model, limits)
        return limiter

    async def acquire(self, model: str, tokens: int = 0) -> ModelPermit:
        limiter = self.model(model)
        if limiter is None:
            return ModelPermit(None, tokens)  # not limited: leave at once
        return await limiter.acquire(tokens)

    def close(self) -> None:
        for limiter in self._models.values():
            limiter.close()


class ChildPermits:
    """One child's permits, answered in the runner's relay.

    Each request waits in its own task; whatever the child still holds or waits for
    when it ends (crash included) is returned, so a dead child never keeps a slot."""

    def __init__(
        self,
        limiter: ProviderLimiter,
        send: Callable[[Frame], None],
        *,
        start: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    ) -> None:
        self._limiter = limiter
        self._send = send
        self._start = start  # its owner's TaskGroup.create_task: the group owns the waits
        self._waiting: dict[int, asyncio.Task[None]] = {}
        self._held: dict[int, ModelPermit] = {}

    def on_request(self, frame: PermitRequest) -> None:
        rid = frame.request_id
        if rid in self._waiting or rid in self._held:
            self._reply(PermitGrant(request_id=rid, granted=False, reason="duplicate request id"))
            return
        if len(self._waiting) + len(self._held) >= MAX_OPEN_PER_CHILD:
            self._reply(
                PermitGrant(
                    request_id=rid,
                    granted=False,
                    reason=f"more than {MAX_OPEN_PER_CHILD} permits open in one sub-agent",
                )
            )
            return
        self._waiting[rid] = self._start(self._grant(frame))

    async def _grant(self, frame: PermitRequest) -> None:
        try:
            permit = await self._limiter.acquire(frame.model, max(0, frame.tokens))
        except Exception as exc:  # a limiter bug must not leave the child waiting forever
            self._waiting.pop(frame.request_id, None)
            self._reply(PermitGrant(request_id=frame.request_id, granted=False, reason=str(exc)))
            return
        # No await between here and the table: a PermitDone finds it either waiting
        # (cancelled) or held (released), never lost in between.
        self._waiting.pop(frame.request_id, None)
        self._held[frame.request_id] = permit
        self._reply(PermitGrant(request_id=frame.request_id))

    def on_done(self, frame: PermitDone) -> None:
        waiting = self._waiting.pop(frame.request_id, None)
        if waiting is not None:  # withdrawn before it was granted
            waiting.cancel()
        permit = self._held.pop(frame.request_id, None)
        if permit is not None:
            permit.release(tokens=max(0, frame.tokens), retry_after=frame.retry_after)

    def _reply(self, frame: PermitGrant) -> None:
        with contextlib.suppress(ChannelClosed):
            self._send(frame)

    async def close(self) -> None:
        waiting = list(self._waiting.values())
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.wait(waiting)
        self._waiting.clear()
        for permit in self._held.values():
            permit.release()
        self._held.clear()


def _per_second(rpm: float) -> tuple[float, float]:
    """(max_rate, period) for aiolimiter: ``rpm`` enforced over the shortest period that
    still admits one whole request (1 s, or 60/rpm s for under 60 per minute)."""
    period = max(1.0, 60.0 / rpm)
    return rpm * period / 60.0, period


def _any_limit(limits: ProviderLimits) -> bool:
    return any(
        value is not None
        for value in (limits.max_concurrent, limits.requests_per_minute, limits.tokens_per_minute)
    )
