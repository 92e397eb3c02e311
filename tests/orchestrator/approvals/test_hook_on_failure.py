"""Claude Code's ``onFailure: "block"`` on a hook entry: a guard that cannot start, times
out, is killed by a signal or exits with neither 0 nor 2 is read as exit 2 — the event is
blocked and the reason names the failure — instead of deciding nothing. Real commands,
Claude Code's settings shape written out literally."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.config._hooks import parse_hooks
from cli_runner import agentcell, cli_env, invoke

FAILURES = {
    "cannot start": {"command": "/nonexistent/guard", "args": []},
    "times out": {"command": "sleep 5", "timeout": 0.3},
    "killed by a signal": {"command": "kill -9 $$"},
    "exits 1": {"command": "echo broken >&2; exit 1"},
}
WHY = {
    "cannot start": "could not start",
    "times out": "timed out after 0.3 s",
    "killed by a signal": "was killed by signal SIGKILL",
    "exits 1": "failed (exit 1): broken",
}


def _runner(tmp_path: Path, hook: dict[str, Any], **entry: Any) -> HookRunner:
    table = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", **hook, **entry}]}]}
    return HookRunner(parse_hooks(table, "settings"), cwd=str(tmp_path), project_dir=str(tmp_path))


async def _pre(runner: HookRunner) -> Any:
    arguments = json.dumps({"command": "ls"})
    return await runner.tool_event("PreToolUse", tool="bash", call_id="c1", arguments=arguments)


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_a_failing_guard_with_on_failure_block_blocks_naming_the_failure(
    tmp_path: Path, failure: str
) -> None:
    outcome = await _pre(_runner(tmp_path, FAILURES[failure], onFailure="block"))
    assert outcome.blocked, failure
    assert WHY[failure] in outcome.reason and "(onFailure: block)" in outcome.reason
    default = await _pre(_runner(tmp_path, FAILURES[failure]))  # "continue": as before
    assert not default.blocked


async def test_block_changes_nothing_for_a_guard_that_works(tmp_path: Path) -> None:
    allow = {"command": f"{sys.executable} -c pass"}
    assert not (await _pre(_runner(tmp_path, allow, onFailure="block"))).blocked
    refuse = {"command": "echo no >&2; exit 2"}
    outcome = await _pre(_runner(tmp_path, refuse, onFailure="block"))
    assert outcome.blocked and outcome.reason == "no"


def test_block_where_nothing_can_block_is_named_and_a_bad_value_refused() -> None:
    notes: list[str] = []
    table = {
        "PostToolUse": [{"hooks": [{"type": "command", "command": "x", "onFailure": "block"}]}]
    }
    (hook,) = parse_hooks(table, "settings", notes)
    assert hook.on_failure == "continue"
    assert notes == [
        'settings: hooks.PostToolUse: onFailure "block" has no effect on PostToolUse: only '
        "PreToolUse, Stop, SubagentStop, UserPromptSubmit can block"
    ]
    bad = {"Stop": [{"hooks": [{"type": "command", "command": "x", "onFailure": "stop"}]}]}
    with pytest.raises(ValueError, match='onFailure must be "continue" or "block"'):
        parse_hooks(bad, "settings")


def test_agents_validate_names_a_settings_block_that_cannot_block(tmp_path: Path) -> None:
    """The settings every agent runs under are judged too: ``"block"`` on PostToolUse is a
    warning (it was said only at run time); blockWritesOutsideWorkingDirectories, honoured
    without a word at run time, is a note of ``-v``."""
    home, project = tmp_path / "home", tmp_path / "project"
    (project / ".claude" / "agents").mkdir(parents=True)
    home.mkdir()
    (project / ".claude" / "agents" / "a.md").write_text("---\nname: a\ndescription: d\n---\nhi\n")
    block = {"type": "command", "command": "true", "onFailure": "block"}
    settings = {
        "hooks": {"PostToolUse": [{"matcher": "", "hooks": [block]}]},
        "permissions": {"blockWritesOutsideWorkingDirectories": True},
    }
    (project / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))
    env = cli_env(project)
    assert invoke("trust", cwd=project, env=env).returncode == 0
    done = invoke("agents", "validate", cwd=project, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert said.count("onFailure") == 1, said
    assert '.claude/settings.json: warning: hooks.PostToolUse: onFailure "block" has no ' in said
    assert "blockWrites" not in said and "1 note(s) not shown" in said
    verbose = invoke("agents", "validate", "-v", cwd=project, env=env).stdout
    assert "settings: info: permissions.blockWritesOutsideWorkingDirectories: the main " in verbose
    # A run says the hook once, in the case the command's own lines use; the honoured
    # key not at all.
    run = agentcell("run", "--model", "scripted:echo", "hi", cwd=project, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("onFailure") == 1, run.stderr
    assert f"agentcell: warning: {project}/.claude/settings.json: hooks.PostToolUse: " in run.stderr
    assert "blockWrites" not in run.stderr
