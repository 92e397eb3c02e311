"""What a worktree agent's hooks write in its worktree: theirs, never the agent's commit.

A hook runs in the parent, as you, and its input's ``cwd`` is the agent's worktree (guards
compare tool paths to it), so a hook that logs to ``os.path.join(payload["cwd"], "logs")``
writes there. The parent watches the worktree while any hook of that agent runs: when the
first of them starts and when the last of them ends (runs that overlap make one window)
it lists the worktree's changed paths (``git status`` against the branch, in a private git
folder of the parent's: nothing of the agent's is read as git's) and ``lstat``s each,
never through a link. A path unchanged before the window and changed after it is the
hook's; the finish leaves it out of the commit and the diff stat, unless it is no longer
as the hook's last run left it (the agent wrote it again since: it is then the agent's).

A path the agent had changed before a hook touched it stays the agent's, as it is after
the hook: a formatter hook's rewrite (``PostToolUse`` running ``prettier`` on the file the
agent just wrote) is what you would commit, and a Claude Code session leaves the same file
in your folder; the agent's bytes before the hook are not kept. What runs outside a hook's
window is the agent's, and inside one is the hook's: the agent waits for its hook's
answer, and only read-only tools run beside another call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from agentcell.orchestrator.workspace._safe_git import GitError, SafeGit
from agentcell.orchestrator.workspace._worktree import (
    KeptWorktree,
    Worktree,
    finish_worktree,
    private_view,
    replaced,
)

log = logging.getLogger("agentcell.worktree")

#: What ``lstat`` says of a path: (mode, size, mtime_ns, ctime_ns, inode); None: absent
#: (or behind a link, which is never followed). A write changes its ctime at least.
Seen = tuple[int, int, int, int, int] | None

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HookWrites:
    """One worktree agent's hook windows, and the paths its hooks changed in them."""

    def __init__(self, tree: Worktree) -> None:
        self.tree = tree
        #: Each path a hook changed, as the hook's last run left it.
        self.owned: dict[str, Seen] = {}
        self._lock = asyncio.Lock()
        self._running = 0
        self._before: dict[str, Seen] | None = None
        self._git: SafeGit | None = None
        self._private = ""  # the parent's git folder for the status (made at first use)
        self._closed = False

    @contextlib.asynccontextmanager
    async def during(self) -> AsyncIterator[None]:
        """Around one run of the agent's hooks."""
        async with self._lock:
            if self._running == 0 and not self._closed:
                self._before = await self._changed()
                if self._before is not None:
                    self._forget_rewritten(self._before)
            self._running += 1
        try:
            yield
        finally:
            async with self._lock:
                self._running -= 1
                if self._running == 0 and self._before is not None:
                    after = await self._changed()
                    if after is not None:
                        self._attribute(self._before, after)
                    self._before = None

    def _forget_rewritten(self, now: dict[str, Seen]) -> None:
        """Between windows, the agent ran: a hook's path it changed again is its own."""
        for path, seen in list(self.owned.items()):
            if path not in now or now[path] != seen:
                del self.owned[path]

    def _attribute(self, before: dict[str, Seen], after: dict[str, Seen]) -> None:
        for path, seen in after.items():
            if path not in before or path in self.owned:  # new in the window, or the hook's
                self.owned[path] = seen
        for path in [path for path in self.owned if path not in after]:
            del self.owned[path]  # as the branch has it again: nothing to leave out

    def still_theirs(self) -> list[str]:
        """The hooks' paths still as their last run left them: left out of the commit."""
        now = _seen_all(self.tree, list(self.owned))
        if now is None:
            return []
        return sorted(path for path, seen in self.owned.items() if now[path] == seen)

    async def finish(self, message: str = "agentcell: sub-agent changes") -> KeptWorktree | None:
        """``finish_worktree``, the hooks' writes left out; then the watch is closed."""
        try:
            return await finish_worktree(self.tree, message, hooks_wrote=self.still_theirs())
        finally:
            self.close()

    def close(self) -> None:
        """Remove the private git folder; a hook run after this is watched no more."""
        if self._private:
            shutil.rmtree(self._private, ignore_errors=True)
        self._private = ""
        self._git = None
        self._before = None
        self._closed = True

    async def _changed(self) -> dict[str, Seen] | None:
        """The worktree's changed paths (tracked or not, not ignored) and what each is;
        None when they cannot be listed (then the window attributes nothing)."""
        if replaced(self.tree):
            return None
        try:
            git = await self._opened()
            listing = ("--porcelain", "-z", "--untracked-files=all", "--no-renames")
            code, out = await git.run("status", *listing, strip=False)
        except (GitError, OSError) as exc:
            log.warning("%s: the hooks' writes cannot be told apart: %s", self.tree.path, exc)
            return None
        if code != 0:
            log.warning("%s: git status failed: %s", self.tree.path, " ".join(out.split()))
            return None
        paths = [entry[3:].rstrip("/") for entry in out.split("\0") if len(entry) > 3]
        return _seen_all(self.tree, paths)

    async def _opened(self) -> SafeGit:
        if self._git is None:
            self._private = tempfile.mkdtemp(prefix="agentcell-hooks-")
            git = await SafeGit.open(private_view(self.tree, Path(self._private)))
            # The branch as it is now, once; git status refreshes the stat data it keeps.
            code, out = await git.run("read-tree", self.tree.branch)
            if code != 0:
                raise GitError(f"git read-tree {self.tree.branch} failed: {out}")
            self._git = git
        return self._git


def _seen_all(tree: Worktree, paths: list[str]) -> dict[str, Seen] | None:
    """``lstat`` of each path in the worktree, through folder descriptors opened without
    following a link (a link in the way reads as absent); None if the worktree itself is
    not the folder git made."""
    try:
        root = os.open(tree.path, _FOLDER)
    except OSError:
        return None
    try:
        info = os.fstat(root)
        if (info.st_dev, info.st_ino) != tree.ids["worktree"]:
            return None
        return {path: _seen(root, path) for path in paths}
    finally:
        os.close(root)


def _seen(root: int, path: str) -> Seen:
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    opened: list[int] = []
    try:
        folder = root
        for part in parts[:-1]:
            folder = os.open(part, _FOLDER, dir_fd=folder)
            opened.append(folder)
        info = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
    except OSError:
        return None
    finally:
        for fd in opened:
            os.close(fd)
    return info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino
