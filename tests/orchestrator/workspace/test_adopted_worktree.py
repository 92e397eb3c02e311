"""A resumed run's worktree agent goes on in the worktree the killed run gave it — the one
recorded in the journal, never a folder planted at its path since.

The worktree lies in the killed run's folder, which sub-agents may write: adoption trusts
only what the journal recorded when git made it (before any agent ran), as the finish does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec
import pytest
from agentcell.orchestrator.workspace._worktree import (
    Worktree,
    WorktreeError,
    adopt_worktree,
    create_worktree,
    finish_worktree,
    journaled_worktree,
)
from git_util import git, git_repo


def _through_the_journal(tree: Worktree) -> dict[str, object]:
    """As a resume reads it back: msgpack, as the journal's records are."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(journaled_worktree(tree)))


@pytest.fixture
async def made(tmp_path: Path) -> tuple[Worktree, dict[str, object]]:
    repo = git_repo(tmp_path / "repo")
    tree = await create_worktree(repo, tmp_path / "killed-run", "a1", "agentcell/r/a1")
    return tree, _through_the_journal(tree)


async def test_the_journaled_worktree_is_gone_on_in_and_finished_on_its_branch(
    made: tuple[Worktree, dict[str, object]],
) -> None:
    tree, journaled = made
    (tree.workdir / "before.txt").write_text("written before the kill\n")
    # What the killed agent left in git's marks: put back before anything runs there.
    (tree.admin / "config.worktree").write_text("[core]\n\tfsmonitor = touch /tmp/x\n")
    (tree.admin / "gitdir").write_text("/elsewhere/.git\n")
    adopted = adopt_worktree(journaled)
    assert adopted == tree
    assert not (tree.admin / "config.worktree").exists()
    assert (tree.admin / "gitdir").read_text() == f"{tree.path}/.git\n"
    (adopted.workdir / "after.txt").write_text("written by the resumed agent\n")
    kept = await finish_worktree(adopted, "agentcell: a1")
    assert kept is not None and kept.path == str(tree.path) and kept.commit_error == ""
    listed = git(tree.repo, "ls-tree", "--name-only", "agentcell/r/a1").split()
    assert listed == ["README.md", "after.txt", "before.txt"]


async def test_a_folder_planted_at_its_path_is_not_adopted(
    made: tuple[Worktree, dict[str, object]], tmp_path: Path
) -> None:
    tree, journaled = made
    shutil.move(tree.path, tmp_path / "aside")
    tree.path.mkdir()
    (tree.path / ".git").write_text(f"gitdir: {tmp_path / 'hostile.git'}\n")
    with pytest.raises(WorktreeError) as caught:
        adopt_worktree(journaled)
    assert str(caught.value) == f"{tree.path} was replaced or removed since the killed run"
    assert (tree.path / ".git").read_text() == f"gitdir: {tmp_path / 'hostile.git'}\n"


async def test_a_link_to_the_very_worktree_is_not_adopted(
    made: tuple[Worktree, dict[str, object]], tmp_path: Path
) -> None:
    tree, journaled = made
    shutil.move(tree.path, tmp_path / "aside")
    tree.path.symlink_to(tmp_path / "aside")  # the same folder, reached through a link
    with pytest.raises(WorktreeError, match="replaced or removed since the killed run"):
        adopt_worktree(journaled)


async def test_a_replaced_admin_folder_or_repository_is_not_adopted(
    made: tuple[Worktree, dict[str, object]], tmp_path: Path
) -> None:
    tree, journaled = made
    os.rename(tree.admin, tmp_path / "admin-aside")
    shutil.copytree(tmp_path / "admin-aside", tree.admin)
    with pytest.raises(WorktreeError, match=f"{tree.admin} was replaced"):
        adopt_worktree(journaled)
    shutil.rmtree(tree.admin)
    os.rename(tmp_path / "admin-aside", tree.admin)
    adopt_worktree(journaled)  # the very folder again: adopted
    common = tree.home.common_dir
    os.rename(common, tmp_path / "common-aside")
    shutil.copytree(tmp_path / "common-aside", common, symlinks=True)
    with pytest.raises(WorktreeError, match=f"{common} was replaced"):
        adopt_worktree(journaled)


@pytest.mark.parametrize(
    "damage",
    [
        lambda j: j.pop("marks"),
        lambda j: j["ids"].pop("admin"),
        lambda j: j.update(home=["only one"]),
        lambda j: j.update(ids={"worktree": "x", "admin": [1], "common": [1, 2]}),
        lambda j: j.update(workdir="/"),
    ],
    ids=["no marks", "no admin id", "short home", "bad ids", "workdir outside"],
)
async def test_a_journaled_worktree_that_does_not_read_is_one_line(
    made: tuple[Worktree, dict[str, object]], damage: object
) -> None:
    _, journaled = made
    damage(journaled)  # type: ignore[operator]
    with pytest.raises(WorktreeError) as caught:
        adopt_worktree(journaled)
    assert "\n" not in str(caught.value)
