"""Hooks written for Claude Code guard agentcell's agents as they guard Claude Code.

The hook scripts here follow Claude Code's documented hook contract, not ours: they read
``tool_name == "Bash"`` and ``tool_input.command``, ``tool_name == "Read"`` and
``tool_input.file_path``, answer with exit 2 + stderr or with
``hookSpecificOutput.permissionDecision``, live at ``$CLAUDE_PROJECT_DIR/.claude/hooks/``
and are run through real sub-agent processes (the real OpenAI client against the local
model server) or the main agent. ``../shared/hooks`` holds real hook scripts in use.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config._hooks import parse_hooks
from agentcell.orchestrator.config._load import load_settings
from agentcell.orchestrator.config._trust import trust
from agentcell.protocol import RunStatus, ToolMessage
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from places import SHARED, SUPPORT

from agentcell.testing import FunctionModel, reply, tool_call

PY = sys.executable
SERVER = str(SUPPORT / "mcp_server.py")
SHARED_HOOKS = SHARED / "hooks"
SEP = "\n=====\n"
SECRET = "sk-live-0123456789abcdefSECRET"

#: A community-style PreToolUse guard, in Claude Code's format: argv[1] is its log.
GUARD = """\
import json, os, sys
doc = json.load(sys.stdin)
seen = {"doc": doc, "project_dir": os.environ.get("CLAUDE_PROJECT_DIR")}
if doc.get("transcript_path"):
    with open(doc["transcript_path"]) as transcript:
        seen["transcript_first"] = json.loads(transcript.readline())
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(seen) + "\\n")
name, tool_input = doc.get("tool_name"), doc.get("tool_input") or {}
if name == "Bash" and "rm -rf" in tool_input.get("command", ""):
    print("Blocked: rm -rf is not allowed here", file=sys.stderr)
    sys.exit(2)
if name == "Read" and os.path.basename(tool_input.get("file_path", "")) == ".env":
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "Blocked: .env holds secrets",
    }}))
sys.exit(0)
"""


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-claude-hooks-test-key")
    yield model_server


def calls_then_report(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """Make ``calls`` one by one, then answer with every tool output joined by SEP."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(calls):
            name, arguments = calls[len(outputs)]
            return Reply(tool_calls=[Call(name, arguments)])
        return Reply(text=SEP.join(outputs))

    return respond


def project_with_hook(tmp_path: Path, name: str, code: str) -> tuple[Path, str, Path]:
    """A project holding ``.claude/hooks/NAME``; the command that runs it the way
    Claude Code configs do (through ``$CLAUDE_PROJECT_DIR``), and its log."""
    project = tmp_path / "project"
    (project / ".claude" / "hooks").mkdir(parents=True)
    (project / ".claude" / "hooks" / name).write_text(code)
    log = tmp_path / f"{name}.log"
    return project, f'{PY} "$CLAUDE_PROJECT_DIR/.claude/hooks/{name}" {log}', log


def logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def worker(tools: list[str], **fields: Any) -> AgentDefinition:
    return AgentDefinition(
        name="worker",
        description="does the work",
        system_prompt="You do the work.",
        tools=tools,
        model="openai:test",
        source="test",
        **fields,
    )


def orchestrator(project: Path, hooks: dict[str, Any], *agents: AgentDefinition, **kw: Any) -> Any:
    settings = {"approval": "allow", "warm_spares": 0, **kw.pop("settings", {})}
    return Orchestrator(
        settings=Settings(model="openai:test", hooks=hooks, **settings),
        workdir=project,
        agents=list(agents),
        load_agent_files=False,
        **{"record": False, **kw},
    )


async def test_a_claude_code_guard_stops_rm_rf_and_an_env_read_in_a_sub_agent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    project, command, log = project_with_hook(tmp_path, "guard.py", GUARD)
    (project / "junk").mkdir()
    (project / "junk" / "keep.txt").write_text("still here\n")
    (project / ".env").write_text(f"OPENAI_API_KEY={SECRET}\n")
    served.responder = calls_then_report(
        [
            ("bash", {"command": "rm -rf junk", "timeout_s": 3}),
            ("read_file", {"path": ".env"}),
        ]
    )
    hooks = {"PreToolUse": [{"matcher": "Bash|Read", "hooks": [{"command": command}]}]}
    async with orchestrator(project, hooks, worker(["bash", "read_file"]), record=True) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "clean up"), 60)
    assert result.status is RunStatus.COMPLETED, result
    removed, read = result.text.split(SEP)
    assert "Blocked: rm -rf is not allowed here" in removed
    assert (project / "junk" / "keep.txt").exists()  # the command never ran
    assert "Blocked: .env holds secrets" in read
    # The secret never reached the model server, in any request.
    assert all(SECRET not in json.dumps(request.body) for request in served.requests)

    bash, env = logged(log)
    root = os.path.realpath(project)
    assert bash["doc"]["tool_name"] == "Bash" and env["doc"]["tool_name"] == "Read"
    assert bash["doc"]["tool_input"] == {"command": "rm -rf junk", "timeout": 3000}  # ms
    assert env["doc"]["tool_input"] == {"file_path": f"{root}/.env"}  # absolute
    for seen in (bash, env):
        doc = seen["doc"]
        assert seen["project_dir"] == str(project)
        assert doc["hook_event_name"] == "PreToolUse"
        assert doc["session_id"] and doc["session_id"] == bash["doc"]["session_id"]
        assert doc["cwd"] == root and doc["permission_mode"] == "default"
        assert doc["agent_id"] == result.agent_id and doc["agent_type"] == "worker"
        assert doc["tool_use_id"]
        # The agent's own JSONL transcript, there and readable while it runs.
        assert doc["transcript_path"].endswith(f"{result.agent_id}.jsonl")
        assert isinstance(seen["transcript_first"], dict)


#: Rewrites one Bash command (updatedInput, Claude Code's field names and units).
REWRITE = """\
import json, sys
doc = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(doc) + "\\n")
command = doc["tool_input"].get("command", "")
new = {"echo original > out.txt": "echo rewritten > out.txt", "echo safe": "rm -rf junk"}
if command in new:
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "updatedInput": {"command": new[command], "timeout": 5000},
    }}))
"""


async def test_updated_input_runs_in_the_child_and_is_judged_by_the_deny_rules(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    project, command, log = project_with_hook(tmp_path, "rewrite.py", REWRITE)
    (project / "junk").mkdir()
    served.responder = calls_then_report(
        [
            ("bash", {"command": "echo original > out.txt"}),
            ("bash", {"command": "echo safe"}),
        ]
    )
    hooks = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": command}]}]}
    definition = worker(["bash"])
    async with orchestrator(
        project, hooks, definition, settings={"deny_rules": ["bash(rm *)"]}
    ) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "write it"), 60)
    assert result.status is RunStatus.COMPLETED, result
    _, refused = result.text.split(SEP)
    assert (project / "out.txt").read_text() == "rewritten\n"
    # The rewrite into `rm -rf junk` met the deny rule the original call did not.
    assert "denied by the rule bash(rm *)" in refused
    assert (project / "junk").is_dir()
    assert [d["tool_input"]["command"] for d in logged(log)] == [
        "echo original > out.txt",
        "echo safe",
    ]


#: Blocks every MCP tool call of one name, logs every call it sees (Pre and Post).
MCP_GUARD = """\
import json, sys
doc = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(doc) + "\\n")
if doc["hook_event_name"] == "PreToolUse" and doc["tool_name"] == "mcp__local__echo":
    print("echo is off limits", file=sys.stderr)
    sys.exit(2)
"""


# "^mcp__local": a regular expression, found at the start of the name as Claude Code's
# `new RegExp(matcher).test(name)` finds it (a whole-name match would miss every tool).
@pytest.mark.parametrize("matcher", ["*", "", "^mcp__local"])
async def test_a_wildcard_hook_fires_for_a_sub_agents_mcp_tool_calls(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, matcher: str
) -> None:
    project, command, log = project_with_hook(tmp_path, "mcp_guard.py", MCP_GUARD)
    served.responder = calls_then_report(
        [("mcp__local__echo", {"text": "hi"}), ("mcp__local__add", {"a": 2, "b": 3})]
    )
    definition = worker(
        ["mcp__local__*"],
        mcp_servers=[{"local": {"command": PY, "args": [SERVER]}}],
    )
    entry = {"matcher": matcher, "hooks": [{"type": "command", "command": command}]}
    hooks = {"PreToolUse": [entry], "PostToolUse": [entry]}
    async with orchestrator(project, hooks, definition) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "use the tools"), 60)
    assert result.status is RunStatus.COMPLETED, result
    echo, added = result.text.split(SEP)
    assert "echo is off limits" in echo and "echo from MCP" not in echo
    assert json.loads(added) == {"sum": 5}
    seen = [(d["hook_event_name"], d["tool_name"], d["tool_input"]) for d in logged(log)]
    assert seen == [
        ("PreToolUse", "mcp__local__echo", {"text": "hi"}),
        ("PreToolUse", "mcp__local__add", {"a": 2, "b": 3}),
        ("PostToolUse", "mcp__local__add", {"a": 2, "b": 3}),
    ]


#: Asks for approval of every Read; continue:false after any Bash; logs Notifications.
ASKER = """\
import json, sys
doc = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(doc) + "\\n")
if doc["hook_event_name"] == "PreToolUse" and doc["tool_name"] == "Read":
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "ask",
        "permissionDecisionReason": "reading needs a person's yes",
    }}))
if doc["hook_event_name"] == "PostToolUse" and doc["tool_name"] == "Bash":
    print(json.dumps({"continue": False, "stopReason": "enough for today"}))
"""


async def test_ask_goes_to_approval_with_a_notification_and_continue_false_stops(
    tmp_path: Path,
) -> None:
    project, command, log = project_with_hook(tmp_path, "asker.py", ASKER)
    (project / "notes.txt").write_text("harmless\n")
    results: list[str] = []

    def main(messages: list[Any], tools: list[Any]) -> Any:
        done = [m.content for m in messages if isinstance(m, ToolMessage)]
        results[:] = done
        if not done:
            return reply("", tool_call("read_file", path="notes.txt"))
        if len(done) == 1:
            return reply("", tool_call("bash", command="echo ran > ran.txt"))
        return "went on after the stop"

    entry = [{"hooks": [{"type": "command", "command": command}]}]
    hooks = {"PreToolUse": entry, "PostToolUse": entry, "Notification": entry}
    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        # Approvals denied: a read (always allowed by the mode) is refused only if asked.
        settings=Settings(approval="deny", permission_mode="bypass", warm_spares=0, hooks=hooks),
        workdir=project,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("look, then run"), 30)
    assert results[0].startswith("permission denied") and "harmless" not in results[0]
    assert (project / "ran.txt").exists()
    assert report.status is RunStatus.DENIED, report
    assert "stopped by a PostToolUse hook: enough for today" in report.error
    events = [(d["hook_event_name"], d.get("tool_name", "")) for d in logged(log)]
    assert events == [
        ("PreToolUse", "Read"),
        ("Notification", ""),
        ("PreToolUse", "Bash"),
        ("PostToolUse", "Bash"),
    ]
    notification = logged(log)[1]
    assert notification["notification_type"] == "permission_prompt"
    assert "Read" in notification["message"]
    assert notification["permission_mode"] == "bypassPermissions"


def test_every_claude_code_event_and_hook_type_is_taken_not_rejected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "agentcell.toml").write_text(
        '[[hooks.Notification]]\nmatcher = "permission_prompt"\ncommand = "notify-send hi"\n'
        '[[hooks.PermissionRequest]]\ncommand = "true"\n'
        '[[hooks.SessionStart]]\ncommand = "true"\n'
        '[[hooks.Stop]]\nhooks = [{ type = "prompt", prompt = "Is the work done?" }]\n'
    )
    env = {"XDG_CONFIG_HOME": str(home / ".config")}
    trust(project, home / ".config" / "agentcell" / "config.toml")
    settings, _ = load_settings(workdir=project, home=home, env=env)
    assert sorted(settings.hooks) == ["Notification", "PermissionRequest", "SessionStart", "Stop"]
    notes: list[str] = []
    commands = parse_hooks(settings.hooks, "agentcell.toml", notes)
    assert sorted(c.event for c in commands) == ["Notification", "SessionStart"]
    assert [n.split(": ", 1)[1] for n in notes] == [
        "hooks.PermissionRequest: taken, but these hooks do not run: approvals are asked "
        "through agentcell's own channel (a Notification hook with matcher permission_prompt "
        "runs as one is asked)",
        "hooks.Stop: a 'prompt' hook is taken but does not run: agentcell runs command hooks only",
    ]
    # Named once, however often the table is read.
    with caplog.at_level(logging.WARNING, logger="agentcell.hooks"):
        for _ in range(3):
            parse_hooks({"PermissionRequest": [{"command": "x"}]}, "once-test")
    assert caplog.text.count("once-test: hooks.PermissionRequest: taken") == 1


@pytest.fixture
def git_project(tmp_path: Path) -> Path:
    """A repository with no commit yet (the script checks its tree and stops there)."""
    project = tmp_path / "project"
    (project / ".claude" / "hooks").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    return project


@pytest.mark.skipif(not SHARED_HOOKS.is_dir(), reason="../shared/hooks is not here")
async def test_the_real_before_stop_hook_runs_from_the_project_as_claude_code_runs_it(
    tmp_path: Path, git_project: Path
) -> None:
    """../shared/hooks/before-stop, a Stop hook in use, copied into a project's
    .claude/hooks as people do and run through $CLAUDE_PROJECT_DIR."""
    project = git_project
    script = project / ".claude" / "hooks" / "before-stop"
    shutil.copy(SHARED_HOOKS / "before-stop", script)
    script.chmod(0o755)
    out = tmp_path / "stop.out"
    command = f'"$CLAUDE_PROJECT_DIR/.claude/hooks/before-stop" > {out}'
    orch = Orchestrator(
        model=FunctionModel(lambda messages, tools: "all done", name="function:main"),
        settings=Settings(approval="allow", warm_spares=0, hooks={"Stop": [{"command": command}]}),
        workdir=project,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("finish"), 60)
    assert report.status is RunStatus.COMPLETED and report.final_text == "all done"
    text = out.read_text()
    assert "Before you stop — agentcell checklist:" in text
    assert "FIX: no pyproject.toml at the root" in text  # it looked at this project


def test_tool_inputs_map_both_ways_and_tools_without_a_twin_keep_theirs() -> None:
    from agentcell.orchestrator.approvals._hook_shape import (
        claude_tool_input,
        claude_tool_name,
        our_arguments,
    )
    from agentcell.orchestrator.approvals._hooks import HookRunner

    cases = {
        "bash": ({"command": "ls", "timeout_s": 1.5, "description": "list"}, "Bash"),
        "read_file": ({"path": "a/b.py", "offset": 3, "limit": 9}, "Read"),
        "write_file": ({"path": "/w/c.txt", "content": "x"}, "Write"),
        "edit_file": ({"path": "c.txt", "old_string": "a", "new_string": "b"}, "Edit"),
        "glob": ({"pattern": "**/*.py", "path": "src"}, "Glob"),
        "grep": ({"pattern": "x", "include": "*.py", "ignore_case": True}, "Grep"),
        "task": ({"subagent_type": "r", "prompt": "p", "description": "d"}, "Agent"),
        "mcp__gh__issue": ({"title": "t"}, "mcp__gh__issue"),
        "task_status": ({"task_id": "t1"}, "task_status"),
    }
    for tool, (arguments, claude) in cases.items():
        assert claude_tool_name(tool) == claude
        shaped = claude_tool_input(tool, arguments, "/w")
        back = our_arguments(tool, shaped)
        assert set(back) == set(arguments), tool
    assert claude_tool_input("bash", {"command": "ls", "timeout_s": 1.5}, "/w") == {
        "command": "ls",
        "timeout": 1500,
    }
    assert claude_tool_input("read_file", {"path": "a/../b.py"}, "/w") == {"file_path": "/w/b.py"}
    assert claude_tool_input("grep", {"pattern": "x", "include": "*.py"}, "/w")["glob"] == "*.py"
    from agentcell.orchestrator.config._hooks import parse_hooks as hooks_of

    runner = HookRunner(hooks_of({"PreToolUse": [{"matcher": "Agent", "command": "x"}]}, "t"))
    assert runner.hooked_tools(["task", "bash"]) == {"PreToolUse": ["task"]}  # Task or Agent
    assert our_arguments("bash", {"command": "ls", "timeout": 5000}) == {
        "command": "ls",
        "timeout_s": 5.0,
    }


#: Logs each event; SessionStart adds context, as Claude Code's JSON output does.
SESSION = """\
import json, sys
doc = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(doc) + "\\n")
if doc["hook_event_name"] == "SessionStart":
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "SessionStart", "additionalContext": "Follow STYLE.md."}}))
"""


async def test_session_start_and_end_run_once_each_around_the_runs(tmp_path: Path) -> None:
    project, command, log = project_with_hook(tmp_path, "session.py", SESSION)
    prompts: list[str] = []

    def main(messages: list[Any], tools: list[Any]) -> Any:
        prompts.append(messages[-1].content)
        return "ok"

    entry = [{"hooks": [{"type": "command", "command": command}]}]
    hooks = {"SessionStart": entry, "SessionEnd": entry, "UserPromptSubmit": entry}
    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=Settings(approval="allow", warm_spares=0, hooks=hooks),
        workdir=project,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        await asyncio.wait_for(orch.run("first"), 30)
        await asyncio.wait_for(orch.run("second"), 30)
    assert prompts == ["first\n\nFollow STYLE.md.", "second"]
    seen = logged(log)
    assert [d["hook_event_name"] for d in seen] == [
        "SessionStart",
        "UserPromptSubmit",
        "UserPromptSubmit",
        "SessionEnd",
    ]
    assert seen[0]["source"] == "startup" and seen[-1]["reason"] == "other"
    assert len({d["session_id"] for d in seen}) == 1


async def test_plain_stdout_of_a_user_prompt_submit_hook_is_context(tmp_path: Path) -> None:
    """Claude Code adds a UserPromptSubmit (and SessionStart) hook's plain stdout to the
    context; other events' plain stdout is only a log."""
    project, command, _ = project_with_hook(
        tmp_path, "date.py", "import json, sys\njson.load(sys.stdin)\nprint('Today is Friday.')\n"
    )
    prompts: list[str] = []

    def main(messages: list[Any], tools: list[Any]) -> Any:
        prompts.append(messages[-1].content)
        return "ok"

    entry = [{"hooks": [{"type": "command", "command": command}]}]
    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=Settings(
            approval="allow", warm_spares=0, hooks={"UserPromptSubmit": entry, "Stop": entry}
        ),
        workdir=project,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("plan the week"), 30)
    assert report.final_text == "ok"
    assert prompts == ["plan the week\n\nToday is Friday."]
