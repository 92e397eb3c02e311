"""What a spare does before its Hello for the sandbox of the run it will get
(``_sandbox.prepare``): its private temp folder and a Landlock ruleset with the rules
every sandbox has. Used only by that process, only where they fit, and never weaker
than the sandbox made from scratch."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.backends import WorkerPool
from agentcell.protocol import PROTOCOL_VERSION, Start
from agentcell.worker import ChildBoot, _sandbox, _sandbox_spare
from conftest import SpawnRecorder

CAPS = _sandbox.probe()
pytestmark = pytest.mark.skipif(not CAPS["landlock_tcp"], reason="needs Landlock ABI 4")


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, str]:
    workdir, marker = tmp_path / "work", tmp_path / "marker"
    for folder in (workdir, marker):
        folder.mkdir()
        (folder / "file").write_text("x")
    (tmp_path / "secret").write_text("key")
    return {"workdir": str(workdir), "marker": str(marker), "secret": str(tmp_path / "secret")}


async def _enter(
    folders: dict[str, str], port: int, *, boot: ChildBoot | None = None, **args: Any
) -> dict[str, Any]:
    async with WorkerPool(max_workers=1, warm=1, boot=boot) as pool, pool.lease() as lease:
        await lease.send(
            Start(
                protocol_version=PROTOCOL_VERSION,
                run_id="r",
                handler="spare_handlers:run",
                args={"model_ports": [], **folders, "port": port, **args},
            )
        )
        outcome = await lease.wait()
    assert outcome.result is not None, outcome
    report: dict[str, Any] = json.loads(outcome.result.text)
    return report


async def test_a_spare_enters_the_sandbox_with_what_it_made_before_its_start(
    spawned: SpawnRecorder, folders: dict[str, str], listener: int
) -> None:
    report = await _enter(folders, listener)
    assert report["made_before_start"]
    # The folder made before the Start is the run's, empty; the ruleset made then is the
    # one the process was restricted with (the marker rule added to it holds) and is
    # closed now.
    assert report["tmp"] == report["tmp_before"] and report["tmp_same"]
    assert report["tmp_entries"] == []
    assert report["marker"] and not report["ruleset_left_open"]
    # And it walls what a sandbox made from scratch walls: the rest of the disk, TCP.
    assert not report["secret"] and report["tcp"] == "walled"
    assert report["etc"] and report["devnull"] and report["workdir"]


async def test_a_run_whose_tcp_is_its_own_does_not_get_the_spares_ruleset(
    spawned: SpawnRecorder, folders: dict[str, str], listener: int
) -> None:
    """The spare's ruleset walls TCP; a run with in-process custom code keeps its own
    (``model_ports`` None): it gets a new ruleset, and the spare's is closed."""
    report = await _enter(folders, listener, model_ports=None)
    assert report["made_before_start"]
    assert not report["marker"] and not report["ruleset_left_open"]
    assert report["tcp"] == "connected"
    assert not report["secret"] and report["etc"] and report["workdir"]


async def test_a_spares_folder_touched_while_it_waited_is_made_again(
    spawned: SpawnRecorder, folders: dict[str, str], listener: int
) -> None:
    """A spare may wait long; a process of the user outside the walls may put a file in
    its folder meanwhile. The run gets a new, empty folder, never one with that in it."""
    report = await _enter(folders, listener, plant=True)
    assert report["tmp"] == report["tmp_before"]
    assert report["tmp_entries"] == []  # made again (its inode number may be the same)
    assert report["marker"]  # the ruleset did fit


async def test_a_spare_told_not_to_prepare_makes_it_all_at_the_start(
    spawned: SpawnRecorder, folders: dict[str, str], listener: int
) -> None:
    report = await _enter(folders, listener, boot=ChildBoot(prepare_sandbox=False))
    assert not report["made_before_start"]
    assert report["tmp_entries"] == [] and os.path.basename(report["tmp"]).isdigit()
    assert not report["secret"] and report["tcp"] == "walled" and report["etc"]


@pytest.fixture
def prepared_here() -> Iterator[_sandbox_spare.Spare]:
    """``prepare`` run in this (test) process: no wall is applied here, only made."""
    stale = _sandbox_spare.private_tmp(os.getpid())
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "left by a process that had this pid").write_text("x")
    _sandbox_spare.prepare()
    spare = _sandbox_spare._spare
    assert spare is not None
    try:
        yield spare
    finally:
        if spare.ruleset is not None:
            spare.ruleset.close()
        _sandbox_spare._spare = None
        if stale.is_symlink():
            stale.unlink()
        shutil.rmtree(stale, ignore_errors=True)


def test_a_stale_folder_under_the_spares_pid_is_replaced(
    prepared_here: _sandbox_spare.Spare,
) -> None:
    assert prepared_here.tmpdir == _sandbox_spare.private_tmp(os.getpid())
    assert os.listdir(prepared_here.tmpdir) == []


def test_a_spares_folder_swapped_for_a_link_is_not_used(
    prepared_here: _sandbox_spare.Spare, tmp_path: Path
) -> None:
    folder = prepared_here.tmpdir
    assert folder is not None
    folder.rmdir()
    folder.symlink_to(tmp_path)  # an empty folder elsewhere (the home, say)
    assert _sandbox_spare.spare_tmp() is None


def test_a_spares_folder_swapped_for_another_folder_is_not_used(
    prepared_here: _sandbox_spare.Spare, tmp_path: Path
) -> None:
    folder = prepared_here.tmpdir
    assert folder is not None
    other = tmp_path / "other"
    other.mkdir()  # made while the spare's folder still exists: another inode
    folder.rmdir()
    other.rename(folder)  # a real, empty folder, but not the one the spare made
    assert _sandbox_spare.spare_tmp() is None


def test_a_spares_folder_is_used_once(prepared_here: _sandbox_spare.Spare) -> None:
    assert _sandbox_spare.spare_tmp() == _sandbox_spare.private_tmp(os.getpid())
    assert _sandbox_spare.spare_tmp() is None


def test_a_process_forked_from_a_spare_does_not_use_its_ruleset(
    prepared_here: _sandbox_spare.Spare,
) -> None:
    abi, key = prepared_here.abi, prepared_here.etc_key
    prepared_here.pid += 1  # as seen from a process the spare forked
    assert _sandbox_spare.spare_ruleset(abi, wall_tcp=True, etc_key=key) is None
    assert _sandbox_spare.spare_tmp() is None
    prepared_here.pid -= 1
    assert _sandbox_spare.spare_ruleset(abi, wall_tcp=True, etc_key=(0,)) is None  # /etc changed
    assert prepared_here.ruleset is None  # closed: it did not fit
