"""Hardening II (issue 16) over real child processes: caps, frames, process trees, limits.

Every test here failed on the code before its fix.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import hardening_handlers
import nobody_runtime
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._workers import wait_gone
from agentcell.protocol import (
    PROTOCOL_VERSION,
    ApprovalReply,
    ApprovalRequest,
    Control,
    ControlAction,
    Event,
    Notice,
    ProtocolError,
    Result,
    RunStatus,
    Start,
    Usage,
    UsageUpdate,
    decode_body,
    encode_frame,
)
from agentcell.worker.child import _proc
from agents import agent
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from places import SUPPORT

from agentcell.testing import FunctionModel, reply, tool_call


def orchestrator(
    workdir: Path, agents: list[AgentDefinition], models: dict[str, Any], **settings: Any
) -> Orchestrator:
    return Orchestrator(
        settings=Settings(
            model="scripted:echo", approval="allow", max_workers=6, warm_spares=1, **settings
        ),
        workdir=workdir,
        agents=agents,
        models=models,
        load_agent_files=False,
        record=False,
    )


# --- 10. the operator's subagent_* settings cap what a definition asks for ------------


async def test_a_definition_cannot_exceed_the_operators_turn_and_time_caps(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    looper = FunctionModel(
        lambda messages, tools: reply("again", tool_call("glob", pattern="*")),
        name="function:looper",
    )
    orch = orchestrator(
        tmp_path,
        [agent("looper", ["glob"], model="function:looper", max_turns=10_000, timeout_s=86_400)],
        {"function:looper": looper},
        subagent_max_turns=3,
        subagent_timeout_s=600,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("looper", "loop"), 60)
    assert result.status is RunStatus.MAX_TURNS, result
    assert result.turns == 3


# --- 2. frames count only from the process they belong to -----------------------------


def hardening_start(op: str) -> Start:
    return Start(
        protocol_version=PROTOCOL_VERSION,
        run_id="r",
        handler="hardening_handlers:run",
        args={"op": op},
    )


async def test_a_result_followed_by_death_by_signal_is_that_death(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=2, warm=1) as pool, pool.lease() as lease:
        await lease.send(hardening_start("report_then_die"))
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.SIGNALED, outcome
    assert "SIGKILL" in outcome.detail and "report before dying was not accepted" in outcome.detail


async def test_a_result_forged_through_a_copy_of_the_socket_is_dropped(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=2, warm=1) as pool, pool.lease() as lease:
        await lease.send(hardening_start("thief_forges_a_result"))
        outcome = await lease.wait()
        forged = lease._worker.forged_frames
    assert outcome.kind is OutcomeKind.RESULT, outcome
    assert outcome.result is not None and outcome.result.text == "genuine"
    assert forged == 1


async def test_an_approval_forged_through_a_copy_of_the_parents_socket_is_ignored(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=2, warm=1) as pool, pool.lease() as lease:
        await lease.send(hardening_start("approval"))
        request = await lease.recv()
        assert isinstance(request, ApprovalRequest)
        # A thief process with a copy of the parent's end answers "approved" first ...
        fd = lease._worker.channel._fd
        await asyncio.to_thread(
            hardening_handlers.run_thief, hardening_handlers.FORGED_APPROVAL, fd
        )
        # ... and the child still waits for (and obeys) the parent's own answer.
        await lease.send(
            ApprovalReply(request_id=request.request_id, approved=False, reason="not today")
        )
        frames = [f async for f in lease]
    assert isinstance(frames[-1], Result)
    assert frames[-1].result.text == "False:not today"


def test_negative_or_absurd_usage_in_a_frame_is_a_protocol_error() -> None:
    for tokens in (-(10**12), 10**15):
        frame = Event(event=UsageUpdate(usage=Usage(input_tokens=tokens), model="m"))
        with pytest.raises(ProtocolError, match="input_tokens"):
            decode_body(bytes(encode_frame(frame))[4:])


# --- 8. cpu_limit_s counts the whole process tree -------------------------------------


async def test_cpu_limit_counts_every_process_of_the_tree(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Sixteen short busy processes, four at a time: each stays under RLIMIT_CPU's 1 s
    # (a per-process limit), together they use ~6 CPU seconds.
    busy = "python3 -c 'import time\nwhile time.process_time() < 0.4: pass'"
    rounds = f"for r in 1 2 3 4; do for i in 1 2 3 4; do {busy} & done; wait; done; echo done"
    model_server.responder = lambda body, api: Reply(tool_calls=[Call("bash", {"command": rounds})])
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-cpu")
    orch = orchestrator(
        tmp_path, [agent("burner", ["bash"], model="openai:test", cpu_limit_s=1, max_turns=2)], {}
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("burner", "burn"), 60)
    assert result.status is RunStatus.LIMIT, result
    assert "CPU time limit exceeded: its processes used" in result.error
    assert "the limit is 1 (cpu_limit_s)" in result.error


# --- 1. the orchestrator's own environment is not readable ----------------------------

_ORCHESTRATOR = """
import asyncio, os, sys
from agentcell.orchestrator import Orchestrator, Settings

async def main():
    orch = Orchestrator(settings=Settings(model="scripted:echo"), workdir=sys.argv[1],
                        load_agent_files=False, record=False)
    async with orch:
        print(os.getpid(), "OPENAI_API_KEY" in os.environ, flush=True)
        await asyncio.to_thread(sys.stdin.readline)

asyncio.run(main())
"""
_PARENT_KEY = "sk-parent-key-that-no-tool-may-read-0123456789"
_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_a_same_user_process_cannot_read_the_orchestrators_keys(spawned: SpawnRecorder) -> None:
    # The orchestrator and the reader both run as nobody: the reader is any same-user
    # process (a sub-agent's bash, say). Root reads every /proc file; see the next test.
    # Nobody runs a copy of agentcell it can reach (a checkout may sit in a private folder).
    if (why := nobody_runtime.unavailable()) is not None:
        pytest.skip(why)
    runtime = nobody_runtime.runtime()
    workdir = tempfile.mkdtemp(prefix="agentcell-nobody-")
    os.chmod(workdir, 0o777)
    env = {**runtime.env, "HOME": workdir, "OPENAI_API_KEY": _PARENT_KEY}
    with subprocess.Popen(
        runtime.command("-c", _ORCHESTRATOR, workdir),
        env=env,
        cwd="/",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as orch:
        _read_the_orchestrators_environment(orch, workdir)


def _read_the_orchestrators_environment(orch: subprocess.Popen[str], workdir: str) -> None:
    try:
        assert orch.stdout is not None and orch.stdin is not None
        pid, in_environ = orch.stdout.readline().split()
        assert in_environ == "False"  # scrubbed from os.environ: no child inherits it
        reader = subprocess.run(
            [*_NOBODY, "cat", f"/proc/{pid}/environ"], capture_output=True, timeout=30
        )
        assert _PARENT_KEY.encode() not in reader.stdout
        assert reader.returncode != 0 and b"Permission denied" in reader.stderr
        # Even root, who reads any /proc file, finds the key overwritten.
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert _PARENT_KEY.encode() not in f.read()
        orch.stdin.write("done\n")
        orch.stdin.flush()
        assert orch.wait(timeout=30) == 0
    finally:
        if orch.poll() is None:
            os.killpg(orch.pid, signal.SIGKILL)
            orch.wait()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_keys_live_in_memory_while_an_orchestrator_runs(
    spawned: SpawnRecorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcell.orchestrator.backends._environment import child_environment
    from agentcell.worker.child import _proc

    monkeypatch.setenv("OPENAI_API_KEY", _PARENT_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-anthropic-other-provider-key-0123456789")
    async with orchestrator(tmp_path, [], {}):
        assert "OPENAI_API_KEY" not in os.environ and "ANTHROPIC_API_KEY" not in os.environ
        assert not _proc.is_dumpable()
        env, bash_env = child_environment("openai:gpt")  # the child's own key, from memory
        assert env["OPENAI_API_KEY"] == _PARENT_KEY and "ANTHROPIC_API_KEY" not in env
        assert "OPENAI_API_KEY" not in bash_env
    assert os.environ["OPENAI_API_KEY"] == _PARENT_KEY  # back for the code that follows
    assert _proc.is_dumpable()


# --- 3. every process that writes records redacts every configured secret -------------


async def test_a_child_redacts_the_keys_it_was_never_given(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = "fake-anthropic-the-other-providers-key-0123456789"
    (tmp_path / "leak.txt").write_text(f"config: {other}\n")
    replies = iter([Reply(tool_calls=[Call("read_file", {"path": "leak.txt"})]), Reply("done")])
    model_server.responder = lambda body, api: next(replies)
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-of-the-openai-child")
    monkeypatch.setenv("ANTHROPIC_API_KEY", other)
    orch = Orchestrator(
        settings=Settings(model="scripted:echo", approval="allow", max_workers=2, warm_spares=1),
        workdir=tmp_path,
        agents=[agent("reader", ["read_file"], model="openai:test")],
        load_agent_files=False,
        run_dir=tmp_path / "run",
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("reader", "read leak.txt"), 60)
    assert result.status is RunStatus.COMPLETED, result
    [transcript] = [p for p in (tmp_path / "run").rglob("*.jsonl") if p.name != "main.jsonl"]
    text = transcript.read_text()
    assert "config: [REDACTED]" in text
    assert other not in text


# --- 7. descriptors are closed when a child ends, not by the garbage collector --------

_FD_LOAD = """
import asyncio, gc, os, resource, sys
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.protocol import PROTOCOL_VERSION, Start

# 96 descriptors for 1,000 children, 16 at a time, and no garbage collector: only
# descriptors closed the moment each child ends keep this going.
resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))
gc.disable()

async def main():
    kinds = {}
    async with WorkerPool(max_workers=16, warm=4) as pool:
        before = len(os.listdir("/proc/self/fd"))
        async def one(i):
            async with pool.lease() as lease:
                await lease.send(Start(protocol_version=PROTOCOL_VERSION, run_id=str(i),
                    handler="pool_handlers:run", args={"op": "echo", "text": str(i)}))
                outcome = await lease.wait()
            kinds[outcome.kind.value] = kinds.get(outcome.kind.value, 0) + 1
        await asyncio.gather(*(one(i) for i in range(1000)))
        after = len(os.listdir("/proc/self/fd"))
    print(kinds, before, after)

asyncio.run(main())
"""


def test_a_thousand_children_under_a_low_descriptor_limit(spawned: SpawnRecorder) -> None:
    tests = str(SUPPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _FD_LOAD],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kinds, before, after = done.stdout.rsplit("}", 1)[0] + "}", *done.stdout.split()[-2:]
    assert kinds == "{'result': 1000}", done.stdout  # no start error, no false crash
    assert int(after) <= int(before) + 16, done.stdout  # nothing left open per child


# --- 6. every descendant of a sub-agent ends with it ----------------------------------


@pytest.mark.parametrize("how", ["sigkill", "segfault", "exit"])
async def test_descendants_that_left_the_session_die_with_their_child(
    spawned: SpawnRecorder, how: str
) -> None:
    async with WorkerPool(max_workers=2, warm=1) as pool, pool.lease() as lease:
        await lease.send(
            Start(
                protocol_version=PROTOCOL_VERSION,
                run_id="r",
                handler="hardening_handlers:run",
                args={"op": "escape_then", "then": how},
            )
        )
        notice = await lease.recv()
        assert isinstance(notice, Event) and isinstance(notice.event, Notice)
        pids = [int(p) for p in notice.event.message.split()]
        await lease.send(Control(action=ControlAction.STEER, text="end now"))
        outcome = await lease.wait()
        assert outcome.kind in (OutcomeKind.SIGNALED, OutcomeKind.EXITED), outcome
        # Still inside the pool: it is the child's end, not the pool's, that ends them.
        await wait_gone(pids, within=2.0)
        alive = [pid for pid in pids if _proc.is_alive(pid)]
    assert alive == []


async def test_a_killed_fork_server_is_a_clear_result_and_is_replaced(
    spawned: SpawnRecorder,
) -> None:
    from agentcell.orchestrator.backends._starters import forkserver_pid

    async with WorkerPool(max_workers=4, warm=1) as pool:
        async with pool.lease() as lease:
            await lease.send(
                Start(
                    protocol_version=PROTOCOL_VERSION,
                    run_id="r",
                    handler="pool_handlers:run",
                    args={"op": "wait_for_cancel"},
                )
            )
            assert isinstance(await lease.recv(), Event)
            old = forkserver_pid()
            assert old is not None
            os.kill(old, signal.SIGKILL)  # what a tool of any sub-agent could do
            outcome = await lease.wait()
        assert "its fork server died" in outcome.detail, outcome
        async with pool.lease() as lease:  # the next run gets a new fork server
            await lease.send(
                Start(
                    protocol_version=PROTOCOL_VERSION,
                    run_id="r2",
                    handler="pool_handlers:run",
                    args={"op": "echo", "text": "after"},
                )
            )
            outcome = await lease.wait()
        assert outcome.kind is OutcomeKind.RESULT and outcome.result is not None
        assert outcome.result.text == "after"
        assert forkserver_pid() not in (None, old)


# --- 5. a symlink swap race from a sub-agent's own bash -------------------------------

_SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.path.join(sys.argv[1], n).encode() for n in ("f.txt", "swap"))
end = time.monotonic() + 30
while time.monotonic() < end and not os.path.exists(sys.argv[2]):
    libc.renameat2(-100, a, -100, b, 2)  # RENAME_EXCHANGE: f.txt <-> the link to outside
"""


async def test_a_swap_race_from_bash_never_reads_outside(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET\n")
    (work / "f.txt").write_text("inside\n")
    (work / "swap").symlink_to(outside / "secret.txt")
    swapper, stop = tmp_path / "swapper.py", tmp_path / "stop"
    swapper.write_text(_SWAPPER)
    start_swapping = f"setsid {sys.executable} {swapper} {work} {stop} >/dev/null 2>&1 &"
    reads = [Call("read_file", {"path": "f.txt"}) for _ in range(300)]
    replies = iter(
        [
            Reply(tool_calls=[Call("bash", {"command": start_swapping})]),
            Reply(tool_calls=reads, chunk_size=10_000),
            Reply("done"),
        ]
    )
    model_server.responder = lambda body, api: next(replies)
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-race")
    orch = Orchestrator(
        settings=Settings(model="scripted:echo", approval="allow", max_workers=2, warm_spares=1),
        workdir=work,
        agents=[agent("racer", ["bash", "read_file"], model="openai:test", max_turns=5)],
        load_agent_files=False,
        run_dir=tmp_path / "run",
    )
    try:
        async with orch:
            result = await asyncio.wait_for(orch.delegate("racer", "race"), 120)
    finally:
        stop.write_text("")
    assert result.status is RunStatus.COMPLETED, result
    [transcript] = [p for p in (tmp_path / "run").rglob("*.jsonl") if p.name != "main.jsonl"]
    text = transcript.read_text()
    assert text.count("read_file") >= 300
    assert "TOPSECRET" not in text


async def test_a_spare_that_died_before_its_start_does_not_fail_the_run(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    """The fork server is killed (its idle spares die with it, unnoticed yet): the next
    sub-agent still runs, on a process of the replacement fork server."""
    from agentcell.orchestrator.backends._starters import forkserver_pid

    async with Orchestrator(
        settings=Settings(model="scripted:echo", approval="deny", warm_spares=3),
        workdir=tmp_path,
        record=False,
    ) as orch:
        await orch.pool.warmed()
        old = forkserver_pid()
        assert old is not None
        spares = orch.pool.pids()
        os.kill(old, signal.SIGKILL)
        for pid in spares:  # they die with their fork server (PDEATHSIG) ...
            await wait_gone([pid], within=5.0)
        result = await orch.delegate("Explore", "after the fork server died")  # ... unseen
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == "echo: after the fork server died"
    assert result.pid not in spares
