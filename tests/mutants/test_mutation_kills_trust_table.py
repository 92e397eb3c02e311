"""Tests that kill the mutants of orchestrator/config/_trust_table.py that the rest of its
test selection lets live (issue 21, item 9): each way a project's value is judged against
the user's own, at its edges (the same value, one step either side, a value validation has
yet to name), and how a key finds its row. In-process and fast: ``make mutants`` runs them
for each of the module's mutants."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.config._load import load_settings
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.config._trust import untrusted_layer
from agentcell.orchestrator.config._trust_table import (
    SETTINGS_TRUST,
    TrustEntry,
    covering,
    setting_paths,
)


def honoured(key: str, value: Any, users: Any) -> bool:
    """Whether an untrusted project's ``key = value`` is kept over the user's ``users``
    (and, if not, that one line says so)."""
    kept, notes = untrusted_layer({key: value}, {key: users}, "p")
    assert (key in kept) != bool(notes), (kept, notes)
    return key in kept


@pytest.mark.parametrize(
    ("value", "users", "expected"),
    [(3, 3, True), (2, 3, True), (4, 3, False), (2.5, 3, True), (3, None, True)],
)
def test_a_limit_is_honoured_up_to_the_users_own_and_no_higher(
    value: Any, users: Any, expected: bool
) -> None:
    assert honoured("max_turns", value, users) is expected


def test_no_limit_from_a_project_is_honoured_only_where_the_user_has_none() -> None:
    assert honoured("subagent_timeout_s", None, None)
    assert not honoured("subagent_timeout_s", None, 600)


@pytest.mark.parametrize(
    ("value", "users", "expected"),
    [("64", 4, False), ("4", 4, True), ("1e9", 4, False), (True, 0, False), (True, 1, True)],
)
def test_a_limit_is_judged_as_validation_will_read_it(
    value: Any, users: Any, expected: bool
) -> None:
    # The real bug these found: validation reads "64" as 64 and true as 1, so an untrusted
    # project's max_processes = "64" was kept as "no number" and then raised the bound.
    assert honoured("max_processes", value, users) is expected


@pytest.mark.parametrize("value", ["ten", [1]])
def test_a_limit_that_is_no_number_is_left_for_validation_to_name(value: Any) -> None:
    assert honoured("max_turns", value, 5)


def test_a_raised_limit_written_as_text_is_ignored_when_loading(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "agentcell.toml").write_text('max_processes = "100000"\nnetwork = "yes"\n')
    notices: list[str] = []
    settings, _ = load_settings(
        workdir=project, home=home, env={"HOME": str(home)}, notices=notices
    )
    assert settings.max_processes == Settings().max_processes and settings.network is False
    assert len(notices) == 2, notices


@pytest.mark.parametrize(
    ("value", "users", "expected"),
    [
        (False, False, True),
        (False, True, True),
        (True, True, True),
        (True, False, False),
        (True, ["a.test"], False),  # a list of hosts is not all of the network
        (1, False, False),  # validation reads 1, 1.0 and "yes" as on
        (1.0, False, False),
        ("yes", False, False),
        ("yes", "on", True),
        ("sometimes", False, True),  # no switch: validation names it
    ],
)
def test_network_from_a_project_is_honoured_unless_it_switches_it_on(
    value: Any, users: Any, expected: bool
) -> None:
    assert honoured("network", value, users) is expected


@pytest.mark.parametrize(
    ("value", "users", "expected"),
    [
        ("deny", "ask", True),
        ("ask", "ask", True),
        ("bubble", "ask", False),
        ("allow", "bubble", False),
        ("bubble", "allow", True),
    ],
)
def test_an_approval_is_honoured_when_as_strict_as_the_users(
    value: str, users: str, expected: bool
) -> None:
    assert honoured("approval", value, users) is expected


@pytest.mark.parametrize(("value", "users"), [("sometimes", "ask"), ("ask", "sometimes")])
def test_an_approval_off_the_scale_is_left_for_validation_to_name(value: str, users: str) -> None:
    assert honoured("approval", value, users)


@pytest.mark.parametrize(
    ("value", "users", "expected"),
    [
        ("acceptEdits", "accept_edits", True),  # Claude Code's spelling is the same mode
        ("acceptEdits", "bypassPermissions", True),
        ("bypassPermissions", "acceptEdits", False),
        ("Plan", "default", True),
        ("default", "plan", False),
        ("sometimes", "plan", True),  # off the scale: validation names it
        (3, "plan", True),
    ],
)
def test_a_permission_mode_is_judged_in_any_spelling(
    value: Any, users: str, expected: bool
) -> None:
    assert honoured("permission_mode", value, users) is expected


def test_a_kind_is_what_its_entry_says() -> None:
    assert SETTINGS_TRUST["max_turns"].tightens and not SETTINGS_TRUST["max_turns"].neutral
    assert SETTINGS_TRUST["max_workers"].neutral and not SETTINGS_TRUST["max_workers"].tightens
    assert not SETTINGS_TRUST["hooks"].tightens and not SETTINGS_TRUST["hooks"].neutral


def test_no_code_can_loosen_a_row_of_the_table() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SETTINGS_TRUST["hooks"].kind = "neutral"  # type: ignore[misc]


def test_a_table_of_tables_is_walked_for_any_name_and_a_table_for_its_own() -> None:
    paths = set(setting_paths(Settings))
    assert {"limits.*.max_concurrent", "ray.address", "budgets.max_tokens"} <= paths
    assert not {p for p in paths if p.startswith(("ray.*.", "budgets.*.", "limits.max"))}


A, B, C = (TrustEntry("neutral", why) for why in "abc")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("x", "y"), B),  # its own row before the table above it
        (("x", "z"), A),  # no row of its own: the table above covers it
        (("x", "z", "w"), A),
        (("x", "y", "w", "v"), B),  # two levels below its row
        (("t", "k", "m"), C),  # ``*`` matches any one key
        (("t", "m"), None),  # but not none
        (("t", "k", "j", "m"), None),  # nor two
        (("t",), None),
        (("y",), None),
    ],
)
def test_a_key_is_covered_by_its_nearest_row(path: tuple[str, ...], expected: Any) -> None:
    table = {"x": A, "x.y": B, "t.*.m": C}
    assert covering(table, path) is expected
