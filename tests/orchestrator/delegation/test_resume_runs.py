"""``agentcell runs resume``: a resume is a new run that names the run it went on from.

Run through the installed command, as a user runs it, against a scripted model server on
127.0.0.1: a resume that fails (the model refuses, the run is cancelled) gets its own id,
says both ids, shows no answer the model did not give it, and leaves the run it resumed
byte for byte as it was, resumable again.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

from cli_runner import AGENTCELL, cli_env
from model_servers import Call, ModelServer, Reply

REFUSED = Reply(status=400, error_message="this request is refused")


def _agentcell(
    work: Path, env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTCELL, *args],
        cwd=work,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def _runs(work: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    listed = _agentcell(work, env, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {run["run_id"]: run for run in json.loads(listed.stdout)}


def _first_run(work: Path, env: dict[str, str], server: ModelServer) -> tuple[str, Path]:
    server.add(Reply(text="the first answer"))
    first = _agentcell(work, env, "run", "--model", "openai:m", "--json", "hello")
    assert first.returncode == 0, first.stderr
    run_dir = Path(json.loads(first.stdout)["run_dir"])
    return run_dir.name, run_dir


def _project(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_a_failed_resume_is_a_new_run_that_names_both_and_leaves_the_original(
    tmp_path: Path, model_server: ModelServer
) -> None:
    work = _project(tmp_path)
    env = cli_env(work, model_server)
    original, original_dir = _first_run(work, env, model_server)
    before = _files(original_dir)

    model_server.add(REFUSED)
    failed = _agentcell(work, env, "runs", "resume", original[-4:], "go on")
    assert failed.returncode == 1, failed.stderr
    # The model answered nothing: the original's answer is not shown as this run's.
    assert "the first answer" not in failed.stdout, failed.stdout
    new = next(run for run in _runs(work, env) if run != original)
    assert new != original
    error_lines = [line for line in failed.stderr.splitlines() if original in line]
    assert any(new in line for line in error_lines), failed.stderr
    assert "Traceback" not in failed.stderr

    model_server.add(REFUSED)
    as_json = _agentcell(work, env, "runs", "resume", original, "--json", "go on")
    assert as_json.returncode == 1, as_json.stderr
    shown = json.loads(as_json.stdout)
    assert shown["resumed_from"] == original and shown["status"] == "error"
    assert Path(shown["run_dir"]).name not in (original, new)
    assert shown["final_text"] == "", shown

    runs = _runs(work, env)
    assert len(runs) == 3
    assert runs[original]["status"] == "completed" and "resumed_from" not in runs[original]
    assert runs[original]["final_text"] == "the first answer"
    for run_id, run in runs.items():
        if run_id != original:
            assert run["resumed_from"] == original and run["final_text"] == "", run
    assert _files(original_dir) == before  # not a byte of the original changed

    show = _agentcell(work, env, "runs", "show", original)
    assert show.returncode == 0, show.stderr
    assert new in show.stdout and Path(shown["run_dir"]).name in show.stdout
    show_new = _agentcell(work, env, "runs", "show", new)
    assert f"resumes run {original}" in show_new.stdout, show_new.stdout

    # Both stay resumable: the original from its answer, the failed one from its prompt.
    model_server.add(Reply(text="again from the original"), Reply(text="on from the failure"))
    again = _agentcell(work, env, "runs", "resume", original, "--json", "once more")
    assert json.loads(again.stdout)["final_text"] == "again from the original", again.stderr
    onward = _agentcell(work, env, "runs", "resume", new, "--json", "and on")
    assert json.loads(onward.stdout)["resumed_from"] == new, onward.stderr
    sent = [m.get("content") for m in model_server.requests[-1].body["messages"]]
    assert "hello" in sent and "go on" in sent and "and on" in sent, sent


def test_a_cancelled_resume_keeps_its_own_id(tmp_path: Path, model_server: ModelServer) -> None:
    work = _project(tmp_path)
    env = cli_env(work, model_server)
    original, original_dir = _first_run(work, env, model_server)
    before = _files(original_dir)
    model_server.add(Reply(hang=True))
    asked = len(model_server.requests) + 1
    with subprocess.Popen(
        [AGENTCELL, "runs", "resume", original, "go on"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as resume:
        try:
            model_server.wait_requests(asked, timeout=60)  # it is waiting on the model
            resume.send_signal(signal.SIGINT)
            _, stderr = resume.communicate(timeout=60)
        finally:
            if resume.poll() is None:
                resume.kill()
    assert resume.returncode == 130, stderr
    runs = _runs(work, env)
    (new,) = (run_id for run_id in runs if run_id != original)
    assert runs[new]["resumed_from"] == original and runs[new]["status"] == "cancelled"
    assert original in stderr and new in stderr, stderr
    assert _files(original_dir) == before


def test_a_resumed_chat_names_the_run_it_resumed(tmp_path: Path, model_server: ModelServer) -> None:
    work = _project(tmp_path)
    env = cli_env(work, model_server)
    original, original_dir = _first_run(work, env, model_server)
    before = _files(original_dir)
    model_server.add(REFUSED)
    chat = _agentcell(work, env, "runs", "resume", original, stdin="go on\n/quit\n")
    assert chat.returncode == 0, chat.stderr
    assert "the first answer" not in chat.stdout, chat.stdout  # the failed turn shows no answer
    runs = _runs(work, env)
    (new,) = (run_id for run_id in runs if run_id != original)
    assert runs[new]["kind"] == "chat" and runs[new]["resumed_from"] == original
    assert f"resuming run {original} as run {new}" in chat.stdout
    assert _files(original_dir) == before


def _continuing_responder(body: dict[str, Any], api: str) -> Reply:
    """First run: the main agent asks a1 to look. Resumed: it asks to continue a1, is
    refused, and starts a new sub-agent instead."""
    messages = body["messages"]
    if "main agent of agentcell" not in messages[0]["content"]:
        return Reply(text="looked")
    users = [m["content"] for m in messages if m["role"] == "user"]
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    look = {"subagent_type": "Explore", "prompt": "look", "description": "look"}
    if users[-1] == "hello":
        return Reply(tool_calls=[Call("task", look)]) if not tools else Reply(text="looked once")
    if len(tools) == 1:  # the resumed turn's first call: go on with a1
        return Reply(tool_calls=[Call("task", {**look, "resume": "a1", "prompt": "more"})])
    if len(tools) == 2:
        return Reply(tool_calls=[Call("task", look)])
    return Reply(text="resumed done")


def test_a_resumed_run_numbers_its_sub_agents_after_the_ones_it_names(
    tmp_path: Path, model_server: ModelServer
) -> None:
    """The resumed conversation names a1: a new sub-agent used to be a1 again, so "a1"
    meant two agents (and ``resume`` of the earlier one would continue the new one)."""
    work = _project(tmp_path)
    env = cli_env(work, model_server)
    model_server.responder = _continuing_responder
    first = _agentcell(work, env, "run", "--model", "openai:m", "--json", "hello")
    assert [s["agent_id"] for s in json.loads(first.stdout)["subagents"]] == ["a1"], first.stderr
    original = Path(json.loads(first.stdout)["run_dir"]).name
    resumed = _agentcell(work, env, "runs", "resume", original, "--json", "go on")
    shown = json.loads(resumed.stdout)
    assert shown["final_text"] == "resumed done", resumed.stderr
    refused, started = shown["subagents"]
    assert (refused["agent_id"], started["agent_id"]) == ("a2", "a3"), shown["subagents"]
    assert "a1 ran in the earlier run" in refused["error"], refused
    assert started["status"] == "completed"
