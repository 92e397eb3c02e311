"""A sub-agent's first model request sent by the parent while its process starts
(``_call_ahead``, ``worker/engine/_first_call.py``), against the loopback model server and real
children: the child's own identical first call takes the answer under way; a different
one cancels it and is sent; a child that never asks leaves nothing open."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import relay_tools
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config._settings import ProviderLimits
from agentcell.orchestrator.delegation import _runner
from agentcell.orchestrator.model_relay._call_ahead import CallAhead
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.model_relay._relay import ModelRelay
from agentcell.protocol import AgentSpec, RunStatus
from agentcell.worker import first_request_body
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

KEY = "sk-call-ahead-test-key-0077"


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yield model_server


def orchestrator(workdir: Path, agent: AgentDefinition, **settings: Any) -> Orchestrator:
    fields: dict[str, Any] = {"model": "openai:test", "approval": "allow", "max_workers": 2}
    fields |= {"warm_spares": 0, "call_ahead": True}  # off by default
    return Orchestrator(
        settings=Settings(**(fields | settings)),
        workdir=workdir,
        agents=[agent],
        tools=[relay_tools.lie],
        load_agent_files=False,
        record=False,
    )


def agent(**fields: Any) -> AgentDefinition:
    base: dict[str, Any] = {
        "name": "worker",
        "description": "worker",
        "model": "openai:test",
        "source": "test",
        # Built-in tools, a custom one (its object goes in the Start) and skills off:
        # every kind of tool spec the first request carries.
        "tools": ["read_file", "grep", "glob", "lie"],
        "system_prompt": "You work on the files you are given.",
    }
    return AgentDefinition(**(base | fields))


def no_process_until_the_server_has_a_request(
    monkeypatch: pytest.MonkeyPatch, served: ModelServer
) -> list[int]:
    """The pool is asked for the child's process only once the server holds a request:
    only a request sent ahead (before any process) lets a run go on. Returns the count
    of requests the server had when each process was asked for."""
    seen: list[int] = []
    original = _runner.Runner._start_on_a_live_process

    async def after_a_request(self: Any, *args: Any) -> Any:
        await asyncio.to_thread(served.wait_requests, 1, 60)
        seen.append(len(served.requests))
        return await original(self, *args)

    monkeypatch.setattr(_runner.Runner, "_start_on_a_live_process", after_a_request)
    return seen


async def test_the_first_request_leaves_before_the_process_and_the_child_takes_its_answer(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = no_process_until_the_server_has_a_request(monkeypatch, served)
    served.add(Reply(tool_calls=[Call("glob", {"pattern": "*.txt"})]), "the files are listed")
    (tmp_path / "a.txt").write_text("a")
    async with orchestrator(tmp_path, agent()) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "list the files"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "the files are listed"
    assert seen == [1]  # the process was asked for after the request went out
    # Two turns, two requests: the child's identical first call took the one sent ahead.
    assert len(served.requests) == 2
    first = served.requests[0]
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.body["messages"][-1] == {"role": "user", "content": "list the files"}
    names = {t["function"]["name"] for t in first.body["tools"]}
    assert names == {"read_file", "grep", "glob", "lie"}
    assert any(m["role"] == "tool" for m in served.requests[1].body["messages"])


async def test_the_parents_body_is_the_one_a_real_child_sends(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With call_ahead off, the child's own first request as the server got it, against
    # the body the parent builds for the same spec: the same bytes.
    specs: list[AgentSpec] = []
    bodies: list[bytes] = []
    original = ModelRelay.on_call

    def recording(self: ModelRelay, frame: Any) -> None:
        if not bodies:
            specs.append(self._spec)
            bodies.append(frame.body)
        original(self, frame)

    monkeypatch.setattr(ModelRelay, "on_call", recording)
    served.add("done")
    definition = agent(skills=[], max_turns=5)
    async with orchestrator(tmp_path, definition, call_ahead=False) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    predicted = await first_request_body(specs[0], [relay_tools.lie])
    assert predicted is not None
    assert json.loads(predicted) == json.loads(bodies[0])
    assert predicted == bodies[0]


async def test_a_different_first_call_cancels_the_one_sent_ahead_and_is_sent(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The parent's prediction made wrong on purpose: the child's real call must win.
    async def wrong(spec: AgentSpec, tools: Any) -> bytes | None:
        body = await first_request_body(spec, tools)
        assert body is not None
        return body.replace(b'"go"', b'"something else"')

    monkeypatch.setattr(_runner, "first_request_body", wrong)
    served.add("ahead", "the child's answer")
    caplog.set_level(logging.WARNING, "agentcell.orchestrator")
    async with orchestrator(tmp_path, agent()) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "the child's answer"
    assert [r.body["messages"][-1]["content"] for r in served.requests] == [
        "something else",
        "go",
    ]
    assert "was not the one sent ahead" in caplog.text


async def test_a_child_that_never_asks_leaves_no_request_open(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The request goes ahead and hangs; no process can be had: the run fails, and the
    # parent holds no connection to the server after, nor the pool shard it sent from.
    served.responder = lambda body, api: Reply(hang=True)

    async def no_process(self: Any, *args: Any) -> Any:
        await asyncio.to_thread(served.wait_requests, 1, 60)
        raise RuntimeError("no process today")

    monkeypatch.setattr(_runner.Runner, "_start_on_a_live_process", no_process)
    orch = orchestrator(tmp_path, agent())
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
        assert result.status is not RunStatus.COMPLETED
        ports = {
            c.laddr.port
            for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == served.port and c.status == "ESTABLISHED"
        }
        assert ports == set()
        assert set(orch.runner._parent.pools._children) == {0}  # every shard given back
    assert len(served.requests) == 1


class _Answer:
    status, headers = 200, {}

    def __init__(self) -> None:
        self.closed = False

    async def chunks(self) -> Any:
        yield b""

    async def aclose(self) -> None:
        await asyncio.sleep(0)
        self.closed = True


class _Upstream:
    """A transport whose head comes after one loop round (or never, if ``hang``)."""

    def __init__(self, hang: bool = False) -> None:
        self.hang = hang
        self.answer: _Answer | None = None

    async def open(self, body: bytes) -> _Answer:
        await asyncio.sleep(3600 if self.hang else 0)
        self.answer = _Answer()
        return self.answer

    async def aclose(self) -> None:
        return None


def _ahead(upstream: _Upstream, given_back: list[int]) -> tuple[CallAhead, ProviderLimiter]:
    limiter = ProviderLimiter({"openai": ProviderLimits(max_concurrent=1)})
    spec = AgentSpec(agent_id="a1", agent_type="worker", prompt="go", model="openai:test")
    start = asyncio.get_running_loop().create_task
    ahead = CallAhead(
        spec,
        b"{}",
        upstream,
        [],
        limiter=limiter,
        start=start,
        on_done=lambda: given_back.append(1),
    )
    return ahead, limiter


async def _permit_free(limiter: ProviderLimiter) -> bool:
    try:
        permit = await asyncio.wait_for(limiter.acquire("openai:test", 1), 1)
    except TimeoutError:
        return False
    permit.release()
    return True


async def test_a_close_cancelled_midway_still_gives_back_its_permit_shard_and_answer() -> None:
    upstream, given_back = _Upstream(), []
    ahead, limiter = _ahead(upstream, given_back)
    await asyncio.wait([ahead._task])  # the head is in
    closing = asyncio.get_running_loop().create_task(ahead.aclose())
    await asyncio.sleep(0)  # the close is in its wait
    closing.cancel()
    await asyncio.wait([closing])
    assert upstream.answer is not None and upstream.answer.closed
    assert given_back == [1] and await _permit_free(limiter)


async def test_a_take_cancelled_as_the_head_comes_closes_the_answer_and_frees_the_permit() -> None:
    upstream, given_back = _Upstream(), []
    ahead, limiter = _ahead(upstream, given_back)
    ahead.adopt()  # a relay's
    taker = asyncio.get_running_loop().create_task(ahead.take())
    ahead._task.add_done_callback(lambda _: taker.cancel())  # before the taker resumes
    await asyncio.wait([taker])
    assert taker.cancelled()
    assert upstream.answer is not None and upstream.answer.closed
    assert await _permit_free(limiter) and given_back == []  # the relay gives the shard back


async def test_a_request_ahead_cancelled_before_its_head_frees_its_permit() -> None:
    ahead, limiter = _ahead(_Upstream(hang=True), [])
    await asyncio.sleep(0)  # the permit is taken, the head awaited
    ahead._task.cancel()  # its group's, say, with nobody left to close it
    await asyncio.wait([ahead._task])
    assert await _permit_free(limiter)


async def test_under_a_provider_limiter_nothing_goes_ahead_and_nothing_waits_for_it(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # One process and one request at a time, two runs: a run still waiting for the
    # process must not hold the permit its running sibling waits for.
    def respond(body: dict[str, Any], api: str) -> Reply:
        if any(m.get("role") == "tool" for m in body["messages"]):
            return Reply(text="done")
        return Reply(tool_calls=[Call("glob", {"pattern": "*.txt"})])

    served.responder = respond
    (tmp_path / "a.txt").write_text("a")
    limits = {"openai": {"max_concurrent": 1}}
    async with orchestrator(tmp_path, agent(), max_workers=1, limits=limits) as orch:
        both = asyncio.gather(orch.delegate("worker", "one"), orch.delegate("worker", "two"))
        results = await asyncio.wait_for(both, 60)
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 2, [r.error for r in results]
    assert len(served.requests) == 4  # two turns each, none sent ahead


async def test_a_first_request_the_parent_cannot_build_is_the_childs_to_report(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # An option the provider refuses: the child's error, as without call_ahead.
    served.add("never asked")
    options = {"openai": {"frequency_penalty": 0.5}}
    async with orchestrator(tmp_path, agent(), model_options=options) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.ERROR
    assert "frequency_penalty" in (result.error or ""), result.error
    assert "ExceptionGroup" not in (result.error or "")
    assert served.requests == []


@pytest.mark.parametrize(
    ("fields", "settings"),
    [
        ({}, {"call_ahead": False}),  # as by default
        ({"mcp_servers": [{"srv": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}]}, {}),
    ],
    ids=["off", "with an MCP server"],
)
async def test_no_request_goes_ahead_when_off_or_when_the_child_alone_knows_it(
    fields: dict[str, Any],
    settings: dict[str, Any],
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[bytes] = []
    original = _runner.call_ahead

    def recording(spec: AgentSpec, body: bytes, *args: Any) -> Any:
        sent.append(body)
        return original(spec, body, *args)

    monkeypatch.setattr(_runner, "call_ahead", recording)
    served.add("done")
    async with orchestrator(tmp_path, agent(**fields), **settings) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert sent == []
