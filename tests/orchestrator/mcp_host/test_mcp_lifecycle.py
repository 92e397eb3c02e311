"""MCP servers' processes end with their agent (issue 21, item 10a).

A real stdio server (tests/support/mcp_helper_server.py) forks a helper that leaves with ``setsid``
and a double fork, as npx- and uv-launched servers do, and writes the helper's pid to a
file: every pid these tests look at is read from there, a process their own run started.
Whatever happens, the test kills that helper on its way out."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import PoolTimings, WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.protocol import PROTOCOL_VERSION, McpServer, RunStatus, Start
from agentcell.worker import McpServers
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from places import SUPPORT

HELPER_SERVER = str(SUPPORT / "mcp_helper_server.py")


def server_config(pid_file: Path, **env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [HELPER_SERVER, str(pid_file)], "env": env}


def echo_then_answer(body: dict[str, Any], api: str) -> Reply:
    outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if not outputs:
        return Reply(tool_calls=[Call("mcp__helpers__echo", {"text": "hi"})])
    return Reply(text=f"answer: {outputs[0]}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def helper_gone(pid_file: Path) -> bool:
    """Whether the helper this test's server forked has ended (waiting a bounded while:
    a SIGKILL is sent at once but takes effect a moment later)."""
    pid = int(pid_file.read_text())
    with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
        psutil.Process(pid).wait(timeout=30)
    return not _alive(pid)


@pytest.fixture
def helper_pid_file(tmp_path: Path) -> Iterator[Path]:
    """Where the server writes its helper's pid; the helper is killed after the test if it
    is still there (only that pid: the one the test's own server reported)."""
    path = tmp_path / "helper.pid"
    yield path
    if path.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(path.read_text()), signal.SIGKILL)


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mcp-lifecycle-key")
    model_server.responder = echo_then_answer
    return model_server


@pytest.mark.parametrize("linger", [False, True], ids=["polite", "lingering"])
async def test_a_sub_agent_whose_server_left_a_setsid_helper_completes_and_the_helper_ends(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    helper_pid_file: Path,
    linger: bool,
) -> None:
    # The helper once sat in the sub-agent's reaping waitpid, outside its Landlock signal
    # scope: the run, answered, was killed for silence and recorded as crashed. The
    # heartbeat limit is short so that such a failure shows in seconds, not a minute.
    env = {"MCP_TEST_LINGER": "1"} if linger else {}
    agent = AgentDefinition(
        name="helper",
        description="uses an MCP server with a helper",
        tools=["mcp__helpers__*"],
        mcp_servers=[{"helpers": server_config(helper_pid_file, **env)}],
        model="openai:test",
        source="programmatic",
    )
    settings = Settings(
        model="openai:test",
        approval="allow",
        max_workers=2,
        warm_spares=0,
        heartbeat_timeout_s=20,
    )
    orch = Orchestrator(
        settings=settings, workdir=tmp_path, agents=[agent], load_agent_files=False, record=False
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("helper", "go"), 120)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "answer: echo from MCP: hi"
    assert result.sandbox.startswith("workspace"), result.sandbox
    # It left by itself once its answer was out, not killed by the parent.
    assert (result.exit_code, result.signal) == (0, None), result
    assert helper_gone(helper_pid_file)


async def test_the_main_agents_server_and_its_helper_end_with_the_orchestrator(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, helper_pid_file: Path
) -> None:
    settings = Settings(
        model="openai:test",
        approval="allow",
        warm_spares=0,
        mcp_servers={"helpers": McpServerConfig.model_validate(server_config(helper_pid_file))},
    )
    orch = Orchestrator(settings=settings, workdir=tmp_path, load_agent_files=False, record=False)
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 120)
    assert report.final_text == "answer: echo from MCP: hi", report
    assert helper_gone(helper_pid_file)


async def test_a_server_that_exits_at_once_fails_at_once_with_its_status(
    helper_pid_file: Path,
) -> None:
    # Its helper keeps the server's stdout open, so the SDK alone would wait for an
    # answer until start_timeout_s (an hour here: the test's own timeout would fire).
    config = server_config(helper_pid_file, MCP_TEST_EXIT_AT_ONCE="3")
    server = McpServer(name="quits", start_timeout_s=3600, **config)
    servers = McpServers([server])
    try:
        await asyncio.wait_for(servers.start(), 120)
    finally:
        await servers.stop()
    assert servers.started == []
    [problem] = servers.problems
    # (It wrote nothing: an empty log is not named, and is gone.)
    assert problem == (
        "MCP server 'quits' failed to start (the server exited with status 3): "
        "its tools are not available"
    )
    assert helper_gone(helper_pid_file)


OWNER = textwrap.dedent(
    """
    import asyncio, sys
    from agentcell.protocol import McpServer
    from agentcell.worker import McpServers

    async def main():
        server = McpServer(name="helpers", command=sys.executable, args=sys.argv[1:])
        servers = McpServers([server])
        await servers.start()
        print(",".join(servers.started), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def test_a_server_and_its_helper_end_when_their_owner_is_killed(helper_pid_file: Path) -> None:
    # An agent process that dies without a word (SIGKILL) cannot stop anything itself.
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, HELPER_SERVER, str(helper_pid_file)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "helpers"
        assert _alive(int(helper_pid_file.read_text()))
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    assert helper_gone(helper_pid_file)


async def test_a_child_that_hangs_after_its_report_keeps_its_result(
    spawned: SpawnRecorder,
) -> None:
    # However a child's exit hangs once it has reported, the report stands: it is ended
    # after exit_grace, not left to go silent and be killed as crashed. (The heartbeat
    # limit is long here: before, the answer was lost when it ran out.)
    start = Start(
        protocol_version=PROTOCOL_VERSION,
        run_id="test-hang-after-report",
        handler="slow_exit_handlers:report_then_hang",
        heartbeat_s=0.2,
    )
    timings = PoolTimings(exit_grace=0.5)
    pool = WorkerPool(max_workers=1, warm=0, heartbeat_timeout=30, timings=timings)
    async with pool, pool.lease() as lease:
        await lease.send(start)
        frames = [frame async for frame in lease]
        outcome = await asyncio.wait_for(lease.wait(), 120)
    assert outcome.kind is OutcomeKind.RESULT, outcome
    assert outcome.result is not None and outcome.result.text == "the answer"
    assert len(frames) == 1


REAPER = textwrap.dedent(
    """
    import os, signal
    from agentcell.worker.sandbox import _landlock
    from agentcell.worker.child import _main as _child, _proc

    _proc.set_child_subreaper()
    ready, tell = os.pipe()
    outside = os.fork()
    if outside == 0:  # forked before the walls, as an MCP server's warden is
        for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(number, signal.SIG_IGN)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the test reads to the end of stdout
        os.write(tell, b"x")
        while True:
            signal.pause()
    os.read(ready, 1)
    print(outside, flush=True)
    _landlock.Ruleset(fs=0, scoped=_landlock.SCOPE_SIGNAL).restrict_self()
    _child._reap_descendants()
    print("reaped", flush=True)
    """
)


@pytest.mark.skipif(
    __import__("agentcell.worker.sandbox._landlock", fromlist=["abi_version"]).abi_version() < 6,
    reason="Landlock's signal scope needs ABI 6",
)
def test_reaping_does_not_wait_on_a_child_it_may_not_signal() -> None:
    # The sub-agent's end once sat in waitpid for a child outside its Landlock domain,
    # which it could not kill: what it cannot signal is left to its warden and parent.
    process = subprocess.Popen([sys.executable, "-c", REAPER], stdout=subprocess.PIPE, text=True)
    outside = 0
    try:
        assert process.stdout is not None
        outside = int(process.stdout.readline())
        out, _ = process.communicate(timeout=60)
        assert out.strip() == "reaped"
        assert process.returncode == 0
    finally:
        process.kill()
        process.wait()
        if outside:
            with contextlib.suppress(ProcessLookupError):
                os.kill(outside, signal.SIGKILL)
        if process.stdout is not None:
            process.stdout.close()
