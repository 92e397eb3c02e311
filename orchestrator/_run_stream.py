"""``Orchestrator.run_stream``: one run's events, then its report, from a run that has an owner.

An async generator cannot hold a ``TaskGroup`` across its yields (its consumer may resume
it from another task, or never close it at all), so the run it streams is a member of
the orchestrator's ``TaskNursery`` for streamed runs. The generator cancels the run and
waits for it when it is left early (its ``finally``); the orchestrator does, when it
closes, for a stream its consumer dropped without closing it. Either way the run never
outlives the orchestrator and is never destroyed while pending. The run's failure is the
stream's: the last item raises it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

from agentcell.orchestrator._main_run import RunReport
from agentcell.orchestrator.delegation._events import EventStream, OrchestratorEvent
from agentcell.protocol import NurseryClosed, TaskNursery


async def stream_run(
    owner: TaskNursery, events: EventStream, run: Coroutine[Any, Any, RunReport]
) -> AsyncGenerator[OrchestratorEvent | RunReport, None]:
    """Yield ``events`` while ``run`` runs in ``owner``, then its report (see the module)."""
    failed: list[Exception] = []
    try:
        running = owner.start(run, name="a streamed run", on_error=failed.append)
    except NurseryClosed:
        events.close()
        raise RuntimeError(
            "run_stream needs an open orchestrator: use it inside "
            "`async with Orchestrator(...) as orch`"
        ) from None
    running.add_done_callback(lambda _: events.close())
    try:
        async for event in events:
            yield event
        await asyncio.wait({running})
        if running.cancelled():
            raise RuntimeError("the orchestrator closed while the run streamed: it was cancelled")
        report = running.result()
        if report is None:
            raise failed[0]
        yield report
    finally:
        events.close()
        if not running.done():
            running.cancel()
            await asyncio.wait({running})
