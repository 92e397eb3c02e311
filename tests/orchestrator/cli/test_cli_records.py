"""Recorded runs read back through the command (``runs show``, ``runs view``): a sub-agent
that left no transcript, a transcript changed after the fact, and the timeline page of
text full of control characters. Each run is real (a local model server, or the offline
echo model); the commands run in this process (tests/support/cli_runner.py), but for a terminal
and a pipe, which take the installed executable."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from cli_runner import AGENTCELL, cli_env, invoke, project
from http_script import _system, _tool_results
from model_servers import Call, ModelServer, Reply
from terminal_util import Screen

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)

CONTROLS = "\x1b[31mred\x07bell\rcr\x00nul"  # ESC, BEL, CR and a NUL
CONTROLS_SHOWN = "\\e[31mred\\abell\\rcr\\x00nul"  # as every renderer writes them out


def _one_task(task: dict[str, Any]) -> Any:
    """A main agent that starts one sub-agent with ``task``, then answers; the sub-agent
    answers at once."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        if "main agent of agentcell" not in _system(body):
            return Reply(text="looked")
        if not _tool_results(body):
            return Reply(tool_calls=[Call("task", task)])
        return Reply(text="done")

    return respond


def _run(project: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = invoke("run", "--json", "--approve", "allow", *args, cwd=project, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_sub_agent_that_ended_before_its_transcript_is_said_so(
    project: Path, model_server: ModelServer
) -> None:
    # isolation: worktree outside a git repository: the sub-agent ends with an error
    # before any process (and so any transcript) is spent on it.
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "writer.md").write_text(
        "---\nname: writer\ndescription: writes\nisolation: worktree\n---\nWrite.\n"
    )
    model_server.responder = _one_task({"subagent_type": "writer", "prompt": "x.txt"})
    env = cli_env(project, model_server)
    report = _run(project, env, "--model", "openai:gpt-test", "go")
    (sub,) = report["subagents"]
    assert sub["status"] == "error" and "needs a git repository" in sub["error"]
    run_id, agent_id = Path(report["run_dir"]).name, sub["agent_id"]
    assert not (Path(report["run_dir"]) / f"{agent_id}.jsonl").exists()

    for extra in ([], ["--json"]):
        shown = invoke("runs", "show", run_id, agent_id, *extra, cwd=project, env=env)
        assert shown.returncode == 2 and not shown.stdout
        (line,) = shown.stderr.splitlines()
        assert f"{agent_id} (writer) has no transcript: it was not recorded" in line
        assert "ended error: isolation: worktree needs a git repository" in line
        assert f"agentcell runs show {run_id}" in line  # where to read what is known of it
    unknown = invoke("runs", "show", run_id, "a99", cwd=project, env=env)
    assert unknown.returncode == 2 and f"has no agent 'a99' (agents: {agent_id}, main)" in (
        unknown.stderr
    )


def test_runs_show_warns_about_a_transcript_changed_after_it_was_written(project: Path) -> None:
    env = cli_env(project)
    report = _run(project, env, "--model", "scripted:echo", "hello there")
    run_id = Path(report["run_dir"]).name
    record = Path(report["run_dir"]) / "main.jsonl"
    clean = invoke("runs", "show", run_id, "main", cwd=project, env=env)
    assert clean.returncode == 0 and clean.stderr == "", clean.stderr

    lines = record.read_text().splitlines(keepends=True)
    edited = [n for n, line in enumerate(lines, 1) if "hello there" in line]
    assert edited  # what ``sed -i s/…/…/`` on the record does: every such line changed
    record.write_text("".join(line.replace("hello there", "EDITED") for line in lines))

    for extra in ([], ["--json"]):
        shown = invoke("runs", "show", run_id, "main", *extra, cwd=project, env=env)
        assert shown.returncode == 0, shown.stderr
        assert "echo: EDITED" in shown.stdout  # still shown, as it is now
        (warning,) = shown.stderr.splitlines()  # one line, before the transcript
        assert warning.startswith(f"agentcell: warning: {record}: line {edited[0]} was changed")
        assert "its MAC does not match" in warning
    resumed = invoke("runs", "resume", run_id, "more", cwd=project, env=env)
    assert resumed.returncode == 2 and f"line {edited[0]} was changed" in resumed.stderr


def test_the_timeline_writes_control_characters_out(
    project: Path, model_server: ModelServer
) -> None:
    task = {"subagent_type": "Explore", "prompt": "look", "description": f"desc {CONTROLS}"}
    model_server.responder = _one_task(task)
    env = cli_env(project, model_server)
    prompt = project.parent / "prompt.txt"  # no CR: a prompt's newlines are read as "\n"
    prompt.write_text("prompt \x1b[31mred\x07bell\x00nul")
    report = _run(project, env, "--model", "openai:gpt-test", "--prompt-file", str(prompt))
    assert report["subagents"][0]["description"] == f"desc {CONTROLS}"  # kept as given

    viewed = invoke("runs", "view", Path(report["run_dir"]).name, cwd=project, env=env)
    assert viewed.returncode == 0, viewed.stderr
    page = Path(viewed.stdout.strip()).read_bytes().decode()
    for char in ("\x1b", "\x07", "\r", "\x00"):
        assert char not in page, f"{char!r} is in the page as it is"
    assert f"desc {CONTROLS_SHOWN}" in page and "prompt \\e[31mred\\abell\\x00nul" in page


def test_runs_show_reads_a_transcript_of_any_shape_without_a_traceback(project: Path) -> None:
    """A transcript is the child's to write: a hostile sub-agent (or a hand edit) can put
    anything where an object belongs. ``runs show`` shows what is there, never a
    traceback (an attack review's: content not a string raised TypeError)."""
    env = cli_env(project)
    report = _run(project, env, "--model", "scripted:echo", "hello there")
    run_id = Path(report["run_dir"]).name
    record = Path(report["run_dir"]) / "main.jsonl"
    odd = [
        [1, 2],
        "a string line",
        {"kind": "start", "agent_type": ["x"], "model": {"m": 1}},
        {"kind": "messages", "messages": "not a list"},
        {
            "kind": "messages",
            "messages": [
                {"role": "user", "content": ["not", "text"]},
                5,
                {"role": "assistant", "tool_calls": [7, {"name": {}}]},
            ],
        },
        {"kind": "event", "event": "tool_start"},
        {"kind": "result", "result": ["done"]},
    ]
    with record.open("a") as file:
        file.writelines(json.dumps(line) + "\n" for line in odd)
    shown = invoke("runs", "show", run_id, "main", cwd=project, env=env)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "(not a message) 5" in shown.stdout and '["not", "text"]' in shown.stdout
    assert "→ ? " in shown.stdout and "→ {} " in shown.stdout  # the calls, as they are
    # As a person sees it, on a terminal; and read by `| head -2`, which leaves early.
    term = Screen(["runs", "show", run_id, "main"], project, env)
    try:
        screen = term.expect("(not a message) 5")
        assert term.close() == 0
    finally:
        term.kill()
    assert '["not", "text"]' in screen and "Traceback" not in screen
    headed = subprocess.run(
        f"{AGENTCELL} runs show {run_id} main | head -2",
        shell=True, cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert headed.returncode == 0 and "Traceback" not in headed.stderr, headed.stderr
    assert len(headed.stdout.splitlines()) == 2
