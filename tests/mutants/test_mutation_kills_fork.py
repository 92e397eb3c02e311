"""Tests that kill the mutants of worker/child/_fork_request.py (the fork server's lean start
request and its peer check) that its child-level tests let live (issue 21, item 9).

Each runs in a fraction of a second: the request's encoding here, and the fork server's
side of it in a throwaway process (``fork_request_harness.py``, where the checks live)
that plays the fork server around ``serve_one`` and gives the peer check a process below
its owner, the owner, and one above. ``make mutants`` runs the same checks first, without
pytest (``fork_request_harness.py check``). The child-level tests
(``test_fork_request.py``, and ``test_sandbox.py``'s attack on the fork server from a real
sub-agent) still prove both in real children.
"""

from __future__ import annotations

from pathlib import Path

import fork_request_harness as harness
import pytest


def test_a_request_is_the_marker_its_kind_two_lengths_the_settings_and_the_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the check changes into it; the fixture changes back
    harness.check_encoding(tmp_path)


@pytest.mark.parametrize("case", list(harness.BY_DILL))
def test_whatever_the_stdlib_pickle_refuses_travels_by_dill(case: str) -> None:
    target, args = harness.BY_DILL[case]
    harness.check_by_dill(target, args)


@pytest.mark.parametrize("order", ["encoded-sorts-first", "encoded-sorts-last"])
def test_the_child_gets_the_requests_name_path_directory_arguments_and_descriptors(
    tmp_path: Path, order: str
) -> None:
    low, high = tmp_path / "a", tmp_path / "b"
    low.mkdir(), high.mkdir()
    encoded, before = (low, high) if order == "encoded-sorts-first" else (high, low)
    harness.check_serving(encoded, before)


def test_a_dill_request_is_read_by_dill(tmp_path: Path) -> None:
    harness.check_dill_serving(tmp_path)


def test_multiprocess_own_request_is_unpickled_as_inheriting(tmp_path: Path) -> None:
    harness.check_process_serving(tmp_path)


def test_the_peer_check_lets_in_its_owner_only_and_wraps_once() -> None:
    harness.check_peer_guard()


def test_the_check_mode_runs_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    for name in dir(harness):
        if name.startswith("check_") and name != "check_all":
            monkeypatch.setattr(harness, name, lambda *a, _n=name: ran.append(_n))
    harness.check_all()
    checks = {name for name in dir(harness) if name.startswith("check_")} - {"check_all"}
    assert set(ran) == checks
