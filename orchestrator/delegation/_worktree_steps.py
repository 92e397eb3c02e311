"""Who owns a worktree's git steps: the runner, for as long as it lives.

``git worktree add`` must go on after its run is cancelled (git stopped half-way leaves
a registered worktree or a branch behind), so it cannot run in the run's own task or
group, which the cancel ends. It runs in the runner's ``TaskNursery`` instead. A
cancelled run hands the take-away of its (still unchanged) tree to the same nursery and
waits for it, so that when the cancel has gone through, the tree is gone; a second
cancel (the caller's group aborting) stops only that wait, never the take-away. The
runner's close lets every step finish (git is not cancelled), so no step outlives the
orchestrator and none is destroyed while pending.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from agentcell.orchestrator._tasks import NurseryClosed, TaskNursery
from agentcell.orchestrator.delegation._worktree import (
    Worktree,
    WorktreeError,
    create_worktree,
    finish_worktree,
)

log = logging.getLogger("agentcell.runner")


class WorktreeSteps:
    """The runner's git steps for ``isolation: worktree``; see the module's docstring."""

    def __init__(self) -> None:
        self._nursery = TaskNursery("worktree steps")

    def __len__(self) -> int:
        """Steps still in flight (a creation, a take-away)."""
        return len(self._nursery)

    async def open(self) -> None:
        await self._nursery.open()

    async def aclose(self) -> None:
        """Wait for every step to finish (none is cancelled); nothing new starts."""
        await self._nursery.aclose(cancel=False)

    async def create(self, workdir: Path, root: Path, name: str, branch: str) -> Worktree:
        """A new worktree for one run, made by a step that a cancel of the run does not stop."""
        failed: list[Exception] = []
        try:
            making = self._nursery.start(
                create_worktree(workdir, root, name, branch),
                name=f"worktree {name}",
                on_error=failed.append,
            )
        except NurseryClosed:
            raise WorktreeError(
                "isolation: the orchestrator is closing (or not entered): no new worktree"
            ) from None
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
        try:
            taking = self._nursery.start(
                _remove_when_made(making),
                name=f"worktree {name}: take away",
                on_error=lambda exc: log.warning(
                    "could not take away the worktree of %s: %s", name, exc
                ),
            )
        except NurseryClosed:
            # The runner is closing (its close waits for ``making``): removed in this task.
            await _remove_when_made(making)
            return
        await asyncio.shield(taking)


async def _remove_when_made(making: asyncio.Task[Worktree | None]) -> None:
    tree = await making
    if tree is not None:
        await finish_worktree(tree)
