"""The runner's steps that must finish after their run is cancelled, and their owner.

Some of a run's work must go on when the run is cancelled: releasing its process (the
outcome is read, the process reaped), closing its egress proxy, committing what it
changed in its worktree, and ``git worktree add`` itself (git stopped half-way leaves a
registered worktree or a branch behind). ``asyncio.shield`` alone would run each in a
task nobody owns: a second cancel of the run would leave it pending. Here each is a
member of the runner's ``TaskNursery``: the run waits for it (``shielded``), a cancel
stops only that wait, and the runner's close lets every step finish (it cancels
nothing), so no step outlives the orchestrator and none is destroyed while pending.

A run cancelled while git makes its worktree hands the take-away of the (still
unchanged) tree to the same owner and waits for it, so that when the cancel has gone
through, the tree is gone; a second cancel again ends only the wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

from agentcell.orchestrator.workspace._worktree import (
    Worktree,
    WorktreeError,
    create_worktree,
    finish_worktree,
)
from agentcell.protocol import TaskNursery

log = logging.getLogger("agentcell.runner")

T = TypeVar("T")


def worktree_place(run_dir: str, workdir: str, session: str, agent_id: str) -> tuple[Path, str]:
    """Where a sub-agent's new worktree goes (its run's folder) and its branch's name."""
    if run_dir:
        root, run = Path(run_dir), Path(run_dir).name
    else:  # no run record: a name of its own, so sessions never collide
        run = f"session-{session}"
        root = Path(workdir) / ".agentcell" / "worktrees" / run
    return root, f"agentcell/{run}/{agent_id}"


class FinishingSteps:
    """The runner's steps that outlive a cancel; see the module's docstring."""

    def __init__(self) -> None:
        self._nursery = TaskNursery("the runner's finishing steps")

    def __len__(self) -> int:
        """Steps still in flight."""
        return len(self._nursery)

    async def open(self) -> None:
        await self._nursery.open()

    async def aclose(self) -> None:
        """Wait for every step to finish (none is cancelled); nothing new starts."""
        await self._nursery.aclose(cancel=False)

    async def shielded(self, work: Coroutine[Any, Any, T], name: str) -> T:
        """``await work`` as a member: a cancel of the caller ends its wait, never the work
        (``asyncio.shield`` with an owner). Its result or its exception is the caller's."""
        if not self._nursery.is_open:  # not opened, or closing: in this task, unshielded
            return await work
        failed: list[Exception] = []
        step = self._nursery.start(work, name=name, on_error=failed.append)
        done = await asyncio.shield(step)
        if failed:
            raise failed[0]
        return cast(T, done)

    async def worktree(self, workdir: Path, root: Path, name: str, branch: str) -> Worktree:
        """A new worktree for one run, made by a step that a cancel of the run does not stop."""
        if not self._nursery.is_open:
            raise WorktreeError(
                "isolation: the orchestrator is closing (or not entered): no new worktree"
            )
        failed: list[Exception] = []
        making = self._nursery.start(
            create_worktree(workdir, root, name, branch),
            name=f"worktree {name}",
            on_error=failed.append,
        )
        try:
            tree = await asyncio.shield(making)
        except asyncio.CancelledError:
            await self._take_away(making, name)
            raise
        if tree is None:
            raise failed[0]  # git's own error (WorktreeError, OSError), for the run's result
        return tree

    async def _take_away(self, making: asyncio.Task[Worktree | None], name: str) -> None:
        """Once git has made it, remove the tree a cancelled run will never use."""
        if not self._nursery.is_open:
            # The runner is closing (its close waits for ``making``): removed in this task.
            await _remove_when_made(making)
            return
        taking = self._nursery.start(
            _remove_when_made(making),
            name=f"worktree {name}: take away",
            on_error=lambda exc: log.warning(
                "could not take away the worktree of %s: %s", name, exc
            ),
        )
        await asyncio.shield(taking)


async def _remove_when_made(making: asyncio.Task[Worktree | None]) -> None:
    tree = await making
    if tree is not None:
        await finish_worktree(tree)
