"""Lifecycle hooks: the command contract (stdin JSON, exit codes, stdout decisions,
timeouts), where they may be configured from, and the main agent's own hooks."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.config._hooks import HookCommand, parse_hooks
from agentcell.orchestrator.config._load import load_settings
from agentcell.orchestrator.config._trust import trust
from agentcell.protocol import RunStatus, ToolMessage, UserMessage
from agentcell.worker import MAX_STOP_HOOK_CONTINUATIONS
from cli_runner import invoke

from agentcell.testing import FunctionModel, reply, tool_call

PY = sys.executable


def runner(tmp_path: Path, event: str, code: str, **fields: Any) -> HookRunner:
    script = tmp_path / f"hook-{event}.py"
    script.write_text(code)
    command = HookCommand(event=event, command=f"{PY} {script}", **fields)
    return HookRunner([command], cwd=str(tmp_path), session_id="s1")


async def test_exit_2_blocks_with_stderr_and_the_document_has_claude_codes_fields(
    tmp_path: Path,
) -> None:
    code = (
        "import json, sys\n"
        "doc = json.load(sys.stdin)\n"
        "print(json.dumps(doc), file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    hooks = runner(tmp_path, "PreToolUse", code, matcher="Bash")
    outcome = await hooks.run("PreToolUse", {"tool_name": "bash", "tool_input": {"x": 1}}, "bash")
    assert outcome.blocked
    doc = json.loads(outcome.reason)
    assert doc == {
        "hook_event_name": "PreToolUse",
        "session_id": "s1",
        "transcript_path": "",
        "cwd": str(tmp_path),
        "permission_mode": "default",
        "tool_name": "bash",
        "tool_input": {"x": 1},
    }


async def test_exit_0_json_may_block_or_add_context(tmp_path: Path) -> None:
    block = runner(
        tmp_path, "PreToolUse", 'print(\'{"decision": "block", "reason": "not on Fridays"}\')'
    )
    outcome = await block.run("PreToolUse", {}, "bash")
    assert (outcome.blocked, outcome.reason) == (True, "not on Fridays")
    deny = runner(
        tmp_path,
        "PreToolUse",
        "import json; print(json.dumps({'hookSpecificOutput': {'permissionDecision': 'deny', "
        "'permissionDecisionReason': 'policy'}}))",
    )
    assert (await deny.run("PreToolUse", {}, "bash")).reason == "policy"
    context = runner(
        tmp_path, "PostToolUse", 'print(\'{"additionalContext": "lint: 2 warnings"}\')'
    )
    outcome = await context.run("PostToolUse", {}, "edit_file")
    assert (outcome.blocked, outcome.context) == (False, "lint: 2 warnings")
    plain = runner(tmp_path, "PreToolUse", "print('just a log line')")
    assert await plain.run("PreToolUse", {}, "bash") == type(outcome)()


async def test_other_exits_and_timeouts_are_logged_and_never_block(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failing = runner(tmp_path, "PreToolUse", "import sys; print('boom', file=sys.stderr); exit(3)")
    slow = runner(
        tmp_path, "PostToolUse", "import time; time.sleep(30)", timeout_s=0.3, origin="test"
    )
    with caplog.at_level(logging.WARNING, logger="agentcell.hooks"):
        assert not (await failing.run("PreToolUse", {}, "bash")).blocked
        assert not (await slow.run("PostToolUse", {}, "bash")).blocked
    text = caplog.text
    assert "failed (exit 3): boom; the run goes on" in text
    assert "timed out after 0.3 s" in text and "(test)" in text


async def test_matchers_take_our_names_and_claude_codes() -> None:
    hooks = HookRunner(
        parse_hooks(
            {
                "PreToolUse": [
                    {"matcher": "Edit|Write", "command": "true"},
                    {"matcher": "bash", "command": "true"},
                ],
                "PostToolUse": [{"command": "true"}],
            },
            "test",
        )
    )
    tools = ["read_file", "write_file", "edit_file", "bash", "grep"]
    assert hooks.hooked_tools(tools) == {
        "PreToolUse": ["write_file", "edit_file", "bash"],
        "PostToolUse": tools,
    }
    assert HookRunner().hooked_tools(tools) == {}  # nothing relayed without hooks


def test_bad_hook_settings_are_one_line_each() -> None:
    with pytest.raises(ValueError, match="unknown hook event 'PreTool'"):
        Settings(hooks={"PreTool": [{"command": "x"}]})
    with pytest.raises(ValueError, match="each hook needs a command"):
        Settings(hooks={"Stop": [{"matcher": ""}]})
    # Claude Code's prompt hooks are taken (and named when run), not an error.
    Settings(hooks={"Stop": [{"hooks": [{"type": "prompt", "prompt": "x"}]}]})


def test_a_project_may_configure_hooks_only_once_trusted(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "agentcell.toml").write_text(
        '[[hooks.PreToolUse]]\nmatcher = "bash"\ncommand = "./evil.sh"\n'
    )
    env = {"XDG_CONFIG_HOME": str(home / ".config")}
    notices: list[str] = []
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert settings.hooks == {}
    assert any("hooks ignored: hooks run commands on this machine" in n for n in notices)
    trust(project, home / ".config" / "agentcell" / "config.toml")
    settings, _ = load_settings(workdir=project, home=home, env=env)
    assert settings.hooks["PreToolUse"][0]["command"] == "./evil.sh"


def test_an_untrusted_projects_agent_file_loses_its_hooks(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (project / ".agentcell" / "agents").mkdir(parents=True)
    home.mkdir()
    (project / ".agentcell" / "agents" / "x.md").write_text(
        "---\nname: x\ndescription: x\nhooks:\n  Stop:\n    - hooks:\n"
        "        - type: command\n          command: ./evil.sh\n---\nbody\n"
    )
    orch = Orchestrator(workdir=project, home=home, model="scripted:demo")
    definition = orch.registry.get("x")
    assert definition is not None and definition.hooks == {}


async def test_the_main_agents_hooks_block_a_call_and_a_prompt(
    spawned: Any, tmp_path: Path
) -> None:
    guard = tmp_path / "guard.py"
    guard.write_text(
        "import json, sys\n"
        "doc = json.load(sys.stdin)\n"
        "if doc['hook_event_name'] == 'UserPromptSubmit' and 'secret' in doc['prompt']:\n"
        "    print('no secrets in prompts', file=sys.stderr); sys.exit(2)\n"
        "if doc['hook_event_name'] == 'Stop' and not doc['stop_hook_active']:\n"
        "    print('check keep.txt first', file=sys.stderr); sys.exit(2)\n"
        "if doc.get('tool_input', {}).get('command', '').startswith('rm'):\n"
        "    print('rm is not allowed', file=sys.stderr); sys.exit(2)\n"
    )
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "command": f"{PY} {guard}"}],
        "UserPromptSubmit": [{"command": f"{PY} {guard}"}],
        "Stop": [{"command": f"{PY} {guard}"}],
    }
    (tmp_path / "keep.txt").write_text("kept\n")

    seen: list[str] = []

    def main(messages: list[Any], tools: list[Any]) -> Any:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        seen[:] = [r.content for r in results]
        if not results:
            return reply("", tool_call("bash", command="rm keep.txt"))
        last = messages[-1]
        if isinstance(last, UserMessage) and last.content.startswith("Stop hook:"):
            return "checked, after: " + last.content
        return "told: " + results[0].content

    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=Settings(approval="allow", warm_spares=0, hooks=hooks),
        workdir=tmp_path,
        load_agent_files=False,
        record=True,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("tidy up"), 30)
        blocked = await asyncio.wait_for(orch.run("print the secret"), 30)
    # the blocked prompt left no record (its folder, made for the hook's transcript_path)
    runs = [p for p in (tmp_path / ".agentcell" / "runs").iterdir() if p.is_dir()]
    assert [r.name for r in runs] == [Path(report.run_dir).name], runs
    assert report.status is RunStatus.COMPLETED, report
    # Stop blocked once: the agent went on with the hook's reason, then could stop.
    assert report.final_text == "checked, after: Stop hook: check keep.txt first"
    assert seen and "rm is not allowed" in seen[0]
    assert (tmp_path / "keep.txt").exists()
    assert blocked.status is RunStatus.DENIED
    assert "blocked by a UserPromptSubmit hook: no secrets in prompts" in blocked.error


async def test_a_main_stop_hook_that_always_blocks_ends_the_run_at_the_cap(
    tmp_path: Path,
) -> None:
    """The main agent's Stop hook has the sub-agents' cap: a hook that never lets the
    agent stop ends the run as an error naming the cap, long before ``max_turns``."""
    runs = tmp_path / "runs.jsonl"
    nag = tmp_path / "nag.py"
    nag.write_text(
        "import json, sys\n"
        f"open({str(runs)!r}, 'a').write(json.dumps(json.load(sys.stdin)) + '\\n')\n"
        "print('not yet', file=sys.stderr); sys.exit(2)\n"
    )
    turns: list[int] = []

    def main(messages: list[Any], tools: list[Any]) -> Any:
        turns.append(len(messages))
        return "done"

    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=Settings(
            approval="allow", warm_spares=0, hooks={"Stop": [{"command": f"{PY} {nag}"}]}
        ),
        workdir=tmp_path,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("finish"), 60)
    cap = MAX_STOP_HOOK_CONTINUATIONS
    assert report.status is RunStatus.ERROR, report
    assert "MAX_STOP_HOOK_CONTINUATIONS" in report.error and "not yet" in report.error
    assert len(turns) == cap + 1  # the first answer, then one per allowed continuation
    seen = [json.loads(line) for line in runs.read_text().splitlines()]
    assert [r["stop_hook_active"] for r in seen] == [False] + [True] * cap


async def test_only_calls_to_hooked_tools_are_relayed() -> None:
    from agentcell.protocol import HookReply, ToolCall
    from agentcell.worker import RelayedHooks
    from agentcell.worker.tools import ToolOutput

    asked: list[tuple[str, str]] = []

    async def ask(event: str, *, tool: str, **_: Any) -> HookReply:
        asked.append((event, tool))
        return HookReply(request_id=1, context=f"{event} note")

    relay = RelayedHooks({"PreToolUse": ["bash"], "PostToolUse": ["bash"]}, ask)
    for name in ("read_file", "bash"):
        call = ToolCall(id=f"c-{name}", name=name, arguments="{}")
        assert await relay.before_tool(call, None, None) is None  # type: ignore[arg-type]
        out = await relay.after_tool(call, None, ToolOutput("out"))  # type: ignore[arg-type]
        expected = "out" if name == "read_file" else "out\n\nPreToolUse note\nPostToolUse note"
        assert out.content == expected
    assert asked == [("PreToolUse", "bash"), ("PostToolUse", "bash")]


GUARDED_AGENT = """---
name: guarded
description: has hooks
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: ./check.sh
  Stop:
    - hooks:
        - type: command
          command: ./done.sh
---
Body.
"""


def test_agents_show_and_validate_say_an_untrusted_projects_hooks_are_ignored(
    tmp_path: Path,
) -> None:
    import os

    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    (project / ".claude" / "agents").mkdir(parents=True)
    (project / ".claude" / "agents" / "guarded.md").write_text(GUARDED_AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTCELL_", "XDG_"))}
    env.update(HOME=str(home), NO_COLOR="1", COLUMNS="200")

    def cli(*args: str) -> str:
        done = invoke(*args, cwd=project, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    ignored = "2 ignored — this folder is not trusted; run `agentcell trust` in it"
    text = cli("agents", "show", "guarded").splitlines()
    [line] = [line for line in text if line.strip().startswith("hooks ")]
    assert ignored in line and "PreToolUse (1), SubagentStop (1)" in line
    shown = json.loads(cli("agents", "show", "guarded", "--json"))
    assert shown["hooks"] == ["PreToolUse (1)", "SubagentStop (1)"]
    assert shown["hooks_ignored"].startswith(ignored)
    lines = cli("agents", "validate").splitlines()
    said = [line for line in lines if "hooks:" in line]
    assert said == [f".claude/agents/guarded.md: warning: hooks: {shown['hooks_ignored']}"]
    assert lines[-1] == "1 file(s) checked, 0 failed, 1 problem(s)"

    cli("trust")
    shown = json.loads(cli("agents", "show", "guarded", "--json"))
    assert shown["hooks"] == ["PreToolUse (1)", "SubagentStop (1)"]
    assert shown["hooks_ignored"] is None
    assert "hooks:" not in cli("agents", "validate")


# Claude Code's hooks reference: "" or "*" match all; only letters, digits, "_" and "|":
# a name or a list of names, exactly; anything else: a JavaScript regular expression,
# `new RegExp(matcher).test(toolName)` (found anywhere in the name).
@pytest.mark.parametrize(
    ("matcher", "matched", "unmatched"),
    [
        ("Bash", ["Bash"], ["BashOutput", "bash", "MyBash"]),
        ("Edit|Write", ["Edit", "Write"], ["MultiEdit", "Writer", "Edit|Write"]),
        ("Writ", [], ["Write"]),  # letters only: a name, not a prefix
        ("^Bash", ["Bash", "BashOutput"], ["MyBash"]),
        ("Output$", ["BashOutput"], ["Bash", "OutputStyle"]),
        ("rit.", ["Write", "NotebookWrite"], ["Writ", "Read"]),
        ("mcp__memory__.*", ["mcp__memory__store"], ["mcp__other__store"]),
        ("^mcp__", ["mcp__x__y"], ["my_mcp__x"]),
        ("(", [], ["(", "Bash"]),  # no valid expression: nothing
        ("*", ["Bash", "anything"], []),
        ("", ["Bash"], []),
    ],
)
def test_matchers_follow_claude_codes_documented_rules(
    matcher: str, matched: list[str], unmatched: list[str]
) -> None:
    from agentcell.worker import matcher_matches

    assert [n for n in matched if not matcher_matches(matcher, n)] == []
    assert [n for n in unmatched if matcher_matches(matcher, n)] == []


def test_a_matcher_that_is_no_valid_expression_is_named_where_it_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import os

    table = {"PreToolUse": [{"matcher": "(", "hooks": [{"command": "exit 2"}]}]}
    notes: list[str] = []
    [taken] = parse_hooks(table, "settings.json", notes=notes)
    assert not taken.matches("Bash", "bash")  # taken as Claude Code takes it, but
    assert notes == [
        "settings.json: hooks.PreToolUse: matcher '(' is not a valid regular expression "
        "(missing ), unterminated subpattern at position 0): it matches no tool"
    ]
    assert parse_hooks({"PreToolUse": [{"matcher": "Bash|^mcp__", "command": "x"}]}, "s", [])
    with caplog.at_level(logging.WARNING):
        HookRunner(parse_hooks(table, "a run's settings"))
    assert "a run's settings: hooks.PreToolUse: matcher '(' is not a valid" in caplog.text

    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    (project / ".claude" / "agents").mkdir(parents=True)
    agent_file = GUARDED_AGENT.replace("matcher: Bash", "matcher: '(Bash'")
    (project / ".claude" / "agents" / "guarded.md").write_text(agent_file)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTCELL_", "XDG_"))}
    env.update(HOME=str(home), NO_COLOR="1", COLUMNS="200")
    assert invoke("trust", cwd=project, env=env).returncode == 0
    done = invoke("agents", "validate", cwd=project, env=env)
    lines = done.stdout.splitlines()
    assert lines[:-1] == [
        ".claude/agents/guarded.md: warning: frontmatter: hooks.PreToolUse: matcher '(Bash' is not "
        "a valid regular expression (missing ), unterminated subpattern at position 0): it "
        "matches no tool"
    ], done.stdout
    assert lines[-1] == "1 file(s) checked, 0 failed, 1 problem(s)"


@pytest.mark.parametrize(
    ("matcher", "said"),
    [
        ("mcp__github", "names 'mcp__github' exactly, and MCP tools are named mcp__SERVER__TOOL"),
        ("Bash|mcp__memory", "write mcp__memory__.* for every tool of that server"),
        ("mcp__a|mcp__b", "names 'mcp__a' exactly"),  # the first one named
        ("mcp___x", "names 'mcp___x' exactly"),  # a server whose name starts with _
        ("mcp____tool", ""),  # server "" and tool "_tool": a whole tool name
        ("Edit | Write", ""),  # a list, spaces around "|" allowed (Claude Code ≥ 2.1.191)
        ("Edit Write", "names 'Edit Write', and no tool's name has a space"),
        ("^Edit $", "has spaces, which no tool name has"),
        ("mcp__github__.*", ""),
        ("mcp__github__create_issue", ""),
        ("Bash|Edit", ""),
        ("", ""),
    ],
)
def test_a_matcher_that_can_never_fire_is_said(matcher: str, said: str) -> None:
    from agentcell.worker import matcher_problem

    problem = matcher_problem(matcher)
    assert (said in problem) if said else problem == "", problem


def test_a_childs_hook_request_is_matched_only_on_a_name_of_bounded_length() -> None:
    # The user's expression runs in the parent's loop: a compromised child's 40,000
    # character name would hold it (``.*write.*`` is quadratic there).
    hooks = HookRunner(parse_hooks({"PreToolUse": [{"matcher": ".*write.*", "command": "x"}]}, "t"))
    assert hooks.answers("PreToolUse", "mcp__x__write_file", [], mcp=True)
    long_name = "mcp__x__" + "w" * 40_000 + "write"
    assert not hooks.answers("PreToolUse", long_name, [], mcp=True)
    assert hooks.answers("PreToolUse", long_name, [long_name], mcp=True)  # offered: as is
