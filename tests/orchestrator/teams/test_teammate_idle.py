"""Claude Code's TeammateIdle: a named sub-agent about to stop with messages it has read
and not answered runs the hook (``teammate_name``, who it owes, its id and type); exit 2
sends the hook's words back to it and it goes on. A real hook command, real children."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import SpawnRecorder
from model_servers import ModelServer
from team_script import TEAM_AGENTS, TeamScript, run_team

HOOK = """\
import json, pathlib, sys
event = json.load(sys.stdin)
log = pathlib.Path(sys.argv[1])
with log.open("a") as out:
    out.write(json.dumps(event) + "\\n")
if len(log.read_text().splitlines()) == 1:
    print("answer the writer before you stop", file=sys.stderr)
    sys.exit(2)
"""


async def test_a_teammate_stopping_with_a_message_unanswered_is_sent_back_once(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    work, hooks_dir = tmp_path / "work", tmp_path / "hooks"
    work.mkdir()
    hooks_dir.mkdir()
    script, log = hooks_dir / "idle.py", hooks_dir / "idle.jsonl"
    script.write_text(HOOK)
    hooks = {"TeammateIdle": [{"command": f"{sys.executable} {script} {log}"}]}
    team = openai_served.responder = TeamScript(work)
    report = await run_team(work, TEAM_AGENTS, hooks=hooks)
    assert report.final_text == "all done", report
    waiter = next(sub for sub in report.subagents if sub.name == "waiter")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2  # blocked once, then let through
    assert {k: calls[0][k] for k in ("hook_event_name", "teammate_name", "unanswered")} == {
        "hook_event_name": "TeammateIdle",
        "teammate_name": "waiter",
        "unanswered": ["writer"],  # it read the writer's message and answered the main agent
    }
    assert (calls[0]["agent_id"], calls[0]["agent_type"]) == (waiter.agent_id, "waiter")
    sent_back = json.dumps(team.bodies["wait"][-1]["messages"][-1])
    assert "answer the writer before you stop" in sent_back
