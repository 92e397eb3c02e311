"""A load model server: OpenAI-compatible Chat Completions on 127.0.0.1, in its own process.

    python -m bench.load_server [--port 0] [--latency-ms 100] [--tps 0]

It prints ``READY <port>`` once it listens. Replies follow ``bench.script`` (decided by the
request alone), start after a latency (default 100 ms) and then stream their deltas at a
rate in tokens per second (0: all at once). Both ``stream: true`` (SSE, with
``stream_options.include_usage``) and plain JSON answers are spoken, over HTTP/1.1
keep-alive, as the openai SDK, httpx and agentcell's client send them.

It must never be the bottleneck, so it is small and hand-written: one asyncio
``Protocol`` per connection, no framework, msgspec for JSON, uvloop when installed, timers
instead of a task per request. It runs in a separate process and reports its own CPU time.

Control routes (JSON):

With ``--tls-cert``/``--tls-key`` it serves HTTPS on a second port as well (``READY <port>
<tls_port>``). A run whose spec sets ``rl_k``/``rl_rps`` is limited like a provider: past
K requests in flight or R per second, 429 with ``Retry-After`` (counted as ``rejected``).

* ``GET /bench/stats``: CPU seconds, requests, peak concurrency since start.
* ``GET /bench/run/<run>``: one run's requests — arrival and completion times (this
  process's monotonic clock, seconds), who sent it (``main`` or the sub-agent's index),
  its turn, its body's size in bytes — plus the run's peak requests in flight and the
  server CPU it cost.
* ``GET /bench/wait/<run>/<count>``: answers once ``count`` sub-agents of the run have
  sent their first request (or after 30 s), so a benchmark can look at them while all
  of them are alive.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from bench.script import Reply, ScriptError, mail_of, respond

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode
_CREATED = 1_700_000_000
_TICK_S = 0.01  # paced streams send what is due every tick, not one timer per token

_OK_SSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


class RunLog:
    """What the server saw of one run (requests tied together by the run id)."""

    __slots__ = (
        "arrivals",
        "cpu_first",
        "cpu_last",
        "first_seen",
        "bucket",
        "bucket_at",
        "held",
        "in_flight",
        "peak",
        "rejected",
        "released",
        "rows",
    )

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []  # [arrival_s, done_s, role, turn, stream, bytes]
        self.in_flight = 0
        self.peak = 0
        self.first_seen: set[str] = set()  # sub-agents that sent a request
        self.arrivals: list[asyncio.Future[None]] = []  # waiters on first_seen
        self.held: list[Callable[[], object]] | None = None  # first replies on hold
        self.released = False  # the hold is over: later first replies go out at once
        self.cpu_first = time.process_time()
        self.cpu_last = self.cpu_first
        self.rejected = 0  # requests answered 429 (the run's own rate limits)
        self.bucket = -1.0  # requests the rate allows now (-1: full, not yet used)
        self.bucket_at = 0.0

    def doc(self) -> dict[str, Any]:
        return {
            "requests": self.rows,
            "peak_in_flight": self.peak,
            "server_cpu_s": self.cpu_last - self.cpu_first,
            "rejected": self.rejected,
        }

    def refuse(self, k: int, rps: float, now: float, latency_s: float) -> float | None:
        """Seconds to tell the client to wait (Retry-After) if this request is over the
        run's limits, else None (and the request is counted against the rate). The rate
        is a token bucket of ``rps`` requests, refilled at ``rps`` a second."""
        if k and self.in_flight >= k:
            return max(latency_s, 0.05)  # a slot frees when a reply ends
        if rps > 0:
            if self.bucket < 0:
                self.bucket = rps
            else:
                self.bucket = min(rps, self.bucket + (now - self.bucket_at) * rps)
            self.bucket_at = now
            if self.bucket < 1.0:
                return (1.0 - self.bucket) / rps
            self.bucket -= 1.0
        return None


class Server:
    def __init__(self, latency_ms: float, tps: float) -> None:
        self.latency_s = latency_ms / 1000
        self.tps = tps
        self.runs: dict[str, RunLog] = {}
        self.requests = 0
        self.in_flight = 0
        self.peak = 0
        self.started = time.monotonic()

    # -- chat completions ------------------------------------------------------------------
    def chat(self, conn: Connection, body: bytes) -> None:
        arrival = time.monotonic()
        self.requests += 1
        try:
            doc = _decode(body)
            reply = respond(doc)
        except (msgspec.DecodeError, ScriptError, TypeError, AttributeError) as exc:
            conn.send_json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return
        run = self.runs.get(reply.spec.run)
        if run is None:
            run = self.runs[reply.spec.run] = RunLog()
        spec = reply.spec
        if spec.rl_k or spec.rl_rps:
            latency = spec.lat / 1000 if spec.lat >= 0 else self.latency_s
            wait = run.refuse(spec.rl_k, spec.rl_rps, arrival, latency)
            if wait is not None:
                run.rejected += 1
                conn.send_json(
                    429,
                    {"error": {"message": "rate limited", "type": "rate_limit_exceeded"}},
                    {"retry-after": f"{wait:.3f}"},
                )
                return
        row = [arrival, 0.0, reply.role, reply.turn, bool(doc.get("stream")), len(body)]
        if spec.msg:  # the messages workload: a message in it? when did its tool end?
            row += list(mail_of(doc))
        run.rows.append(row)
        run.in_flight += 1
        run.peak = max(run.peak, run.in_flight)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        first = reply.role != "main" and reply.role not in run.first_seen
        if first:
            run.first_seen.add(reply.role)
            for waiter in run.arrivals:
                if not waiter.done():
                    waiter.set_result(None)

        def done() -> None:
            row[1] = time.monotonic()
            run.in_flight -= 1
            run.cpu_last = time.process_time()
            self.in_flight -= 1

        latency = spec.lat / 1000 if spec.lat >= 0 else self.latency_s
        tps = spec.tps if spec.tps >= 0 else self.tps
        model = str(doc.get("model") or "bench")
        loop = asyncio.get_running_loop()
        if not doc.get("stream"):
            answer = _message(reply, model)
            delay = latency + (len(reply.deltas) / tps if tps > 0 else 0.0)
            start = functools.partial(loop.call_later, delay, conn.finish_json, answer, done)
        else:
            usage = bool((doc.get("stream_options") or {}).get("include_usage"))
            events = _events(reply, model, usage)
            start = functools.partial(loop.call_later, latency, conn.stream, events, tps, done)
        if first and spec.hold:
            self._hold(run, spec.n, start)
        elif spec.msg and reply.role == "main" and reply.turn == spec.n:
            # Its messages go out while every sub-agent's 200 ms tool runs: once all have
            # asked for their first reply (the tool call), that reply's latency, 50 ms more.
            asyncio.ensure_future(self._after_all_asked(run, spec.n, 0.05, start))  # noqa: RUF006
        else:
            start()

    async def _after_all_asked(
        self, run: RunLog, n: int, delay: float, start: Callable[[], object]
    ) -> None:
        await _until_seen(run, n)
        await asyncio.sleep(delay)
        start()

    def _hold(self, run: RunLog, n: int, start: Callable[[], object]) -> None:
        """Keep first replies until all n sub-agents have asked (30 s at most), so that
        all of them are alive at once: the memory workload samples them then."""
        if run.held is None:  # the first one: the hold starts (and ends in 30 s at most)
            run.held = []
            asyncio.get_running_loop().call_later(30, self._release, run)
        elif run.released:
            start()
            return
        run.held.append(start)
        if len(run.first_seen) >= n:
            self._release(run)

    @staticmethod
    def _release(run: RunLog) -> None:
        held, run.held, run.released = run.held or [], [], True
        for start in held:
            start()

    # -- control ---------------------------------------------------------------------------
    def control(self, conn: Connection, path: str) -> None:
        parts = path.strip("/").split("/")
        if parts[:2] == ["bench", "stats"]:
            conn.send_json(
                200,
                {
                    "cpu_s": time.process_time(),
                    "requests": self.requests,
                    "peak_in_flight": self.peak,
                    "uptime_s": time.monotonic() - self.started,
                    "loop": type(asyncio.get_running_loop()).__module__,
                },
            )
        elif parts[:2] == ["bench", "run"] and len(parts) == 3:
            run = self.runs.get(parts[2])
            conn.send_json(200, run.doc() if run else {"requests": [], "peak_in_flight": 0})
        elif parts[:2] == ["bench", "wait"] and len(parts) == 4:
            asyncio.ensure_future(self._wait(conn, parts[2], int(parts[3])))  # noqa: RUF006
        else:
            conn.send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    async def _wait(self, conn: Connection, run_id: str, count: int) -> None:
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = RunLog()
        await _until_seen(run, count)
        conn.send_json(200, {"seen": len(run.first_seen), "at": time.monotonic()})


async def _until_seen(run: RunLog, count: int, limit_s: float = 30) -> None:
    """Until ``count`` sub-agents of ``run`` have sent a request (``limit_s`` at most)."""
    deadline = time.monotonic() + limit_s
    while len(run.first_seen) < count and time.monotonic() < deadline:
        waiter = asyncio.get_running_loop().create_future()
        run.arrivals.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, deadline - time.monotonic())
        run.arrivals.remove(waiter)


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: requests are read and answered one at a time."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a response is in progress: later bytes wait in the buffer
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is no subclass)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # small SSE writes must not wait for delayed ACKs
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next_request()

    def _next_request(self) -> None:
        buf = self.buffer
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        method, path, _ = (head[0].split(" ") + ["", ""])[:3]
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body, consumed = _dechunk(buf, start)
            if body is None:
                return  # not all here yet
        else:
            length = int(headers.get("content-length") or 0)
            if len(buf) < start + length:
                return
            body, consumed = bytes(buf[start : start + length]), start + length
        del buf[:consumed]
        self.busy = True
        self.close_after = headers.get("connection", "").lower() == "close"
        path = path.split("?", 1)[0]
        if method == "POST" and path.endswith("/chat/completions"):
            self.server.chat(self, body)
        elif method == "GET" and path.startswith("/bench/"):
            self.server.control(self, path)
        else:
            self.send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def _done(self) -> None:
        self.busy = False
        if self.close_after and self.transport is not None:
            self.transport.close()
        elif self.buffer:
            self._next_request()

    # -- answers ---------------------------------------------------------------------------
    def send_json(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        body = _encode(doc)
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n"
            f"content-type: application/json\r\n{extra}"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        if self.transport is not None:
            self.transport.write(head + body)
        self._done()

    def finish_json(self, doc: dict[str, Any], done: Any) -> None:
        done()
        self.send_json(200, doc)

    def stream(self, events: list[bytes], tps: float, done: Any) -> None:
        if self.transport is None:
            done()
            self._done()
            return
        if tps <= 0:
            body = b"".join(events)
            self.transport.write(_OK_SSE + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            done()
            self._done()
            return
        self.transport.write(_OK_SSE)
        _Pacer(self, events, tps, done).tick()


class _Pacer:
    """Sends a stream's events at ``tps`` per second, in batches every tick."""

    def __init__(self, conn: Connection, events: list[bytes], tps: float, done: Any) -> None:
        self.conn, self.events, self.tps, self.done = conn, events, tps, done
        self.sent = 0
        self.t0 = time.monotonic()

    def tick(self) -> None:
        transport = self.conn.transport
        due = len(self.events)
        if transport is not None:
            due = min(due, 1 + int((time.monotonic() - self.t0) * self.tps))
            if due > self.sent:
                body = b"".join(self.events[self.sent : due])
                transport.write(b"%x\r\n%s\r\n" % (len(body), body))
                self.sent = due
        if self.sent < len(self.events) and transport is not None:
            asyncio.get_running_loop().call_later(_TICK_S, self.tick)
            return
        if transport is not None:
            transport.write(b"0\r\n\r\n")
        self.done()
        self.conn._done()


def _dechunk(buf: bytearray, start: int) -> tuple[bytes | None, int]:
    body = bytearray()
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None, 0
        size = int(bytes(buf[pos:eol]).split(b";")[0] or b"0", 16)
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n", pos)  # no trailers are sent by the clients we serve
            return (bytes(body), end + 2) if end >= 0 else (None, 0)
        if len(buf) < pos + size + 2:
            return None, 0
        body += buf[pos : pos + size]
        pos += size + 2


# -- the wire format ---------------------------------------------------------------------


def _usage(reply: Reply) -> dict[str, Any]:
    completion = max(1, len(reply.deltas) + 8 * len(reply.calls))
    return {"prompt_tokens": 100, "completion_tokens": completion, "total_tokens": 100 + completion}


def _events(reply: Reply, model: str, usage_on: bool) -> list[bytes]:
    """The SSE events of one streamed answer: one per text delta and per tool call."""
    head = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":%d,'
        b'"model":%s,"choices":[{"index":0,"delta":' % (_CREATED, _encode(model))
    )
    tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
    events = [head + b'{"role":"assistant","content":""}' + tail]
    events += [head + b'{"content":%s}' % _encode(d) + tail for d in reply.deltas]
    for index, (call_id, name, arguments) in enumerate(reply.calls):
        delta = {
            "tool_calls": [
                {
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ]
        }
        events.append(head + _encode(delta) + tail)
    finish = b'"tool_calls"' if reply.calls else b'"stop"'
    events.append(head + b'{},"logprobs":null,"finish_reason":%s}]}\n\n' % finish)
    if usage_on:
        doc = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": _CREATED,
            "model": model,
            "choices": [],
            "usage": _usage(reply),
        }
        events.append(b"data: " + _encode(doc) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def _message(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.deltas) or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in reply.calls
        ]
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": _CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.calls else "stop",
            }
        ],
        "usage": _usage(reply),
    }


# -- process entry point -----------------------------------------------------------------


async def serve(
    host: str, port: int, latency_ms: float, tps: float, tls: tuple[str, str] | None = None
) -> None:
    """Serve plain HTTP on ``port``, and with ``tls`` (cert file, key file) HTTPS on a
    second port too: the same script and records, behind a TLS handshake."""
    server = Server(latency_ms, tps)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Connection(server), host, port, backlog=4096)
    listeners = [listener]
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
        listeners.append(
            await loop.create_server(lambda: Connection(server), host, 0, backlog=4096, ssl=context)
        )
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    ports = " ".join(str(lis.sockets[0].getsockname()[1]) for lis in listeners)
    print(f"READY {ports}", flush=True)
    try:
        await stop
    finally:
        for lis in listeners:
            lis.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="bench load model server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--tps", type=float, default=0.0, help="tokens/s; 0: all at once")
    parser.add_argument("--tls-cert", help="also serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="the certificate's private key (PEM)")
    args = parser.parse_args(argv)
    tls = (args.tls_cert, args.tls_key) if args.tls_cert and args.tls_key else None
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(serve(args.host, args.port, args.latency_ms, args.tps, tls))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
