"""The pool's open-file limit (``_descriptors``): the soft RLIMIT_NOFILE raised for
``max_workers`` children, or fewer children at once with one warning. The limits are
monkeypatched: no test starts a thousand processes."""

from __future__ import annotations

import logging
import resource

import pytest
from agentcell.orchestrator.backends import _descriptors
from agentcell.orchestrator.backends._descriptors import needed, workers_that_fit


class FakeLimits:
    """``resource.getrlimit``/``setrlimit`` for RLIMIT_NOFILE, with what was set."""

    def __init__(self, soft: int, hard: int, *, refuse: bool = False) -> None:
        self.soft, self.hard, self.refuse = soft, hard, refuse
        self.set_to: list[tuple[int, int]] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        if self.refuse:
            raise ValueError("not allowed")
        self.set_to.append(limits)
        self.soft = limits[0]


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> FakeLimits:
    fake = FakeLimits(1024, 1024)
    monkeypatch.setattr(_descriptors.resource, "getrlimit", fake.getrlimit)
    monkeypatch.setattr(_descriptors.resource, "setrlimit", fake.setrlimit)
    return fake


def test_a_soft_limit_that_fits_is_left_alone(limits: FakeLimits) -> None:
    limits.soft, limits.hard = 4096, 524288
    assert workers_that_fit(1000) == 1000
    assert limits.set_to == []


def test_the_soft_limit_is_raised_to_the_hard_one_for_1000_workers(
    limits: FakeLimits, caplog: pytest.LogCaptureFixture
) -> None:
    limits.soft, limits.hard = 1024, 524288
    with caplog.at_level(logging.WARNING, "agentcell.pool"):
        assert workers_that_fit(1000) == 1000
    assert limits.set_to == [(524288, 524288)]
    assert caplog.records == []


def test_a_hard_limit_too_low_runs_fewer_workers_and_says_why_in_one_line(
    limits: FakeLimits, caplog: pytest.LogCaptureFixture
) -> None:
    limits.soft, limits.hard = 512, 1024
    with caplog.at_level(logging.WARNING, "agentcell.pool"):
        fit = workers_that_fit(1000)
    assert limits.set_to == [(1024, 1024)]  # raised as far as it goes
    assert fit == (1024 - _descriptors.RESERVE) // _descriptors.PER_WORKER
    assert needed(fit) <= 1024 < needed(1000)
    [record] = caplog.records
    message = record.getMessage()
    assert record.levelno == logging.WARNING and "\n" not in message
    assert "RLIMIT_NOFILE" in message and f"ulimit -n {needed(1000)}" in message
    assert f"at most {fit} sub-agents at once" in message


def test_a_refused_raise_keeps_the_limit_and_at_least_one_worker(
    limits: FakeLimits, caplog: pytest.LogCaptureFixture
) -> None:
    limits.soft, limits.hard, limits.refuse = 64, 524288, True
    with caplog.at_level(logging.WARNING, "agentcell.pool"):
        assert workers_that_fit(1000) == 1
    assert "the limit (RLIMIT_NOFILE) is 64" in caplog.records[0].getMessage()


async def test_the_pool_is_sized_by_it(limits: FakeLimits) -> None:
    """WorkerPool.start applies it before starting any child (nothing is started: the
    spawner's open is replaced)."""
    from agentcell.orchestrator.backends._forkserver import WorkerPool

    limits.soft, limits.hard = 512, 1024
    pool = WorkerPool(max_workers=1000, warm=900)

    async def no_fork_servers() -> None:
        raise RuntimeError("stop here")

    pool.spawner.open = no_fork_servers  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="stop here"):
        await pool.start()
    assert pool.max_workers == 256 and pool.warm == 256
