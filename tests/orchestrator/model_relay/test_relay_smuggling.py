"""What the parent's upstream request carries when a compromised sub-agent shapes it, and
what a hostile model server's head can do to the parent (issue 39: "then attack, and
fix, what this run did not reach"). Real children (their tools in smuggle_tools run
inside them) against the loopback server over HTTP/1.1 and a scripted HTTP/2 server
(h2_hostile_server) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import smuggle_tools
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.model_relay._relay import ModelPools
from agentcell.protocol import RunStatus
from agentcell.worker.models import ModelError, ModelErrorKind, Retry, resolve_model
from conftest import SpawnRecorder
from h2_hostile_server import ATTACKS, FLOOD_FRAMES, HostileH2Server
from h2_model_server import serving_openai
from model_servers import Call, ModelServer, Reply
from raw_http import RawServer, pool_for, post, read_request
from smuggle_tools import MARKER, PIPELINED

KEY = "sk-smuggling-test-key-4242"
#: The request headers the parent's HTTP/2 request may carry, each once.
H2_HEADERS = {
    ":method",
    ":scheme",
    ":authority",
    ":path",
    "authorization",
    "user-agent",
    "accept",
    "accept-encoding",
    "content-type",
    "content-length",
}


@pytest.fixture
def h2_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileH2Server]:
    with serving_openai(HostileH2Server(), KEY, tmp_path, monkeypatch) as server:
        yield server


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yield model_server


def orchestrator(workdir: Path, tools: list[str], **settings: Any) -> Orchestrator:
    worker = AgentDefinition(
        name="worker", description="worker", tools=tools, model="openai:test", source="test"
    )
    fields: dict[str, Any] = {"model": "openai:test", "approval": "allow", "warm_spares": 0}
    return Orchestrator(
        settings=Settings(**(fields | {"max_workers": 1} | settings)),
        workdir=workdir,
        agents=[worker],
        tools=[smuggle_tools.smuggle, smuggle_tools.unlimited, smuggle_tools.pre_compact],
        load_agent_files=False,
        record=False,
    )


def forged(body: dict[str, Any]) -> bool:
    return str(body["messages"][-1].get("content", "")).startswith(MARKER)


def tool_then_echo(tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """The agent calls ``tool``; the tool's own requests get "ok"; the agent's next
    request is answered with the tool's output."""

    def respond(body: dict[str, Any], api: str = "openai") -> Reply:
        if forged(body):
            return Reply(text="ok")
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not outputs:
            return Reply(tool_calls=[Call(tool, arguments or {})])
        return Reply(text=str(outputs[0]))

    return respond


# -- a hostile HTTP/2 server's head ----------------------------------------------------------


@pytest.mark.parametrize("attack", ATTACKS)
async def test_a_hostile_http2_head_costs_the_child_one_retry_not_its_run(
    spawned: SpawnRecorder, tmp_path: Path, h2_server: HostileH2Server, attack: str
) -> None:
    # h2 bounds what a server's head may take (64 CONTINUATION frames, a 64 KiB header
    # list however it is compressed): its error must reach the child as a failed
    # connection, which it retries. It escaped the relay raw mid-body (the run died,
    # "failed in the parent") and, at the head, read as the user's key being malformed
    # (a final error: "check OPENAI_API_KEY").
    h2_server.attacks.append(attack)
    async with orchestrator(tmp_path, []) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 120)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "over h2"
    assert h2_server.attacked == [attack] and len(h2_server.raw_bodies) == 2
    if attack == "continuation flood":
        # The parent hung up after h2's 64 frames (and what the socket buffers held):
        # it never read the 320 MB the server had for it.
        assert 64 < h2_server.flood_frames < FLOOD_FRAMES // 4, h2_server.flood_frames


async def test_a_servers_endless_http1_head_is_cut_and_the_connection_dropped() -> None:
    # The plain-HTTP route (h11): a head is read up to h11's 16 KiB, never further.
    lines = 0

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal lines
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for lines in range(1, 100_001):  # noqa: B007 - counted for the assertion
            writer.write(b"x-h: " + b"a" * 1000 + b"\r\n")
            await writer.drain()  # raises once the client has closed

    async with RawServer(endless) as server:
        pool = pool_for(server.base_url)
        with pytest.raises(Retry):
            await post(pool)
        await asyncio.wait_for(server.closed_by_client.wait(), 30)
        await pool.aclose()
    assert lines < 25_000, lines  # 100 MB were there to read


# -- what a child puts in its body ---------------------------------------------------------


@pytest.mark.parametrize("protocol", ["HTTP/1.1", "HTTP/2"])
async def test_what_a_child_puts_in_its_body_goes_upstream_as_body_bytes_only(
    spawned: SpawnRecorder,
    tmp_path: Path,
    protocol: str,
    request: pytest.FixtureRequest,
) -> None:
    if protocol == "HTTP/2":
        h2: HostileH2Server = request.getfixturevalue("h2_server")
        h2.responder = tool_then_echo("smuggle")
    else:
        h1: ModelServer = request.getfixturevalue("served")
        h1_raw: list[bytes] = request.getfixturevalue("raw_bodies")
        h1.responder = tool_then_echo("smuggle")
    async with orchestrator(tmp_path, ["smuggle"]) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 120)
    assert result.status is RunStatus.COMPLETED, result.error
    lines = dict(line.split(": ", 1) for line in result.text.splitlines())
    assert set(lines) == set(smuggle_tools.SMUGGLED)
    sent = {name for name, line in lines.items() if line == "SENT, HTTP 200"}
    assert sent == set(smuggle_tools.SENT), lines
    for name in set(lines) - sent:  # header names as body keys: not the provider's
        assert "the orchestrator refused" in lines[name] and "not allowed for openai" in lines[name]
    if protocol == "HTTP/2":
        raws, heads = h2.raw_bodies, h2.header_lists
        port = h2.base_url.split(":")[2].split("/")[0]
        for head, raw in zip(heads, raws, strict=True):
            names = [name for name, _ in head]
            assert len(names) == len(set(names)) and set(names) <= H2_HEADERS, head
            fields = dict(head)
            assert (fields[":method"], fields[":path"]) == ("POST", "/v1/chat/completions")
            assert fields[":authority"] == f"127.0.0.1:{port}"
            assert fields["authorization"] == f"Bearer {KEY}"
            assert fields["content-length"] == str(len(raw))
    else:
        raws = h1_raw
        for recorded, raw in zip(h1.requests, raws, strict=True):
            assert (recorded.method, recorded.path, recorded.query) == (
                "POST",
                "/v1/chat/completions",
                "",
            )
            assert recorded.headers["authorization"] == f"Bearer {KEY}"
            assert recorded.headers["content-length"] == str(len(raw))
            assert "transfer-encoding" not in recorded.headers
            assert recorded.headers["host"] == h1.openai_base_url.split("/")[2]
    # The agent's two turns and the two bodies sent: nothing pipelined behind them.
    assert len(raws) == 4
    ours = [raw for raw in raws if MARKER.encode() in raw]
    assert len(ours) == 2
    (pipelined,) = [raw for raw in ours if b"evil" in raw]
    assert json.loads(pipelined)["messages"][0]["content"] == MARKER + PIPELINED
    # The usage flag given twice reached the server once, as the parent read it.
    (twice,) = [raw for raw in ours if raw is not pipelined]
    pairs = json.loads(twice, object_pairs_hook=list)
    options = next(value for key, value in pairs if key == "stream_options")
    assert options == [("include_usage", True)], twice


# -- the output limit under a budget -----------------------------------------------------------


async def test_a_request_with_no_output_limit_gets_the_budget_left_as_one(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # An OpenAI request of agentcell's own sets no output limit; one clamped where it is
    # set but left alone where it is not could ask for the model's whole maximum past a
    # run's budget, by leaving max_tokens out.
    budget = 3000
    served.responder = tool_then_echo("unlimited")
    async with orchestrator(tmp_path, ["unlimited"], budgets={"max_tokens": budget}) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 120)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "unlimited: SENT, HTTP 200"
    first, ours, last = served.requests
    assert forged(ours.body) and "max_completion_tokens" not in ours.body
    # Its first turn was charged (the server's default usage) before its tool ran.
    assert first.body["max_tokens"] == budget
    assert ours.body["max_tokens"] == budget - 15
    assert last.body["max_tokens"] <= budget - 15


async def test_a_first_request_sent_ahead_under_a_budget_is_bounded_and_still_taken(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The request the parent sends ahead is checked as the child's: under a budget it
    # carries the budget left as its limit, and the child's own first call, checked the
    # same way, takes its answer (else each sub-agent's first request went twice).
    caplog.set_level(logging.INFO, "agentcell.orchestrator")
    served.add("done ahead")
    settings: dict[str, Any] = {"call_ahead": True, "budgets": {"max_tokens": 100_000}}
    async with orchestrator(tmp_path, [], **settings) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "done ahead"
    (ahead,) = served.requests
    assert ahead.body["max_tokens"] == 100_000
    assert "sent ahead was not" not in caplog.text and "not the one sent ahead" not in caplog.text


async def test_a_key_with_a_stray_character_is_refused_before_sending_on_http2_too(
    h2_server: HostileH2Server,
) -> None:
    # h11 refuses a header value with CR, LF or NUL; h2 sent it as it was (to an HTTP/1.1
    # hop behind the server, a second header), and the child heard "Server disconnected".
    pools = ModelPools()
    for key in ("sk-abc\r\nx-evil: 1", "sk-abc\x00", "sk-abc\n"):
        model = resolve_model("openai:test", {"base_url": h2_server.base_url, "api_key": key})
        transport = model.transport_over(lambda url, h, where: pools.transport(url, h, where, 0))
        with pytest.raises(ModelError) as caught:
            await transport.open(smuggle_tools.SMUGGLED["usage twice"])
        assert caught.value.kind is ModelErrorKind.CONFIG
        assert "check OPENAI_API_KEY" in str(caught.value) and "sk-abc" not in str(caught.value)
    await pools.aclose()
    assert h2_server.header_lists == [] and h2_server.connections == []
