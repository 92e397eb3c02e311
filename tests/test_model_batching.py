"""The parent relays a model answer's bytes in batches: what the upstream had ready
crosses as one ``ModelData`` frame, and nothing is held back waiting for more.

End to end through a real sub-agent process (a raw loopback server that writes a burst
of SSE events in one write, then holds the rest behind a gate), and ``relay_chunks``
alone over scripted sources (the bound, the backpressure point, cancellation)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.delegation._model_batch import relay_chunks
from agentcell.orchestrator.delegation._model_relay import ModelRelay
from agentcell.protocol import Frame, ModelData, RunStatus, TextDelta
from conftest import SpawnRecorder
from model_servers import Reply, _openai_events

TEXT = "a burst of many small deltas, then the rest of the answer after a pause"
#: Events of the first burst: the role chunk, then 24 two-character text deltas.
FIRST = 25


class BurstServer:
    """Answers each chat completion with one chunked SSE stream: its first ``FIRST``
    events in the same write as the head, then — once ``gate`` is set — the rest in one
    more write. Every connection is closed after its answer."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.events: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def __enter__(self) -> BurstServer:
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.gate.set()
        self._sock.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                body = _read_request(conn)
            except OSError:
                return
            if body is None:  # a GET: an empty answer
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                return
            usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
            self.events = _openai_events(Reply(text=TEXT, chunk_size=2), body["model"], 1, usage_on)
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            )
            conn.sendall(head + _chunked(self.events[:FIRST]))
            while not self.gate.wait(0.05):
                if self._stop.is_set():
                    return
            with contextlib.suppress(OSError):
                conn.sendall(_chunked(self.events[FIRST:]) + b"0\r\n\r\n")


def _chunked(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events)


def _read_request(conn: socket.socket) -> dict[str, Any] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            raise OSError("closed before the request's head")
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    if head.startswith(b"GET"):
        return None
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += conn.recv(65536)
    return dict(msgspec.json.decode(rest[:length]))


@pytest.fixture
def burst(monkeypatch: pytest.MonkeyPatch) -> Iterator[BurstServer]:
    with BurstServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-batching-test")
        yield server


def recorded_data(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The body bytes of every ``ModelData`` frame the parent's relay sends, in order."""
    sent: list[bytes] = []
    original = ModelRelay.__init__

    def recording(self: ModelRelay, *args: Any, **kwargs: Any) -> None:
        send, send_nowait = args[4], kwargs["send_nowait"]

        async def counted(frame: Frame) -> None:
            if isinstance(frame, ModelData):
                sent.append(frame.data)
            await send(frame)

        def counted_nowait(frame: Frame) -> None:
            if isinstance(frame, ModelData):
                sent.append(frame.data)
            send_nowait(frame)

        original(self, *args[:4], counted, **(kwargs | {"send_nowait": counted_nowait}))

    monkeypatch.setattr(ModelRelay, "__init__", recording)
    return sent


async def test_a_burst_crosses_as_one_frame_and_is_not_held_for_the_rest(
    spawned: SpawnRecorder,
    tmp_path: Path,
    burst: BurstServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = recorded_data(monkeypatch)
    worker = AgentDefinition(
        name="talker", description="talker", tools=[], model="openai:test", source="test"
    )
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0),
        workdir=tmp_path,
        agents=[worker],
        load_agent_files=False,
        record=False,
    )
    first_text = TEXT[: 2 * (FIRST - 1)]
    async with orch:
        events = orch.events()
        run = asyncio.create_task(orch.delegate("talker", "go"))
        seen = ""
        async with asyncio.timeout(60):
            async for item in events:
                event = getattr(item, "event", None)
                if isinstance(event, TextDelta):
                    seen += event.text
                    if seen == first_text:
                        break
        # The first burst reached the child while the server still held the rest ...
        assert not burst.gate.is_set()
        # ... as one frame (a read split by the kernel could make it two), not 25.
        frames_of_first = len(sent)
        assert 1 <= frames_of_first <= 2, [len(data) for data in sent]
        burst.gate.set()
        result = await asyncio.wait_for(run, 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == TEXT
    # The same bytes, in order, in far fewer frames than the server's events.
    assert b"".join(sent) == b"".join(burst.events)
    assert len(sent) - frames_of_first <= 2, [len(data) for data in sent]
    assert len(burst.events) > 30


class Recorder:
    """``relay_chunks``'s two ways out, recorded in order."""

    def __init__(self) -> None:
        self.sends: list[tuple[str, bytes]] = []

    async def send(self, data: bytes) -> None:
        self.sends.append(("send", data))

    def send_nowait(self, data: bytes) -> None:
        self.sends.append(("nowait", data))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.sends]

    def joined(self) -> bytes:
        return b"".join(data for _, data in self.sends)


async def test_a_lone_chunk_goes_on_before_the_source_has_more() -> None:
    more = asyncio.Event()
    out = Recorder()

    async def source() -> AsyncIterator[bytes]:
        yield b"alone"
        await more.wait()  # the next chunk comes only once the first one was passed on
        yield b"next"

    def send_nowait(data: bytes) -> None:
        out.send_nowait(data)
        more.set()

    await asyncio.wait_for(relay_chunks(source(), out.send, send_nowait), 10)
    assert out.sends == [("nowait", b"alone"), ("send", b"next")]


async def test_ready_chunks_are_joined_up_to_the_bound() -> None:
    async def source() -> AsyncIterator[bytes]:
        for i in range(100):
            yield bytes([i]) * 1024  # all ready: nothing awaited between them

    out = Recorder()
    await relay_chunks(source(), out.send, out.send_nowait, limit=16 * 1024)
    assert out.joined() == b"".join(bytes([i]) * 1024 for i in range(100))
    # Six full batches at the bound (each waiting for the peer), then the last 4 KiB.
    assert [len(data) for _, data in out.sends] == [16 * 1024] * 6 + [4 * 1024]
    assert set(out.kinds()) == {"send"}


async def test_the_peer_is_waited_for_after_every_wait_of_the_source() -> None:
    async def source() -> AsyncIterator[bytes]:
        for i in range(5):
            await asyncio.sleep(0)  # each chunk comes after a wait
            yield b"%d" % i

    out = Recorder()
    await relay_chunks(source(), out.send, out.send_nowait)
    # Every chunk after a wait is sent with the backpressure wait: a child that stops
    # reading stops the relay's reads upstream.
    assert out.sends == [("send", b"%d" % i) for i in range(5)]


async def test_a_cancel_reaches_the_read_the_source_is_waiting_on() -> None:
    reading = asyncio.Event()
    ended: list[BaseException] = []

    async def source() -> AsyncIterator[bytes]:
        yield b"first"
        try:
            reading.set()
            await asyncio.Event().wait()  # an upstream that never sends more
        except BaseException as exc:
            ended.append(exc)
            raise
        yield b"never"

    out = Recorder()
    task = asyncio.create_task(relay_chunks(source(), out.send, out.send_nowait))
    await asyncio.wait_for(reading.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [type(exc) for exc in ended] == [asyncio.CancelledError]
    assert out.sends == [("nowait", b"first")]
