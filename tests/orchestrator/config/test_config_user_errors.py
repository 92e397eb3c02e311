"""Configuration a new user gets wrong, as they write it: each mistake is one line naming
where it is, the setting and the fix (no pydantic internals), and what the README
documents loads."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import Orchestrator
from agentcell.orchestrator.config._load import ConfigError, load_settings, user_config_path
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.config._trust import trust
from agentcell.worker.models import ModelError
from cli_runner import AGENTCELL, agentcell, cli_env, project
from pydantic import ValidationError

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)


def load(
    tmp_path: Path,
    user: str = "",
    *,
    env: dict[str, str] | None = None,
    flags: dict[str, Any] | None = None,
    project_file: str | None = None,
    trusted: bool = False,
) -> Settings:
    """The settings from ``user`` as ~/.config/agentcell/config.toml (and ``project_file``
    as the project's agentcell.toml), loaded as `agentcell run` loads them."""
    home = tmp_path / "home"
    config = user_config_path(home, env={})
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(user)
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    if project_file is not None:
        (workdir / "agentcell.toml").write_text(project_file)
    if trusted:
        trust(workdir, config)
    return load_settings(workdir=workdir, home=home, env=env or {}, flags=flags)[0]


def problems(tmp_path: Path, user: str = "", **kwargs: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, user, **kwargs)
    return caught.value.problems


# -- subagent_timeout_s: "no limit" as a file can write it ---------------------------------


def test_a_zero_subagent_timeout_in_a_file_means_no_limit(tmp_path: Path) -> None:
    assert load(tmp_path, "subagent_timeout_s = 0\n").subagent_timeout_s is None
    assert load(tmp_path, "subagent_timeout_s = 0.0\n").subagent_timeout_s is None
    assert load(tmp_path, "subagent_timeout_s = 90\n").subagent_timeout_s == 90


def test_no_subagent_timeout_from_flags_and_the_python_api(tmp_path: Path) -> None:
    assert load(tmp_path, flags={"subagent_timeout_s": 0}).subagent_timeout_s is None
    assert Settings(subagent_timeout_s=None).subagent_timeout_s is None
    assert Settings(subagent_timeout_s=0).subagent_timeout_s is None


def test_an_untrusted_project_cannot_lift_the_timeout_with_a_zero(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentcell.config")
    settings = load(tmp_path, project_file="subagent_timeout_s = 0\n")
    assert settings.subagent_timeout_s == 1800
    assert "subagent_timeout_s ignored" in caplog.text


def test_an_untrusted_project_may_set_a_timeout_where_the_user_has_none(tmp_path: Path) -> None:
    settings = load(tmp_path, "subagent_timeout_s = 0\n", project_file="subagent_timeout_s = 60\n")
    assert settings.subagent_timeout_s == 60


# -- "did you mean": from the keys of the table the key is in -------------------------------


@pytest.mark.parametrize(
    ("text", "near"),
    [
        ("[budgets]\nmax_tokenz = 5\n", "did you mean 'max_tokens'?"),
        ("[ray]\nadress = 'auto'\n", "did you mean 'address'?"),
        ("[limits.openai]\nmax_concurent = 2\n", "did you mean 'max_concurrent'?"),
        ('[prices."openai:x"]\ninput = 1\noutput = 2\ncache_reed = 0.1\n', "'cache_read'?"),
        ("[mcp_servers.docs]\ncomand = 'npx'\n", "did you mean 'command'?"),
        ("max_workerz = 3\n", "did you mean 'max_workers'?"),
    ],
    ids=["budgets", "ray", "limits", "prices", "mcp-server", "top-level"],
)
def test_a_misspelt_key_gets_the_near_key_of_its_own_table(
    tmp_path: Path, text: str, near: str
) -> None:
    (line,) = problems(tmp_path, text)
    assert near in line, line


def test_a_top_level_key_under_a_table_is_told_to_move_up(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, '[limits.openai]\nmax_concurrent = 8\nsandbox = "workspace"\n')
    assert "unknown setting 'limits.openai.sandbox'" in line
    assert "'sandbox' is a top-level setting: move it above the first [table] header" in line


# -- permission_mode: the documented spellings ----------------------------------------------


def test_a_bad_permission_mode_lists_the_documented_spellings(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, env={"AGENTCELL_PERMISSION_MODE": "bogus"})
    assert line.startswith("AGENTCELL_PERMISSION_MODE='bogus': permission_mode:")
    assert "use default, acceptEdits, bypassPermissions or plan" in line
    assert "accept_edits" not in line


@pytest.mark.parametrize("mode", ["default", "acceptEdits", "bypassPermissions", "plan"])
def test_each_listed_permission_mode_is_accepted(tmp_path: Path, mode: str) -> None:
    load(tmp_path, env={"AGENTCELL_PERMISSION_MODE": mode})
    load(tmp_path, f'permission_mode = "{mode}"\n')


# -- network: what it takes, in one line ----------------------------------------------------


@pytest.mark.parametrize("value", ["42", '"yes"', "[1, 2]", "{ host = 'x' }"])
def test_a_network_of_the_wrong_kind_is_one_line_saying_what_it_takes(
    tmp_path: Path, value: str
) -> None:
    (line,) = problems(tmp_path, f"network = {value}\n")
    assert "config.toml: network: must be true (any host), false (none) or a list of hosts" in line
    assert "list[str]" not in line and "network.bool" not in line


def test_network_takes_a_switch_or_hosts(tmp_path: Path) -> None:
    assert load(tmp_path, "network = true\n").network is True
    hosts = load(tmp_path, 'network = ["pypi.org", "github.com:443"]\n').network
    assert hosts == ["pypi.org", "github.com:443"]


# -- numbers are never true or false --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("max_workers = true\n", "max_workers"),
        ("subagent_timeout_s = false\n", "subagent_timeout_s"),
        ("heartbeat_timeout_s = true\n", "heartbeat_timeout_s"),
        ("[budgets]\nmax_tokens = true\n", "budgets.max_tokens"),
        ("[ray]\nnum_cpus = true\n", "ray.num_cpus"),
        ("[limits.openai]\nrequests_per_minute = true\n", "limits.openai.requests_per_minute"),
        ('[prices."openai:x"]\ninput = true\noutput = 1\n', "prices.openai:x.input"),
    ],
)
def test_a_switch_for_a_number_is_refused(tmp_path: Path, text: str, where: str) -> None:
    (line,) = problems(tmp_path, text)
    assert f"config.toml: {where}: must be a number, not true or false" in line


def test_switches_and_numbers_still_load(tmp_path: Path) -> None:
    settings = load(tmp_path, "start_ahead = false\nmax_workers = 3\n[ray]\nnum_cpus = 1\n")
    assert settings.start_ahead is False and settings.max_workers == 3
    assert settings.ray.num_cpus == 1.0


# -- a flag wins over the environment, even a bad value in it -------------------------------


@pytest.mark.parametrize("raw", ["0", "many"])
def test_a_flag_overrides_a_bad_environment_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, raw: str
) -> None:
    caplog.set_level(logging.WARNING, "agentcell.config")
    env = {"AGENTCELL_MAX_WORKERS": raw}
    settings = load(tmp_path, env=env, flags={"max_workers": 2})
    assert settings.max_workers == 2
    assert f"AGENTCELL_MAX_WORKERS={raw!r}" in caplog.text
    assert "ignored: --max-workers is given" in caplog.text
    (line,) = problems(tmp_path, env=env)  # without the flag it still stops the run
    assert line.startswith(f"AGENTCELL_MAX_WORKERS={raw!r}")


def test_the_max_workers_flag_runs_despite_a_bad_variable(project: Path) -> None:
    env = cli_env(project, AGENTCELL_MAX_WORKERS="0")
    done = agentcell(
        "run", "--model", "scripted:echo", "--max-workers", "2", "hi", cwd=project, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "AGENTCELL_MAX_WORKERS='0'" in done.stderr and "Traceback" not in done.stderr


# -- a provider's base URL: scheme and host, checked before anything is recorded ------------


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_base_url_without_a_scheme_exits_2_and_records_nothing(
    project: Path, command: str
) -> None:
    env = cli_env(project, OPENAI_BASE_URL="127.0.0.1:1/v1", OPENAI_API_KEY="sk-test-123456")
    extra = ["hi"] if command == "run" else []
    done = subprocess.run(
        [AGENTCELL, command, "--model", "openai:gpt-test", *extra],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,  # chat reads none: it stops before its first prompt
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("agentcell: error: OPENAI_BASE_URL='127.0.0.1:1/v1': not an http")
    assert "http://127.0.0.1:1/v1" in line
    assert not (project / ".agentcell").exists()


@pytest.mark.parametrize(
    ("url", "usable"),
    [
        ("http://127.0.0.1:1/v1", True),
        ("https://api.example.com/v1?api-version=1", True),
        ("http://[::1]:8000/v1", True),
        ("127.0.0.1:1/v1", False),
        ("localhost:8000/v1", False),
        ("ftp://127.0.0.1/v1", False),
        ("http:///v1", False),
        ("http://127.0.0.1:port/v1", False),
    ],
)
async def test_the_setup_check_reads_the_base_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, usable: bool
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123456")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    orch = Orchestrator(settings=Settings(model="openai:gpt-test"), workdir=tmp_path, record=False)
    if usable:
        await orch.check_setup()
        return
    with pytest.raises(ModelError, match=r"^OPENAI_BASE_URL=.*: not an http:// or https://"):
        await orch.check_setup()


async def test_a_base_url_from_the_config_is_named_as_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123456")
    settings = Settings(
        model="openai:gpt-test", model_options={"openai": {"base_url": "localhost:8000/v1"}}
    )
    orch = Orchestrator(settings=settings, workdir=tmp_path, record=False)
    with pytest.raises(ModelError, match=r"^model_options\.openai\.base_url = 'localhost:8000/v1'"):
        await orch.check_setup()


# -- MCP: the sse transport is refused in one line that says what to use --------------------


def test_an_sse_server_in_the_config_is_one_line_suggesting_http(tmp_path: Path) -> None:
    text = '[mcp_servers.docs]\ntype = "sse"\nurl = "http://127.0.0.1:8000/sse"\n'
    (line,) = problems(tmp_path, text)
    assert 'mcp_servers.docs.type: the "sse" transport is not supported: use "http"' in line


def test_an_sse_server_in_mcp_json_is_skipped_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentcell.config")
    (tmp_path / "work").mkdir()
    servers = {"mcpServers": {"docs": {"type": "sse", "url": "http://127.0.0.1:8000/sse"}}}
    (tmp_path / "work" / ".mcp.json").write_text(json.dumps(servers))
    assert load(tmp_path, trusted=True).mcp_servers == {}
    (line,) = [r.getMessage() for r in caplog.records if "'docs'" in r.getMessage()]
    assert 'skipped: type: the "sse" transport is not supported: use "http"' in line
    with pytest.raises(ValidationError, match="streamable HTTP"):
        McpServerConfig(type="SSE", url="http://127.0.0.1:8000/sse")
