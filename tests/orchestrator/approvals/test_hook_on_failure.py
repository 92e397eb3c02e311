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
