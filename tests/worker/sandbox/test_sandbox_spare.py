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
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.protocol import PROTOCOL_VERSION, Start
from agentcell.worker import ChildBoot
from agentcell.worker.sandbox import _apply as _sandbox
from agentcell.worker.sandbox import _spare as _sandbox_spare
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


def test_a_spare_of_a_lower_pid_is_not_this_process(prepared_here: _sandbox_spare.Spare) -> None:
    prepared_here.pid -= 1
    try:
        assert _sandbox_spare.own_spare() is None
    finally:
        prepared_here.pid += 1
    assert _sandbox_spare.own_spare() is prepared_here


@pytest.mark.parametrize("shift", [-1, 1])
def test_a_folder_of_another_inode_either_way_is_not_used(
    prepared_here: _sandbox_spare.Spare, shift: int
) -> None:
    device, inode = prepared_here.tmp_identity
    prepared_here.tmp_identity = (device, inode + shift)
    assert _sandbox_spare.spare_tmp() is None


def test_a_spares_folder_removed_meanwhile_is_not_used(
    prepared_here: _sandbox_spare.Spare,
) -> None:
    assert prepared_here.tmpdir is not None
    prepared_here.tmpdir.rmdir()
    assert _sandbox_spare.spare_tmp() is None


@pytest.mark.parametrize("etc_key", [(0,), (2**62, 2**62, 2**62)])
def test_a_ruleset_from_another_etc_either_way_is_not_used(
    prepared_here: _sandbox_spare.Spare, etc_key: tuple[int, ...]
) -> None:
    ruleset = prepared_here.ruleset
    assert ruleset is not None
    found = _sandbox_spare.spare_ruleset(prepared_here.abi, wall_tcp=True, etc_key=etc_key)
    assert found is None and ruleset.fd == -1  # closed


def test_a_ruleset_of_other_tcp_handling_is_not_used(prepared_here: _sandbox_spare.Spare) -> None:
    ruleset = prepared_here.ruleset
    assert ruleset is not None
    key = prepared_here.etc_key
    assert _sandbox_spare.spare_ruleset(prepared_here.abi, wall_tcp=False, etc_key=key) is None
    assert ruleset.fd == -1


def test_the_ruleset_that_fits_is_handed_over_once(prepared_here: _sandbox_spare.Spare) -> None:
    abi, key = prepared_here.abi, prepared_here.etc_key
    ruleset = _sandbox_spare.spare_ruleset(abi, wall_tcp=True, etc_key=key)
    assert ruleset is not None and ruleset.fd >= 0
    try:
        assert _sandbox_spare.spare_ruleset(abi, wall_tcp=True, etc_key=key) is None
    finally:
        ruleset.close()


def test_a_run_without_walls_closes_the_spares_ruleset(
    prepared_here: _sandbox_spare.Spare,
) -> None:
    ruleset = prepared_here.ruleset
    assert ruleset is not None
    _sandbox_spare.drop_spare_ruleset()
    assert ruleset.fd == -1 and prepared_here.ruleset is None
    _sandbox_spare.drop_spare_ruleset()  # nothing left: nothing to do
    _sandbox_spare._spare = None
    _sandbox_spare.drop_spare_ruleset()


@pytest.mark.parametrize("abi", [0, 1])
def test_a_ruleset_is_made_before_the_hello_exactly_where_landlock_is(
    monkeypatch: pytest.MonkeyPatch, abi: int
) -> None:
    from agentcell.worker.sandbox import _landlock

    monkeypatch.setattr(_landlock, "abi_version", lambda: abi)
    _sandbox_spare.prepare()
    spare = _sandbox_spare._spare
    assert spare is not None
    try:
        assert (spare.ruleset is not None) is (abi >= 1)
        assert spare.abi == abi
    finally:
        if spare.ruleset is not None:
            spare.ruleset.close()
        _sandbox_spare._spare = None
        shutil.rmtree(_sandbox_spare.private_tmp(os.getpid()), ignore_errors=True)


def test_a_ruleset_that_could_not_be_filled_is_closed_and_left_to_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcell.worker.sandbox import _landlock_rules as _common_rules

    made: list[Any] = []
    new_ruleset = _common_rules.new_ruleset

    def recorded(*args: Any, **kwargs: Any) -> Any:
        made.append(new_ruleset(*args, **kwargs))
        return made[-1]

    def refused(*args: Any) -> None:
        raise OSError("landlock_add_rule: refused")

    monkeypatch.setattr(_common_rules, "new_ruleset", recorded)
    monkeypatch.setattr(_common_rules, "allow_common", refused)
    _sandbox_spare.prepare()
    spare = _sandbox_spare._spare
    try:
        assert spare is not None and spare.ruleset is None
        assert len(made) == 1 and made[0].fd == -1  # not left open
    finally:
        _sandbox_spare._spare = None
        shutil.rmtree(_sandbox_spare.private_tmp(os.getpid()), ignore_errors=True)


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp root of this test's own (``tempfile.tempdir``): the folder above every
    sub-agent's private one is made, checked and tampered with there."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return _sandbox_spare.private_tmp(os.getpid()).parent


def test_the_private_folders_are_the_users_alone(own_tmp: Path) -> None:
    private = _sandbox_spare.make_private_tmp()
    assert private.parent == own_tmp
    assert own_tmp.stat().st_mode & 0o777 == 0o700
    assert private.stat().st_mode & 0o777 == 0o700


def test_a_folder_above_that_is_a_link_is_refused(own_tmp: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    own_tmp.symlink_to(elsewhere)
    with pytest.raises(OSError, match="not this user's own folder"):
        _sandbox_spare.make_private_tmp()


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
@pytest.mark.parametrize("owner", [1, 65534])
def test_a_folder_above_of_another_user_is_refused(own_tmp: Path, owner: int) -> None:
    own_tmp.mkdir(mode=0o700)
    os.chown(own_tmp, owner, owner)
    with pytest.raises(OSError, match="not this user's own folder"):
        _sandbox_spare.make_private_tmp()
