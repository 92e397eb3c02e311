"""A fake Anthropic Messages API that honours prompt-caching breakpoints.

It answers ``POST /v1/messages`` (streamed or not) with one short text reply, and reports
the usage the real API would for the request's ``cache_control`` breakpoints: the request
is read in the API's order (tools, system, messages), block by block; the prefix up to a
marked block is cached once a request has sent it (if it holds ``min_cache_tokens`` or
more), and a later request whose prefix up to one of its own breakpoints is the same, byte
for byte, reads those tokens from the cache (``cache_read_input_tokens``); the rest up to
its last breakpoint is written (``cache_creation_input_tokens``), the tail is plain input.
Tokens are counted as one per four bytes of each block's JSON (the model's own tokenizer
is not needed to compare with caching and without).

Unlike the real API, a prefix is readable as soon as a request has written it (there, once
that response has begun), and entries never expire: a fan-out whose requests all start at
the same instant reads somewhat less from the real cache than from this one.

    with CachingAnthropicServer() as server:
        model = AnthropicModel(
            "claude-sonnet-4-5", http=HttpOptions(base_url=server.base_url, api_key="x")
        )
        ...
        server.usages  # each request's usage, in arrival order

Used by ``bench.cache_cost`` and by the tests (``tests/worker/models/test_prompt_cache.py``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Anthropic's smallest cacheable prompt for Sonnet and Opus 4.x (Haiku's is larger).
MIN_CACHE_TOKENS = 1024
REPLY_TEXT = "done."
OUTPUT_TOKENS = 20


def _tokens(data: bytes) -> int:
    return max(1, (len(data) + 3) // 4)


def _blocks(body: dict[str, Any]) -> list[tuple[bytes, bool]]:
    """Each block of the request in the API's order, as (canonical JSON without the
    marker, whether it carries a breakpoint)."""
    out: list[tuple[bytes, bool]] = []

    def add(kind: str, block: Any) -> None:
        marked = isinstance(block, dict) and "cache_control" in block
        if marked:
            block = {k: v for k, v in block.items() if k != "cache_control"}
        data = json.dumps([kind, block], sort_keys=True, separators=(",", ":")).encode()
        out.append((data, marked))

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    if isinstance(system, str):
        add("system", {"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add("system", block)
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content or []:
            add(f"{index}:{message.get('role')}", block)
    return out


class PromptCache:
    """The cache: prefixes (by hash) with their token counts; ``usage(body)`` for each
    request, in the order they are handled."""

    def __init__(self, min_tokens: int = MIN_CACHE_TOKENS) -> None:
        self.min_tokens = min_tokens
        self._cached: set[bytes] = set()
        self._lock = threading.Lock()

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        digest = hashlib.sha256()
        total = 0
        breakpoints: list[tuple[bytes, int]] = []  # (prefix hash, tokens up to it)
        for data, marked in _blocks(body):
            digest.update(data)
            total += _tokens(data)
            if marked:
                breakpoints.append((digest.digest(), total))
        with self._lock:
            read = max((n for h, n in breakpoints if h in self._cached), default=0)
            write = 0
            if breakpoints:
                last_hash, last = breakpoints[-1]
                if last >= self.min_tokens and last_hash not in self._cached:
                    write = last - read
                self._cached.update(h for h, n in breakpoints if n >= self.min_tokens)
        return {
            "input_tokens": total - read - write,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": OUTPUT_TOKENS,
        }


class CachingAnthropicServer:
    """The fake API on 127.0.0.1 (an ephemeral port), in a thread; a context manager."""

    def __init__(self, min_cache_tokens: int = MIN_CACHE_TOKENS) -> None:
        self.cache = PromptCache(min_cache_tokens)
        self.usages: list[dict[str, int]] = []
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/messages":
                    self._send(404, b'{"type":"error","error":{"type":"not_found_error"}}')
                    return
                usage = server.cache.usage(body)
                with server._lock:
                    server.bodies.append(body)
                    server.usages.append(usage)
                model = str(body.get("model", "claude"))
                if body.get("stream"):
                    self._send(200, _stream(model, usage), "text/event-stream")
                else:
                    self._send(200, json.dumps(_message(model, usage)).encode())

            def _send(self, status: int, data: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> CachingAnthropicServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def totals(self) -> dict[str, int]:
        """Every request's usage summed (the wire's names)."""
        keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        out = {key: sum(u[key] for u in self.usages) for key in keys}
        out["output_tokens"] = sum(u["output_tokens"] for u in self.usages)
        return out


def _message(model: str, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": REPLY_TEXT}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def _stream(model: str, usage: dict[str, int]) -> bytes:
    start = {**_message(model, {**usage, "output_tokens": 1}), "content": [], "stop_reason": None}
    events = [
        ("message_start", {"message": start}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": REPLY_TEXT}}),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        ("message_stop", {}),
    ]
    return b"".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind, **doc})}\n\n".encode()
        for kind, doc in events
    )
