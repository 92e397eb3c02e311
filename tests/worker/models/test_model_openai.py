"""OpenAIChatModel through the real httpx client against the local model server.

Also covers the shared plumbing in worker.models._http (SSE parsing, Retry-After, the
block guard) and the server's own clean shutdown.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable
from email.utils import formatdate
from typing import Any

import httpcore
import msgspec
import pytest
from agentcell.protocol import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from agentcell.worker.models import _http
from agentcell.worker.models._base import (
    ModelError,
    ModelErrorKind,
    ModelRequest,
    ModelResponse,
    StopReason,
    TextPart,
)
from agentcell.worker.models._http_options import HttpOptions
from agentcell.worker.models._openai import TOOL_ERROR_PREFIX, OpenAIChatModel
from agentcell.worker.models.transports import _client
from model_servers import Call, ModelServer, Reply
from provider_util import READ, fail_stream, run_stream

# Retries never really wait in these tests (the delays asked for are recorded instead).
pytestmark = pytest.mark.usefixtures("sleeps")

HELLO = ModelRequest(messages=[UserMessage(content="hi")])


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # nothing here may reach a real model, and the developer's settings must not leak in
    monkeypatch.setenv("AGENTCELL_BLOCK_REAL_MODELS", "1")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def make(server: ModelServer) -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    made: list[OpenAIChatModel] = []

    def factory(**options: Any) -> OpenAIChatModel:
        options.setdefault("base_url", server.openai_base_url)
        options.setdefault("api_key", "sk-test")
        options.setdefault("retry_base_delay", 0.01)
        model = OpenAIChatModel("gpt-test", http=HttpOptions.take(options), **options)
        made.append(model)
        return model

    yield factory
    for model in made:
        await model.aclose()


async def run(model: OpenAIChatModel, request: ModelRequest = HELLO) -> tuple[str, ModelResponse]:
    return await run_stream(model, request)


async def fail(model: OpenAIChatModel, request: ModelRequest = HELLO) -> tuple[str, ModelError]:
    return await fail_stream(model, request)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- streaming ----------------------------------------------------------------------------


async def test_text_streams_in_many_chunks(server: ModelServer, make: Any) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 3
    server.add(Reply(text=text, chunk_size=2))
    items = [item async for item in make().stream(HELLO)]
    *parts, response = items
    assert len(parts) == (len(text) + 1) // 2
    assert all(isinstance(p, TextPart) for p in parts)
    assert isinstance(response, ModelResponse)
    assert response.text == text
    assert response.stop_reason is StopReason.END
    assert response.tool_calls == []
    assert response.model == "gpt-test"


async def test_tool_calls_split_across_chunks(server: ModelServer, make: Any) -> None:
    read_args = {"path": "src/very/long/path/to/a/file.py", "lines": [1, 2, 3]}
    server.add(
        Reply(
            text="Let me look.",
            tool_calls=[Call("read", read_args, id="call_a"), Call("ls", {}, id="call_b")],
            chunk_size=2,
        )
    )
    text, response = await run(make())
    assert text == "Let me look."
    assert response.tool_calls == [
        ToolCall(id="call_a", name="read", arguments=json.dumps(read_args, separators=(",", ":"))),
        ToolCall(id="call_b", name="ls", arguments="{}"),
    ]
    assert response.stop_reason is StopReason.TOOL_USE


async def test_tool_call_without_id_gets_a_stable_synthetic_one(
    server: ModelServer, make: Any
) -> None:
    reply = Reply(
        tool_calls=[Call("read", {"path": "a"}, id=""), Call("read", {"path": "b"}, id="")]
    )
    server.add(reply, reply)
    model = make()
    _, first = await run(model)
    _, second = await run(model)
    ids = [c.id for c in first.tool_calls]
    assert all(i.startswith("call_") for i in ids)
    assert len(set(ids)) == 2
    assert [c.id for c in second.tool_calls] == ids  # the same call, the same id
    later = ModelRequest(messages=[*HELLO.messages, AssistantMessage(content="x")])
    server.add(reply)
    _, third = await run(model, later)
    assert not set(ids) & {c.id for c in third.tool_calls}  # another turn, other ids


async def test_usage_and_cached_tokens(server: ModelServer, make: Any) -> None:
    usage = Usage(input_tokens=1200, output_tokens=34, cache_read_tokens=1024)
    server.add(Reply(text="ok", usage=usage))
    _, response = await run(make())
    assert response.usage == usage


@pytest.mark.parametrize(
    ("stop", "expected"),
    [("max_tokens", StopReason.MAX_TOKENS), ("refusal", StopReason.REFUSAL)],
)
async def test_finish_reasons(server: ModelServer, make: Any, stop: str, expected: Any) -> None:
    server.add(Reply(text="partial", stop_reason=stop))
    _, response = await run(make())
    assert response.stop_reason is expected


async def test_many_concurrent_streams_on_one_model(server: ModelServer, make: Any) -> None:
    server.responder = lambda body, api: Reply(text=f"echo {body['messages'][-1]['content']}")
    model = make()
    requests = [ModelRequest(messages=[UserMessage(content=f"n{i}")]) for i in range(24)]
    results = await asyncio.gather(*(run(model, r) for r in requests))
    assert [r.text for _, r in results] == [f"echo n{i}" for i in range(24)]
    assert len(server.requests) == 24


CHILD = """
import asyncio, sys
from agentcell.protocol import UserMessage
from agentcell.worker.models._base import ModelRequest, complete
from agentcell.worker.models._http_options import HttpOptions
from agentcell.worker.models._openai import OpenAIChatModel

async def main():
    async with OpenAIChatModel("gpt-test", http=HttpOptions(base_url=sys.argv[1])) as model:
        request = ModelRequest(messages=[UserMessage(content=sys.argv[2])])
        print((await complete(model, request)).text)

asyncio.run(main())
"""


async def test_child_processes_and_the_parent_share_the_server(
    server: ModelServer, make: Any
) -> None:
    everyone = threading.Barrier(6, timeout=30)  # answer only once all six are in flight

    def responder(body: dict[str, Any], api: str) -> Reply:
        everyone.wait()
        return Reply(text=f"echo {body['messages'][-1]['content']}")

    server.responder = responder
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            server.openai_base_url,
            f"child{i}",
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(3)
    ]
    model = make()
    requests = [ModelRequest(messages=[UserMessage(content=f"p{i}")]) for i in range(3)]
    results = await asyncio.gather(*(run(model, r) for r in requests))
    assert [response.text for _, response in results] == ["echo p0", "echo p1", "echo p2"]
    outputs = [(await child.communicate())[0].decode().strip() for child in children]
    assert outputs == ["echo child0", "echo child1", "echo child2"]
    assert all(child.returncode == 0 for child in children)
    assert len(server.requests) == 6


# -- the request ------------------------------------------------------------------------


async def test_request_body_and_headers(server: ModelServer, make: Any) -> None:
    server.add(Reply(text="done"))
    conversation: list[Message] = [
        SystemMessage(content="You are terse."),
        UserMessage(content="Read a and b."),
        AssistantMessage(
            content="Reading.",
            tool_calls=[
                ToolCall(id="c1", name="read", arguments='{"path":"a"}'),
                ToolCall(id="c2", name="read", arguments='{"path":"b"}'),
            ],
        ),
        ToolMessage(tool_call_id="c1", name="read", content="A"),
        ToolMessage(tool_call_id="c2", name="read", content="no such file", is_error=True),
        AssistantMessage(tool_calls=[ToolCall(id="c3", name="read", arguments="{}")]),
        ToolMessage(tool_call_id="c3", name="read", content="C"),
        UserMessage(content="Go on."),
    ]
    await run(make(), ModelRequest(messages=conversation, tools=[READ], max_output_tokens=256))
    (recorded,) = server.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == "Bearer sk-test"
    assert recorded.headers["content-type"] == "application/json"
    assert recorded.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Read a and b."},
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path":"a"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path":"b"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
            {"role": "tool", "tool_call_id": "c2", "content": TOOL_ERROR_PREFIX + "no such file"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c3",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c3", "content": "C"},
            {"role": "user", "content": "Go on."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                },
            }
        ],
        "max_tokens": 256,
    }


async def test_custom_server_without_key_gets_no_authorization(
    server: ModelServer, make: Any
) -> None:
    server.add(Reply(text="ok"))
    await run(make(api_key=None))
    assert "authorization" not in server.requests[0].headers


async def test_environment_gives_base_url_and_key(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url + "/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    server.add(Reply(text="ok"))
    async with OpenAIChatModel("gpt-test") as model:
        assert model.name == "openai:gpt-test"
        await run(model)
    assert server.requests[0].headers["authorization"] == "Bearer sk-env"


def test_output_limit_field() -> None:
    request = ModelRequest(messages=[UserMessage(content="hi")], max_output_tokens=99)
    official = OpenAIChatModel("o3", http=HttpOptions(api_key="sk"))
    local_url = HttpOptions(base_url="http://127.0.0.1:1/v1")
    local = OpenAIChatModel("llama", http=local_url)
    forced = OpenAIChatModel("x", http=local_url, max_tokens_field="max_completion_tokens")
    assert msgspec.json.decode(official._body(request))["max_completion_tokens"] == 99
    assert msgspec.json.decode(local._body(request))["max_tokens"] == 99
    assert msgspec.json.decode(forced._body(request))["max_completion_tokens"] == 99
    no_usage = OpenAIChatModel("x", http=local_url, stream_usage=False)
    assert "stream_options" not in msgspec.json.decode(no_usage._body(request))


async def test_missing_api_key_for_the_official_api() -> None:
    async with OpenAIChatModel("gpt-4o") as model:
        _, error = await fail(model)
    assert error.kind is ModelErrorKind.CONFIG
    assert str(error) == (
        "OPENAI_API_KEY is not set: export it (or point OPENAI_BASE_URL at a server that "
        "needs no key)"
    )


# -- failures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (400, ModelErrorKind.BAD_REQUEST, ["refused the request (HTTP 400)"]),
        (401, ModelErrorKind.AUTH, ["rejected the API key (HTTP 401): check OPENAI_API_KEY"]),
        (403, ModelErrorKind.AUTH, ["may not use model 'gpt-test' (HTTP 403)", "OPENAI_API_KEY"]),
        (
            404,
            ModelErrorKind.NOT_FOUND,
            ["unknown model 'gpt-test' or wrong base URL 'http://127.0.0.1:", "OPENAI_BASE_URL"],
        ),
        (422, ModelErrorKind.BAD_REQUEST, ["(HTTP 422)"]),
    ],
)
async def test_client_errors_fail_at_once(
    server: ModelServer,
    make: Any,
    sleeps: list[float],
    status: int,
    kind: ModelErrorKind,
    words: list[str],
) -> None:
    server.add(Reply(status=status, error_message="the server's own words"))
    _, error = await fail(make())
    assert error.kind is kind
    assert error.status == status
    message = str(error)
    assert message.startswith("openai: ")
    for word in [*words, "the server's own words"]:
        assert word in message
    assert len(server.requests) == 1
    assert sleeps == []


@pytest.mark.parametrize(
    ("error_type", "said"),
    [("authentication_error", "the server's own words"), (None, "Invalid API key provided")],
)
async def test_a_400_about_the_key_names_the_key_not_the_model_options(
    server: ModelServer, make: Any, error_type: str | None, said: str
) -> None:
    """Some gateways answer a bad key with a 400: its type or words say so."""
    server.add(Reply(status=400, error_message=said, error_type=error_type))
    _, error = await fail(make())
    assert error.kind is ModelErrorKind.AUTH
    assert "rejected the API key (HTTP 400): check OPENAI_API_KEY" in str(error)
    assert "options" not in str(error)


async def test_server_errors_are_retried(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    server.add(Reply(status=500), Reply(status=503), Reply(text="finally"))
    text, _ = await run(make())
    assert text == "finally"
    assert len(server.requests) == 3
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= 0.01 and 0 <= sleeps[1] <= 0.02  # full jitter, doubling


async def test_server_error_forever_gives_up(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    server.responder = lambda body, api: Reply(status=500, error_message="kaputt")
    _, error = await fail(make(max_retries=3))
    assert error.kind is ModelErrorKind.SERVER
    assert error.status == 500
    assert "HTTP 500" in str(error) and "kaputt" in str(error)
    assert "gave up after 4 attempts" in str(error)
    assert len(server.requests) == 4
    assert len(sleeps) == 3


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
    ],
)
async def test_rate_limit_honours_retry_after(
    server: ModelServer, make: Any, sleeps: list[float], headers: dict[str, str], delay: float
) -> None:
    server.add(Reply(status=429, headers=headers), Reply(text="ok"))
    text, _ = await run(make())
    assert text == "ok"
    assert len(server.requests) == 2
    assert sleeps == [delay]


async def test_rate_limit_with_an_http_date(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    server.add(Reply(status=429, retry_after=formatdate(0, usegmt=True)), Reply(text="ok"))
    await run(make())
    assert sleeps == [0.0]  # a date in the past: retry at once


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert _http.parse_retry_after({"retry-after": "3"}) == 3.0
    assert _http.parse_retry_after({"retry-after": "0.5"}) == 0.5
    date = formatdate(now + 7, usegmt=True)
    assert _http.parse_retry_after({"retry-after": date}, now=now) == 7.0
    assert _http.parse_retry_after({"retry-after": "soon"}) is None
    assert _http.parse_retry_after({"retry-after": "-1"}) is None
    assert _http.parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert _http.parse_retry_after({}) is None


async def test_rate_limit_forever_and_quota(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    server.responder = lambda body, api: Reply(status=429, error_message="slow down")
    _, error = await fail(make(max_retries=1))
    assert error.kind is ModelErrorKind.RATE_LIMIT
    assert "HTTP 429" in str(error) and "slow down" in str(error)
    assert len(server.requests) == 2
    server.responder = lambda body, api: Reply(status=429, error_code="insufficient_quota")
    _, error = await fail(make(max_retries=1))
    assert error.kind is ModelErrorKind.RATE_LIMIT
    assert "quota" in str(error) and "OPENAI_API_KEY" in str(error)
    assert len(server.requests) == 3  # not retried: waiting does not refill a quota


async def test_retry_after_too_long_fails_at_once(server: ModelServer, make: Any) -> None:
    server.add(Reply(status=503, retry_after="3600"))
    _, error = await fail(make())
    assert error.kind is ModelErrorKind.SERVER
    assert "3600 s" in str(error)
    assert len(server.requests) == 1


async def test_drop_after_output_is_not_retried(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    # events: the role chunk, then "abc", "def": the drop comes after two text chunks
    server.add(Reply(text="abcdefghijkl", drop_after=3), Reply(text="never"))
    text, error = await fail(make())
    assert text == "abcdef"
    assert error.kind is ModelErrorKind.CONNECTION
    assert "dropped mid-stream" in str(error)
    assert len(server.requests) == 1
    assert sleeps == []


async def test_drop_before_output_is_retried(server: ModelServer, make: Any) -> None:
    server.add(
        Reply(text="hello", drop_after=1), Reply(tool_calls=[Call("ls")], drop_after=3), "hello"
    )
    text, response = await run(make())
    assert text == "hello"  # streamed once, not twice
    assert response.text == "hello"
    assert len(server.requests) == 3


async def test_stream_error_event(server: ModelServer, make: Any) -> None:
    server.add(Reply(text="abc", stream_error="server_error"), "recovered")
    text, _ = await run(make())
    assert text == "recovered"
    server.add(Reply(text="abc", stream_error="invalid_request_error", stream_error_message="bad"))
    _, error = await fail(make())
    assert error.kind is ModelErrorKind.BAD_REQUEST
    assert "bad" in str(error)
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("raw", "content_type"),
    [
        (b"<html><body>Welcome to nginx!</body></html>\n", "text/event-stream"),
        (b"<html><body>Welcome to nginx!</body></html>\n", "text/html"),
        (b"data: {this is not json\n\n", "text/event-stream"),
        (b'data: {"choices": 42}\n\n', "text/event-stream"),
    ],
)
async def test_garbage_instead_of_sse(
    server: ModelServer, make: Any, raw: bytes, content_type: str
) -> None:
    server.add(Reply(raw=raw, content_type=content_type))
    _, error = await fail(make())
    assert error.kind is ModelErrorKind.PROTOCOL
    assert len(server.requests) == 1


async def test_connection_refused(make: Any, sleeps: list[float]) -> None:
    base = f"http://127.0.0.1:{unused_port()}/v1"
    _, error = await fail(make(base_url=base, max_retries=1))
    assert error.kind is ModelErrorKind.CONNECTION
    assert f"cannot reach {base}: connection refused; is the server running? (OPENAI_BASE_URL)" in (
        str(error)
    )
    assert len(sleeps) == 1


async def test_request_timeout(server: ModelServer, make: Any) -> None:
    server.responder = lambda body, api: Reply(hang=True)
    _, error = await fail(make(timeout=0.2, max_retries=1))
    assert error.kind is ModelErrorKind.TIMEOUT
    assert "0.2 s" in str(error)
    assert len(server.requests) == 2


async def test_stall_after_output_is_not_retried(server: ModelServer, make: Any) -> None:
    server.add(Reply(text="abcdef", hang_after=2))
    text, error = await fail(make(timeout=0.5))
    assert text == "abc"
    assert error.kind is ModelErrorKind.TIMEOUT
    assert "stalled mid-stream for 0.5 s" in str(error)
    assert len(server.requests) == 1


async def test_block_guard_stops_real_requests_without_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_network(self: object, request: object) -> None:
        raise AssertionError("the network was touched")

    monkeypatch.setattr(httpcore.AsyncConnectionPool, "handle_async_request", no_network)
    async with OpenAIChatModel("gpt-4o", http=HttpOptions(api_key="sk-real")) as model:
        _, error = await fail(model)
        assert error.kind is ModelErrorKind.BLOCKED
        assert str(error).startswith(
            "real model requests are blocked (AGENTCELL_BLOCK_REAL_MODELS=1): "
        )
        assert "https://api.openai.com" in str(error)
        # the guard is in the transport: the raw client cannot get around it either
        with pytest.raises(ModelError) as info:
            await model._http.client.get("https://example.com/")
        assert info.value.kind is ModelErrorKind.BLOCKED


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert _client.is_loopback(host), host
    for host in ("api.openai.com", "10.0.0.1", "0.0.0.0", "localhost.evil.com"):
        assert not _client.is_loopback(host), host


async def test_closed_model_refuses_to_stream(make: Any) -> None:
    model = make()
    await model.aclose()
    _, error = await fail(model)
    assert error.kind is ModelErrorKind.CONFIG


# -- the SSE parser ----------------------------------------------------------------------


SSE_SAMPLE = (
    b": a comment\r\n"
    b"event: first\r\n"
    b"data: one\r\n"
    b"data:two\r\n"
    b"id: 7\r\n"
    b"\r\n"
    b'data: {"x": 1}\n\n'
    b"event: empty\n\n"
    b"retry: 10\r"
    b"data: [DONE]\r\r"
)
SSE_EVENTS = [(b"first", b"one\ntwo"), (b"", b'{"x": 1}'), (b"", b"[DONE]")]


def test_sse_decoder_whole_and_split_at_every_byte() -> None:
    decoder = _http.SSEDecoder()
    assert decoder.feed(SSE_SAMPLE) == SSE_EVENTS
    for cut in range(1, len(SSE_SAMPLE)):
        decoder = _http.SSEDecoder()
        events = decoder.feed(SSE_SAMPLE[:cut]) + decoder.feed(SSE_SAMPLE[cut:])
        assert events == SSE_EVENTS, cut
    decoder = _http.SSEDecoder()
    events = [e for i in range(len(SSE_SAMPLE)) for e in decoder.feed(SSE_SAMPLE[i : i + 1])]
    assert events == SSE_EVENTS


def test_sse_decoder_keeps_a_last_event_without_blank_line() -> None:
    decoder = _http.SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\n") == [(b"", b"a")]
    assert decoder.close() == [(b"", b"b")]


# -- the server itself ---------------------------------------------------------------------


async def test_server_stops_cleanly_with_hung_and_idle_connections() -> None:
    before = {t.ident for t in threading.enumerate()}
    server = ModelServer(lambda body, api: Reply(hang=True)).start()
    port = server.port
    model = OpenAIChatModel(
        "gpt-test", http=HttpOptions(base_url=server.openai_base_url, max_retries=0)
    )
    idle = socket.create_connection(("127.0.0.1", port))  # a keep-alive client doing nothing
    task = asyncio.ensure_future(fail(model))
    await asyncio.to_thread(server.wait_requests, 1)
    await asyncio.to_thread(server.stop)  # must not wait for the hung reply or the idle one
    _, error = await task
    assert error.kind is ModelErrorKind.CONNECTION
    await model.aclose()
    assert idle.recv(1) == b""  # the server closed its end
    idle.close()
    left = [t for t in threading.enumerate() if t.ident not in before]
    assert [t.name for t in left if not t.name.startswith("asyncio_")] == []  # executor is fine
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


async def test_server_non_streaming_json(server: ModelServer) -> None:
    import httpx

    server.add(Reply(text="hi", tool_calls=[Call("ls", {"a": 1})]))
    async with httpx.AsyncClient() as client:
        resp = await client.post(
            server.openai_base_url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    doc = resp.json()
    assert doc["object"] == "chat.completion"
    message = doc["choices"][0]["message"]
    assert message["content"] == "hi"
    assert message["tool_calls"][0]["function"] == {"name": "ls", "arguments": '{"a":1}'}
    assert doc["choices"][0]["finish_reason"] == "tool_calls"
