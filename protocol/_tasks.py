"""The owner of the parent's long-lived tasks: an ``asyncio.TaskGroup`` whose members fail alone.

An object whose work outlives one call (the pool's spawns and watchdog, the task tool's
background sub-agents, a chat's turns, the Ray backend's reader) enters a ``TaskNursery``
for its lifetime and starts every task in it. A plain ``TaskGroup`` cancels every member,
and the task that entered it, when one member raises; here each member is contained
first, so its failure is reported (to the member's ``on_error``, else logged with its
traceback) and never reaches its siblings or its owner. Closing the nursery cancels every
member and waits until each has ended, so none outlives its owner and none is destroyed
while pending.

Leaving ``async with`` normally waits for the members (as a ``TaskGroup`` does); leaving
it on an exception cancels them first, then lets the exception go on unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
OnError = Callable[[Exception], None]


class NurseryClosed(RuntimeError):
    """A task was started in a nursery that is not open (never entered, or closed)."""


class _Closing(Exception):
    """Handed to the group's exit so that it cancels its members (and swallowed here)."""


class TaskNursery:
    """A ``TaskGroup`` held open by its owner; see the module's docstring."""

    def __init__(self, name: str) -> None:
        self.name = name  # says whose tasks these are, in a failure's log line
        self._group: asyncio.TaskGroup | None = None
        self._running = 0  # members not yet ended (a long-lived owner's table stays flat)

    def __len__(self) -> int:
        return self._running

    def __bool__(self) -> bool:  # an owner, empty or not (not a container's truth)
        return True

    @property
    def is_open(self) -> bool:
        return self._group is not None

    async def open(self) -> Self:
        """Enter the group, unless it is open (best in the task that will close it)."""
        if self._group is None:
            group = asyncio.TaskGroup()
            await group.__aenter__()
            self._group = group
        return self

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._exit(cancel=et is not None)

    async def aclose(self, *, cancel: bool = True) -> None:
        """Cancel every member (or, with ``cancel=False``, let each finish) and wait until
        each has ended; nothing new starts from the call on. Safe to repeat."""
        await self._exit(cancel=cancel)

    def start(
        self,
        work: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        on_error: OnError | None = None,
    ) -> asyncio.Task[T | None]:
        """Run ``work`` as a member; if it raises, ``on_error`` gets the exception (else it
        is logged) and the task's result is None."""
        if self._group is None:
            work.close()  # never run: no "coroutine was never awaited" warning either
            raise NurseryClosed(f"{self.name} is not open: no task can start")
        task = self._group.create_task(self._contained(work, on_error), name=name)
        # Cancelled before its first step (a close right after the start), the wrapper
        # never awaits ``work``: close it then, so that it is not reported as never awaited.
        task.add_done_callback(lambda _: self._ended(work))
        self._running += 1
        return task

    def _ended(self, work: Coroutine[Any, Any, Any]) -> None:
        self._running -= 1
        work.close()

    async def _contained(self, work: Coroutine[Any, Any, T], on_error: OnError | None) -> T | None:
        try:
            return await work
        except Exception as exc:  # this member's failure, reported: never its siblings'
            if on_error is None:
                log.error("%s: a task failed", self.name, exc_info=exc)
            else:
                try:
                    on_error(exc)
                except Exception:
                    log.exception("%s: reporting a failed task failed", self.name)
            return None

    async def _exit(self, *, cancel: bool) -> None:
        group, self._group = self._group, None  # from here on nothing new starts
        if group is None:
            return
        if not cancel:
            await group.__aexit__(None, None, None)
            return
        try:
            await group.__aexit__(_Closing, _Closing(), None)
        except* _Closing:
            pass


async def gather_owned(*work: Coroutine[Any, Any, T]) -> list[T]:
    """``asyncio.gather`` whose tasks never outlive it: the results in order, or the first
    exception — raised as itself, as ``gather`` does — once every sibling is cancelled and
    ended (``gather`` leaves them running when one raises)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(w) for w in work]
    except BaseExceptionGroup as group_error:
        first = group_error.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return [task.result() for task in tasks]
