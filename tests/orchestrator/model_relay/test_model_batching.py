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
from agentcell.orchestrator.model_relay._batch import relay_chunks
from agentcell.orchestrator.model_relay._relay import ModelRelay
from agentcell.protocol import (
    Frame,
    ModelCall,
    ModelData,
    ModelEnd,
    ModelHead,
    RunStatus,
    TextDelta,
)
from agentcell.worker.models.transports._base import Retry
from agentcell.worker.models.transports._parent import LinkTransport
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
        self.whole = False  # the whole answer in one write, with the head
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
        with contextlib.suppress(OSError):  # wakes the accept (close alone does not)
            self._sock.shutdown(socket.SHUT_RDWR)
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
            if self.whole:
                conn.sendall(head + _chunked(self.events) + b"0\r\n\r\n")
                return
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


def recorded_frames(monkeypatch: pytest.MonkeyPatch) -> list[Frame]:
    """Every frame of a model answer the parent's relay sends, in order."""
    sent: list[Frame] = []
    original = ModelRelay.__init__

    def recording(self: ModelRelay, *args: Any, **kwargs: Any) -> None:
        send = args[4]

        async def counted(frame: Frame) -> None:
            if isinstance(frame, ModelHead | ModelData | ModelEnd):
                sent.append(frame)
            await send(frame)

        original(self, *args[:4], counted, **kwargs)

    monkeypatch.setattr(ModelRelay, "__init__", recording)
    return sent


def body_of(frames: list[Frame]) -> list[bytes]:
    """The body bytes of the frames that carry some."""
    return [f.data for f in frames if isinstance(f, ModelHead | ModelData) and f.data]


def talker(tmp_path: Path) -> Orchestrator:
    worker = AgentDefinition(
        name="talker", description="talker", tools=[], model="openai:test", source="test"
    )
    return Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0),
        workdir=tmp_path,
        agents=[worker],
        load_agent_files=False,
        record=False,
    )


async def test_a_burst_crosses_as_one_frame_and_is_not_held_for_the_rest(
    spawned: SpawnRecorder,
    tmp_path: Path,
    burst: BurstServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frames = recorded_frames(monkeypatch)
    orch = talker(tmp_path)
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
        # ... as one frame, with the head (a read split by the kernel could make it two),
        # not 26 (a head, then an event each).
        sent = body_of(frames)
        frames_of_first = len(sent)
        assert 1 <= frames_of_first <= 2, [len(data) for data in sent]
        burst.gate.set()
        result = await asyncio.wait_for(run, 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == TEXT
    # The same bytes, in order, in far fewer frames than the server's events (the rest
    # in one more, with the end).
    sent = body_of(frames)
    assert b"".join(sent) == b"".join(burst.events)
    assert len(sent) - frames_of_first <= 2, [len(data) for data in sent]
    assert len(burst.events) > 30


async def test_a_short_answer_read_in_one_go_is_one_frame(
    spawned: SpawnRecorder,
    tmp_path: Path,
    burst: BurstServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    burst.whole = True
    frames = recorded_frames(monkeypatch)
    async with talker(tmp_path) as orch:
        result = await asyncio.wait_for(orch.delegate("talker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == TEXT
    # Head, body and end in one frame (not a head, 40 events and an end).
    (frame,) = frames
    assert isinstance(frame, ModelHead) and frame.status == 200
    assert frame.data == b"".join(burst.events)
    assert frame.end is not None and not frame.end.error_kind


async def network() -> None:
    """A wait on a future, resolved in the next loop round (what a socket read does)."""
    future = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.set_result, None)
    await future


async def loop_turns(count: int) -> None:
    """Let the event loop run ``count`` rounds (deterministic: no clock involved)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_lone_chunk_goes_on_before_the_source_has_more() -> None:
    more = asyncio.Event()
    sent: list[bytes] = []

    async def source() -> AsyncIterator[bytes]:
        yield b"alone"
        await more.wait()  # the next chunk comes only once the first one was passed on
        yield b"last"

    async def send(data: bytes) -> None:
        sent.append(data)
        more.set()

    rest = await asyncio.wait_for(relay_chunks(source(), send), 10)
    assert (sent, rest) == ([b"alone"], b"last")  # the last bytes go with the end


async def test_ready_chunks_are_joined_up_to_the_bound() -> None:
    async def source() -> AsyncIterator[bytes]:
        for i in range(100):
            yield bytes([i]) * 1024  # all ready: nothing awaited between them

    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    rest = await relay_chunks(source(), send, limit=16 * 1024)
    assert b"".join(sent) + rest == b"".join(bytes([i]) * 1024 for i in range(100))
    # Six full batches at the bound, then the last 4 KiB with the end.
    assert [len(data) for data in sent] == [16 * 1024] * 6 and len(rest) == 4 * 1024


async def test_no_read_starts_upstream_while_the_childs_pipe_is_full() -> None:
    reads: list[int] = []
    pipe_free = asyncio.Event()
    sent: list[bytes] = []

    async def source() -> AsyncIterator[bytes]:
        for i in range(3):
            reads.append(i)
            await network()  # each chunk comes after a wait for the network
            yield b"%d" % i

    async def send(data: bytes) -> None:
        sent.append(data)
        if data == b"0":
            await pipe_free.wait()  # the child stopped reading after the first chunk

    task = asyncio.create_task(relay_chunks(source(), send))
    await loop_turns(20)
    # The read already open when b"0" went could finish; no other one started.
    assert (reads, sent, task.done()) == ([0, 1], [b"", b"0"], False)
    pipe_free.set()
    assert await asyncio.wait_for(task, 10) == b"2"
    assert (reads, sent) == ([0, 1, 2], [b"", b"0", b"1"])


async def test_a_checkpoint_of_the_source_is_not_a_wait() -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"a"
        await asyncio.sleep(0)  # what anyio's lock takes on the way out: one loop round
        yield b"b"

    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    assert (await relay_chunks(source(), send), sent) == (b"ab", [])


async def test_a_cancel_reaches_the_read_the_source_is_waiting_on() -> None:
    reading = asyncio.Event()
    ended: list[BaseException] = []
    sent: list[bytes] = []

    async def source() -> AsyncIterator[bytes]:
        yield b"first"
        try:
            reading.set()
            await asyncio.Event().wait()  # an upstream that never sends more
        except BaseException as exc:
            ended.append(exc)
            raise
        yield b"never"

    async def send(data: bytes) -> None:
        sent.append(data)

    task = asyncio.create_task(relay_chunks(source(), send))
    await asyncio.wait_for(reading.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [type(exc) for exc in ended] == [asyncio.CancelledError]
    assert sent == [b"first"]


async def test_a_source_that_fails_has_its_ready_bytes_sent_first() -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"shown"
        raise ConnectionResetError("upstream dropped")

    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    with pytest.raises(ConnectionResetError):
        await relay_chunks(source(), send)
    assert sent == [b"shown"]  # before the error's end, as the child would have seen it


class FakeLink:
    """A child's link as ``LinkTransport`` needs it: frames sent are recorded."""

    def __init__(self) -> None:
        self.sent: list[Frame] = []
        self.channel = self
        self.model_link: Any = None

    async def send(self, frame: Frame) -> None:
        self.sent.append(frame)

    def send_nowait(self, frame: Frame) -> None:
        self.sent.append(frame)


async def body(response: Any) -> bytes:
    return b"".join([chunk async for chunk in response.chunks()])


@pytest.mark.parametrize(
    "frames",
    [
        [ModelHead(id=1, status=200, data=b"all", end=ModelEnd(id=1))],
        [
            ModelHead(id=1, status=200, data=b"a"),
            ModelData(id=1, data=b"l"),
            ModelData(id=1, data=b"l", end=ModelEnd(id=1)),
        ],
        [ModelHead(id=1, status=200), ModelData(id=1, data=b"all"), ModelEnd(id=1)],
    ],
    ids=["one frame", "end on the last bytes", "a frame each"],
)
async def test_the_child_reads_an_answer_however_its_frames_are_joined(
    frames: list[Frame],
) -> None:
    link = FakeLink()
    transport = LinkTransport(link)
    opening = asyncio.create_task(transport.open(b"{}"))
    await loop_turns(2)
    for frame in frames:
        transport.dispatch(frame)  # type: ignore[arg-type]
    response = await asyncio.wait_for(opening, 10)
    assert response.status == 200 and await asyncio.wait_for(body(response), 10) == b"all"
    await response.aclose()
    # The call ended with its frames: closing it sends no ModelCancel.
    assert [type(frame) for frame in link.sent] == [ModelCall]


async def test_an_error_end_on_the_head_fails_the_read_not_the_open() -> None:
    transport = LinkTransport(FakeLink())
    opening = asyncio.create_task(transport.open(b"{}"))
    await loop_turns(2)
    end = ModelEnd(id=1, error_kind="connection", message="dropped", retry=True)
    transport.dispatch(ModelHead(id=1, status=200, data=b"data: {}\n\n", end=end))
    response = await asyncio.wait_for(opening, 10)
    with pytest.raises(Retry, match="dropped"):
        await body(response)
