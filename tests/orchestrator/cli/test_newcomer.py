"""What a new user trips on first, run as they run it: through pipes and a terminal (the
installed executable); what only reads what a command prints or records runs the command
in this process (tests/support/cli_runner.py)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.backends.ray._local import RayHead, stop_ray_head
from cli_runner import AGENTCELL, agentcell, cli_env, invoke
from model_servers import Call, ModelServer, Reply
from places import SUPPORT
from ray_util import outside_loopback


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
    listed = invoke("runs", "list", "--json", cwd=work, env=env)
    assert '"completed"' in listed.stdout, listed.stdout + listed.stderr


def test_resume_takes_the_recorded_model_and_a_short_id(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = cli_env(work)
    first = invoke("run", "--model", "scripted:demo", "--json", "hello", cwd=work, env=env)
    assert first.returncode == 0, first.stderr
    run_id = json.loads(first.stdout)["run_dir"].rsplit("/", 1)[-1]
    # No --model, and no model configured anywhere: the record names the one it used.
    by_suffix = invoke("runs", "resume", run_id[-4:], "--json", "go on", cwd=work, env=env)
    assert by_suffix.returncode == 0, by_suffix.stderr
    resumed = json.loads(by_suffix.stdout)
    assert resumed["status"] == "completed"
    assert resumed["run_dir"].rsplit("/", 1)[-1] != run_id
    shown = invoke("runs", "show", run_id[:-2], "--json", cwd=work, env=env)
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == run_id, shown.stderr


def test_an_ambiguous_or_unknown_short_id_is_one_line(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = cli_env(work)
    for _ in range(2):
        assert (
            invoke("run", "--model", "scripted:demo", "--quiet", "hi", cwd=work, env=env).returncode
            == 0
        )
    ambiguous = invoke("runs", "show", "2", cwd=work, env=env)
    assert ambiguous.returncode == 2 and "matches several runs" in ambiguous.stderr
    assert len(ambiguous.stderr.strip().splitlines()) == 1 and "Traceback" not in ambiguous.stderr
    unknown = invoke("runs", "resume", "zzzz", "x", cwd=work, env=env)
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
    # Unmapped, with no Anthropic key: named before the run with the fix, left out, and
    # the main agent's call to it refused (no process started): exit 3.
    unmapped = invoke(*args, cwd=work, env=env)
    assert unmapped.returncode == 3, unmapped.stderr
    assert "cannot be reached): helper; sonnet is anthropic:" in unmapped.stderr
    assert "ANTHROPIC_API_KEY is not set" in unmapped.stderr
    assert "--model-alias sonnet=openai:local-main" in unmapped.stderr
    assert json.loads(unmapped.stdout)["subagents"] == []
    mapped = invoke(*args, "--model-alias", "sonnet=openai:local-sonnet", cwd=work, env=env)
    sub = json.loads(mapped.stdout)["subagents"][0]
    assert sub["status"] == "completed", sub
    assert sub["final_text"] == "helper ran on local-sonnet"
    bad = invoke(*args, "--model-alias", "sonnet", cwd=work, env=env)
    assert bad.returncode == 2 and "write ALIAS=PROVIDER:NAME" in bad.stderr


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
        started = agentcell("ray", "start", "--num-cpus", "1", cwd=tmp_path, env=env)
        assert started.returncode == 0, started.stderr
        state = json.loads((tmp_path / "st" / "agentcell" / "ray-head.json").read_text())
        head = RayHead(state["address"], {}, state["home"], state["leader"])
        assert state["address"].startswith("127.0.0.1:") and head.processes()
        assert not outside_loopback(head)
        status = agentcell("ray", "status", cwd=tmp_path, env=env)
        assert state["address"] in status.stdout
        stopped = agentcell("ray", "stop", cwd=tmp_path, env=env)
        assert stopped.returncode == 0 and "stopped the Ray head" in stopped.stdout
        assert not head.processes()
        assert bystander.poll() is None, "agentcell ray stop ended a process it did not start"
        again = agentcell("ray", "stop", cwd=tmp_path, env=env)
        assert again.returncode == 0 and "no Ray head" in again.stdout
    finally:
        if head is not None:
            stop_ray_head(head)
        bystander.kill()
        bystander.wait()


_DRIVER = """
import asyncio, signal
from pool_util import run_op
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._forkserver import PoolTimings

signal.signal(signal.SIGINT, lambda *_: print("interrupted", flush=True))

async def main():
    timings = PoolTimings(start_timeout=15)
    async with WorkerPool(max_workers=1, preload=["slow_boot"], timings=timings) as pool:
        _frames, outcome = await run_op(pool, "echo", text="hi")
        print("child", outcome.exit_code, flush=True)

asyncio.run(main())
"""


def test_ctrl_c_while_a_fork_server_imports_neither_kills_it_nor_shows_a_traceback(
    tmp_path: Path,
) -> None:
    """A terminal sends Ctrl-C to its whole foreground process group, fork servers
    included; one still importing its preload list must not die of it."""
    importing, release = tmp_path / "importing", tmp_path / "release"
    os.mkfifo(release)
    # A preload module that holds the fork server mid-import until the test lets it go.
    (tmp_path / "slow_boot.py").write_text(
        f"open({str(importing)!r}, 'w').close()\nopen({str(release)!r}).read()\n"
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER],
        # The fork server imports its preload list from PYTHONPATH (it keeps that variable).
        env={**os.environ, "PYTHONPATH": f"{tmp_path}:{SUPPORT}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        _wait_for(importing, driver)
        os.killpg(driver.pid, signal.SIGINT)  # what Ctrl-C on a terminal does
        assert driver.stdout is not None
        assert driver.stdout.readline() == "interrupted\n"  # delivered: the group got it
        _release(release)  # let the import finish
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
    assert "KeyboardInterrupt" not in err and "Traceback" not in err, err
    assert out == "child 0\n", out + err


def _release(fifo: Path) -> None:
    """Open the fifo the preload module reads (it then returns); if no reader holds it
    any more (the fork server died), there is nothing to release."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise


def _wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the fork server never began its preload"
        time.sleep(0.05)  # another process's start-up: polled, with a deadline


def test_ctrl_c_before_a_command_takes_over_exits_130_without_aborted(tmp_path: Path) -> None:
    """Ctrl-C while ``run -`` still reads its prompt: exit 130, as everywhere else, and no
    click "Aborted!" with exit code 1."""
    (tmp_path / "home").mkdir()
    # Ctrl-C's default, whoever started this suite: a background job of a shell without
    # job control (``cmd &``, ``setsid … &``) starts with SIGINT ignored, and Python then
    # leaves it ignored in every process it starts (rightly: a background job ignores it).
    default_sigint = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    default_sigint += "os.execv(sys.argv[1], sys.argv[1:])"
    reading = subprocess.Popen(
        [sys.executable, "-c", default_sigint, AGENTCELL, "run", "--model", "scripted:echo", "-"],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_reading_stdin(reading.pid)
        reading.send_signal(signal.SIGINT)
        # stdin stays open, as a terminal's does (an EOF read first is an empty prompt).
        reading.wait(timeout=60)
        _out, err = reading.communicate(timeout=60)  # it ended: its words, the pipes closed
    finally:
        if reading.poll() is None:
            reading.kill()
            reading.communicate()
    assert reading.returncode == 130, err
    assert "Aborted" not in err and "Traceback" not in err, err


def _wait_reading_stdin(pid: int) -> None:
    """Until the process sits in read(0, …): the prompt is being read."""
    read_nr = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)
    if read_nr is None:
        pytest.skip(f"the read system call's number on {os.uname().machine} is not known here")
    deadline = time.monotonic() + 120
    while True:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
        if fields[:2] == [read_nr, "0x0"]:
            return
        assert time.monotonic() < deadline, "the command never read its prompt"
        time.sleep(0.05)  # another process's start-up: polled, with a deadline


def test_piped_chat_runs_each_line_in_turn_and_keeps_the_last_answer(tmp_path: Path) -> None:
    """A pipe is a script: the second prompt used to be refused ("the main agent is still
    on your last message"), and a /quit right after a prompt dropped its answer."""
    (tmp_path / "home").mkdir()
    chat = subprocess.run(
        [AGENTCELL, "chat", "--model", "scripted:echo"],
        input="hello\nagain\n/quit\n",
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert chat.returncode == 0, chat.stderr
    assert "echo: hello" in chat.stdout and "echo: again" in chat.stdout, chat.stdout
    assert "still on your last message" not in chat.stdout
    assert chat.stdout.index("echo: hello") < chat.stdout.index("echo: again")


def test_on_a_terminal_the_answer_shows_as_it_streams_not_a_line_at_a_time(
    tmp_path: Path, model_server: ModelServer
) -> None:
    """A long one-line answer left the screen blank until its newline: the line in
    progress now shows under the live table as the tokens come."""
    from terminal_util import Screen

    release = threading.Event()
    model_server.responder = lambda body, api: Reply(
        text="Streaming-head of an answer that is one long line",
        chunk_size=4,
        pause_after=6,
        release=release,
    )
    (tmp_path / "home").mkdir()
    env = cli_env(tmp_path, model_server)
    env.pop("NO_COLOR")  # a colour terminal: the live table, as a person sees it
    term = Screen(["run", "--model", "openai:gpt-test", "go"], tmp_path, env)
    try:
        # Under the name its finished lines take (a chat's used to end under another).
        term.wait(lambda text: "agent> Streaming-" in text, "the line in progress")
        assert "main> " not in term.text()
        release.set()
        term.wait(lambda text: "completed in" in text, "the end of the run")
        assert term.close() == 0
    finally:
        release.set()
        term.kill()


def test_chat_names_each_agent_file_warning_once_for_the_session(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "odd.md").write_text(
        "---\nname: odd\ndescription: d\ntools: Read, KillShell\n---\nYou help.\n"
    )
    (agents / "broken.md").write_text("---\nname: broken\nmaxTurns: ten\n---\nYou help.\n")
    chat = subprocess.run(
        [AGENTCELL, "chat", "--model", "scripted:echo"],
        input="hello\n@odd hi\nagain\n/quit\n",
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert chat.returncode == 0, chat.stderr
    both = chat.stdout + chat.stderr
    # An agent left out is said once; what only `agents validate` needs (an unknown tool
    # of an agent that loads) is not said at all (issue 44).
    assert both.count("broken.md: maxTurns must be a whole number") == 1, both
    assert "KillShell" not in both
