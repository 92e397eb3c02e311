"""What a worktree agent's hooks change in its worktree stays out of its commit
(``workspace/_hook_writes.py``), on a real repository and worktree: a hook's window is
``HookWrites.during`` (the runner enters it around every run of the agent's hooks), and
what is written outside a window is the agent's. The real sub-agent runs with a real
hook script are in ``test_worktree_hooks.py``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from agentcell.orchestrator.workspace._hook_writes import HookWrites
from agentcell.orchestrator.workspace._worktree import create_worktree
from git_util import branches, git, git_repo


@pytest.fixture
async def watched(tmp_path: Path) -> HookWrites:
    repo = git_repo(tmp_path / "repo")
    return HookWrites(await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1"))


def _committed(watched: HookWrites) -> list[str]:
    return git(watched.tree.repo, "show", "--name-only", "--format=", watched.tree.branch).split()


async def test_what_a_hook_writes_is_left_out_and_a_hook_alone_keeps_no_branch(
    watched: HookWrites,
) -> None:
    tree = watched.tree
    async with watched.during():  # a hook logging to os.path.join(payload["cwd"], "logs")
        (tree.path / "logs").mkdir()
        (tree.path / "logs" / "pre_tool_use.json").write_text("{}\n")
    async with watched.during():  # a later hook run appends: still the hook's
        with (tree.path / "logs" / "pre_tool_use.json").open("a") as log:
            log.write("{}\n")
    assert await watched.finish() is None  # nothing of the agent's: no branch
    assert not tree.path.exists() and len(branches(tree.repo)) == 1


async def test_the_agents_file_is_committed_and_the_hooks_log_left_in_the_worktree(
    watched: HookWrites,
) -> None:
    tree = watched.tree
    (tree.path / "made.txt").write_text("the agent's\n")
    async with watched.during():
        (tree.path / "hook.log").write_text("the hook's\n")
        (tree.path / "README.md").unlink()  # a hook that removes a tracked file
    kept = await watched.finish("agentcell: a1")
    assert kept is not None and _committed(watched) == ["made.txt"]
    assert "not committed: README.md, hook.log: a hook wrote them" in kept.diff_stat
    assert "made.txt" in kept.diff_stat.splitlines()[-2]
    assert (tree.path / "hook.log").read_text() == "the hook's\n"  # there, uncommitted


async def test_a_hooks_file_the_agent_wrote_again_is_the_agents(watched: HookWrites) -> None:
    tree = watched.tree
    async with watched.during():
        (tree.path / "notes.md").write_text("the hook's\n")
        (tree.path / "later.md").write_text("the hook's\n")
    (tree.path / "notes.md").write_text("the agent's, after the hook\n")  # no hook after it
    async with watched.during():  # nothing written in this one
        pass
    (tree.path / "later.md").write_text("the agent's, after the last hook\n")
    kept = await watched.finish()
    assert kept is not None and _committed(watched) == ["later.md", "notes.md"]
    shown = git(tree.repo, "show", f"{tree.branch}:notes.md")
    assert shown == "the agent's, after the hook"


async def test_an_agents_file_a_hook_rewrote_is_committed_as_the_hook_left_it(
    watched: HookWrites,
) -> None:
    """A formatter hook (PostToolUse on Write): the agent's file, formatted, is what is
    committed — the file you would have in a Claude Code session's folder."""
    tree = watched.tree
    (tree.path / "code.py").write_text("x=1\n")
    async with watched.during():
        (tree.path / "code.py").write_text("x = 1\n")
    kept = await watched.finish()
    assert kept is not None and _committed(watched) == ["code.py"]
    assert git(tree.repo, "show", f"{tree.branch}:code.py") == "x = 1"


async def test_overlapping_hook_runs_are_one_window(watched: HookWrites) -> None:
    """Two hooks of the agent run at once (parallel read-only calls): what either writes
    while the other's window is open is a hook's."""
    tree = watched.tree
    first_in, second_done = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with watched.during():
            first_in.set()
            await second_done.wait()
            (tree.path / "first.log").write_text("1\n")

    async def second() -> None:
        await first_in.wait()
        async with watched.during():
            (tree.path / "second.log").write_text("2\n")
        second_done.set()

    await asyncio.gather(first(), second())
    assert sorted(watched.owned) == ["first.log", "second.log"]
    assert await watched.finish() is None


async def test_a_link_in_the_way_is_never_followed(watched: HookWrites, tmp_path: Path) -> None:
    """The agent moves the hook's folders out of the worktree (their files unchanged) and
    leaves links to them, one in place of a folder, one in place of the file: the hook's
    files read as what is there now, links (never stat'ed through), so they are no longer
    the hook's, and what the agent left is committed."""
    tree = watched.tree
    async with watched.during():
        for folder in ("logs", "logs2"):
            (tree.path / folder).mkdir()
            (tree.path / folder / "a.json").write_text("{}\n")
    for folder in ("logs", "logs2"):
        os.rename(tree.path / folder, tmp_path / folder)
    (tree.path / "logs").symlink_to(tmp_path / "logs")
    (tree.path / "logs2").mkdir()
    (tree.path / "logs2" / "a.json").symlink_to(tmp_path / "logs2" / "a.json")
    assert watched.still_theirs() == []
    kept = await watched.finish()
    assert kept is not None and _committed(watched) == ["logs", "logs2/a.json"]


@pytest.mark.parametrize("planted", ["admin config.worktree", "own .git"])
async def test_the_status_around_a_hook_runs_nothing_the_agent_planted(
    tmp_path: Path, planted: str
) -> None:
    """The two ``git status`` of each hook window are git run by the parent in a tree the
    agent writes: an fsmonitor or a filter driver it names (in the admin folder's
    ``config.worktree``, or a ``.git`` of its own) never runs."""
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = git_repo(tmp_path / "repo")
    git(repo, "config", "extensions.worktreeConfig", "true")  # as sparse checkouts set it
    watched = HookWrites(await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1"))
    tree = watched.tree.path
    traps = {
        "core.fsmonitor": f"touch {markers}/fsmonitor; false",
        "filter.x.clean": f"touch {markers}/clean; cat",
    }
    if planted == "own .git":
        (tree / ".git").unlink()
        git(tree, "init", "-q", ".")
        for key, command in traps.items():
            git(tree, "config", key, command)
    else:
        for key, command in traps.items():
            git(tree, "config", "--worktree", key, command)
    (tree / ".gitattributes").write_text("* filter=x\n")
    (tree / "made.txt").write_text("by the agent\n")
    async with watched.during():
        (tree / "hook.log").write_text("{}\n")
    await watched.finish()
    assert sorted(os.listdir(markers)) == []
