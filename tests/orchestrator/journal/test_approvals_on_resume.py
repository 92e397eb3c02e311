"""Approvals across a kill and its resume: an "always" the user gave still holds; a call
the killed run never got to asks again; a journaled call is not asked about again."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_runner import cli_env
from http_script import _system
from model_servers import Call, ModelServer, Reply
from places import SUPPORT
from process_group import run_in_group

DRIVER = str(SUPPORT / "approval_resume_driver.py")


def _script(body: dict[str, Any], api: str) -> Reply:
    assert "main agent of agentcell" in _system(body)
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    steps = [
        Call("bash", {"command": "echo one >> counter.txt"}),  # asked: "always"
        Call("write_file", {"path": "out.txt", "content": "x"}),  # asked: "yes"
        Call("bash", {"command": "echo two >> counter.txt"}),  # allowed "always"
    ]
    return Reply(tool_calls=[steps[turn]]) if turn < len(steps) else Reply(text="done")


def _driver(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_in_group([sys.executable, DRIVER, *args], cwd=work, env=env)


def test_an_always_holds_after_the_resume_and_an_unasked_call_is_asked(
    tmp_path: Path, model_server: ModelServer
) -> None:
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    model_server.responder = _script
    env = {**cli_env(work, model_server), "PYTHONPATH": str(SUPPORT)}
    # Killed once its second answer (the write_file call) is journaled: never asked.
    killed = _driver(work, {**env, "AGENTCELL_TEST_KILL_AT": "main_answer:2"}, "run", str(work))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert (work / "asked.txt").read_text().split() == ["bash"]
    (run_dir,) = [p for p in (work / ".agentcell" / "runs").iterdir() if p.is_dir()]
    (work / "asked.txt").unlink()
    resumed = _driver(work, env, "resume", str(work), run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.strip() == "done"
    # The first bash call is journaled (not asked, not run again); the write_file call is
    # asked; the second bash call runs under the "always" given before the kill.
    assert (work / "asked.txt").read_text().split() == ["other"]
    assert (work / "counter.txt").read_text().split() == ["one", "two"]
    assert (work / "out.txt").read_text() == "x"
