"""``runs show`` lists a run's messages between its agents — who to whom, when each was
read, the words — through a pipe and on a terminal, where a message's text is shown as
written, never read as markup; ``--json`` carries them too; ``runs view`` marks each on
its sender's lane (sent) and its recipient's (read)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_runner import AGENTCELL, cli_env
from model_servers import Call, ModelServer, Reply
from team_script import TeamScript, team_project
from terminal_util import Screen

MARKUP = "[bold red]not markup[/]"


class _Marked(TeamScript):
    """The team script, its writer's message carrying console markup."""

    def __call__(self, body: dict, api: str) -> Reply:  # type: ignore[type-arg]
        reply = super().__call__(body, api)
        calls = [
            Call(c.name, {"to": "waiter", "message": f"hello {MARKUP}"})
            if c.name == "send_message" and '"to": "waiter"' in json.dumps(c.arguments)
            else c
            for c in reply.tool_calls
        ]
        reply.tool_calls = calls
        return reply


def test_runs_show_lists_the_messages_through_a_pipe_and_on_a_terminal(
    tmp_path: Path, model_server: ModelServer
) -> None:
    work = team_project(tmp_path)
    model_server.responder = _Marked(work)
    env = cli_env(work, model_server)
    run = [AGENTCELL, "run", "go", "--model", "openai:m", "--max-workers", "2", "--approve"]
    run += ["allow", "--json"]
    ran = subprocess.run(run, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout)
    ids = {sub["name"]: sub["agent_id"] for sub in report["subagents"]}
    run_id = Path(report["run_dir"]).name
    shown = subprocess.run(
        [AGENTCELL, "runs", "show", run_id], cwd=work, env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    writer, waiter = f"writer ({ids['writer']})", f"waiter ({ids['waiter']})"
    assert "2 messages between agents:" in shown.stdout
    assert f"m1 {writer} → {waiter}, read at its turn 2: hello {MARKUP}" in shown.stdout
    assert f"m2 {waiter} → main, read at its turn 2: the waiter heard the writer" in shown.stdout
    as_json = subprocess.run(
        [AGENTCELL, "runs", "show", run_id, "--json"], cwd=work, env=env, capture_output=True
    )
    messages = json.loads(as_json.stdout)["messages"]
    assert [(m["id"], m["read_at_turn"]) for m in messages] == [("m1", 2), ("m2", 2)]
    assert messages[0]["text"] == f"hello {MARKUP}"
    page = work / "timeline.html"
    viewed = subprocess.run(
        [AGENTCELL, "runs", "view", run_id, "--output", str(page)], cwd=work, env=env
    )
    assert viewed.returncode == 0
    lanes = {lane.split('"', 1)[0]: lane for lane in page.read_text().split('data-agent="')[1:]}
    assert f'title="to {ids["waiter"]}, m1: hello {MARKUP}">✉→</span>' in lanes[ids["writer"]]
    assert f'title="from {ids["writer"]}, m1: hello {MARKUP}">→✉</span>' in lanes[ids["waiter"]]
    term = Screen(["runs", "show", run_id], work, env)
    screen = term.expect("between agents:")
    assert term.close() == 0
    assert f"m1 {writer} → {waiter}, read at its turn 2: hello {MARKUP}" in term.text(), screen
