"""Claude Code puts ``agent_id`` and ``agent_type`` in every hook payload of every event
fired for a sub-agent, and in none of the main session's. A real run through the main
agent: each event its sub-agent fires (SubagentStart, PreToolUse, PostToolUse,
SubagentStop, TaskCreated) names the sub-agent; the main agent's (UserPromptSubmit,
PreToolUse, PostToolUse, Stop) name none, and each names the main transcript."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition
from conftest import SpawnRecorder
from http_script import _system, _tool_results
from model_servers import Call, ModelServer, Reply
from team_script import run_team

LOG_HOOK = """\
import json, sys
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(json.load(sys.stdin)) + "\\n")
"""
EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SubagentStart")
EVENTS += ("SubagentStop", "TaskCreated")


def _script(body: dict[str, Any], api: str) -> Reply:
    results = _tool_results(body)
    if "main agent of agentcell" in _system(body):
        if not results:
            return Reply(tool_calls=[Call("task", {"subagent_type": "worker", "prompt": "go"})])
        return Reply(text="main done")
    steps = [Call("bash", {"command": "echo hi"}), Call("team_tasks", {"action": "create",
             "subject": "s"})]  # fmt: skip
    return Reply(tool_calls=[steps[len(results)]]) if len(results) < 2 else Reply(text="ok")


async def test_every_sub_agent_event_names_it_and_no_main_agent_event_does(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    hooks_dir = tmp_path / "hooks"
    hooks_dir.mkdir()
    script, log = hooks_dir / "log.py", hooks_dir / "events.jsonl"
    script.write_text(LOG_HOOK)
    command = f"{sys.executable} {script} {log}"
    hooks = {event: [{"command": command}] for event in EVENTS}
    openai_served.responder = _script
    worker = AgentDefinition(name="worker", description="w", tools=["bash", "team_tasks"])
    report = await run_team(tmp_path / "work", [worker], hooks=hooks, record=True)
    assert report.final_text == "main done", report
    (sub,) = report.subagents
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    ours = [e for e in seen if e.get("agent_id") == sub.agent_id]
    assert all(e.get("agent_type") == "worker" for e in ours)
    assert sorted({e["hook_event_name"] for e in ours}) == sorted(
        ["SubagentStart", "PreToolUse", "PostToolUse", "SubagentStop", "TaskCreated"]
    )
    main = [e for e in seen if "agent_id" not in e]
    assert {e["hook_event_name"] for e in main} == {
        "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"
    }  # fmt: skip
    assert all("agent_type" not in e for e in main)
    # Every main event, UserPromptSubmit too (fired before the run began), names the main
    # transcript, as Claude Code's name the session's (it used to be "" in that one).
    assert report.run_dir, report
    transcript = Path(report.run_dir) / "main.jsonl"
    assert {e["transcript_path"] for e in main} == {str(transcript)}, main
    assert transcript.is_file()
    assert len(ours) + len(main) == len(seen)  # nothing else, nothing half-named
