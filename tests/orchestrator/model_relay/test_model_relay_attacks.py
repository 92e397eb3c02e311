"""Attacks on the parent's model relay from a real, compromised sub-agent process (its
tools in tests/support/attack_tools.py run inside it), against the loopback model server: the
parent is the process that holds the key, so what it sends on a child's behalf, and what
it hands back, is the attack surface."""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attack_tools
import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.model_relay._relay import ModelRelay
from agentcell.protocol import ModelCall, RunStatus, Usage
from agentcell.worker.models.transports._base import RELAYED_HEADERS
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

KEY = "sk-attack-test-key-7731"


def orchestrator(workdir: Path, tool: Any) -> Orchestrator:
    worker = AgentDefinition(
        name="hostile", description="hostile", tools=[tool.name], model="openai:test", source="t"
    )
    return Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0),
        workdir=workdir,
        agents=[worker],
        tools=[tool],
        load_agent_files=False,
        record=False,
    )


def tool_then_done(tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """A responder: a request with no tool output calls ``tool``; any other says done."""

    def respond(body: dict[str, Any], api: str) -> Reply | str:
        if any(m["role"] == "tool" for m in body["messages"]):
            return "done"
        return Reply(tool_calls=[Call(tool, arguments or {})])

    return respond


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yield model_server


@pytest.fixture
def relayed_ids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The id of every ModelCall that reached the parent's relay."""
    ids: list[int] = []
    original = ModelRelay.on_call

    def recording(self: ModelRelay, frame: ModelCall) -> None:
        ids.append(frame.id)
        original(self, frame)

    monkeypatch.setattr(ModelRelay, "on_call", recording)
    return ids


async def test_model_calls_without_the_runs_signature_are_dropped(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, relayed_ids: list[int]
) -> None:
    # What a process holding a stolen copy of the child's socket writes: ModelCalls with
    # no MAC, a MAC of the right length that is wrong, and one under another key. The
    # parent would send each with its own key; it must drop them before its relay.
    served.responder = tool_then_done("forge")
    orch = orchestrator(tmp_path, attack_tools.forge)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    # The forged frames came before the child's second call on the same socket: by the
    # run's end the relay has seen every one it was handed.
    assert relayed_ids == [1, 2]
    assert not any(attack_tools.MARKER in json.dumps(r.body) for r in served.requests)


async def test_the_parent_sends_the_one_model_it_checked(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, raw_bodies: list[bytes]
) -> None:
    # {"model": "gpt-5-pro", "model": "test"}: the parent's decoder keeps the last one, a
    # server's parser may keep the first. Whatever it sends must name one model, its own.
    served.responder = tool_then_done("twice")
    orch = orchestrator(tmp_path, attack_tools.twice)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    tool_output = next(
        m["content"] for m in served.requests[-1].body["messages"] if m["role"] == "tool"
    )
    # Both went upstream (the model the parent checked is the spec's), so both must show.
    assert tool_output == "plain: SENT, HTTP 200\nescaped: SENT, HTTP 200", tool_output
    assert len(raw_bodies) == 4
    for raw in raw_bodies:
        models = [v for k, v in json.loads(raw, object_pairs_hook=list) if k == "model"]
        assert models == ["test"], raw[:200]


async def headers_seen(tmp_path: Path, served: ModelServer) -> dict[str, Any]:
    """One run of the ``headers`` tool: the status, headers and body its child was handed
    for the server's second answer."""
    orch = orchestrator(tmp_path, attack_tools.headers)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    tool_output = next(
        m["content"] for m in served.requests[-1].body["messages"] if m["role"] == "tool"
    )
    seen: dict[str, Any] = json.loads(bytes.fromhex(tool_output))
    return seen


async def test_neither_the_parents_headers_nor_a_servers_others_reach_the_child(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    hostile = {
        "authorization": f"Bearer {KEY}",
        "x-api-key": KEY,
        "set-cookie": f"session={KEY}",
        "x-echo-request-headers": f"authorization: Bearer {KEY}",
    }
    served.add(
        Reply(tool_calls=[Call("headers", {})]),
        Reply(raw=b"data: [DONE]\n\n", headers=hostile),
        "done",
    )
    seen = await headers_seen(tmp_path, served)
    assert seen["status"] == 200 and seen["body"] == "data: [DONE]\n\n"
    assert set(seen["headers"]) <= set(RELAYED_HEADERS), seen["headers"]
    assert KEY not in json.dumps(seen)
    # The parent did send the key upstream: what it holds back is its own.
    assert served.requests[1].headers["authorization"] == f"Bearer {KEY}"


#: Where a server or proxy may echo the key the parent sent: what the child must get
#: instead, masked (the attack tool shows the child's status, headers and body bytes).
ECHOES: dict[str, Reply] = {
    "in the body": Reply(raw=b'data: {"echo": "Bearer ' + KEY.encode() + b'"}\n\n'),
    "in a relayed header": Reply(
        raw=b"data: [DONE]\n\n", headers={"x-request-id": f"req-{KEY}", "retry-after": KEY}
    ),
    "in an error page": Reply(status=401, error_message=f"Incorrect API key provided: {KEY}"),
    "compressed anyway": Reply(
        raw=gzip.compress(b'data: {"echo": "' + KEY.encode() + b'"}\n\n'),
        headers={"content-encoding": "gzip"},
    ),
}


@pytest.mark.parametrize("where", list(ECHOES))
async def test_a_key_the_server_echoes_reaches_the_child_masked(
    where: str, spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.add(Reply(tool_calls=[Call("headers", {})]), ECHOES[where], "done")
    seen = await headers_seen(tmp_path, served)
    assert KEY not in json.dumps(seen), seen
    assert "[REDACTED]" in json.dumps(seen), seen  # the echo arrived, masked
    assert "content-encoding" not in seen["headers"]  # inflated by the parent
    assert served.requests[1].headers["authorization"] == f"Bearer {KEY}"


async def test_a_gzip_bomb_relayed_to_a_child_is_inflated_in_steps_and_cut_by_it(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # The parent inflates a compressed answer itself (to mask its key in it): about
    # 100 MiB from under 1 MiB, 64 KiB per step, each batch sent as the child's pipe
    # takes it; the child cuts the endless event at its cap and cancels the call.
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    line = b"data: " + b"x" * 4090 + b"\n"
    bomb = b"".join(packer.compress(line * 256) for _ in range(100)) + packer.flush()
    assert len(bomb) < 2**20
    served.add(Reply(raw=bomb, headers={"content-encoding": "gzip"}))
    orch = orchestrator(tmp_path, attack_tools.headers)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    # (The parent's pieces are bounded: test_transport.py's inflating test.)
    assert result.status is RunStatus.ERROR, result
    assert "event of more than 16777216 bytes" in (result.error or ""), result.error


@pytest.mark.parametrize("flood", list(attack_tools.FLOODS))
async def test_refusals_to_a_child_that_never_reads_keep_the_parents_memory_bounded(
    flood: str,
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The child asks and asks (a 4 MiB model name, or 100 000 times four unknown keys) and
    # reads nothing: each refusal is queued for it without backpressure, so what one
    # refusal may carry, and how many are answered, is what bounds the parent's memory.
    calls, _, unbounded = attack_tools.FLOODS[flood]
    refused = 0
    all_refused = asyncio.Event()
    original = ModelRelay._refuse

    def counting(self: ModelRelay, call_id: int, why: str) -> None:
        nonlocal refused
        original(self, call_id, why)
        refused += 1
        if refused == calls:
            all_refused.set()

    monkeypatch.setattr(ModelRelay, "_refuse", counting)
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    served.responder = tool_then_done("flood", {"gate": str(gate), "flood": flood})
    orch = orchestrator(tmp_path, attack_tools.flood)
    parent = psutil.Process()
    async with orch:
        run = asyncio.create_task(orch.delegate("hostile", "go"))
        try:
            await asyncio.wait_for(all_refused.wait(), 120)
            gc.collect()
            held = parent.memory_info().rss
        finally:
            await asyncio.to_thread(lambda: os.close(os.open(gate, os.O_WRONLY)))
        result = await asyncio.wait_for(run, 120)
        after = parent.memory_info().rss
    assert result.status is RunStatus.COMPLETED, result.error
    # What the refusals left queued while the child read nothing, seen as the memory
    # released once it read again: a fraction of the flood, not the flood itself.
    assert held - after < unbounded // 4, (held, after)


async def test_every_answer_the_parent_relays_is_charged_what_the_server_reported(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # The parent charges a relayed child what the server reported in the stream, not what
    # the child says; a call whose answer reports no usage it can read (not streamed, or
    # without OpenAI's usage chunk) would cost the child nothing at all.
    answered = Usage()

    def respond(body: dict[str, Any], api: str) -> Reply:
        nonlocal answered
        unpaid = body["messages"][-1]["content"] == "unpaid"
        usage = Usage(input_tokens=1000 if unpaid else 10, output_tokens=100 if unpaid else 1)
        answered = answered + usage
        if unpaid or any(m["role"] == "tool" for m in body["messages"]):
            return Reply(text="done", usage=usage)
        return Reply(tool_calls=[Call("unpaid", {})], usage=usage)

    served.responder = respond
    orch = orchestrator(tmp_path, attack_tools.unpaid)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
        total = orch.total_usage
    assert result.status is RunStatus.COMPLETED, result.error
    assert (total.input_tokens, total.output_tokens) == (
        answered.input_tokens,
        answered.output_tokens,
    ), result.text


async def test_an_answer_relayed_to_a_child_that_then_vanishes_is_still_charged(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # The servers' counts reach the ledger with the child's next UsageUpdate; a child that
    # ends straight after a relayed answer sends none, and must not get that answer free.
    answered = Usage()

    def respond(body: dict[str, Any], api: str) -> Reply:
        nonlocal answered
        vanishing = body["messages"][-1]["content"] == "vanish"
        usage = Usage(input_tokens=1000 if vanishing else 10, output_tokens=100 if vanishing else 1)
        answered = answered + usage
        if vanishing:
            return Reply(text="gone", usage=usage)
        return Reply(tool_calls=[Call("vanish", {})], usage=usage)

    served.responder = respond
    orch = orchestrator(tmp_path, attack_tools.vanish)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
        total = orch.total_usage
    assert result.status is not RunStatus.COMPLETED  # it left without a result
    assert answered == Usage(input_tokens=1010, output_tokens=101)
    assert (total.input_tokens, total.output_tokens) == (1010, 101)


async def test_near_miss_models_and_smuggled_routing_keys_are_refused(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.responder = tool_then_done("near")
    orch = orchestrator(tmp_path, attack_tools.near)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    tool_output = next(
        m["content"] for m in served.requests[-1].body["messages"] if m["role"] == "tool"
    )
    lines = dict(line.split(": ", 1) for line in tool_output.splitlines())
    assert set(lines) == set(attack_tools.NEAR_MISSES)
    sent = {name for name, line in lines.items() if line.startswith("SENT")}
    assert sent == {"nested"}, lines
    assert all("the orchestrator refused" in lines[name] for name in set(lines) - sent)
    # The nested keys went as body bytes only: same path, no header of the child's.
    (nested,) = [r for r in served.requests if "metadata" in (r.body or {})]
    assert nested.path == "/v1/chat/completions"
    assert "x-injected" not in nested.headers and "x-evil" not in nested.headers
    assert nested.headers["authorization"] == f"Bearer {KEY}"
    assert len(served.requests) == 3  # the agent's two turns and the nested call


async def test_a_key_with_a_stray_character_is_not_spelled_out_to_the_child(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key pasted with a carriage return cannot go in a header; the parent's failure is
    # the child's error (a ModelEnd message), so its words must not quote the header.
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "\r")
    served.responder = tool_then_done("near")
    orch = orchestrator(tmp_path, attack_tools.near)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    assert result.status is RunStatus.ERROR, result
    assert "check OPENAI_API_KEY" in (result.error or ""), result.error
    assert KEY not in (result.error or "") and KEY[:12] not in (result.error or ""), result.error
    assert served.requests == []


async def test_an_oversized_answer_from_a_compromised_child_is_cut_by_the_parent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    """A child cuts its answer to ``MAX_ANSWER_BYTES`` itself; a compromised one can
    send a frame's worth (16 MiB) into the main agent's context. The parent cuts it the
    same way: head and tail kept, and a note (an attack review's finding)."""
    from agentcell.worker import MAX_ANSWER_BYTES

    served.responder = tool_then_done("oversized")
    orch = orchestrator(tmp_path, attack_tools.oversized)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert attack_tools.OVERSIZED_ANSWER_BYTES > MAX_ANSWER_BYTES
    assert len(result.text.encode()) < MAX_ANSWER_BYTES + 1024
    assert result.text.startswith("HEAD") and result.text.endswith("TAIL")
    assert "omitted: a sub-agent's answer is limited to" in result.text
    assert "(cut by the parent)" in result.text
