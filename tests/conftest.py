"""Shared test set-up: a fixed hypothesis profile, process-leak checks, pool helpers."""

from __future__ import annotations

import sys
from pathlib import Path

# The tests' helpers (servers, models, scripts run as children) are in tests/support/:
# importable by name here, in every child that inherits this path, and by path.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator

import psutil
import pytest
from agentcell.orchestrator.backends import _forkserver as _pool
from agentcell.orchestrator.backends._starters import forkserver_pids
from agentcell.orchestrator.backends.ray._local import RayHead, local_ray_head
from agentcell.worker.child import _proc
from hypothesis import HealthCheck, settings
from model_servers import (  # noqa: F401  (fixtures for every test module)
    model_server,
    openai_served,
    raw_bodies,
)
from provider_util import server, sleeps  # noqa: F401  (fixtures of the provider tests)

# No test may reach a real model: providers refuse any host but loopback. Set before any
# fork server starts, so every child process inherits it too.
os.environ["AGENTCELL_BLOCK_REAL_MODELS"] = "1"
# The run records' key (see orchestrator/records/_key.py) is made in a folder of the test
# session's own, never in the home of whoever runs the tests. Made by pytest's own process
# only: Ray workers and other processes that import a test module import this one too,
# and each left an empty folder in /tmp when it was killed (279 of them in one day).
_STATE: tempfile.TemporaryDirectory[str] | None = None


STATE_PREFIX = "agentcell-test-state-"


def pytest_configure(config: pytest.Config) -> None:
    global _STATE
    _remove_dead_sessions_state()
    _STATE = tempfile.TemporaryDirectory(prefix=f"{STATE_PREFIX}{os.getpid()}-")
    os.environ["XDG_STATE_HOME"] = _STATE.name


def _remove_dead_sessions_state() -> None:
    """The folders of earlier test sessions that were killed before their clean-up (a
    timed-out run, a mutation tool's mutant that hung): named by the session's pid, and
    removed once no process has that pid (a folder without one is left alone)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        owner = name[len(STATE_PREFIX) :].partition("-")[0]
        if name.startswith(STATE_PREFIX) and owner.isdigit() and not psutil.pid_exists(int(owner)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STATE is not None:
        _STATE.cleanup()


#: ``make test`` is to take at most 10 minutes on a quiet 2-core machine. The suite is
#: serial and CPU-bound (about 95 % of one core), so the CPU time it uses — this process
#: and every child it waited for — is what a quiet machine's clock shows, while a busy
#: machine stretches the clock and not this. The budget is in the CPU seconds of the
#: reference machine (the project's 2-core CI machine, quiet), where importing the
#: orchestrator in a fresh interpreter takes ``REFERENCE_IMPORT_CPU_S``; the same import,
#: timed when the run ends, says how much slower this machine is today (the CPU time of
#: one suite varied by a third between quiet runs of one machine), and the budget grows or
#: shrinks by as much. A whole run over its budget fails. On the
#: reference machine a run used 489 and 497 s (2,461 tests, session 14).
SUITE_CPU_BUDGET_S = 600.0
REFERENCE_IMPORT_CPU_S = 0.47
_SUITE_START: list[float] = []


def _cpu_seconds() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _import_cpu_s() -> float:
    """The least CPU of three fresh interpreters importing the orchestrator (s)."""
    times = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import agentcell.orchestrator"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return max(min(times), 0.01)


def _machine_speed() -> float:
    """How much slower than the reference machine this one runs now (1.0: as fast)."""
    return _import_cpu_s() / REFERENCE_IMPORT_CPU_S


def pytest_sessionstart(session: pytest.Session) -> None:
    _SUITE_START[:] = [_cpu_seconds(), time.monotonic()]


def _whole_suite(session: pytest.Session) -> bool:
    """``make test``'s run: every test file, no keyword, no mark but ``not soak``."""
    config = session.config
    args = [a for a in config.args if a not in ("tests", str(config.rootpath / "tests"))]
    return (
        not args
        and not config.getoption("keyword")
        and config.getoption("markexpr") in ("", "not soak")
        and session.testscollected > 1000
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _SUITE_START or not _whole_suite(session):
        return
    cpu = _cpu_seconds() - _SUITE_START[0]
    wall = time.monotonic() - _SUITE_START[1]
    # Timed after the run (a busy machine at its end counts) and not counted in it.
    slower = _machine_speed()
    budget = SUITE_CPU_BUDGET_S * slower
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    line = (
        f"the suite used {cpu:.0f} s of CPU in {wall:.0f} s: {cpu / slower:.0f} s on the "
        f"reference machine (this one runs {slower:.2f}× its time); budget: "
        f"{SUITE_CPU_BUDGET_S:.0f} s there, a quiet 2-core machine's 10 minutes"
    )
    over = cpu > budget
    if reporter is not None:
        reporter.write_line(line + (": over budget" if over else ""), red=over)
    if over and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    """The tests on the shared Ray head (``ray_head``) run last, one after another: the
    head is then up only while they run, and starts and stops once (~8 s each time on
    2 cores) instead of once per module."""
    on_ray = [item for item in items if "ray_head" in getattr(item, "fixturenames", ())]
    if on_ray:
        chosen = set(map(id, on_ray))
        items[:] = [item for item in items if id(item) not in chosen] + on_ray


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """One loopback-only Ray head (design brief §9's four settings: ``local_ray_head``)
    for every Ray test module; gone, with every process and its temp folder, at the end."""
    pytest.importorskip("ray", reason="the ray extra is not installed (no wheel for this Python?)")
    with local_ray_head() as cluster:
        yield cluster
    assert not cluster.processes(), "a process of the head outlived local_ray_head"
    assert not os.path.exists(cluster.home), "local_ray_head left its temp folder behind"


# CI is deterministic: the same examples every run. HYPOTHESIS_PROFILE=dev explores.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class SpawnRecorder:
    """Records every child pid a pool starts, so teardown can prove they are all gone.

    A pid is the child's only while its start time is the one recorded: after thousands
    of children the kernel hands their pids to other processes, which a test never
    touches. (A session or group id is not reused while a process holds it, so members
    of a session named for a dead child are that child's.)"""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.started: dict[int, int] = {}
        self.forkservers: set[int] = set()

    def add(self, pid: int) -> None:
        self.pids.add(pid)
        self.started[pid] = _start_time(pid)

    def _others(self, table: dict[int, _proc.ProcInfo]) -> set[int]:
        """Recorded pids that are now another process's (alive, another start time)."""
        return {pid for pid in self.pids if pid in table and _start_time(pid) != self.started[pid]}

    def leftovers(self) -> list[str]:
        found = []
        table = _proc.process_table()  # one scan for every child (a test may start thousands)
        others = self._others(table)
        sessions: dict[int, list[int]] = {}
        for info in table.values():
            sessions.setdefault(info.sid, []).append(info.pid)
        for pid in sorted(self.pids - others):
            if pid in table:
                found.append(f"child {pid} is alive")
            for member in sessions.get(pid, ()):
                if member != pid:
                    found.append(f"process {member} of child {pid}'s session is alive")
        for pid in self.forkservers:
            if _proc.is_alive(pid):
                found.append(f"fork server {pid} is alive")
        if not forkserver_pids():
            for proc in psutil.Process().children(recursive=True):
                try:
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(f"descendant {proc.pid} ({proc.name()}) is alive")
                except psutil.NoSuchProcess:
                    pass
        return found

    def kill_all(self) -> None:
        table = _proc.process_table()
        others = self._others(table)
        sids = {info.sid for info in table.values()}
        for pid in self.pids - others:
            if pid in table or pid in sids:  # the child, or what its session still holds
                _proc.kill_session(pid, signal.SIGKILL, table)


def _start_time(pid: int) -> int:
    """When ``pid`` started (clock ticks since boot; -1 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return -1
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> Iterator[SpawnRecorder]:
    """Track the children of every pool made in the test; fail if any outlives it."""
    recorder = SpawnRecorder()
    original = _pool._Worker.__init__

    def recording_init(self: _pool._Worker, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        recorder.add(self.pid)
        recorder.forkservers.update(forkserver_pids())

    monkeypatch.setattr(_pool._Worker, "__init__", recording_init)
    try:
        yield recorder
        leftovers = recorder.leftovers()
        assert not leftovers, leftovers
    finally:
        recorder.kill_all()


@pytest.fixture
async def pool(spawned: SpawnRecorder) -> AsyncIterator[_pool.WorkerPool]:
    """A small pool whose children (and fork server) are checked gone afterwards."""
    async with _pool.WorkerPool(max_workers=8, warm=2, heartbeat_timeout=30) as p:
        yield p
