"""Model requests through the parent, from real sub-agent processes against the loopback
model server: the child holds no key and opens no connection; its calls are checked,
streamed back in pieces, cancelled with it, and rate-limited where they are sent."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
import relay_tools
from agentcell.orchestrator.model_relay._relay import ModelPools, ModelRelay
from agentcell.protocol import ModelCancel, RunStatus, TextDelta, Usage
from agentcell.worker import probe_sandbox
from agents import agent
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from relay_util import KEY, orchestrator, recorded_starts

CAPS = probe_sandbox()
needs_landlock_tcp = pytest.mark.skipif(
    not CAPS["landlock_tcp"], reason="needs Landlock ABI 4 (TCP rules)"
)


def tool_then_text(tool: str, arguments: dict[str, Any]) -> Any:
    """A responder: the first request calls ``tool``; the next answers with its output."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not outputs:
            return Reply(tool_calls=[Call(tool, arguments)])
        return Reply(text=outputs[0])

    return respond


async def run_a_tool_in_a_child(
    tmp_path: Path, served: ModelServer, tool: Any, agent_name: str = "plain"
) -> Any:
    """One sub-agent with ``tool`` (a custom tool object) that calls it and answers with
    its output; the completed result."""
    served.responder = tool_then_text(tool.name, {})
    orch = orchestrator(tmp_path, agent(agent_name, [tool.name]), tools=[tool])
    async with orch:
        result = await asyncio.wait_for(orch.delegate(agent_name, "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    return result


def own_ports(to_port: int) -> set[int]:
    """The local ports of this (the parent's) process's TCP connections to ``to_port``."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == to_port
    }


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yield model_server


@needs_landlock_tcp
async def test_a_child_holds_no_key_and_every_model_connection_is_the_parents(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts = recorded_starts(monkeypatch)
    # Under network: true, python in bash runs in the child's own Landlock domain: what
    # it may connect to is what the sub-agent process itself may.
    probe = (
        "python3 -c 'import socket;"
        f'socket.create_connection(("127.0.0.1", {served.port}), timeout=5);'
        'print("MODEL-REACHED")\''
    )
    served.responder = tool_then_text("bash", {"command": probe, "timeout_s": 20})
    orch = orchestrator(tmp_path, agent("worker", ["bash"]), network=True)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
        parents = own_ports(served.port)
    assert result.status is RunStatus.COMPLETED, result.error
    assert "own tcp: none" in result.sandbox, result.sandbox
    assert "MODEL-REACHED" not in result.text and "PermissionError" in result.text
    assert len(served.requests) == 2
    # Every connection the server ever accepted is one the parent still holds in its pool.
    assert served.accepted and set(served.accepted) <= parents
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in served.requests)
    (start,) = starts
    assert start.spec is not None and start.spec.model_via_parent
    assert KEY.encode() not in msgspec.msgpack.encode(start)
    assert start.spec.env is not None and "OPENAI_BASE_URL" not in start.spec.env


async def test_a_relayed_sub_agents_process_never_imports_an_http_client(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # Its requests go through the parent: the ~12 MiB of httpx, httpcore, h11, h2, anyio
    # and idna in the fork server's template cost every fork and exit about 1 ms.
    result = await run_a_tool_in_a_child(tmp_path, served, relay_tools.http_stack)
    assert result.text == "none"
    assert served.requests  # answered through the parent, from its own httpx pool


async def test_sub_agents_one_after_another_reuse_the_parents_open_connection(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # Each took the next of 32 pools in turn: a new client and a new connection for every
    # sub-agent's first request (~1 ms on a dispatch), though the last one's sat idle.
    served.responder = tool_then_text("glob", {"pattern": "*"})
    orch = orchestrator(tmp_path, agent("plain", ["glob"]))
    async with orch:
        for job in range(3):
            result = await asyncio.wait_for(orch.delegate("plain", f"job {job}"), 60)
            assert result.status is RunStatus.COMPLETED, result.error
    assert len(served.requests) == 6
    assert len(served.accepted) == 1, served.accepted


def test_concurrent_children_spread_over_the_pools_and_give_their_place_back() -> None:
    pools = ModelPools()
    taken = [pools.take_shard() for _ in range(2 * ModelPools.SHARDS)]
    assert sorted(taken) == sorted(list(range(ModelPools.SHARDS)) * 2)
    pools.leave_shard(taken[5])
    assert pools.take_shard() == taken[5]


async def test_forged_model_calls_from_a_real_child_are_refused_and_never_sent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    result = await run_a_tool_in_a_child(tmp_path, served, relay_tools.forge, "hostile")
    lines = dict(line.split(": ", 1) for line in result.text.splitlines())
    assert set(lines) == set(relay_tools.FORGED)
    assert all(
        text.startswith("the orchestrator refused the model request: ") for text in lines.values()
    ), lines
    assert "names model 'gpt-5-pro', but this sub-agent runs on 'test'" in lines["wrong model"]
    assert "sets 'n', not allowed for openai" in lines["unknown key"]
    assert "more than the 8388608 allowed" in lines["oversized"]
    assert "not a JSON object" in lines["not an object"]
    assert len(served.requests) == 2  # the agent's own two turns, nothing forged


async def test_the_answer_streams_through_the_parent_in_pieces(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    release = threading.Event()
    served.responder = lambda body, api: Reply(
        text="streamed-head, then the rest", chunk_size=4, pause_after=3, release=release
    )
    orch = orchestrator(tmp_path, agent("talker", []))
    try:
        async with orch:
            events = orch.events()
            run = asyncio.create_task(orch.delegate("talker", "go"))
            seen = ""
            async with asyncio.timeout(60):
                async for item in events:
                    event = getattr(item, "event", None)
                    if isinstance(event, TextDelta):
                        seen += event.text
                        if seen.startswith("stre"):
                            break
            # The server still holds the rest: the first text crossed the parent alone.
            assert not release.is_set() and "the rest" not in seen
            release.set()
            result = await asyncio.wait_for(run, 60)
    finally:
        release.set()
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "streamed-head, then the rest"


async def test_a_sigkilled_childs_request_is_cancelled_upstream(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.responder = lambda body, api: Reply(hang=True)
    orch = orchestrator(tmp_path, agent("victim", []))
    async with orch:
        events = orch.events()
        run = asyncio.create_task(orch.delegate("victim", "go"))
        pid = 0
        async with asyncio.timeout(60):
            async for item in events:
                pid = getattr(item, "pid", 0)
                if pid:
                    break
        await asyncio.to_thread(served.wait_requests, 1, 60)
        assert own_ports(served.port)  # the parent's request is open upstream
        os.kill(pid, signal.SIGKILL)
        result = await asyncio.wait_for(run, 60)
        # The relay ended with the child and closed the request: no connection is left.
        assert own_ports(served.port) == set()
    assert result.status is RunStatus.CRASHED, result
    assert len(served.requests) == 1


async def test_a_429_through_the_parent_pauses_the_model_and_the_retry_succeeds(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.add(Reply(status=429, headers={"retry-after-ms": "50"}), Reply(text="after the pause"))
    orch = orchestrator(tmp_path, agent("patient", []), limits={"openai": {"max_concurrent": 4}})
    async with orch:
        result = await asyncio.wait_for(orch.delegate("patient", "go"), 60)
        limiter = orch.runner.limiter.model("openai:test")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "after the pause"
    assert len(served.requests) == 2
    assert limiter is not None and limiter.stats.pauses == 1 and limiter.stats.granted == 2


async def test_a_hostile_servers_bytes_are_parsed_in_the_child_and_the_parent_survives(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.add(Reply(raw=b"data: {this is not json\n\n"), "the parent is fine")
    orch = orchestrator(tmp_path, agent("victim", []), model="scripted:echo")
    async with orch:
        broken = await asyncio.wait_for(orch.delegate("victim", "go"), 60)
        again = await asyncio.wait_for(orch.delegate("victim", "go"), 60)
    assert broken.status is RunStatus.ERROR, broken
    assert "not a chat completion chunk" in (broken.error or ""), broken.error
    assert again.status is RunStatus.COMPLETED and again.text == "the parent is fine"


async def test_a_call_the_child_gives_up_is_cancelled_upstream_by_its_model_cancel(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cancelled: list[int] = []
    original = ModelRelay.on_cancel

    def recording(self: ModelRelay, frame: ModelCancel) -> None:
        cancelled.append(frame.id)
        original(self, frame)

    monkeypatch.setattr(ModelRelay, "on_cancel", recording)
    # Two events, then nothing until the server stops: the child's own deadline gives up.
    served.responder = lambda body, api: Reply(text="never finished", hang_after=2)
    orch = orchestrator(
        tmp_path, agent("impatient", []), model_options={"openai": {"deadline": 1.0}}
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("impatient", "go"), 60)
        left = own_ports(served.port)
    assert result.status is RunStatus.ERROR, result
    assert "did not finish within its 1 s deadline" in (result.error or ""), result.error
    assert cancelled == [1]  # the child's ModelCancel for its one call
    assert left == set()  # and the parent dropped that request's connection


async def test_usage_is_what_the_server_reported_not_what_the_child_says(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # The first answer calls `lie`, which makes the child report every later answer as
    # free; the parent counts the second answer from the stream it relayed, its cached
    # prompt tokens too (which a ledger prices apart).
    served.add(
        Reply(
            tool_calls=[Call("lie", {})],
            usage=Usage(input_tokens=100, output_tokens=10, cache_read_tokens=40),
        ),
        Reply(text="done", usage=Usage(input_tokens=200, output_tokens=20, cache_read_tokens=150)),
    )
    orch = orchestrator(tmp_path, agent("liar", ["lie"]), tools=[relay_tools.lie])
    async with orch:
        result = await asyncio.wait_for(orch.delegate("liar", "go"), 60)
        total = orch.total_usage
    assert result.status is RunStatus.COMPLETED, result.error
    assert (result.usage.input_tokens, result.usage.output_tokens) == (300, 30)
    assert (total.input_tokens, total.output_tokens) == (300, 30)
    assert (result.usage.cache_read_tokens, total.cache_read_tokens) == (190, 190)
