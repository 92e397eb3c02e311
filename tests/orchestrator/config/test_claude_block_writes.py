"""Claude Code's ``permissions.blockWritesOutsideWorkingDirectories`` in a project's
``.claude/settings.json``: the main agent's write_file, edit_file and bash output
redirections outside the workdir and ``additionalDirectories`` are refused before they
run. It only forbids, so an untrusted folder's file sets it too (its
``additionalDirectories`` is ignored there, as before). Sub-agents are walled by the
sandbox already; the settings' note says so."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentcell.orchestrator import Orchestrator
from agentcell.orchestrator.config._load import load_settings
from agentcell.orchestrator.config._trust import trust
from agentcell.protocol import RunStatus, ToolMessage

from agentcell.testing import FunctionModel, reply, tool_call

KEY = "blockWritesOutsideWorkingDirectories"


def _project(tmp_path: Path, *, trusted: bool) -> tuple[Path, Path, dict[str, str]]:
    home, project, shared = tmp_path / "home", tmp_path / "project", tmp_path / "shared"
    for folder in (home / ".claude", project / ".claude", shared):
        folder.mkdir(parents=True)
    # As Claude Code writes it (its schema's key names, a relative additional directory).
    doc = {
        "$schema": "https://json.schemastore.org/claude-code-settings.json",
        "permissions": {KEY: True, "additionalDirectories": ["../shared"], "deny": []},
    }
    (project / ".claude" / "settings.json").write_text(json.dumps(doc, indent=2))
    if trusted:
        trust(project, home / ".config" / "agentcell" / "config.toml")
    return home, project, {"XDG_CONFIG_HOME": str(home / ".config")}


def test_an_untrusted_folder_sets_it_and_its_additional_directories_stay_ignored(
    tmp_path: Path,
) -> None:
    home, project, env = _project(tmp_path, trusted=False)
    notices: list[str] = []
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert settings.block_writes_outside is True
    assert settings.sandbox_read == []
    # Honoured, so a run says nothing of it (issue 44: a notice on every run); how it is
    # honoured is a note of `agents validate -v` (test_hook_on_failure.py).
    assert not any(KEY in n for n in notices), notices


async def test_the_main_agent_writes_only_in_the_workdir_and_additional_directories(
    tmp_path: Path,
) -> None:
    home, project, env = _project(tmp_path, trusted=True)
    settings, _ = load_settings(workdir=project, home=home, env=env)
    assert settings.block_writes_outside and settings.sandbox_read == [str(tmp_path / "shared")]
    settings = settings.model_copy(update={"approval": "allow", "warm_spares": 0})
    outside = tmp_path / "outside.txt"
    calls = [
        tool_call("bash", command="echo in > inside.txt && echo ok 2>/dev/null"),
        tool_call("bash", command="echo s >> ../shared/log.txt"),
        tool_call("bash", command=f"echo out > {outside}"),
        tool_call("bash", command='echo out > "$HOME/x.txt"'),
        tool_call("bash", command=f"cd {tmp_path} && echo out > outside.txt"),
        tool_call("write_file", path=str(outside), content="out"),
        tool_call("write_file", path="written.txt", content="in"),
    ]
    seen: list[str] = []

    def main(messages: list[Any], tools: list[Any]) -> Any:
        results = [m.content for m in messages if isinstance(m, ToolMessage)]
        if len(results) < len(calls):
            return reply("", calls[len(results)])
        seen[:] = results
        return "done"

    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=settings,
        workdir=project,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("write things"), 60)
    assert report.status is RunStatus.COMPLETED, report.error
    assert (project / "inside.txt").read_text() == "in\n"
    assert (tmp_path / "shared" / "log.txt").read_text() == "s\n"
    assert (project / "written.txt").read_text() == "in"
    assert not outside.exists() and not (home / "x.txt").exists()
    for refused in seen[2:6]:
        assert f"permissions.{KEY} is on" in refused, refused
    assert f"the redirection '> {outside}' is outside the working directories" in seen[2]
    assert "a redirection goes to an expansion" in seen[3]
    assert "follows a change of folder" in seen[4]
