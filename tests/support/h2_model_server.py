"""An OpenAI-style streaming endpoint that speaks HTTP/2 only (TLS, ALPN ``h2``), on
127.0.0.1, for the relay's HTTP/2 test.

Built on the ``h2`` protocol library over an asyncio TLS server in a thread of its own.
Every connection is counted, with the protocol TLS negotiated and the streams it carried,
so a test sees whether the parent multiplexes requests or opens a connection per request.
A client that does not offer ``h2`` is refused in the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trustme
from agentcell.worker.models.transports import _client
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, RequestReceived, StreamEnded
from model_servers import Reply, _openai_events

S = TypeVar("S", bound="H2ModelServer")
#: What may take a connection over in place of an answer (``H2ModelServer._answer``).
Takeover = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]] | None


@contextlib.contextmanager
def serving_openai(
    server: S, key: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[S]:
    """``server``, started, as the ``openai`` provider (under ``key``) of every
    orchestrator the test makes, its CA trusted (a file in ``folder``). The parent loads
    its CA bundle once per process: it loads it again with this CA, and once more after,
    so no later test trusts the test CA."""
    with server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", key)
        monkeypatch.setenv("SSL_CERT_FILE", server.ca_file(str(folder)))
        _client._shared_ssl_context.cache_clear()
        try:
            yield server
        finally:
            _client._shared_ssl_context.cache_clear()


@dataclasses.dataclass
class Connection:
    """What one client connection did: its ALPN protocol and the requests it carried."""

    protocol: str | None
    streams: int = 0


class H2ModelServer:
    """``with H2ModelServer() as server:`` serves ``/v1/chat/completions`` over HTTP/2,
    recording each request's headers (as a dict and as the list received), its body and
    the body's raw bytes."""

    def __init__(self, text: str = "over h2") -> None:
        self.text = text
        self.ca = trustme.CA()
        self.connections: list[Connection] = []
        self.bodies: list[dict[str, Any]] = []
        self.raw_bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.header_lists: list[list[tuple[str, str]]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._lock = threading.Lock()

    # -- life ------------------------------------------------------------------------

    def __enter__(self) -> H2ModelServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> asyncio.Server:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(context)
        context.set_alpn_protocols(["h2"])
        return await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=context)

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"https://127.0.0.1:{port}/v1"

    def ca_file(self, folder: str) -> str:
        """The test CA as a PEM file in ``folder``, for SSL_CERT_FILE."""
        path = f"{folder}/h2-ca.pem"
        self.ca.cert_pem.write_to_path(path)
        return path

    # -- one connection --------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tls = writer.get_extra_info("ssl_object")
        record = Connection(tls.selected_alpn_protocol() if tls else None)
        with self._lock:
            self.connections.append(record)
        h2 = H2Connection(H2Configuration(client_side=False, header_encoding="utf-8"))
        h2.initiate_connection()
        bodies: dict[int, bytearray] = {}
        try:
            while True:
                writer.write(h2.data_to_send())
                await writer.drain()
                data = await reader.read(65536)
                if not data:
                    return
                for event in h2.receive_data(data):
                    if isinstance(event, ConnectionTerminated):
                        return
                    request = self._take(h2, event, bodies, record)
                    if request is None:
                        continue
                    takeover = self._answer(h2, event.stream_id, *request)
                    if takeover is not None:  # the connection is its now, then done
                        writer.write(h2.data_to_send())
                        await takeover(reader, writer)
                        return
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            writer.close()

    def _take(
        self, h2: H2Connection, event: Any, bodies: dict[int, bytearray], record: Connection
    ) -> tuple[dict[str, Any], int] | None:
        """Records one event; once a request has all come, its body and its number."""
        if isinstance(event, RequestReceived):
            bodies[event.stream_id] = bytearray()
            with self._lock:
                self.header_lists.append([(str(k), str(v)) for k, v in event.headers])
                self.headers.append(dict(event.headers))
        elif isinstance(event, DataReceived):
            bodies[event.stream_id] += event.data
            h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, StreamEnded):
            raw = bytes(bodies.pop(event.stream_id))
            body = json.loads(raw)
            with self._lock:
                self.raw_bodies.append(raw)
                self.bodies.append(body)
                record.streams += 1
                return body, len(self.bodies)
        return None

    def _answer(self, h2: H2Connection, stream: int, body: dict[str, Any], n: int) -> Takeover:
        """Answers the ``n``-th request (``body``, on ``stream``) with ``_reply``'s
        stream. A subclass may return, in place of an answer, what takes the connection
        over (what is queued on it written first)."""
        events = _openai_events(self._reply(body), str(body["model"]), n, True)
        h2.send_headers(stream, [(":status", "200"), ("content-type", "text/event-stream")])
        data = b"".join(events)  # (small answers: within the first flow window)
        for at in range(0, len(data), 16_000):
            end = at + 16_000 >= len(data)
            h2.send_data(stream, data[at : at + 16_000], end_stream=end)
        return None

    def _reply(self, body: dict[str, Any]) -> Reply:
        return Reply(text=self.text)
