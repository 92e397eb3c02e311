"""What a new user trips on first, run as they run it: through pipes and a terminal."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from agentcell.orchestrator.backends._ray_local import RayHead, stop_ray_head
from model_servers import Call, ModelServer, Reply
from test_cli import AGENTCELL, cli_env


def _piped(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``agentcell … | head -1`` in bash; return agentcell's exit code and its stderr."""
    script = f"set -o pipefail; {AGENTCELL} {command} 2>stderr.txt | head -1 >/dev/null"
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, timeout=120)
    return done.returncode, (cwd / "stderr.txt").read_text()


def test_a_closed_stdout_ends_the_run_quietly_and_the_run_is_recorded(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = cli_env(work)
    # The demo's answer is many lines, written over seconds: head is gone long before.
    code, stderr = _piped("run --model scripted:demo --quiet hello", work, env)
    assert code == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    listed = subprocess.run(
        [AGENTCELL, "runs", "list", "--json"], cwd=work, env=env, capture_output=True, text=True
    )
    assert '"completed"' in listed.stdout, listed.stdout + listed.stderr


def _agentcell(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTCELL, *args], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )


def test_resume_takes_the_recorded_model_and_a_short_id(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = cli_env(work)
    first = _agentcell(work, env, "run", "--model", "scripted:demo", "--json", "hello")
    assert first.returncode == 0, first.stderr
    run_id = json.loads(first.stdout)["run_dir"].rsplit("/", 1)[-1]
    # No --model, and no model configured anywhere: the record names the one it used.
    by_suffix = _agentcell(work, env, "runs", "resume", run_id[-4:], "--json", "go on")
    assert by_suffix.returncode == 0, by_suffix.stderr
    resumed = json.loads(by_suffix.stdout)
    assert resumed["status"] == "completed"
    assert resumed["run_dir"].rsplit("/", 1)[-1] != run_id
    shown = _agentcell(work, env, "runs", "show", run_id[:-2], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == run_id, shown.stderr


def test_an_ambiguous_or_unknown_short_id_is_one_line(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = cli_env(work)
    for _ in range(2):
        assert (
            _agentcell(work, env, "run", "--model", "scripted:demo", "--quiet", "hi").returncode
            == 0
        )
    ambiguous = _agentcell(work, env, "runs", "show", "2")
    assert ambiguous.returncode == 2 and "matches several runs" in ambiguous.stderr
    assert len(ambiguous.stderr.strip().splitlines()) == 1 and "Traceback" not in ambiguous.stderr
    unknown = _agentcell(work, env, "runs", "resume", "zzzz", "x")
    assert unknown.returncode == 2 and "no run 'zzzz'" in unknown.stderr


def _claude_code_responder(body: dict[str, Any], api: str) -> Reply:
    """The main agent sends one task to a Claude Code agent file; the sub-agent answers."""
    system = json.dumps(body["messages"][0])
    if "main agent of agentcell" not in system:
        return Reply(text=f"helper ran on {body['model']}")
    if any(m.get("role") == "tool" for m in body["messages"]):
        return Reply(text="done")
    task = {"subagent_type": "helper", "prompt": "help", "description": "help"}
    return Reply(tool_calls=[Call("task", task)])


def test_a_claude_code_agent_file_runs_on_a_local_server_through_model_alias(
    tmp_path: Path, model_server: ModelServer
) -> None:
    work = tmp_path / "work"
    (work / ".claude" / "agents").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    agent_file = "---\nname: helper\ndescription: helps\nmodel: sonnet\n---\nYou help.\n"
    (work / ".claude" / "agents" / "helper.md").write_text(agent_file)
    env = cli_env(work, model_server)
    model_server.responder = _claude_code_responder
    args = ("run", "--model", "openai:local-main", "--json", "--approve", "allow", "go")
    unmapped = json.loads(_agentcell(work, env, *args).stdout)
    assert "ANTHROPIC_API_KEY" in unmapped["subagents"][0]["error"]
    mapped = _agentcell(work, env, *args, "--model-alias", "sonnet=openai:local-sonnet")
    sub = json.loads(mapped.stdout)["subagents"][0]
    assert sub["status"] == "completed", sub
    assert sub["final_text"] == "helper ran on local-sonnet"
    bad = _agentcell(work, env, *args, "--model-alias", "sonnet")
    assert bad.returncode == 2 and "write ALIAS=PROVIDER:NAME" in bad.stderr


def _outside_loopback(head: RayHead) -> list[str]:
    outside = []
    for proc in head.processes():
        try:
            connections = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        for conn in connections:
            for address in (conn.laddr, conn.raddr):
                if address and address.ip not in ("127.0.0.1", "::ffff:127.0.0.1"):
                    outside.append(f"{proc.pid} {proc.name()}: {address.ip}:{address.port}")
    return outside


def test_agentcell_ray_start_and_stop_keep_to_loopback_and_to_their_own_head(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed (make test installs it)")
    home = tmp_path / "home"
    home.mkdir()
    env = {**cli_env(tmp_path, None), "HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "st")}
    # Another program's process that `ray stop` would end (it matches Ray's names).
    bystander = subprocess.Popen(["bash", "-c", "exec -a raylet sleep 600"], start_new_session=True)
    head: RayHead | None = None
    try:
        started = _agentcell(tmp_path, env, "ray", "start", "--num-cpus", "1")
        assert started.returncode == 0, started.stderr
        state = json.loads((tmp_path / "st" / "agentcell" / "ray-head.json").read_text())
        head = RayHead(state["address"], {}, state["home"], state["leader"])
        assert state["address"].startswith("127.0.0.1:") and head.processes()
        assert not _outside_loopback(head)
        status = _agentcell(tmp_path, env, "ray", "status")
        assert state["address"] in status.stdout
        stopped = _agentcell(tmp_path, env, "ray", "stop")
        assert stopped.returncode == 0 and "stopped the Ray head" in stopped.stdout
        assert not head.processes()
        assert bystander.poll() is None, "agentcell ray stop ended a process it did not start"
        again = _agentcell(tmp_path, env, "ray", "stop")
        assert again.returncode == 0 and "no Ray head" in again.stdout
    finally:
        if head is not None:
            stop_ray_head(head)
        bystander.kill()
        bystander.wait()
