"""``make test``'s budget (tests/conftest.py): a whole run that uses more CPU than its
budget fails; a partial run is never judged."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import conftest
import pytest


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[tuple[str, bool]] = []

    def write_line(self, line: str, red: bool = False) -> None:
        self.lines.append((line, red))


def _session(args: list[str], markexpr: str = "not soak", collected: int = 2400) -> Any:
    reporter = _Reporter()
    options = {"keyword": "", "markexpr": markexpr}
    config = SimpleNamespace(
        args=args,
        rootpath=Path("/repo"),
        getoption=options.__getitem__,
        pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter),
    )
    return SimpleNamespace(config=config, testscollected=collected, exitstatus=0), reporter


@pytest.mark.parametrize("slower", [1.0, 1.5, 0.8])
@pytest.mark.parametrize(("over", "fails"), [(-1, False), (1, True)])
def test_a_whole_run_over_its_cpu_budget_fails(
    monkeypatch: pytest.MonkeyPatch, slower: float, over: float, fails: bool
) -> None:
    """The budget is the reference machine's, scaled by how much slower this one is."""
    used = conftest.SUITE_CPU_BUDGET_S * slower + over
    monkeypatch.setattr(conftest, "_SUITE_START", [100.0, 0.0])
    monkeypatch.setattr(conftest, "_cpu_seconds", lambda: 100.0 + used)
    monkeypatch.setattr(conftest, "_machine_speed", lambda: slower)
    session, reporter = _session(["tests"])
    conftest.pytest_sessionfinish(session, 0)
    assert (session.exitstatus == pytest.ExitCode.TESTS_FAILED) is fails
    ((line, red),) = reporter.lines
    assert f"used {used:.0f} s of CPU" in line and red is fails
    assert f"{used / slower:.0f} s on the reference machine" in line


def test_the_machine_is_timed_by_a_real_import() -> None:
    """Three fresh interpreters import the orchestrator: a time near the reference's on
    any machine this project runs on (a tenth to ten times it)."""
    assert 0.1 < conftest._machine_speed() < 10


@pytest.mark.parametrize(
    "partial",
    [
        {"args": ["tests/protocol/test_codec.py"]},
        {"args": [], "markexpr": "slow"},
        {"args": [], "collected": 10},
    ],
)
def test_a_partial_run_is_never_judged(monkeypatch: pytest.MonkeyPatch, partial: Any) -> None:
    monkeypatch.setattr(conftest, "_SUITE_START", [0.0, 0.0])
    monkeypatch.setattr(conftest, "_cpu_seconds", lambda: 10_000.0)
    session, reporter = _session(**partial)
    conftest.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0 and reporter.lines == []
