"""File-system isolation: a fresh git worktree (and branch) per sub-agent.

The child works in ``<root>/worktrees/<agent-id>`` on branch ``agentcell/<run>/<agent-id>``.
When it ends with nothing changed, the worktree and the branch are removed; otherwise
what it left is committed on that branch (a message naming the agent and its task), both
are kept, and the result says where, on which branch and commit, and what changed — work
is never silently lost, and ``git merge <branch>`` takes it. Git commands on one
repository are serialised: concurrent ``git worktree add`` calls contend for the same
administrative files.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

from agentcell.worker import remove_protection_placeholders


class WorktreeError(Exception):
    """The worktree could not be made; the message says why and what to do."""


@dataclasses.dataclass(slots=True)
class Worktree:
    repo: Path  # the repository's top level
    path: Path  # the new worktree
    branch: str
    base: str  # the commit it branched from
    workdir: Path  # where the child works: the same place inside the worktree


@dataclasses.dataclass(frozen=True, slots=True)
class KeptWorktree:
    path: str
    branch: str
    diff_stat: str
    commit: str  # the branch's head after the agent's changes were committed
    commit_error: str = ""  # why the changes are left uncommitted (staged), if they are


#: Who commits an agent's work when the repository names nobody.
_FALLBACK_IDENTITY = ("-c", "user.name=agentcell", "-c", "user.email=agentcell@localhost")


_locks: dict[tuple[int, Path], asyncio.Lock] = {}


async def _git(*args: str, cwd: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace").strip()


def _lock(repo: Path) -> asyncio.Lock:
    # One lock per repository and event loop (an asyncio lock belongs to one loop).
    key = (id(asyncio.get_running_loop()), repo)
    lock = _locks.get(key)
    if lock is None:
        lock = _locks[key] = asyncio.Lock()
    return lock


async def create_worktree(workdir: Path, root: Path, name: str, branch: str) -> Worktree:
    code, top = await _git("rev-parse", "--show-toplevel", cwd=workdir)
    if code != 0:
        raise WorktreeError(
            f"isolation: worktree needs a git repository, and {workdir} is not inside one "
            "(run `git init` and commit, or drop the isolation setting)"
        )
    repo = Path(top)  # git prints the real path
    code, base = await _git("rev-parse", "--verify", "HEAD^{commit}", cwd=repo)
    if code != 0:
        raise WorktreeError(
            f"isolation: worktree needs a commit to branch from, and {repo} has none yet "
            "(commit once first)"
        )
    path = root / "worktrees" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    async with _lock(repo):
        code, out = await _git(
            "worktree", "add", "--quiet", "-b", branch, str(path), base, cwd=repo
        )
    if code != 0:
        raise WorktreeError(f"isolation: git could not add a worktree at {path}: {out}")
    _, prefix = await _git("rev-parse", "--show-prefix", cwd=workdir)
    inside = Path(prefix)  # where the workdir sits inside the repository
    return Worktree(repo=repo, path=path, branch=branch, base=base, workdir=path / inside)


async def finish_worktree(
    tree: Worktree, message: str = "agentcell: sub-agent changes"
) -> KeptWorktree | None:
    """Remove the worktree if nothing changed; otherwise commit what the agent left on its
    branch (with ``message``), keep both, and describe the changes since the base."""
    remove_protection_placeholders(tree.path)  # never committed: they stand for "absent"
    _, status = await _git("status", "--porcelain", "--untracked-files=all", cwd=tree.path)
    _, ahead = await _git("rev-list", "--count", f"{tree.base}..HEAD", cwd=tree.path)
    if not status and ahead.strip() in ("", "0"):
        async with _lock(tree.repo):
            await _git("worktree", "remove", "--force", str(tree.path), cwd=tree.repo)
            await _git("branch", "-D", tree.branch, cwd=tree.repo)
        return None
    await _git("add", "--all", cwd=tree.path)
    commit_error = ""
    if status:
        code, out = await _git(*await _identity(tree.path), *_COMMIT, "-m", message, cwd=tree.path)
        if code != 0:  # left staged, and the result says why
            commit_error = " ".join(out.split())
    _, head = await _git("rev-parse", "HEAD", cwd=tree.path)
    # Against the index: the commit when it worked, the staged changes when it did not.
    _, stat = await _git("diff", "--cached", "--stat", tree.base, cwd=tree.path)
    return KeptWorktree(
        path=str(tree.path),
        branch=tree.branch,
        diff_stat=stat,
        commit=head.strip(),
        commit_error=commit_error,
    )


# No hooks (the repository's pre-commit checks are for people, and could run anything in
# the parent) and no signing (gpg would wait for a passphrase nobody types).
_COMMIT = ("-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify")


async def _identity(path: Path) -> tuple[str, ...]:
    """The repository's own author when it has one, else agentcell's."""
    code, email = await _git("config", "--get", "user.email", cwd=path)
    return () if code == 0 and email.strip() else _FALLBACK_IDENTITY
