"""The ``preload`` setting: modules the fork server imports once for every sub-agent.

A preloaded tool module is already imported when a child's first tool runs (its
import-time ``os.getpid()`` is the fork server's); one that fails at import costs the
speed-up, in one line, never the pool; a name that is not a module is one error naming
the setting; and an untrusted project's ``preload`` imports nothing, not even its own
``evil.py`` from the folder the orchestrator was started in.
"""

from __future__ import annotations

import asyncio
import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._starters import forkserver_pids
from agentcell.orchestrator.config._load import ConfigError, load_settings, user_config_path
from agentcell.orchestrator.config._trust import trust
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from pydantic import ValidationError

TOOL_MODULE = '''
import os
from agentcell.worker.tools import function_tool

IMPORTED_IN = os.getpid()


def where_imported() -> str:
    """Say which process imported this module and which one runs the tool."""
    return f"imported in {IMPORTED_IN}, running in {os.getpid()}"


# Under its own name, so that the function travels by reference (its module imported).
WHERE_IMPORTED = function_tool(where_imported)
'''


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-preload-test-key")
    yield model_server


def _call_then_answer(tool: str) -> Any:
    """A responder: call ``tool`` once, then answer with what it returned."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not outputs:
            return Reply(tool_calls=[Call(tool, {})])
        return Reply(text=outputs[0])

    return respond


def _agent(name: str, tools: list[str]) -> AgentDefinition:
    return AgentDefinition(
        name=name, description=name, tools=tools, model="openai:test", source="test"
    )


def _orchestrator(work: Path, settings: Settings, **kwargs: Any) -> Orchestrator:
    return Orchestrator(
        settings=settings, workdir=work, load_agent_files=False, record=False, **kwargs
    )


def _settings(**fields: Any) -> Settings:
    return Settings(model="openai:test", approval="allow", warm_spares=0, **fields)


async def _where_imported(work: Path, settings: Settings, tool: Any) -> tuple[int, int, list[int]]:
    """(the pid that imported the tool's module, the child's pid, the fork servers)."""
    async with _orchestrator(
        work, settings, tools=[tool], agents=[_agent("prober", [tool.name])]
    ) as orch:
        result = await asyncio.wait_for(orch.delegate("prober", "where?"), 60)
        servers = forkserver_pids()
    assert result.status is RunStatus.COMPLETED, result.error
    words = result.text.replace(",", "").split()
    return int(words[2]), int(words[5]), servers


async def test_a_preloaded_module_is_imported_in_the_template_before_the_first_tool_runs(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "preloaded_tools.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(modules))
    import preloaded_tools  # type: ignore[import-not-found]

    served.responder = _call_then_answer("where_imported")
    work = tmp_path / "work"
    work.mkdir()
    tool = preloaded_tools.WHERE_IMPORTED
    imported, child, servers = await _where_imported(
        work, _settings(preload=["preloaded_tools"]), tool
    )
    assert imported in servers and imported != child  # the template's import, inherited
    # Without the setting the child imports it itself, as its tool is unpickled.
    imported, child, servers = await _where_imported(work, _settings(), tool)
    assert imported == child and imported not in servers


async def test_a_module_that_fails_at_import_costs_the_speed_up_in_one_line_not_the_pool(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "raises_at_import.py").write_text("raise RuntimeError('boom at import')\n")
    (modules / "exits_at_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(modules))
    work = tmp_path / "work"
    work.mkdir()
    served.responder = lambda body, api: Reply(text="still here")
    settings = _settings(preload=["raises_at_import", "exits_at_import"])
    with caplog.at_level(logging.WARNING, logger="agentcell.pool"):
        async with _orchestrator(work, settings, agents=[_agent("plain", [])]) as orch:
            first = await asyncio.wait_for(orch.delegate("plain", "hi"), 60)
            second = await asyncio.wait_for(orch.delegate("plain", "again"), 60)
    assert [first.text, second.text] == ["still here", "still here"]
    lines = [r.getMessage() for r in caplog.records if "preload" in r.getMessage()]
    assert len(lines) == 1, lines  # said once, for the pool, not per child
    line = lines[0]
    assert "\n" not in line and line.startswith("preload: ")
    assert "raises_at_import (RuntimeError: boom at import)" in line
    assert "exits_at_import (SystemExit: 3)" in line
    assert "remove it from the preload setting" in line


def test_a_name_that_is_no_module_here_is_one_error_naming_the_setting(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    config = user_config_path(home, {})
    config.parent.mkdir(parents=True)
    for value, expected in (
        ("no_such_module_here", "no module named 'no_such_module_here' on this Python's path"),
        ("json.no_such_submodule", "no module named 'json.no_such_submodule'"),
        ("not-a-module", "'not-a-module' is not a module name"),
    ):
        config.write_text(f'preload = ["{value}"]\n')
        with pytest.raises(ConfigError) as caught:
            load_settings(workdir=work, home=home, env={})
        assert len(caught.value.problems) == 1
        problem = caught.value.problems[0]
        assert problem.startswith(f"{config}: preload: ") and expected in problem, problem
    with pytest.raises(ValidationError, match="no module named 'nope_nope'"):
        Settings(preload=["nope_nope"])


def test_checking_a_name_runs_none_of_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules, marker = tmp_path / "modules", tmp_path / "ran"
    (modules / "pkg_with_effects").mkdir(parents=True)
    effect = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (modules / "pkg_with_effects" / "__init__.py").write_text(effect)
    (modules / "pkg_with_effects" / "tools.py").write_text(effect)
    monkeypatch.syspath_prepend(str(modules))
    settings = Settings(preload=["pkg_with_effects.tools"])
    assert settings.preload == ["pkg_with_effects.tools"]
    assert not marker.exists()


EVIL = textwrap.dedent(
    """
    import os
    with open({marker!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    """
)


async def test_an_untrusted_projects_preload_imports_nothing(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, project, marker = tmp_path / "home", tmp_path / "cloned-repo", tmp_path / "imported"
    home.mkdir()
    project.mkdir()
    (project / "agentcell.toml").write_text('model = "openai:test"\npreload = ["evil"]\n')
    (project / "evil.py").write_text(EVIL.format(marker=str(marker)))
    # The orchestrator started from inside the clone (``python -m``, a script beside it):
    # the folder is on its path, and the fork server's too.
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    served.responder = lambda body, api: Reply(text="done")

    async def delegate_once() -> list[int]:
        notices: list[str] = []
        loaded, _ = load_settings(
            workdir=project, home=home, env={"HOME": str(home)}, notices=notices
        )
        settings = loaded.model_copy(update={"approval": "allow", "warm_spares": 0})
        async with _orchestrator(project, settings, agents=[_agent("plain", [])]) as orch:
            result = await asyncio.wait_for(orch.delegate("plain", "hi"), 60)
            servers = forkserver_pids()
        assert result.status is RunStatus.COMPLETED, result.error
        if not loaded.preload:
            assert len(notices) == 1 and notices[0].startswith(
                f"{project / 'agentcell.toml'}: preload ignored: "
            ), notices
        return servers

    await delegate_once()
    assert not marker.exists(), "an untrusted project's module was imported"
    # The same folder once the user trusts it: the module is the fork server's import.
    trust(project, user_config_path(home, {"HOME": str(home)}))
    servers = await delegate_once()
    assert sorted(int(pid) for pid in marker.read_text().split()) == sorted(servers)


SHADOW = "open({marker!r}, 'a').write(__name__ + '\\n')\nraise ImportError('a shadow')\n"


async def test_a_module_in_the_folder_the_orchestrator_started_in_never_shadows_the_fork_servers(
    spawned: SpawnRecorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cloned repository's ``httpx.py`` or ``dill.py``, in the folder agentcell is run
    from: the fork server (``python -c``) would have had that folder first on its path."""
    project, marker = tmp_path / "cloned-repo", tmp_path / "imported"
    project.mkdir()
    for name in ("dill", "httpx", "psutil"):
        (project / f"{name}.py").write_text(SHADOW.format(marker=str(marker)))
    monkeypatch.chdir(project)  # as `agentcell run` in it: the folder is not on our path
    from agentcell.orchestrator.backends._forkserver import WorkerPool
    from pool_util import run_op

    async with WorkerPool(max_workers=1, warm=1) as pool:
        _frames, outcome = await run_op(pool, "echo", text="hi")
        hello = pool.queue.spares[0].hello if pool.queue.spares else None
    assert outcome.exit_code == 0, outcome
    assert not marker.exists(), f"the fork server imported {marker.read_text().split()}"
    assert hello is None or hello.preload_ok, hello
