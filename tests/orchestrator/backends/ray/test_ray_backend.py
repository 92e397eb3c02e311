"""The Ray backend against a real Ray head on loopback: the same frames, the same results.

One head for the whole module (starting Ray costs seconds); every sub-agent is a real
actor whose process dials back over TCP. The last tests check what the cluster holds
afterwards: no actor or sub-agent process of ours, and no socket to anything but
127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest
from agentcell.orchestrator import AgentActivity, CallbackChannel
from agentcell.orchestrator.backends.ray._backend import RayBackend, RayBackendError, RayOptions
from agentcell.orchestrator.backends.ray._local import RayHead
from agentcell.orchestrator.delegation._request import DelegationRequest, RunHandle, Scope
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir
from agentcell.protocol import Notice, RunStatus
from agentcell.worker.tools import function_tool
from cli_runner import AGENTCELL, cli_env
from delegation_util import gate
from http_script import _first_user
from model_servers import Call, ModelServer, Reply
from places import SUPPORT
from ray_util import outside_loopback

from agentcell import AgentDefinition, Orchestrator, Settings
from agentcell.testing import FunctionModel, reply, tool_call, tool_results

pytest.importorskip("ray", reason="the ray extra is not installed (no wheel for this Python?)")

pytestmark = pytest.mark.slow

SUB_AGENT_MARKS = ("agentcell.worker.remote", "SubAgentHost")
SLEEPER = ["sleep", "600"]


@pytest.fixture
def head(ray_head: RayHead) -> RayHead:
    return ray_head  # the session's one head (conftest.py), checked gone at its end


@pytest.fixture
def ray_env(head: RayHead, monkeypatch: pytest.MonkeyPatch) -> RayHead:
    for key, value in head.env.items():
        if key.startswith("RAY_"):
            monkeypatch.setenv(key, value)
    return head


def ours_alive(head: RayHead) -> list[str]:
    """Sub-agent processes and actors of ours still alive anywhere on this machine."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if any(mark in text for mark in SUB_AGENT_MARKS):
            found.append(f"{proc.pid}: {text[:80]}")
    return found


async def wait_none_alive(head: RayHead, within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        # Another program's processes: no event to wait on, so the table is polled.
        while ours_alive(head):  # noqa: ASYNC110
            await asyncio.sleep(0.2)


def settings(head: RayHead, **extra: Any) -> Settings:
    options: dict[str, Any] = {"model": "scripted:echo", "approval": "deny", **extra}
    s = Settings(backend="ray", warm_spares=0, **options)
    s.ray.address = head.address
    return s


def fan_out_responder(n: int) -> Any:
    def respond(body: dict[str, Any], api: str) -> Reply:
        messages = body.get("messages", [])
        system = str(messages[0].get("content", "")) if messages else ""
        results = [m for m in messages if m.get("role") == "tool"]
        if "main agent of agentcell" in system:
            if not results:
                return Reply(
                    tool_calls=[
                        Call(
                            "task",
                            {
                                "subagent_type": "Explore",
                                "prompt": f"job {i}",
                                "description": f"j{i}",
                            },
                        )
                        for i in range(n)
                    ]
                )
            return Reply(text=f"{len(results)} sub-agents reported")
        if not results:
            return Reply(tool_calls=[Call("glob", {"pattern": "*.txt"})])
        return Reply(text="found " + str(results[0]["content"]).strip())

    return respond


def test_a_fan_out_of_16_through_the_command_line(
    head: RayHead, model_server: ModelServer, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    (work / "a.txt").write_text("x\n")
    model_server.responder = fan_out_responder(16)
    env = cli_env(work, model_server, **{k: v for k, v in head.env.items() if k.startswith("RAY_")})
    done = subprocess.run(
        [
            AGENTCELL,
            "run",
            "--json",
            "--backend",
            "ray",
            "--ray-address",
            head.address,
            "--max-workers",
            "16",
            "--model",
            "openai:gpt-test",
            "fan out",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["final_text"] == "16 sub-agents reported"
    subs = report["subagents"]
    assert len(subs) == 16
    assert {s["status"] for s in subs} == {"completed"}
    assert all(s["final_text"] == "found a.txt" for s in subs)
    assert all(s["node"] for s in subs), "each result names the Ray node it ran on"
    assert len({s["pid"] for s in subs}) == 16
    asyncio.run(wait_none_alive(head))


async def test_a_crash_a_hang_and_an_exception_are_contained_beside_siblings(
    ray_env: RayHead, tmp_path: Path
) -> None:
    @function_tool(read_only=True)
    def explode() -> str:
        """Fail the whole process (a MemoryError ends the run, as in the local pool)."""
        raise MemoryError("boom in the remote child")

    def model(messages: list[Any], tools: list[Any]) -> Any:
        task = messages[1].content if len(messages) > 1 else ""
        done = tool_results(messages)
        if task == "victim":  # leaves a grandchild behind, then waits to be killed
            if not done:
                escape = "setsid sleep 600 > /dev/null 2>&1 < /dev/null & echo started"
                return reply("", tool_call("bash", command=escape))
            return reply("", tool_call("wait_at_gate"))
        if done:
            return "sibling done"
        if task == "hang":
            return reply("", tool_call("bash", command="sleep 600"))
        if task == "raise":
            return reply("", tool_call("explode"))
        return reply("", tool_call("glob", pattern="*"))

    async with gate() as g:
        fn = FunctionModel(model, name="function:remote")
        tools = ["bash", "glob", "explode", "wait_at_gate"]
        agents = [
            AgentDefinition(name="worker", model="function:remote", tools=tools),
            AgentDefinition(name="hanger", model="function:remote", tools=["bash"], timeout_s=3),
        ]
        async with Orchestrator(
            settings=settings(ray_env, approval="allow", permission_mode="bypass"),
            workdir=tmp_path,
            agents=agents,
            tools=[explode, g.tool()],
            models={"function:remote": fn},
            record=False,
        ) as orch:
            victim = asyncio.ensure_future(orch.delegate("worker", "victim"))
            async with asyncio.timeout(120):
                await g.wait_arrivals(1)  # the victim is at work on its node
            # SIGKILL the actor's process (from outside: the sandbox rightly stops a
            # sub-agent doing it). The victim's is the only actor alive at this point.
            (actor,) = [
                proc
                for proc in ray_env.processes()  # this head's, not another test run's
                if "SubAgentHost" in " ".join(proc.info["cmdline"] or [])
            ]
            actor.kill()
            hang, boom, one, two = await asyncio.gather(
                orch.delegate("hanger", "hang"),
                orch.delegate("worker", "raise"),
                orch.delegate("worker", "sibling one"),
                orch.delegate("worker", "sibling two"),
            )
            crash = await victim
    assert crash.status is RunStatus.CRASHED, crash
    assert crash.error.startswith("its Ray actor died: The actor is dead because"), crash.error
    assert hang.status is RunStatus.TIMEOUT, hang
    assert boom.status is RunStatus.ERROR and "MemoryError" in boom.error, boom
    assert (one.status, two.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
    assert one.text == "sibling done" and one.node
    await wait_none_alive(ray_env)
    # The actor died under the sub-agent: its guardian, seeing the actor's pipe close,
    # killed the sub-agent's whole tree, the grandchild that left its group included.
    assert not [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == SLEEPER]


async def test_an_approval_round_trip_and_a_steer_reach_a_remote_sub_agent(
    ray_env: RayHead, tmp_path: Path
) -> None:
    asked: list[str] = []

    def approve(query: Any) -> bool:
        asked.append(f"{query.tool}:{query.arguments}")
        return True

    async with gate() as g:

        def model(messages: list[Any], tools: list[Any]) -> Any:
            done = tool_results(messages)
            text = " ".join(getattr(m, "content", "") for m in messages)
            if not done:
                return reply("", tool_call("bash", command="echo approved-ran > out.txt"))
            if len(done) == 1 and done[0].name == "bash":
                return reply("", tool_call("wait_at_gate"))
            return "steered: turn left" if "turn left" in text else "never steered"

        fn = FunctionModel(model, name="function:steer")
        agent = AgentDefinition(
            name="steered", model="function:steer", tools=["bash", "wait_at_gate"]
        )
        async with Orchestrator(
            settings=settings(ray_env, approval="ask"),
            workdir=tmp_path,
            agents=[agent],
            tools=[g.tool()],
            models={"function:steer": fn},
            approval=CallbackChannel(approve),
            record=False,
        ) as orch:
            acknowledged = asyncio.Event()

            def watch(event: Any) -> None:
                notice = event.event if isinstance(event, AgentActivity) else None
                if isinstance(notice, Notice) and "steering message received" in notice.message:
                    acknowledged.set()

            orch.bus.subscribe(watch)
            handle = RunHandle()
            scope = Scope(agent_id="user", tools=["bash", "wait_at_gate"], model="scripted:echo")
            running = asyncio.ensure_future(
                orch.runner.run(
                    DelegationRequest(agent_type="steered", prompt="work"), scope, handle=handle
                )
            )
            async with asyncio.timeout(120):
                await g.wait_arrivals(1)  # it waits at the gate: its turn is in flight
                handle.steer("turn left")
                await acknowledged.wait()
                g.open()
                result = await running
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == "steered: turn left"
    assert asked == ['bash:{"command":"echo approved-ran > out.txt"}']
    assert (tmp_path / "out.txt").read_text() == "approved-ran\n"


async def test_a_background_run_is_delivered_once(ray_env: RayHead, tmp_path: Path) -> None:
    def main(messages: list[Any], tools: list[Any]) -> Any:
        text = " ".join(getattr(m, "content", "") for m in messages)
        if "echo: in the back" in text:  # its result, in task_wait's output or injected
            return f"got it {text.count('echo: in the back')} time(s)"
        if not tool_results(messages):
            return reply(
                "",
                tool_call("task", subagent_type="echoer", prompt="in the back", background=True),
            )
        return reply("", tool_call("task_wait", timeout_s=120))

    async with Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=settings(ray_env),
        agents=[AgentDefinition(name="echoer", model="scripted:echo", tools=[])],
        workdir=tmp_path,
        record=False,
    ) as orch:
        report = await orch.run("go")
    assert report.status is RunStatus.COMPLETED, report.error
    assert report.final_text == "got it 1 time(s)"
    assert [s.status for s in report.subagents] == [RunStatus.COMPLETED]
    assert report.subagents[0].background and report.subagents[0].node


def test_killing_the_orchestrator_leaves_no_actor_or_sub_agent_behind(
    ray_env: RayHead, tmp_path: Path
) -> None:
    script = tmp_path / "orch.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from agentcell import AgentDefinition, Orchestrator, Settings
            from agentcell.testing import FunctionModel, reply, tool_call

            def model(messages, tools):
                return reply("", tool_call("bash", command="sleep 600 & sleep 600"))

            async def main():
                s = Settings(model="scripted:echo", approval="allow", permission_mode="bypass",
                             backend="ray", warm_spares=0)
                s.ray.address = {ray_env.address!r}
                agent = AgentDefinition(name="sleeper", model="function:s", tools=["bash"])
                fn = FunctionModel(model, name="function:s")
                async with Orchestrator(settings=s, workdir={str(tmp_path)!r}, agents=[agent],
                                        models={{"function:s": fn}}, record=False) as orch:
                    orch.bus.subscribe(lambda e: print(type(e).__name__, flush=True))
                    await orch.delegate("sleeper", "sleep")

            asyncio.run(main())
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **{k: v for k, v in ray_env.env.items() if k.startswith("RAY_")}},
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until the sub-agent is at work
            if line.strip() == "AgentActivity":
                break
        assert ours_alive(ray_env), "the sub-agent should be running on the cluster"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        asyncio.run(wait_none_alive(ray_env, within=60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    sleepers = [
        p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "600"]
    ]
    assert not [p for p in sleepers if p.status() != psutil.STATUS_ZOMBIE]


async def test_the_driver_log_gets_a_name_only_when_an_error_names_it(
    ray_env: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every backend start left a named file in the temp folder, never removed (246 there,
    # some from parents that were killed): now it is unnamed while the backend runs.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    backend = await RayBackend(options=RayOptions(address=ray_env.address)).start()
    try:
        assert backend.nodes >= 1
        assert not list(tmp_path.iterdir()), "a running backend's log has a name"
    finally:
        await backend.close()
    assert not list(tmp_path.iterdir())

    failed = RayBackend(options=RayOptions(address="127.0.0.1:9", connect_timeout=1))
    with pytest.raises(RayBackendError) as caught:
        await failed.start()
    named = list(tmp_path.iterdir())
    assert [str(p) for p in named] == [failed.driver_log]
    assert failed.driver_log in str(caught.value)
    # Stuck in Ray's connect, it reads no shutdown: killed, not left running.
    assert failed._driver is not None
    assert failed._driver.returncode == -signal.SIGKILL


def test_the_cluster_talks_to_loopback_only(head: RayHead) -> None:
    """Every socket of every process the head started points at 127.0.0.1 (or is local)."""
    outside = outside_loopback(head)
    assert head.processes(), "the head should still be running"
    assert not outside, outside


async def test_a_remote_sub_agent_starts_its_mcp_server_on_its_node(
    ray_env: RayHead, tmp_path: Path
) -> None:
    """An MCP server named by the definition starts in the remote sub-agent's own tree
    (on its node) and its tools reach the model there, as they do locally."""
    server = str(SUPPORT / "mcp_server.py")
    marker = tmp_path / "server.pid"

    def model(messages: list[Any], tools: list[Any]) -> Any:
        done = tool_results(messages)
        if not done:
            return reply("", tool_call("mcp__local__echo", text="from the node"))
        return done[0].content

    agent = AgentDefinition(
        name="mcp-user",
        model="function:mcp",
        tools=["mcp__local__*"],
        mcp_servers=[{"local": {"command": sys.executable, "args": [server, str(marker)]}}],
    )
    async with Orchestrator(
        settings=settings(ray_env, approval="allow"),  # an MCP tool may change things
        workdir=tmp_path,
        agents=[agent],
        models={"function:mcp": FunctionModel(model, name="function:mcp")},
        record=False,
    ) as orch:
        result = await orch.delegate("mcp-user", "use the server")
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == "echo from MCP: from the node"
    assert result.node
    pid, parent = map(int, marker.read_text().split())
    assert parent == result.pid  # a process of the remote sub-agent's own tree
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    await wait_none_alive(ray_env)


def test_a_run_killed_on_a_cluster_resumes_on_it_and_its_actors_are_gone(
    head: RayHead, model_server: ModelServer, tmp_path: Path
) -> None:
    """The orchestrator SIGKILLed once two of four remote sub-agents ended: its actors
    and their processes go with it; `runs resume` on the same cluster delivers the two
    results from the journal and asks nothing it had answered."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    (work / "a.txt").write_text("x\n")
    model_server.responder = fan_out_responder(4)
    env = cli_env(work, model_server, **{k: v for k, v in head.env.items() if k.startswith("RAY_")})
    ray_flags = ["--backend", "ray", "--ray-address", head.address, "--model", "openai:gpt-test"]
    killed = subprocess.run(
        [AGENTCELL, "run", "--json", *ray_flags, "fan out"],
        cwd=work, env={**env, "AGENTCELL_TEST_KILL_AT": "fact:ended:2"},
        capture_output=True, text=True, timeout=240, start_new_session=True,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    asyncio.run(wait_none_alive(head))  # the dead run's actors and processes are gone
    (run_dir,) = [p for p in (work / ".agentcell" / "runs").iterdir() if p.is_dir()]
    records = read_journal(journal_dir(run_dir) / "journal").records
    ended = {r["result"]["description"] for r in records if r.get("what") == "ended"}
    before = len(model_server.requests)
    resumed = subprocess.run(
        [AGENTCELL, "runs", "resume", run_dir.name, "--json", *ray_flags],
        cwd=work, env=env, capture_output=True, text=True, timeout=240, start_new_session=True,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["final_text"] == "4 sub-agents reported"
    assert {s["status"] for s in report["subagents"]} == {"completed"}
    asked = {_first_user(r.body) for r in model_server.requests[before:]}
    assert len(ended) == 2 and not {f"job {d[1:]}" for d in ended} & asked
    asyncio.run(wait_none_alive(head))
