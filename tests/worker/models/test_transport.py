"""The pieces of a model request: the transport under the SSE client (any transport, the
same provider classes), the body decoder's caps, the deadline, the attempt loop, the
link's error mapping, the parent relay's per-child checks and its usage scan."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.model_relay._relay import (
    ModelPools,
    ModelRelay,
    check_call,
    inflated_chunks,
)
from agentcell.orchestrator.model_relay._usage import UsageScan
from agentcell.protocol import AgentSpec, ModelCall, ModelCancel, ModelEnd, Usage, UserMessage
from agentcell.worker.models import (
    Inflater,
    ModelError,
    ModelErrorKind,
    ModelRequest,
    OpenAIChatModel,
    Retry,
    _http,
    complete,
)
from agentcell.worker.models._http import BodyDecoder, HttpOptions
from agentcell.worker.models.transports._base import Endpoint
from agentcell.worker.models.transports._client import make_client
from agentcell.worker.models.transports._direct import HttpxTransport
from agentcell.worker.models.transports._parent import end_error
from model_servers import ModelServer, Reply

REQUEST = ModelRequest(messages=[UserMessage(content="hi")])
INVALID = "http://model.invalid/v1"  # never reached: the transport answers


def chunk(text: str) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


FINISH = (
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
    b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}\n\n'
    b"data: [DONE]\n\n"
)


class Scripted:
    """A transport answering from a list: (status, headers, body pieces) per attempt."""

    def __init__(self, *answers: tuple[int, dict[str, str], list[bytes]]) -> None:
        self.answers = list(answers)
        self.bodies: list[bytes] = []
        self.closed = 0

    async def open(self, body: bytes) -> Any:
        self.bodies.append(body)
        status, headers, pieces = self.answers.pop(0)
        outer = self

        class Response:
            def __init__(self) -> None:
                self.status, self.headers = status, headers

            async def chunks(self) -> AsyncIterator[bytes]:
                for piece in pieces:
                    yield piece

            async def aclose(self) -> None:
                outer.closed += 1

        return Response()

    async def aclose(self) -> None:
        pass


async def test_the_same_provider_class_runs_over_any_transport() -> None:
    sse = {"content-type": "text/event-stream"}
    transport = Scripted((200, sse, [chunk("hel"), chunk("lo"), FINISH]))
    model = OpenAIChatModel("m", http=HttpOptions(base_url=INVALID, transport=transport))
    response = await complete(model, REQUEST)
    assert response.text == "hello" and response.usage.input_tokens == 7
    assert json.loads(transport.bodies[0])["model"] == "m"
    assert transport.closed == 1


async def test_the_attempt_loop_retries_a_503_on_a_fresh_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(_http, "sleep", no_wait)
    sse = {"content-type": "text/event-stream"}
    transport = Scripted(
        (503, {"retry-after": "2"}, [b'{"error": {"message": "busy"}}']),
        (200, sse, [chunk("ok"), FINISH]),
    )
    model = OpenAIChatModel("m", http=HttpOptions(base_url=INVALID, transport=transport))
    response = await complete(model, REQUEST)
    assert response.text == "ok" and waits == [2.0] and len(transport.bodies) == 2
    assert transport.closed == 2  # each attempt's response closed


async def test_the_deadline_ends_a_stream_that_never_finishes() -> None:
    never = asyncio.Event()

    class Trickle(Scripted):
        async def open(self, body: bytes) -> Any:
            response = await super().open(body)

            async def chunks() -> AsyncIterator[bytes]:
                yield chunk("a")
                await never.wait()
                yield b""  # pragma: no cover - never reached

            response.chunks = chunks
            return response

    transport = Trickle((200, {"content-type": "text/event-stream"}, []))
    http = HttpOptions(base_url=INVALID, transport=transport, deadline=0.05)
    model = OpenAIChatModel("m", http=http)
    with pytest.raises(ModelError) as caught:
        await complete(model, REQUEST)
    assert caught.value.kind is ModelErrorKind.TIMEOUT
    assert "0.05 s deadline" in str(caught.value)


def test_the_body_decoder_inflates_splits_anywhere_and_caps_the_inflated_size() -> None:
    body = chunk("x" * 100) + chunk("y")
    packed = gzip.compress(body)
    decoder = BodyDecoder(
        "gzip", "openai", 10_000, lambda: ModelError(ModelErrorKind.PROTOCOL, "big")
    )
    events = [e for i in range(len(packed)) for e in decoder.feed(packed[i : i + 1])]
    assert [json.loads(d)["choices"][0]["delta"]["content"] for _, d in events] == ["x" * 100, "y"]
    small = BodyDecoder(
        "gzip", "openai", len(body) - 1, lambda: ModelError(ModelErrorKind.PROTOCOL, "big")
    )
    with pytest.raises(ModelError, match="big"):
        small.feed(packed)


async def test_the_httpx_transport_hands_on_only_the_allow_listed_headers(
    model_server: ModelServer,
) -> None:
    model_server.add(Reply(text="hi", headers={"x-request-id": "r-1", "set-cookie": "s=1"}))
    client = make_client(model_server.url, timeout=10)
    where = Endpoint(
        "openai", model_server.openai_base_url, "OPENAI_BASE_URL", "OPENAI_API_KEY", 10, 4
    )
    transport = HttpxTransport(
        lambda: client, f"{model_server.openai_base_url}/chat/completions", {}, where
    )
    try:
        body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
        response = await transport.open(body)
        data = b"".join([piece async for piece in response.chunks()])
        await response.aclose()
    finally:
        await client.aclose()
    assert response.status == 200 and b"[DONE]" in data
    assert response.headers.get("x-request-id") == "r-1"
    assert "set-cookie" not in response.headers and "content-type" in response.headers


async def test_the_httpx_transport_reports_a_refused_connection_as_a_retry() -> None:
    client = make_client("http://127.0.0.1:9", timeout=5)
    where = Endpoint("openai", "http://127.0.0.1:9/v1", "OPENAI_BASE_URL", "OPENAI_API_KEY", 5, 4)
    transport = HttpxTransport(lambda: client, "http://127.0.0.1:9/v1/chat/completions", {}, where)
    try:
        with pytest.raises(Retry) as caught:
            await transport.open(b"{}")
    finally:
        await client.aclose()
    assert caught.value.kind is ModelErrorKind.CONNECTION
    assert "connection refused; is the server running? (OPENAI_BASE_URL)" in caught.value.cause


def test_a_relayed_end_means_in_the_child_what_the_direct_failure_would() -> None:
    assert end_error(ModelEnd(id=1)) is None
    retry = end_error(ModelEnd(id=1, error_kind="timeout", message="slow", retry=True))
    assert isinstance(retry, Retry) and retry.kind is ModelErrorKind.TIMEOUT
    refused = end_error(ModelEnd(id=1, error_kind="refused", message="wrong model"))
    assert isinstance(refused, ModelError) and refused.kind is ModelErrorKind.BAD_REQUEST
    assert str(refused) == "the orchestrator refused the model request: wrong model"
    odd = end_error(ModelEnd(id=1, error_kind="no-such-kind", message="?"))
    assert isinstance(odd, ModelError) and odd.kind is ModelErrorKind.PROTOCOL


def spec(**fields: Any) -> AgentSpec:
    return AgentSpec(
        agent_id="a1", agent_type="t", prompt="p", model="openai:m", model_via_parent=True, **fields
    )


def test_the_parent_checks_a_call_against_the_childs_definition() -> None:
    good = json.dumps(
        {
            "model": "m",
            "messages": [],
            "stream": True,
            "tools": [],
            "stream_options": {"include_usage": True},
        }
    ).encode()
    assert check_call(spec(), good) == ""
    assert "not reached through" in check_call(
        AgentSpec(agent_id="a", agent_type="t", prompt="p", model="openai:m"), good
    )
    assert "runs on 'm'" in check_call(spec(), b'{"model": "other"}')
    assert "'logit_bias'" in check_call(spec(), b'{"model": "m", "logit_bias": {}}')
    assert "not a JSON object" in check_call(spec(), b'{"model": 5}')


async def test_a_child_may_have_only_so_many_calls_in_flight_and_cancel_only_its_own() -> None:
    sent: list[Any] = []
    started: list[asyncio.Task[None]] = []

    def start(coro: Any) -> asyncio.Task[None]:
        coro.close()  # not sent anywhere: only the bookkeeping is under test
        task = asyncio.ensure_future(asyncio.Event().wait())
        started.append(task)  # type: ignore[arg-type]
        return task  # type: ignore[return-value]

    async def send(frame: Any) -> None:
        sent.append(frame)

    relay = ModelRelay(
        spec(),
        Settings(),
        ProviderLimiter({}),
        ModelPools(),
        send,
        send_nowait=sent.append,
        start=start,
    )
    body = (
        b'{"model": "m", "messages": [], "stream": true, "stream_options": {"include_usage": true}}'
    )
    for n in range(1, 6):
        relay.on_call(ModelCall(id=n, body=body))
    relay.on_call(ModelCall(id=1, body=body))  # a duplicate of one in flight
    assert len(started) == 4
    assert [f.id for f in sent] == [5, 1]
    assert "more than 4 model calls in flight" in sent[0].message
    assert "already in flight" in sent[1].message
    relay.on_cancel(ModelCancel(id=99))  # an id it never used: nothing happens
    assert not any(t.cancelled() for t in started)
    relay.on_cancel(ModelCancel(id=2))
    await asyncio.sleep(0)
    assert started[1].cancelled() and not started[0].cancelled()
    await relay.close()
    assert all(t.cancelled() for t in started)


def test_the_usage_scan_reads_what_each_provider_reports_however_it_is_split() -> None:
    openai = UsageScan("openai")
    stream = chunk("hi") + FINISH
    for i in range(0, len(stream), 7):
        openai.feed(stream[i : i + 7])
    openai.finish()
    assert (openai.input, openai.output) == (7, 3)
    long = UsageScan("openai")  # usage past the kept head: found in the kept tail
    for piece in [chunk("x" * 1000)] * 100 + [FINISH]:
        long.feed(piece)
    long.finish()
    assert (long.input, long.output) == (7, 3)
    anthropic = UsageScan("anthropic")
    anthropic.feed(
        b'event: message_start\ndata: {"type": "message_start", "message": {"usage": '
        b'{"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}}}\n\n'
        b'event: message_delta\ndata: {"type": "message_delta", "usage": {"output_tokens": 9}}\n\n'
    )
    anthropic.finish()
    assert (anthropic.input, anthropic.output) == (105, 9) and anthropic.tokens == 114
    assert anthropic.usage == Usage(input_tokens=105, output_tokens=9, cache_read_tokens=100)
    # A later event may repeat the counts cumulatively: a value present replaces its own
    # part alone (the cache write reported late, the uncached prompt kept).
    late = UsageScan("anthropic")
    late.feed(
        b'event: message_start\ndata: {"type": "message_start", "message": {"usage": '
        b'{"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}}}\n\n'
        b'event: message_delta\ndata: {"type": "message_delta", "usage": '
        b'{"cache_creation_input_tokens": 30, "output_tokens": 9}}\n\n'
    )
    late.finish()
    assert late.usage == Usage(
        input_tokens=135, output_tokens=9, cache_read_tokens=100, cache_write_tokens=30
    )
    cached = UsageScan("openai")  # OpenAI's cached prompt tokens, in the usage chunk
    cached.feed(
        b'data: {"choices": [], "usage": {"prompt_tokens": 70, "completion_tokens": 3, '
        b'"prompt_tokens_details": {"cached_tokens": 64}}}\n\ndata: [DONE]\n\n'
    )
    cached.finish()
    assert cached.usage == Usage(input_tokens=70, output_tokens=3, cache_read_tokens=64)


async def test_a_relayed_call_without_a_key_for_the_official_api_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    sent: list[Any] = []
    tasks: list[asyncio.Task[None]] = []

    async def send(frame: Any) -> None:
        sent.append(frame)

    def start(coro: Any) -> asyncio.Task[None]:
        tasks.append(asyncio.ensure_future(coro))
        return tasks[-1]

    pools = ModelPools()
    relay = ModelRelay(
        spec(), Settings(), ProviderLimiter({}), pools, send, send_nowait=sent.append, start=start
    )
    streamed = b'{"model": "m", "messages": [], "stream": true, '
    relay.on_call(ModelCall(id=1, body=streamed + b'"stream_options": {"include_usage": true}}'))
    await asyncio.gather(*tasks)
    await pools.aclose()
    (end,) = sent
    assert isinstance(end, ModelEnd) and end.error_kind == "config"
    assert "OPENAI_API_KEY is not set" in end.message
    error = end_error(end)
    assert isinstance(error, ModelError) and "OPENAI_API_KEY is not set" in str(error)


async def test_the_relay_inflates_a_compressed_answer_in_bounded_pieces_as_asked() -> None:
    # ~100 MiB from one 100 KiB read: the parent must never hold it whole, and inflates
    # only as far as the relay has asked (it stops asking when the child stops reading).
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(packer.compress(b"data: " + b"x" * (1 << 20)) for _ in range(100))
    bomb += packer.flush()
    assert len(bomb) < 1 << 20

    async def one_read() -> AsyncIterator[bytes]:
        yield bomb

    pieces = inflated_chunks(one_read(), Inflater("gzip", "openai"))
    sizes = [len(await anext(pieces)) for _ in range(20)]
    assert sizes and max(sizes) <= 64 * 1024, sizes
    await pieces.aclose()
    plain = inflated_chunks(one_read(), Inflater("", "openai"))
    assert [p async for p in plain] == [bomb]  # identity: passed on as it came
