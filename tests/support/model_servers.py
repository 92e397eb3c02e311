"""A scripted local model server speaking the real OpenAI and Anthropic wire formats.

It is a real HTTP/1.1 server on 127.0.0.1 (ephemeral port) in a background thread, so
the test process and its sub-agent child processes can all talk to it at once::

    with ModelServer() as server:
        server.add(Reply(text="Hello!"), Reply(tool_calls=[Call("read", {"path": "a"})]))
        model = OpenAIChatModel("gpt-test", http=HttpOptions(base_url=server.openai_base_url))
        ...
        assert server.requests[0].body["messages"][0]["role"] == "system"

Routes: ``POST /v1/chat/completions`` (OpenAI; SSE when ``stream`` is true, else one
JSON object) and ``POST /v1/messages`` (Anthropic; SSE or JSON likewise). Each request
takes the next queued ``Reply`` (``add``), else asks the ``responder(body, api)``
callable, else gets a 400 saying nothing was scripted. With several clients at once a
queue hands replies out in arrival order; a responder that looks at the request is the
deterministic choice. Every request is recorded in ``requests`` before it is answered.

Stopping releases hung replies, closes every connection and joins every thread.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from agentcell.protocol import Usage

__all__ = [
    "Call",
    "ModelServer",
    "RecordedRequest",
    "Reply",
    "Responder",
    "Thought",
    "events_through_last_tool_name",
    "model_server",
    "openai_served",
    "raw_bodies",
    "serving",
]

_CREATED = 1_700_000_000  # a fixed timestamp keeps the chunks deterministic
_DEFAULT_USAGE = Usage(input_tokens=10, output_tokens=5)

_OPENAI_FINISH = {
    "end": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_ANTHROPIC_STOP = {
    "end": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
}
_ANTHROPIC_ERROR = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclasses.dataclass
class Call:
    """A tool call for a reply. ``arguments`` is JSON text (sent as is) or a dict.

    ``id=None`` gets a generated id; ``id=""`` sends none (like some local servers).
    """

    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclasses.dataclass
class Thought:
    """An Anthropic thinking block for a reply: ``thinking`` text with its ``signature``,
    or, with ``data``, a ``redacted_thinking`` block (encrypted; no text)."""

    thinking: str = ""
    signature: str = ""
    data: str | None = None

    def block(self) -> dict[str, Any]:
        if self.data is not None:
            return {"type": "redacted_thinking", "data": self.data}
        return {"type": "thinking", "thinking": self.thinking, "signature": self.signature}


@dataclasses.dataclass
class Reply:
    """One scripted answer. The defaults give a successful streamed text reply.

    Content: ``text`` and ``tool_calls``, streamed in pieces of ``chunk_size``
    characters (text deltas and argument fragments alike), after ``thinking`` (Anthropic
    thinking blocks: thinking deltas then one signature delta); ``usage`` in our terms
    (``input_tokens`` counts every prompt token; Anthropic's wire form reports cache
    reads and writes apart); ``stop_reason`` one of end/tool_use/max_tokens/refusal,
    by default tool_use when there are tool calls.

    Failures: ``status`` != 200 answers with that API's JSON error body
    (``error_message``, ``error_type``, ``error_code``), plus ``retry_after`` as a
    Retry-After header; ``drop_after=N`` closes the socket after N stream events;
    ``hang`` sends nothing and ``hang_after=N`` stops after N events, both until the
    server stops; ``pause_after=N`` stops after N events until ``release`` is set;
    ``stream_error`` (an error type such as ``overloaded_error``) is sent as an in-stream
    error event after ``stream_error_after`` events; ``raw`` is sent
    verbatim as the body (garbage, hand-written streams) with ``content_type``.
    """

    text: str = ""
    tool_calls: Sequence[Call] = ()
    thinking: Sequence[Thought] = ()  # Anthropic only
    usage: Usage | None = None
    stop_reason: str | None = None
    model: str | None = None  # the model named in the answer; default: the requested one
    chunk_size: int = 3
    status: int = 200
    error_message: str = ""
    error_type: str | None = None
    error_code: str | None = None
    retry_after: str | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    drop_after: int | None = None
    hang: bool = False
    hang_after: int | None = None
    # Stop after this many stream events until ``release`` is set (or the server stops):
    # a test sees what a client does with half an answer.
    pause_after: int | None = None
    release: threading.Event | None = None
    stream_error: str | None = None
    stream_error_message: str = "Overloaded"
    stream_error_after: int = 1
    raw: bytes | None = None
    content_type: str = "text/event-stream"


@dataclasses.dataclass
class RecordedRequest:
    """One request as received. ``headers`` keys are lower case; ``body`` is the JSON."""

    api: str  # "openai", "anthropic" or "" for an unknown path
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    client_port: int = 0  # the client's end of the connection it came on
    query: str = ""  # what followed "?" in the request target


Responder = Callable[[dict[str, Any], str], "Reply | str"]


class ModelServer:
    """The scripted server; see the module docstring. Use it as a context manager."""

    def __init__(
        self,
        responder: Responder | None = None,
        replies: Iterable[Reply] = (),
        *,
        idle_timeout: float | None = None,
    ):
        self.responder = responder
        # Close a keep-alive connection idle this long (seconds), as real servers do.
        self.idle_timeout = idle_timeout
        self.accepted: list[int] = []  # client ports of every connection accepted
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []  # responder exceptions, answered with HTTP 400
        self._queue: collections.deque[Reply] = collections.deque(replies)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._counter = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting and inspection -----------------------------------------------------

    def add(self, *replies: Reply | str) -> None:
        """Queue replies (a str is a text reply), taken one per request in order."""
        with self._lock:
            self._queue.extend(Reply(text=r) if isinstance(r, str) else r for r in replies)

    def wait_requests(self, count: int, timeout: float = 10.0) -> None:
        """Block until ``count`` requests have arrived (for checks on hanging ones)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"{len(self.requests)} requests arrived, not {count}")

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the server is not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> ModelServer:
        handler = _Handler
        if self.idle_timeout is not None:
            handler = type("_IdleClosingHandler", (_Handler,), {"timeout": self.idle_timeout})
        httpd = _HTTPServer(("127.0.0.1", 0), handler)
        httpd.owner = self
        self._httpd = httpd
        # a short poll interval keeps stop() fast; the loop costs next to nothing
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="model-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None or self._stopping.is_set():
            return
        self._stopping.set()  # releases hung replies
        httpd.shutdown()  # no more accepts
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # wakes handlers waiting on idle keep-alive sockets
            _shutdown(conn)
        httpd.server_close()
        thread.join()
        for handler_thread in httpd.handler_threads:  # all woken above
            handler_thread.join()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- called from handler threads --------------------------------------------------

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def _track(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)
            self.accepted.append(conn.getpeername()[1])
            stopping = self._stopping.is_set()
        if stopping:  # accepted just as stop() began: it must not wait for a request
            _shutdown(conn)

    def _untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

    def _record(self, request: RecordedRequest) -> int:
        with self._arrived:
            self.requests.append(request)
            self._counter += 1
            self._arrived.notify_all()
            return self._counter

    def _next_reply(self, body: dict[str, Any], api: str) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is None:
            return Reply(
                status=400,
                error_message="model server: no reply scripted for this request "
                "(add replies or give a responder)",
            )
        try:
            reply = self.responder(body, api)
        except Exception as exc:
            self.errors.append(f"responder raised {exc!r}")
            return Reply(status=400, error_message=f"model server: responder raised {exc!r}")
        return Reply(text=reply) if isinstance(reply, str) else reply


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A started server, stopped after the test; fails the test if its responder raised."""
    with ModelServer() as server:
        yield server
    assert not server.errors, server.errors


@pytest.fixture
def openai_served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    """``model_server`` as the ``openai`` provider of every orchestrator the test makes."""
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-served-test-key")
    return model_server


@pytest.fixture
def raw_bodies(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every request body the test's model servers received, byte for byte."""
    bodies: list[bytes] = []
    original = _Handler._read_body

    def recording(self: _Handler) -> bytes:
        bodies.append(original(self))
        return bodies[-1]

    monkeypatch.setattr(_Handler, "_read_body", recording)
    return bodies


@contextlib.contextmanager
def serving(
    handler: type[BaseHTTPRequestHandler],
    *,
    host: str = "127.0.0.1",
    tls: ssl.SSLContext | None = None,
) -> Iterator[int]:
    """A threaded HTTP server on ``host`` with ``handler`` (HTTPS with ``tls``); its
    port, stopped after."""
    server = ThreadingHTTPServer((host, 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    # a short poll interval: shutdown() waits for the loop's next poll (0.5 s by default)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer or by the handler


class _HTTPServer(ThreadingHTTPServer):
    owner: ModelServer
    request_queue_size = 1024  # many children connect at once; a backlog of 5 drops SYNs

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        super().__init__(address, handler)
        self.handler_threads: list[threading.Thread] = []

    def process_request(self, request: Any, client_address: Any) -> None:
        # socketserver joins only non-daemon threads, and those would block interpreter
        # exit if a test forgot stop(); so: daemon threads, kept here to be joined
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="model-server-connection",
            daemon=True,
        )
        self.handler_threads[:] = [t for t in self.handler_threads if t.is_alive()]
        self.handler_threads.append(thread)
        thread.start()


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as the real APIs
    server: _HTTPServer
    disable_nagle_algorithm = True  # small SSE writes must not wait for delayed ACKs
    timeout = 120  # an idle keep-alive connection is closed eventually in any case

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read self.requests instead

    def do_GET(self) -> None:
        self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        try:
            self._post()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; nothing to answer

    # -- request handling -------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _post(self) -> None:
        owner = self.server.owner
        raw = self._read_body()
        path = self.path.split("?", 1)[0]
        api = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}.get(path, "")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        query = self.path.partition("?")[2]
        recorded = RecordedRequest(api, "POST", path, headers, body, self.client_address[1], query)
        n = owner._record(recorded)
        if not api:
            self._error("openai", Reply(status=404, error_message=f"no route {path}"))
            return
        problem = self._invalid(api, body, headers)
        if problem:
            self._error(api, Reply(status=400, error_message=problem))
            return
        assert isinstance(body, dict)
        reply = owner._next_reply(body, api)
        if reply.hang:
            owner._stopping.wait()
            self.close_connection = True
            return
        if reply.status != 200:
            self._error(api, reply)
            return
        if reply.raw is not None:
            self._send(200, reply.raw, reply.content_type, reply.headers)
            return
        model = reply.model or str(body.get("model", ""))
        if not body.get("stream"):
            doc = (
                _openai_message(reply, model, n)
                if api == "openai"
                else _anthropic_message(reply, model, n)
            )
            self._json(200, doc)
            return
        if api == "openai":
            usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
            events = _openai_events(reply, model, n, usage_on)
        else:
            events = _anthropic_events(reply, model, n)
        self._stream(api, reply, events)

    @staticmethod
    def _invalid(api: str, body: Any, headers: dict[str, str]) -> str:
        """The first thing the real API would refuse this request for, if any."""
        if not isinstance(body, dict):
            return "the request body is not a JSON object"
        required = ("model", "messages") if api == "openai" else ("model", "messages", "max_tokens")
        for field in required:
            if field not in body:
                return f"{field}: Field required"
        if api == "anthropic" and "anthropic-version" not in headers:
            return "anthropic-version: header is required"
        if api == "anthropic" and body.get("thinking") is not None:
            return _thinking_problem(body)
        return ""

    # -- responses --------------------------------------------------------------------

    def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, _dumps(doc), "application/json", headers or {})

    def _error(self, api: str, reply: Reply) -> None:
        status = reply.status
        message = reply.error_message or f"scripted error {status}"
        headers = dict(reply.headers)
        if reply.retry_after is not None:
            headers["retry-after"] = reply.retry_after
        if api == "anthropic":
            etype = reply.error_type or _ANTHROPIC_ERROR.get(status, "api_error")
            doc: dict[str, Any] = {"type": "error", "error": {"type": etype, "message": message}}
        else:
            etype = reply.error_type or (
                "server_error" if status >= 500 else "invalid_request_error"
            )
            doc = {
                "error": {
                    "message": message,
                    "type": etype,
                    "param": None,
                    "code": reply.error_code,
                }
            }
        self._json(status, doc, headers)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _stream(self, api: str, reply: Reply, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for i, event in enumerate([*events, b""]):
            if reply.drop_after == i:
                self.close_connection = True
                _shutdown(self.connection)  # mid-body: the client sees a broken stream
                return
            if reply.hang_after == i:
                self.server.owner._stopping.wait()
                self.close_connection = True
                return
            if reply.pause_after == i and reply.release is not None:
                self.wfile.flush()
                owner = self.server.owner
                while not (reply.release.wait(0.05) or owner._stopping.is_set()):
                    pass
            if reply.stream_error is not None and reply.stream_error_after == i:
                for error_event in _error_events(api, reply):
                    self._chunk(error_event)
                break
            if event:
                self._chunk(event)
        self.wfile.write(b"0\r\n\r\n")


# -- the wire formats ------------------------------------------------------------------


def _usage(reply: Reply) -> Usage:
    return reply.usage if reply.usage is not None else _DEFAULT_USAGE


def _stop(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end")


def _call_id(call: Call, prefix: str, n: int, i: int) -> str:
    return f"{prefix}_{n}_{i}" if call.id is None else call.id


def _openai_usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _openai_events(reply: Reply, model: str, n: int, usage_on: bool) -> list[bytes]:
    base: dict[str, Any] = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "system_fingerprint": "fp_agentcell",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        doc = {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage_on:
            doc["usage"] = None
        return b"data: " + _dumps(doc) + b"\n\n"

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in _pieces(reply.text, reply.chunk_size)]
    for i, call in enumerate(reply.tool_calls):
        first: dict[str, Any] = {"index": i, "type": "function"}
        call_id = _call_id(call, "call", n, i)
        if call_id:
            first["id"] = call_id
        first["function"] = {"name": call.name, "arguments": ""}
        events.append(chunk({"tool_calls": [first]}))
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in _pieces(call.arguments_text(), reply.chunk_size)
        ]
    events.append(chunk({}, _OPENAI_FINISH.get(_stop(reply), _stop(reply))))
    if usage_on:
        doc = {**base, "choices": [], "usage": _openai_usage(_usage(reply))}
        events.append(b"data: " + _dumps(doc) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def _openai_message(reply: Reply, model: str, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text or None,
        "refusal": None,
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(call, "call", n, i),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text()},
            }
            for i, call in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": _CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _OPENAI_FINISH.get(_stop(reply), _stop(reply)),
            }
        ],
        "usage": _openai_usage(_usage(reply)),
        "system_fingerprint": "fp_agentcell",
    }


def _anthropic_usage(u: Usage) -> dict[str, int]:
    # the wire's input_tokens excludes cache reads and writes; ours includes them
    uncached = max(0, u.input_tokens - u.cache_read_tokens - u.cache_write_tokens)
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
        "output_tokens": u.output_tokens,
    }


def _sse(kind: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _dumps({"type": kind, **doc}) + b"\n\n"


def _anthropic_events(reply: Reply, model: str, n: int) -> list[bytes]:
    usage = _anthropic_usage(_usage(reply))
    start: dict[str, Any] = {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events = [_sse("message_start", {"message": start})]
    ping = _sse("ping", {})
    index = 0
    for thought in reply.thinking:
        events += _thinking_events(thought, index, reply.chunk_size)
        if index == 0:
            events.append(ping)
        index += 1
    if reply.text:
        events.append(
            _sse(
                "content_block_start",
                {"index": index, "content_block": {"type": "text", "text": ""}},
            )
        )
        if index == 0:
            events.append(ping)
        events += [
            _sse(
                "content_block_delta",
                {"index": index, "delta": {"type": "text_delta", "text": piece}},
            )
            for piece in _pieces(reply.text, reply.chunk_size)
        ]
        events.append(_sse("content_block_stop", {"index": index}))
        index += 1
    for i, call in enumerate(reply.tool_calls):
        block = {"type": "tool_use", "id": _call_id(call, "toolu", n, i), "name": call.name}
        events.append(
            _sse("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
        )
        if index == 0:
            events.append(ping)
        pieces = ["", *_pieces(call.arguments_text(), reply.chunk_size)]
        events += [
            _sse(
                "content_block_delta",
                {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}},
            )
            for piece in pieces
        ]
        events.append(_sse("content_block_stop", {"index": index}))
        index += 1
    if index == 0:
        events.append(ping)
    stop = _ANTHROPIC_STOP.get(_stop(reply), _stop(reply))
    events.append(
        _sse(
            "message_delta",
            {
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(_sse("message_stop", {}))
    return events


def _thinking_events(thought: Thought, index: int, chunk_size: int) -> list[bytes]:
    """A thinking block as the API streams it: an empty start, thinking deltas, then the
    signature in one delta; a redacted block arrives whole in its start event."""
    if thought.data is not None:
        start = {"index": index, "content_block": thought.block()}
        return [_sse("content_block_start", start), _sse("content_block_stop", {"index": index})]
    empty = {"type": "thinking", "thinking": "", "signature": ""}
    events = [_sse("content_block_start", {"index": index, "content_block": empty})]
    events += [
        _sse(
            "content_block_delta",
            {"index": index, "delta": {"type": "thinking_delta", "thinking": piece}},
        )
        for piece in _pieces(thought.thinking, chunk_size)
    ]
    signature = {"type": "signature_delta", "signature": thought.signature}
    events.append(_sse("content_block_delta", {"index": index, "delta": signature}))
    events.append(_sse("content_block_stop", {"index": index}))
    return events


def _thinking_problem(body: dict[str, Any]) -> str:
    """What the real API refuses a request with thinking on for, if anything: a budget
    under 1024 or not under max_tokens, sampling parameters thinking forbids, and a
    tool-use turn being continued without its thinking block first."""
    thinking = body["thinking"]
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if budget >= body["max_tokens"]:
            return "`max_tokens` must be greater than `thinking.budget_tokens`"
    elif kind != "adaptive":
        return f"thinking.type: Input should be 'enabled', 'adaptive' or 'disabled', not {kind!r}"
    for name in ("temperature", "top_k"):
        if name in body and body[name] != 1:
            return f"`{name}` may only be set to 1 when thinking is enabled"
    assistants = [m for m in body["messages"] if m.get("role") == "assistant"]
    last = assistants[-1]["content"] if assistants else []
    uses_tools = isinstance(last, list) and any(b.get("type") == "tool_use" for b in last)
    if uses_tools and last[0].get("type") not in ("thinking", "redacted_thinking"):
        return (
            "messages: Expected `thinking` or `redacted_thinking`, but found "
            f"`{last[0].get('type')}`. When `thinking` is enabled, a final `assistant` "
            "message must start with a thinking block"
        )
    return ""


def _anthropic_message(reply: Reply, model: str, n: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [thought.block() for thought in reply.thinking]
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for i, call in enumerate(reply.tool_calls):
        try:
            arguments = json.loads(call.arguments_text())
        except ValueError:
            arguments = {}
        content.append(
            {
                "type": "tool_use",
                "id": _call_id(call, "toolu", n, i),
                "name": call.name,
                "input": arguments,
            }
        )
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _ANTHROPIC_STOP.get(_stop(reply), _stop(reply)),
        "stop_sequence": None,
        "usage": _anthropic_usage(_usage(reply)),
    }


def _error_events(api: str, reply: Reply) -> list[bytes]:
    etype, message = reply.stream_error or "overloaded_error", reply.stream_error_message
    if api == "anthropic":
        return [_sse("error", {"error": {"type": etype, "message": message}})]
    error = {"message": message, "type": etype, "param": None, "code": None}
    return [b"data: " + _dumps({"error": error}) + b"\n\n", b"data: [DONE]\n\n"]


def events_through_last_tool_name(reply: Reply, api: str) -> int:
    """How many stream events carry ``reply`` up to the last tool call's name (its
    arguments not yet): ``pause_after``/``drop_after`` at this holds or cuts the stream
    right after every call has been named."""
    if api == "openai":
        events = _openai_events(reply, "m", 1, usage_on=True)
    else:
        events = _anthropic_events(reply, "m", 1)
    named = [i for i, event in enumerate(events) if b'"name":' in event]
    assert named, "the reply has no tool calls"
    return named[-1] + 1
