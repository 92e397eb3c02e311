"""Hook settings written as Claude Code's hooks reference documents them (2026), read and
answered as Claude Code reads and answers them.

Each case is one a compatibility audit found silently doing nothing or something else:
an exec-form guard (``command`` + ``args``) ran without its arguments and never blocked;
a JSON deny printed before ``exit 1`` was dropped; ``Edit, Write`` matched no tool; the
``if`` filter was ignored; ``updatedToolOutput`` redacted nothing; the default timeout
was a tenth of Claude Code's; a script testing ``tool_name == "Agent"`` never saw it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.approvals._hook_shape import tool_document
from agentcell.orchestrator.approvals._hooks import HookRunner, local_tool_hooks
from agentcell.orchestrator.config._hooks import parse_hooks
from agentcell.orchestrator.workspace._code_files import code_entries
from agentcell.protocol import ToolCall
from agentcell.worker import matcher_matches, matcher_problem
from agentcell.worker.tools import ToolOutput

GUARD = """\
import json, sys
with open(sys.argv[1], "w") as seen:
    json.dump(sys.argv[2:], seen)
command = json.load(sys.stdin)["tool_input"].get("command", "")
if command.startswith("rm "):
    print("Blocked: rm", file=sys.stderr)
    sys.exit(2)
"""


def _runner(project: Path, event: str, *hooks: dict[str, Any], matcher: str = "Bash") -> HookRunner:
    table = {event: [{"matcher": matcher, "hooks": [{"type": "command", **h} for h in hooks]}]}
    return HookRunner(parse_hooks(table, "settings"), cwd=str(project), project_dir=str(project))


async def _pre(runner: HookRunner, command: str) -> Any:
    arguments = json.dumps({"command": command})
    return await runner.tool_event("PreToolUse", tool="bash", call_id="c1", arguments=arguments)


def _script(project: Path, name: str, text: str) -> Path:
    path = project / ".claude" / "hooks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def test_the_exec_form_runs_its_program_with_its_args_and_no_shell(tmp_path: Path) -> None:
    _script(tmp_path, "guard.py", GUARD)
    seen = tmp_path / "argv.json"
    args = ["${CLAUDE_PROJECT_DIR}/.claude/hooks/guard.py", str(seen), "two words", "$HOME;`id`"]
    runner = _runner(tmp_path, "PreToolUse", {"command": sys.executable, "args": args})
    outcome = await _pre(runner, "rm -rf build")
    assert outcome.blocked and outcome.reason == "Blocked: rm"
    # Each word as written, the placeholder put in: no shell split or expanded anything.
    assert json.loads(seen.read_text()) == ["two words", "$HOME;`id`"]
    assert not (await _pre(runner, "ls")).blocked
    # The script it runs is workdir code run outside the walls: held read-only per child.
    hook = runner.commands[0]
    entries = code_entries([hook.spawned], [], cwd=str(tmp_path), project_dir=str(tmp_path))
    assert ".claude" in entries
    assert str(hook).startswith(sys.executable) and "guard.py" in str(hook)


@pytest.mark.parametrize(
    ("script", "blocked", "reason"),
    [
        # Any code but 2: a JSON object on stdout decides alone (Claude Code's "Other exit codes").
        (
            'echo \'{"hookSpecificOutput": {"permissionDecision": "deny", '
            '"permissionDecisionReason": "no rm"}}\'; exit 1',
            True,
            "no rm",
        ),
        ('echo \'{"decision": "block", "reason": "legacy no"}\'; exit 3', True, "legacy no"),
        # Exit 2 blocks whatever the JSON says; its blocking reason wins over stderr.
        (
            'echo \'{"hookSpecificOutput": {"permissionDecision": "allow"}}\'; '
            "echo from-stderr >&2; exit 2",
            True,
            "from-stderr",
        ),
        (
            'echo \'{"decision": "block", "reason": "json reason"}\'; echo err >&2; exit 2',
            True,
            "json reason",
        ),
        # Without JSON, any code but 0 and 2 is an error that decides nothing.
        ("echo plain; echo oops >&2; exit 1", False, ""),
    ],
)
async def test_exit_codes_are_read_as_claude_code_reads_them(
    tmp_path: Path, script: str, blocked: bool, reason: str
) -> None:
    outcome = await _pre(_runner(tmp_path, "PreToolUse", {"command": script}), "rm -rf x")
    assert (outcome.blocked, outcome.reason) == (blocked, reason)
    assert outcome.decision == ""  # an "allow" under exit 2 allows nothing


def test_matcher_lists_with_commas_spaces_and_hyphens() -> None:
    for matcher in ("Edit,Write", "Edit, Write", "Edit | Write", " Edit|Write "):
        assert matcher_matches(matcher, "Write") and matcher_matches(matcher, "Edit"), matcher
        assert not matcher_matches(matcher, "NotebookEdit"), matcher
        assert matcher_problem(matcher) == "", matcher
    assert matcher_matches("code-reviewer", "code-reviewer")
    assert not matcher_matches("code-reviewer", "senior-code-reviewer")
    # Any other matcher is a regular expression searched for anywhere (the docs' example).
    assert matcher_matches("Edit.*", "NotebookEdit") and not matcher_matches("^Edit$", "EditX")
    assert "no tool's name has a space" in matcher_problem("Edit Write")


def test_default_timeouts_are_claude_codes() -> None:
    table = {
        "PreToolUse": [{"hooks": [{"type": "command", "command": "true"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "true"}]}],
    }
    timeouts = {h.event: h.timeout_s for h in parse_hooks(table, "settings")}
    assert timeouts == {"PreToolUse": 600.0, "UserPromptSubmit": 30.0}


def test_every_documented_event_is_taken_and_the_unraised_ones_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = {
        event: [{"hooks": [{"type": "command", "command": "true"}]}]
        for event in ("PermissionDenied", "PostToolBatch", "StopFailure", "PostCompact")
    }
    notes: list[str] = []
    assert parse_hooks(table, "agent.md", notes=notes) == []
    assert len(notes) == 4 and all("do not run" in note for note in notes), notes
    with pytest.raises(ValueError, match="unknown hook event 'PreToolUs'"):
        parse_hooks({"PreToolUs": []}, "agent.md")


def test_the_task_tool_is_shown_to_hooks_as_agent() -> None:
    document = tool_document(
        "PreToolUse", tool="task", call_id="c", arguments='{"subagent_type": "r"}', workdir="/w"
    )
    assert document["tool_name"] == "Agent"


async def test_if_runs_a_hook_only_on_the_calls_its_rule_catches(tmp_path: Path) -> None:
    hook = {"if": "Bash(git *)", "command": "echo 'no git here' >&2; exit 2"}
    runner = _runner(tmp_path, "PreToolUse", hook)
    assert (await _pre(runner, "git push")).blocked
    assert (await _pre(runner, "FOO=1 npm test && git push")).blocked
    assert not (await _pre(runner, "npm test")).blocked
    # On an event without a tool call, a hook with an ``if`` never runs.
    marker = tmp_path / "ran"
    stop = _runner(tmp_path, "Stop", {"if": "Bash(git *)", "command": f"touch {marker}"})
    await stop.run("Stop", {"last_assistant_message": "done"})
    assert not marker.exists()


REDACT = """\
echo '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": %s}}'
"""


@pytest.mark.parametrize(
    ("tool", "updated", "seen"),
    [
        ("bash", {"stdout": "[redacted]", "stderr": "", "interrupted": False}, "[redacted]"),
        ("bash", {"stdout": "out", "stderr": "err"}, "out\nerr"),
        ("read_file", {"type": "text", "file": {"filePath": "/w/a", "content": "safe"}}, "safe"),
        ("mcp__db__query", [{"type": "text", "text": "rows hidden"}], "rows hidden"),
        # Not the tool's shape: ignored, as Claude Code ignores it; the output stands.
        ("bash", "just text", "AWS_SECRET_ACCESS_KEY=abc123"),
        ("bash", {"content": "x"}, "AWS_SECRET_ACCESS_KEY=abc123"),
    ],
)
async def test_updated_tool_output_replaces_what_the_model_sees(
    tmp_path: Path, tool: str, updated: Any, seen: str
) -> None:
    script = _script(tmp_path, "redact.sh", REDACT % json.dumps(updated))
    runner = _runner(tmp_path, "PostToolUse", {"command": f"sh {script}"}, matcher=".*")
    relay = local_tool_hooks(runner, [tool])
    assert relay is not None
    call = ToolCall(id="c1", name=tool, arguments='{"command": "env", "path": "a"}')
    output = await relay.after_tool(call, None, ToolOutput("AWS_SECRET_ACCESS_KEY=abc123", False))  # type: ignore[arg-type]
    assert output.content == seen


async def test_an_if_is_not_judged_on_arguments_past_its_bound(tmp_path: Path) -> None:
    """A child's hook request is judged in the parent's event loop, and a wrapper's rule
    costs the square of its words: past ``MAX_IF_ARGUMENTS`` the ``if`` is not judged and
    the hook runs (the guard still guards), as Claude Code runs one it cannot read."""
    from agentcell.orchestrator.approvals._hooks import MAX_IF_ARGUMENTS

    hook = {"if": "Bash(git *)", "command": "echo 'judged by the hook' >&2; exit 2"}
    runner = _runner(tmp_path, "PreToolUse", hook)
    huge = "env " + "a " * (MAX_IF_ARGUMENTS // 2)
    outcome = await _pre(runner, huge)
    assert outcome.blocked and outcome.reason == "judged by the hook"
    assert not (await _pre(runner, "env a a a")).blocked  # judged: not a git line


@pytest.mark.parametrize(
    "command",
    [
        "if :; then rm -rf build; fi",
        "{ rm -rf build; }",
        "'rm' -rf build",
        "\\rm -rf build",
        "while rm -rf build; do :; done",
    ],
)
async def test_an_if_gated_guard_sees_a_command_however_it_is_spelt(
    tmp_path: Path, command: str
) -> None:
    """A guard written ``{"if": "Bash(rm *)", …}`` never started for these (an attack
    review): its rule was matched on the raw text."""
    hook = {"if": "Bash(rm *)", "command": "echo 'guarded' >&2; exit 2"}
    outcome = await _pre(_runner(tmp_path, "PreToolUse", hook), command)
    assert outcome.blocked and outcome.reason == "guarded"


async def test_an_if_runs_its_hook_on_a_line_it_cannot_read(tmp_path: Path) -> None:
    """As Claude Code's: a line the parser cannot read, or a substitution or variable
    under a rule that names more than the program, runs the hook anyway."""
    hook = {"if": "Bash(git push *)", "command": "echo 'guarded' >&2; exit 2"}
    runner = _runner(tmp_path, "PreToolUse", hook)
    assert (await _pre(runner, "echo $(date)")).blocked
    assert (await _pre(runner, "echo 'unclosed")).blocked
    assert not (await _pre(runner, "echo hello")).blocked
    named = _runner(tmp_path, "PreToolUse", {**hook, "if": "Bash(rm *)"})
    assert not (await _pre(named, "echo $(date)")).blocked  # only the program named
