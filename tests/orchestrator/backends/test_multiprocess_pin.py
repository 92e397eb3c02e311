"""What agentcell patches in ``multiprocess``, checked against the installed one.

The fork server's peer check and lean start request (worker/child/_fork_request.py), the
explicit environment of a fork server's exec (orchestrator/backends/_starters.py) and the
skipped ``__main__`` (orchestrator/backends/_forkserver.py) replace or wrap multiprocess
internals. multiprocess ships those internals per Python version, so these checks run on
whichever Python runs the suite: if an upgrade moves what is patched, they fail here,
naming it, instead of the fork server running silently unguarded.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
import tomllib
from importlib import metadata
from typing import Any

import pytest
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._starters import forkserver_pids
from conftest import SpawnRecorder
from places import ROOT

#: The multiprocess releases the patches were written and checked against.
PATCHED_FOR = ((0, 70, 16), (0, 70, 20))  # [lower, upper)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_pyproject_pins_multiprocess_to_the_range_the_patches_were_written_for() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pin] = [d for d in project["dependencies"] if d.startswith("multiprocess")]
    low, high = PATCHED_FOR
    assert pin == f"multiprocess>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}", pin
    installed = _version(metadata.version("multiprocess"))
    assert low <= installed < high, (
        f"multiprocess {metadata.version('multiprocess')} is outside the range agentcell's "
        f"fork-server patches were checked against ({pin}): re-check them (this file), "
        "then widen the pin"
    )


def _source(function: Any) -> str:
    return inspect.getsource(function)


def test_the_fork_server_loop_still_calls_what_agentcell_replaces() -> None:
    """The peer check replaces ``reduction.recvfds`` and the lean request replaces
    ``_serve_one``: both only work while the loop looks them up at call time, and a
    refused peer is skipped only while the loop ignores ECONNABORTED."""
    from multiprocess import forkserver

    loop = _source(forkserver.main)
    problems = [
        f"multiprocess.forkserver.main no longer {what}"
        for what, present in (
            ("calls reduction.recvfds(s, ...)", "reduction.recvfds(s," in loop),
            (
                "calls the module's _serve_one(child_r, fds, ...)",
                "_serve_one(child_r, fds," in loop,
            ),
            ("skips an ECONNABORTED connection", "errno.ECONNABORTED" in loop),
        )
        if not present
    ]
    assert problems == [], problems


def test_serve_one_still_does_what_agentcells_copy_of_it_does() -> None:
    """agentcell's ``serve_one`` repeats the first steps of multiprocess's ``_serve_one``
    and serves multiprocess's own request as ``spawn._main`` would."""
    from multiprocess import forkserver, process, spawn, util

    assert list(inspect.signature(forkserver._serve_one).parameters) == [
        "child_r",
        "fds",
        "unused_fds",
        "handlers",
    ]
    serve = _source(forkserver._serve_one)
    for step in (
        "signal.set_wakeup_fd(-1)",
        "_forkserver._forkserver_alive_fd",
        "resource_tracker._resource_tracker._fd",
        "*_forkserver._inherited_fds) = fds",
        "spawn._main(child_r, parent_sentinel)",
    ):
        assert step in serve, f"multiprocess.forkserver._serve_one changed: {step!r} is gone"
    main = _source(spawn._main)
    for step in ("_inheriting = True", "prepare(preparation_data)", "_bootstrap(parent_sentinel)"):
        assert step in main, f"multiprocess.spawn._main changed: {step!r} is gone"
    assert callable(util._close_stdin) and callable(util._run_after_forkers)
    assert "parent_sentinel" in inspect.signature(process.BaseProcess._bootstrap).parameters
    assert list(inspect.signature(spawn.get_preparation_data).parameters) == ["name"]


def _starting_source(owner: type) -> str:
    """``ensure_running`` and what it calls to start the process: multiprocess for 3.13
    moved the resource tracker's start into ``_ensure_running_and_write`` and ``_launch``."""
    steps = ("ensure_running", "_ensure_running_and_write", "_launch")
    return "".join(_source(getattr(owner, step)) for step in steps if hasattr(owner, step))


def test_fork_servers_are_started_through_the_spawn_agentcell_wraps() -> None:
    from multiprocess import forkserver, resource_tracker, util

    for owner in (forkserver.ForkServer, resource_tracker.ResourceTracker):
        assert "util.spawnv_passfds(exe, args, fds_to_pass)" in _starting_source(owner), owner
    assert getattr(util.spawnv_passfds, "__name__", "") == "_spawnv_passfds"  # ours is in


async def test_a_fork_server_gets_the_minimal_environment_and_ours_is_never_touched(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCELL_PIN_TEST_SECRET", "sk-pin-test-not-real")
    writes: list[str] = []
    for name in ("clear", "update", "pop", "setdefault", "popitem"):
        original = getattr(os.environ, name)

        def recording(*args: Any, _original: Any = original, _name: str = name) -> Any:
            writes.append(f"{_name} from {threading.current_thread().name}")
            return _original(*args)

        monkeypatch.setattr(os.environ, name, recording)
    assert forkserver_pids() == []  # this pool starts the fork server
    async with WorkerPool(max_workers=1, warm=0, starters=1) as pool:
        [server] = forkserver_pids()
        with open(f"/proc/{server}/environ", "rb") as environ:
            assert b"sk-pin-test-not-real" not in environ.read()
        lease = await pool.acquire()
        await lease.release()
    assert writes == []
