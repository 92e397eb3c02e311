"""The model call an engine has in flight, which a message may interrupt."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class InFlight:
    """Runs each model call as a task of its own, so that ``interrupt`` can cancel it
    without cancelling the loop that awaits it."""

    def __init__(self) -> None:
        self._call: asyncio.Task[Any] | None = None

    def interrupt(self) -> bool:
        """Cancel the call in flight, if one is; True if one was."""
        call = self._call
        if call is None or call.done():
            return False
        call.cancel()
        return True

    async def run(self, call: Coroutine[Any, Any, T]) -> T | None:
        """``call``'s result; None if ``interrupt`` cancelled it first. Its own errors are
        raised as themselves. A cancel of the caller cancels it too — unless it had just
        finished: then its result comes first and the cancel lands at the caller's next
        wait (a budget crossed by the call's own usage keeps the answer it paid for)."""
        task: asyncio.Task[T] | None = None
        try:
            async with asyncio.TaskGroup() as group:
                task = self._call = group.create_task(call)
        except asyncio.CancelledError:
            if task is None or not task.done() or task.cancelled() or task.exception():
                raise
            current = asyncio.current_task()
            assert current is not None
            current.cancel()  # again: at the caller's next wait, after this result
        except BaseExceptionGroup as failed:  # the call's own error (StopRun, a model bug)
            raise failed.exceptions[0] from None
        finally:
            self._call = None
        return None if task.cancelled() else task.result()
