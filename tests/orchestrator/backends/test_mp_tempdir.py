"""multiprocess's temp folder (the fork servers' sockets): what a killed orchestrator
leaves is cleared by the next one, and nothing else is."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import multiprocess.process
import pytest
from agentcell.orchestrator.backends import _mp_tempdir
from agentcell.worker.child import _proc

#: An orchestrator that prints its multiprocess temp folder and fork server, then waits
#: (to be killed) or, with "exit", leaves cleanly.
_ORCHESTRATOR = """
import asyncio, json, sys
import multiprocess.process
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._starters import forkserver_pid

async def main():
    async with WorkerPool(max_workers=1, warm=1) as pool:
        await pool.warmed()
        folder = multiprocess.process.current_process()._config["tempdir"]
        print(json.dumps({"folder": folder, "forkserver": forkserver_pid()}), flush=True)
        if sys.argv[1] == "wait":
            await asyncio.Event().wait()

asyncio.run(main())
"""


def _orchestrator(tmp: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _ORCHESTRATOR, mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
        start_new_session=True,
    )


@pytest.fixture()
def short_tmp() -> Iterator[Path]:
    """A temp folder with a short path: the fork servers' sockets go beneath it."""
    folder = Path(tempfile.mkdtemp(prefix="mp-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _report(process: subprocess.Popen[str]) -> dict[str, object]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the orchestrator failed (exit {process.wait()})"
    report: dict[str, object] = json.loads(line)
    return report


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _proc.is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _stop(process: subprocess.Popen[str], *pids: int) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()
    for pid in pids:
        if pid > 0:  # 0: never learnt (the orchestrator failed before it said)
            _proc.kill_session(pid)


def test_a_killed_orchestrators_folder_is_cleared_by_the_next(short_tmp: Path) -> None:
    killed = _orchestrator(short_tmp, "wait")
    server = 0
    try:
        report = _report(killed)
        folder, server = Path(str(report["folder"])), int(str(report["forkserver"]))
        assert folder.parent == short_tmp / f"agentcell-mp-{os.getuid()}"
        assert folder.name.startswith(f"{killed.pid}-")
        assert any(p.name.startswith(("sock-", "listener-")) for p in folder.iterdir())
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        _wait_gone(server, 5.0)
        assert folder.is_dir()  # no clean-up ran: the leftover the next one clears
    finally:
        _stop(killed, server)

    clean = _orchestrator(short_tmp, "exit")
    try:
        own = Path(str(_report(clean)["folder"]))
        assert not folder.exists()
        assert own.parent == folder.parent
        assert clean.wait(timeout=60) == 0
        assert not own.exists()  # its own: removed at its clean exit
    finally:
        _stop(clean)
    assert list(folder.parent.iterdir()) == []


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_only_the_folders_of_dead_orchestrators_are_removed(tmp_path: Path) -> None:
    gone = _dead_pid()
    dead = [tmp_path / f"{gone}-b{i}" for i in range(3)]
    live = tmp_path / f"{os.getpid()}-abc"
    others = [tmp_path / "pymp-x1", tmp_path / "abc-1", tmp_path / "12x-1", tmp_path / "99999999"]
    for folder in [*dead, live, *others]:
        folder.mkdir()
        (folder / "sock-1").write_text("")
    (tmp_path / f"{gone}-a-file").write_text("not a folder")  # sorted first: passed over
    assert _mp_tempdir.sweep_dead(tmp_path) == [folder.name for folder in dead]
    assert not any(folder.exists() for folder in dead)
    assert all(folder.is_dir() for folder in [live, *others])
    assert (tmp_path / f"{gone}-a-file").read_text() == "not a folder"
    assert _mp_tempdir.sweep_dead(tmp_path / "missing") == []


def test_a_folder_that_cannot_be_removed_does_not_stop_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = _dead_pid()
    stuck, other = tmp_path / f"{gone}-a", tmp_path / f"{gone}-b"
    stuck.mkdir()
    other.mkdir()
    real = shutil.rmtree

    def rmtree(path: Path, ignore_errors: bool = False) -> None:
        if Path(path) == stuck:
            if not ignore_errors:
                raise PermissionError(13, "Permission denied", str(path))
            return
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(_mp_tempdir.shutil, "rmtree", rmtree)
    _mp_tempdir.sweep_dead(tmp_path)
    assert stuck.is_dir() and not other.exists()


def test_the_exit_clean_up_removes_the_folder_and_forgets_only_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = multiprocess.process.current_process()._config
    mine = tmp_path / "mine"
    # Each path built anew (an equal string, not the same object); "a-other" sorts first.
    for current, expected in ((f"{mine}", None), (f"{tmp_path}/a-other", "a-other")):
        mine.mkdir()
        monkeypatch.setitem(config, "tempdir", current)
        _mp_tempdir._remove(shutil.rmtree, f"{tmp_path}/mine")
        assert not mine.exists()
        assert (config["tempdir"] and Path(config["tempdir"]).name) == expected
    _mp_tempdir._remove(shutil.rmtree, str(mine))  # gone already: no error


@pytest.fixture()
def no_temp_folder_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process may have made its own already; each test starts without one."""
    config = multiprocess.process.current_process()._config
    monkeypatch.setitem(config, "tempdir", None)


@pytest.mark.usefixtures("no_temp_folder_yet")
def test_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    victim = target / f"{_dead_pid()}-x"
    victim.mkdir(parents=True)
    (victim / "keep").write_text("data")
    base = tmp_path / "base"
    base.symlink_to(target)
    assert _mp_tempdir.use_own_temp_folder(base) is None
    assert (victim / "keep").read_text() == "data"
    assert multiprocess.process.current_process()._config["tempdir"] is None

    link = tmp_path / "real"
    link.mkdir(mode=0o700)
    (link / f"{_dead_pid()}-y").symlink_to(target)  # a link inside: never removed through
    _mp_tempdir.sweep_dead(link)
    assert (victim / "keep").read_text() == "data"


@pytest.mark.usefixtures("no_temp_folder_yet")
def test_a_folder_others_can_write_or_own_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    left = shared / f"{_dead_pid()}-z"
    left.mkdir()
    assert _mp_tempdir.use_own_temp_folder(shared) is None
    assert left.is_dir()  # not swept: the folder is not ours alone
    for mode in (0o720, 0o702):  # writable by its group, or by others
        shared.chmod(mode)
        assert _mp_tempdir.use_own_temp_folder(shared) is None
    assert left.is_dir()
    assert _mp_tempdir.use_own_temp_folder(tmp_path / "missing" / "base") is None
    if os.getuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        assert _mp_tempdir.use_own_temp_folder(foreign) is None
        # As that user (a uid that is no small cached int) it is our own; as the next
        # uid up it is not.
        monkeypatch.setattr(os, "getuid", lambda: int("65535"))
        assert _mp_tempdir.use_own_temp_folder(foreign) is None
        monkeypatch.setattr(os, "getuid", lambda: int("65534"))
        assert _mp_tempdir.use_own_temp_folder(foreign) is not None


@pytest.mark.usefixtures("no_temp_folder_yet")
def test_a_private_folder_is_used_and_an_existing_one_is_kept(tmp_path: Path) -> None:
    base = tmp_path / "base"
    made = _mp_tempdir.use_own_temp_folder(base)
    assert made is not None and made.parent == base and made.is_dir()
    assert made.name.startswith(f"{os.getpid()}-")
    assert base.stat().st_mode & 0o777 == 0o700
    assert multiprocess.process.current_process()._config["tempdir"] == str(made)
    assert _mp_tempdir.use_own_temp_folder(base) is None  # one per process
    made.rmdir()


@pytest.mark.usefixtures("no_temp_folder_yet")
def test_a_folder_too_deep_for_a_socket_is_not_used(tmp_path: Path) -> None:
    # The fork servers listen on sockets in it: a path past 107 bytes cannot be bound.
    room = _mp_tempdir.MAX_SOCKET_PATH - len(f"/{os.getpid()}-12345678/listener-12345678")
    fits = Path("/tmp") / ("d" * (room - len("/tmp/")))
    deep = Path("/tmp") / ("d" * (room - len("/tmp/") + 1))
    try:
        assert _mp_tempdir.use_own_temp_folder(deep) is None and not deep.exists()
        made = _mp_tempdir.use_own_temp_folder(fits)
        assert made is not None
        assert len(str(made / "listener-12345678")) == _mp_tempdir.MAX_SOCKET_PATH
    finally:
        shutil.rmtree(fits, ignore_errors=True)
