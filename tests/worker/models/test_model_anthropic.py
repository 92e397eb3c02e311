"""AnthropicModel through the real httpx client against the local model server."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
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
from agentcell.worker.models._anthropic import AnthropicModel
from agentcell.worker.models._base import (
    ModelError,
    ModelErrorKind,
    ModelRequest,
    ModelResponse,
    StopReason,
    TextPart,
)
from agentcell.worker.models._http_options import HttpOptions
from model_servers import Call, ModelServer, Reply
from provider_util import READ, fail_stream, run_stream

# Retries never really wait in these tests (the delays asked for are recorded instead).
pytestmark = pytest.mark.usefixtures("sleeps")

HELLO = ModelRequest(messages=[SystemMessage(content="Be brief."), UserMessage(content="hi")])


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCELL_BLOCK_REAL_MODELS", "1")
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def make(server: ModelServer) -> AsyncIterator[Callable[..., AnthropicModel]]:
    made: list[AnthropicModel] = []

    def factory(**options: Any) -> AnthropicModel:
        options.setdefault("base_url", server.anthropic_base_url)
        options.setdefault("api_key", "sk-ant-test")
        options.setdefault("retry_base_delay", 0.01)
        options.setdefault("prompt_cache", "off")  # whole bodies compared; test_prompt_cache
        model = AnthropicModel("claude-test", http=HttpOptions.take(options), **options)
        made.append(model)
        return model

    yield factory
    for model in made:
        await model.aclose()


async def run(model: AnthropicModel, request: ModelRequest = HELLO) -> tuple[str, ModelResponse]:
    return await run_stream(model, request)


async def fail(model: AnthropicModel, request: ModelRequest = HELLO) -> tuple[str, ModelError]:
    return await fail_stream(model, request)


# -- streaming ----------------------------------------------------------------------------


async def test_text_streams_in_many_chunks(server: ModelServer, make: Any) -> None:
    text = "Sphinx of black quartz, judge my vow. " * 3
    server.add(Reply(text=text, chunk_size=2))
    items = [item async for item in make().stream(HELLO)]
    *parts, response = items
    assert len(parts) == (len(text) + 1) // 2
    assert all(isinstance(p, TextPart) for p in parts)
    assert isinstance(response, ModelResponse)
    assert response.text == text
    assert response.stop_reason is StopReason.END
    assert response.model == "claude-test"
    assert make().name == "anthropic:claude-test"


async def test_tool_calls_split_across_chunks(server: ModelServer, make: Any) -> None:
    args = {"path": "docs/architecture/overview.md", "limit": 200}
    server.add(
        Reply(
            text="Reading both.",
            tool_calls=[Call("read", args, id="toolu_a"), Call("ls", id="toolu_b")],
            chunk_size=3,
        )
    )
    text, response = await run(make())
    assert text == "Reading both."
    assert response.tool_calls == [
        ToolCall(id="toolu_a", name="read", arguments=json.dumps(args, separators=(",", ":"))),
        ToolCall(id="toolu_b", name="ls", arguments="{}"),
    ]
    assert response.stop_reason is StopReason.TOOL_USE


async def test_tool_calls_only(server: ModelServer, make: Any) -> None:
    server.add(Reply(tool_calls=[Call("ls", {"dir": "."})]))
    text, response = await run(make())
    assert text == ""
    assert response.tool_calls == [ToolCall(id="toolu_1_0", name="ls", arguments='{"dir":"."}')]


async def test_usage_counts_cache_reads_and_writes_as_input(server: ModelServer, make: Any) -> None:
    raw = (
        b"event: message_start\n"
        b'data: {"type":"message_start","message":{"id":"msg_1","type":"message",'
        b'"role":"assistant","model":"claude-x","content":[],"stop_reason":null,'
        b'"usage":{"input_tokens":10,"cache_read_input_tokens":500,'
        b'"cache_creation_input_tokens":30,"output_tokens":1}}}\n\n'
        b'event: ping\ndata: {"type": "ping"}\n\n'
        b"event: message_delta\n"
        b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        b'"usage":{"output_tokens":42}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    server.add(Reply(raw=raw))
    _, response = await run(make())
    assert response.usage == Usage(
        input_tokens=540, output_tokens=42, cache_read_tokens=500, cache_write_tokens=30
    )
    assert response.model == "claude-x"
    usage = Usage(input_tokens=900, output_tokens=7, cache_read_tokens=800, cache_write_tokens=50)
    server.add(Reply(text="ok", usage=usage))  # the server's wire form, back to ours
    _, response = await run(make())
    assert response.usage == usage


@pytest.mark.parametrize(
    ("stop", "expected"),
    [("max_tokens", StopReason.MAX_TOKENS), ("refusal", StopReason.REFUSAL)],
)
async def test_stop_reasons(server: ModelServer, make: Any, stop: str, expected: Any) -> None:
    server.add(Reply(text="partial", stop_reason=stop))
    _, response = await run(make())
    assert response.stop_reason is expected


# -- the request ------------------------------------------------------------------------


async def test_request_body_and_headers(server: ModelServer, make: Any) -> None:
    server.add(Reply(text="done"))
    conversation: list[Message] = [
        SystemMessage(content="You are terse."),
        UserMessage(content="Read a and b."),
        AssistantMessage(
            content="Reading.",
            tool_calls=[
                ToolCall(id="t1", name="read", arguments='{"path":"a"}'),
                ToolCall(id="t2", name="read", arguments='{"path":"b"}'),
            ],
        ),
        ToolMessage(tool_call_id="t1", name="read", content="A"),
        ToolMessage(tool_call_id="t2", name="read", content="no such file", is_error=True),
        UserMessage(content="Also: hurry."),
        AssistantMessage(tool_calls=[ToolCall(id="t3", name="ls", arguments="")]),
        ToolMessage(tool_call_id="t3", name="ls", content=""),
    ]
    request = ModelRequest(messages=conversation, tools=[READ], max_output_tokens=300)
    await run(make(), request)
    (recorded,) = server.requests
    assert recorded.path == "/v1/messages"
    assert recorded.headers["x-api-key"] == "sk-ant-test"
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in recorded.headers
    assert recorded.body == {
        "model": "claude-test",
        "max_tokens": 300,
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read a and b."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {"path": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [  # both results and the user's text: one user message
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": "no such file",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Also: hurry."},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t3", "name": "ls", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3"}]},
        ],
        "stream": True,
        "tools": [
            {
                "name": "read",
                "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
    }


def test_default_max_tokens_and_late_system_messages() -> None:
    local = HttpOptions(base_url="http://127.0.0.1:1")
    model = AnthropicModel("c", http=local, max_tokens=1234, prompt_cache="off")
    request = ModelRequest(
        messages=[
            UserMessage(content="hi"),
            AssistantMessage(content=""),  # an empty answer: dropped, the API refuses it
            SystemMessage(content="Steer: be polite."),
            AssistantMessage(tool_calls=[ToolCall(id="x", name="f", arguments="not json")]),
        ]
    )
    body = msgspec.json.decode(model._body(request))
    assert body["max_tokens"] == 1234
    assert "system" not in body
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "text", "text": "Steer: be polite."},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}],
        },
    ]


async def test_missing_api_key_for_the_official_api() -> None:
    async with AnthropicModel("claude-x") as model:
        _, error = await fail(model)
    assert error.kind is ModelErrorKind.CONFIG
    assert "ANTHROPIC_API_KEY is not set" in str(error)


async def test_custom_server_without_key_sends_none(server: ModelServer, make: Any) -> None:
    server.add("ok")
    await run(make(api_key=None))
    assert "x-api-key" not in server.requests[0].headers


# -- failures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (400, ModelErrorKind.BAD_REQUEST, ["refused the request (HTTP 400)"]),
        (401, ModelErrorKind.AUTH, ["rejected the API key (HTTP 401): check ANTHROPIC_API_KEY"]),
        (403, ModelErrorKind.AUTH, ["(HTTP 403)", "ANTHROPIC_API_KEY"]),
        (404, ModelErrorKind.NOT_FOUND, ["unknown model 'claude-test'", "ANTHROPIC_BASE_URL"]),
        (413, ModelErrorKind.BAD_REQUEST, ["too large (HTTP 413)"]),
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
    server.add(Reply(status=status, error_message="model: claude-test"))
    _, error = await fail(make())
    assert error.kind is kind
    assert error.status == status
    assert str(error).startswith("anthropic: ")
    for word in [*words, "model: claude-test"]:
        assert word in str(error)
    assert len(server.requests) == 1
    assert sleeps == []


async def test_overloaded_and_server_errors_are_retried(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    server.add(Reply(status=529), Reply(status=500), Reply(status=429, retry_after="1.5"), "ok")
    text, _ = await run(make())
    assert text == "ok"
    assert len(server.requests) == 4
    assert len(sleeps) == 3 and sleeps[2] == 1.5


async def test_server_error_forever_gives_up(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    server.responder = lambda body, api: Reply(status=500, error_message="Internal server error")
    _, error = await fail(make(max_retries=2))
    assert error.kind is ModelErrorKind.SERVER
    assert "gave up after 3 attempts" in str(error)
    assert "Internal server error" in str(error)
    assert len(server.requests) == 3


async def test_overloaded_event_before_output_is_retried(
    server: ModelServer, make: Any, sleeps: list[float]
) -> None:
    # after message_start, before any text: nothing was shown, so try again
    server.add(Reply(text="first", stream_error="overloaded_error", stream_error_after=1), "ok")
    text, _ = await run(make())
    assert text == "ok"
    assert len(server.requests) == 2
    assert len(sleeps) == 1


async def test_overloaded_event_after_output_is_not_retried(server: ModelServer, make: Any) -> None:
    # message_start, content_block_start, ping, then "abc": the error follows the text
    server.add(Reply(text="abcdef", stream_error="overloaded_error", stream_error_after=4), "x")
    text, error = await fail(make())
    assert text == "abc"
    assert error.kind is ModelErrorKind.SERVER
    assert "overloaded_error" in str(error) and "not retried" in str(error)
    assert len(server.requests) == 1


async def test_non_transient_error_event(server: ModelServer, make: Any) -> None:
    server.add(
        Reply(stream_error="invalid_request_error", stream_error_message="prompt is too long")
    )
    _, error = await fail(make())
    assert error.kind is ModelErrorKind.BAD_REQUEST
    assert "prompt is too long" in str(error)
    assert len(server.requests) == 1


async def test_drop_after_output_is_not_retried(server: ModelServer, make: Any) -> None:
    server.add(Reply(text="abcdefghi", drop_after=5), "never")
    text, error = await fail(make())
    assert text == "abcdef"
    assert error.kind is ModelErrorKind.CONNECTION
    assert "dropped mid-stream" in str(error)
    assert len(server.requests) == 1


async def test_drop_before_output_is_retried(server: ModelServer, make: Any) -> None:
    server.add(Reply(text="hello", drop_after=1), Reply(text="hello", drop_after=0), "hello")
    text, _ = await run(make())
    assert text == "hello"
    assert len(server.requests) == 3


async def test_stream_ending_early_without_error(server: ModelServer, make: Any) -> None:
    # a clean end of body before message_stop is a dropped stream too
    raw = (
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":{}}}\n\n'
        b"event: content_block_start\n"
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text"}}\n\n'
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Hi"}}\n\n'
    )
    server.add(Reply(raw=raw))
    text, error = await fail(make())
    assert text == "Hi"
    assert error.kind is ModelErrorKind.CONNECTION
    assert "dropped mid-stream" in str(error)


@pytest.mark.parametrize(
    "raw",
    [b"this is not an event stream\n", b'event: message_start\ndata: {"type": 5}\n\n'],
)
async def test_garbage_instead_of_sse(server: ModelServer, make: Any, raw: bytes) -> None:
    server.add(Reply(raw=raw))
    _, error = await fail(make())
    assert error.kind is ModelErrorKind.PROTOCOL
    assert len(server.requests) == 1


async def test_connection_refused(make: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    _, error = await fail(make(base_url=base, max_retries=0))
    assert error.kind is ModelErrorKind.CONNECTION
    assert str(error) == (
        f"anthropic: cannot reach {base}: connection refused; is the server running? "
        "(ANTHROPIC_BASE_URL)"
    )


async def test_request_timeout(server: ModelServer, make: Any) -> None:
    server.add(Reply(hang=True), "late but fine")
    text, _ = await run(make(timeout=0.5, max_retries=1))
    assert text == "late but fine"
    assert len(server.requests) == 2


async def test_block_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_network(self: object, request: object) -> None:
        raise AssertionError("the network was touched")

    monkeypatch.setattr(httpcore.AsyncConnectionPool, "handle_async_request", no_network)
    async with AnthropicModel("claude-x", http=HttpOptions(api_key="sk-ant-real")) as model:
        _, error = await fail(model)
    assert error.kind is ModelErrorKind.BLOCKED
    assert "AGENTCELL_BLOCK_REAL_MODELS=1" in str(error)
    assert "https://api.anthropic.com" in str(error)
    assert "ANTHROPIC_BASE_URL" in str(error)


async def test_server_non_streaming_json(server: ModelServer) -> None:
    import httpx

    server.add(Reply(text="hi", tool_calls=[Call("ls", {"a": 1})]))
    async with httpx.AsyncClient() as client:
        resp = await client.post(
            server.anthropic_base_url + "/v1/messages",
            headers={"anthropic-version": "2023-06-01"},
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        )
    doc = resp.json()
    assert doc["type"] == "message"
    assert doc["content"][0] == {"type": "text", "text": "hi"}
    assert doc["content"][1]["input"] == {"a": 1}
    assert doc["stop_reason"] == "tool_use"


async def test_server_refuses_requests_the_api_would(server: ModelServer) -> None:
    import httpx

    async with httpx.AsyncClient() as client:
        resp = await client.post(
            server.anthropic_base_url + "/v1/messages",
            json={"model": "m", "max_tokens": 5, "messages": []},
        )
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert "anthropic-version" in resp.json()["error"]["message"]
