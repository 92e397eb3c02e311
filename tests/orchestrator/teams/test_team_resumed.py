"""A team run whose orchestrator is SIGKILLed just after a sub-agent took a message into
its next model request, then resumed with ``runs resume``: every message reaches its
recipient's model once — the taken one read again at the same turn (not sent again),
the later ones sent in the resume — and the run ends as an unkilled one does."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir
from cli_runner import AGENTCELL, cli_env
from model_servers import ModelServer
from process_group import run_in_group
from team_script import TeamScript, team_project


def _newly_read(bodies: list[dict], text: str) -> int:  # type: ignore[type-arg]
    """How many requests carry ``text`` after their last assistant message (a tool result
    or a user message): read there for the first time, not in the history."""
    count = 0
    for body in bodies:
        messages = body["messages"]
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=0)
        count += any(text in str(m.get("content", "")) for m in messages[last + 1 :])
    return count


def _facts(run_dir: Path, what: str) -> list[dict]:  # type: ignore[type-arg]
    records = read_journal(journal_dir(run_dir) / "journal").records
    return [r for r in records if r.get("what") == what]


def test_a_killed_team_run_resumes_and_each_message_is_read_once(
    tmp_path: Path, model_server: ModelServer
) -> None:
    work = team_project(tmp_path)
    script = model_server.responder = TeamScript(work)
    env = cli_env(work, model_server, AGENTCELL_TEST_KILL_AT="fact:mail:1")
    flags = ["--approve", "allow", "--json"]
    run = [AGENTCELL, "run", "go", "--model", "openai:m", "--max-workers", "2", *flags]
    killed = run_in_group(run, cwd=work, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (run_dir,) = [p for p in (work / ".agentcell" / "runs").iterdir() if p.is_dir()]
    assert [f["recipient"] for f in _facts(run_dir, "mail")] == [
        _facts(run_dir, "message")[0]["recipient"]
    ]
    env.pop("AGENTCELL_TEST_KILL_AT")
    resumed = run_in_group([AGENTCELL, "runs", "resume", run_dir.name, *flags], cwd=work, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["final_text"] == "all done"
    assert _newly_read(script.bodies["wait"], "hello from the writer") == 1
    assert _newly_read(script.bodies["main"], "the waiter heard the writer") == 1
    # Sent once each over both runs: the writer's in the killed run, the waiter's after.
    new_run = Path(report["run_dir"])
    sent = [(f["id"], f["text"].count("hello from the writer")) for f in _facts(run_dir, "message")]
    assert sent == [("m1", 1)]
    assert [f["id"] for f in _facts(new_run, "message")] == ["m2"]
    assert [(f["recipient"], f["ids"]) for f in _facts(new_run, "mail")] == [("main", ["m2"])]
