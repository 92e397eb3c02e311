"""Tests that kill the mutants of orchestrator/config/_sandbox_policy.py that its end-to-end
tests let live (issue 21, item 9): each comparison of ``check_sandbox``,
``untrusted_project_file``, ``_loosening_keys`` and the network-list narrowing, tested on
its own, in-process (``make mutants`` runs these first)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.config import _sandbox_policy as policy
from agentcell.orchestrator.config._load import user_config_path
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.config._trust import trust
from agentcell.orchestrator.config._trust_table import AGENT_FILE_TRUST
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._registry import AgentRegistry

HOOKS = {"PreToolUse": [{"matcher": "bash", "hooks": [{"type": "command", "command": "true"}]}]}
INLINE = {"srv": {"command": "true"}}


@pytest.fixture
def lacking(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The machine lacks one mechanism (whatever this one has); nothing said yet."""
    missing = ["a mechanism for the test"]
    monkeypatch.setattr(policy, "probe_sandbox", lambda: {})
    monkeypatch.setattr(policy, "sandbox_missing", lambda mode, probe: list(missing))
    monkeypatch.setattr(policy, "_said", set())
    return missing


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agentcell.sandbox"]


def test_off_checks_nothing_and_says_nothing(
    lacking: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agentcell.sandbox"):
        assert policy.check_sandbox(Settings(sandbox="off")) == []
    assert _warnings(caplog) == []


@pytest.mark.parametrize("mode", ["workspace", "read-only"])
def test_a_mode_short_of_required_runs_and_says_what_is_missing_once(
    lacking: list[str], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="agentcell.sandbox"):
        assert policy.check_sandbox(Settings(sandbox=mode)) == lacking
        assert policy.check_sandbox(Settings(sandbox=mode)) == lacking
    assert _warnings(caplog) == [f"the sandbox cannot enforce everything here: no {lacking[0]}"]


def test_required_refuses_where_something_is_missing_and_runs_where_nothing_is(
    lacking: list[str],
) -> None:
    with pytest.raises(policy.SandboxUnavailable, match="a mechanism for the test"):
        policy.check_sandbox(Settings(sandbox="required"))
    lacking.clear()
    assert policy.check_sandbox(Settings(sandbox="required")) == []


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    return home


def _project(tmp_path: Path) -> Path:
    # A sibling whose name extends the project's: beneath it by prefix, not by path.
    for name in ("repo", "repo-other"):
        (tmp_path / name / ".claude" / "agents").mkdir(parents=True)
    return tmp_path / "repo"


def _file_agent(folder: Path, name: str = "helper", **keys: Any) -> AgentDefinition:
    source = str(folder / ".claude" / "agents" / f"{name}.md")
    return AgentDefinition(name=name, source=source, **{"hooks": HOOKS, **keys})


def test_only_a_file_beneath_an_untrusted_workdir_is_an_untrusted_project_file(
    tmp_path: Path, user: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    inside, beside = _file_agent(project), _file_agent(tmp_path / "repo-other")
    # No separator: not a file, even where the working directory would resolve it inside.
    monkeypatch.chdir(project)
    unnamed = AgentDefinition(name="helper", source="settings", hooks=HOOKS)
    assert policy.untrusted_project_file(inside, project, user) is True
    assert policy.untrusted_project_file(beside, project, user) is False
    assert policy.untrusted_project_file(unnamed, project, user) is False
    trust(project, user_config_path(user))
    assert policy.untrusted_project_file(inside, project, user) is False
    assert policy.untrusted_project_file(beside, project, user) is False


def _loosening(bound: int = 8, **keys: Any) -> dict[str, str]:
    return policy._loosening_keys(AgentDefinition(name="a", **keys), bound)


def test_each_loosening_key_is_found_on_its_own_and_only_when_it_loosens() -> None:
    assert _loosening() == {}
    assert set(_loosening(hooks=HOOKS)) == {"hooks"}
    assert set(_loosening(network=True)) == {"network"}
    assert _loosening(network=False) == {}
    assert set(_loosening(backend="ray")) == {"backend"}
    assert _loosening(backend="local") == {}
    assert set(_loosening(mcp_servers=[INLINE])) == {"mcp_servers"}
    assert set(_loosening(mcp_servers=["named", INLINE])) == {"mcp_servers"}
    assert _loosening(mcp_servers=["named"]) == {}


def test_a_process_bound_is_dropped_above_the_users_only() -> None:
    assert _loosening(8, max_processes=9) == {"max_processes": "9 is above max_processes (8)"}
    assert _loosening(8, max_processes=8) == {}
    assert _loosening(8, max_processes=7) == {}


def test_tightening_and_neutral_keys_set_to_anything_are_never_loosening() -> None:
    assert _loosening(max_turns=3, sandbox="read-only", description="d", background=True) == {}


def test_a_network_list_is_left_to_the_narrowing_and_the_keys_after_it_are_still_checked() -> None:
    assert set(_loosening(network=["example.com"], hooks=HOOKS)) == {"hooks"}


def test_every_loosening_keys_default_is_the_tight_unset_one() -> None:
    # Why "set at all" is "loosening" (the check compares with no default).
    defaults = {name: field.default for name, field in AgentDefinition.model_fields.items()}
    loose = [key for key, entry in AGENT_FILE_TRUST.items() if entry.kind == "loosening"]
    assert loose and not [key for key in loose if defaults[key]]


def _distrusted(
    tmp_path: Path, user: Path, settings: Settings | None, *agents: AgentDefinition
) -> dict[str, AgentDefinition]:
    registry = AgentRegistry()
    for agent in agents:
        registry.add(agent)
    policy.distrust_project_agents(registry, tmp_path / "repo", user, settings)
    return {d.name: d for d in registry.definitions()}


def test_an_untrusted_network_list_keeps_the_hosts_the_users_setting_allows(
    tmp_path: Path, user: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project = _project(tmp_path)
    listed = _file_agent(project, network=["example.com", "evil.test"], hooks={})
    mine = Settings(network=["example.com"])
    with caplog.at_level(logging.WARNING):
        seen = _distrusted(tmp_path, user, mine, listed)
    assert seen["helper"].network == ["example.com"]
    said = [r.getMessage() for r in caplog.records if "evil.test" in r.getMessage()]
    assert len(said) == 1 and "network evil.test ignored" in said[0]


def test_an_untrusted_network_list_the_user_allows_whole_is_kept_whole(
    tmp_path: Path, user: Path
) -> None:
    project = _project(tmp_path)
    listed = _file_agent(project, network=["example.com"], hooks={})
    seen = _distrusted(tmp_path, user, Settings(network=True), listed)
    assert seen["helper"].network == ["example.com"]


def test_the_users_own_bound_is_the_one_applied(tmp_path: Path, user: Path) -> None:
    project = _project(tmp_path)
    bounded = _file_agent(project, max_processes=600, hooks={})
    assert Settings().max_processes < 600  # the default bound, taken without settings
    kept = _distrusted(tmp_path, user, Settings(max_processes=1000), bounded)
    assert kept["helper"].max_processes == 600
    assert _distrusted(tmp_path, user, None, bounded)["helper"].max_processes is None
