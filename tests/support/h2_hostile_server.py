"""``H2ModelServer`` with a script: what it answers each request (``responder``) and, for
the requests ``attacks`` names, a hostile answer written frame by frame past h2's own
state machine:

- ``continuation flood``: a HEADERS frame without END_HEADERS, then CONTINUATION frames
  of 16,000 bytes, one after another until the client stops reading (at most
  ``FLOOD_FRAMES``: 320 MB); ``flood_frames`` counts those written;
- ``hpack bomb``: a 4,000-byte header put in the dynamic table, then referenced 12,000
  times by one byte each (48 MB once inflated) in one HEADERS frame;
- ``header list``: 200 headers of 1,000 bytes (three times h2's 64 KiB list limit), in
  HEADERS and CONTINUATION frames;
- ``broken framing``: a valid head and an SSE comment, then, once the client has read
  them (its PING ACK), a CONTINUATION frame where none may come: in the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Any

from h2.connection import H2Connection
from h2.events import PingAckReceived
from h2_model_server import H2ModelServer, Takeover
from hyperframe.frame import ContinuationFrame, HeadersFrame
from model_servers import Reply

FLOOD_FRAMES = 20_000
ATTACKS = ("continuation flood", "hpack bomb", "header list", "broken framing")


class HostileH2Server(H2ModelServer):
    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        super().__init__()
        self.responder = responder or (lambda body: Reply(text=self.text))
        self.attacks: list[str] = []
        self.attacked: list[str] = []
        self.flood_frames = 0

    def _answer(self, h2: H2Connection, stream: int, body: dict[str, Any], n: int) -> Takeover:
        """The next attack of ``attacks``, if any, takes the connection over; else the
        ``responder``'s answer."""
        with self._lock:
            attack = self.attacks.pop(0) if self.attacks else ""
            if attack:
                self.attacked.append(attack)
        if not attack:
            return super()._answer(h2, stream, body, n)
        return functools.partial(self._attack, attack, h2, stream)

    def _reply(self, body: dict[str, Any]) -> Reply:
        return self.responder(body)

    async def _attack(
        self,
        attack: str,
        h2: H2Connection,
        stream: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if attack == "continuation flood":
            writer.write(_headers(stream, h2.encoder.encode([(":status", "200")]), end=False))
            for _ in range(FLOOD_FRAMES):
                writer.write(_continuation(stream, bytes(16_000), end=False))
                self.flood_frames += 1
                await writer.drain()  # raises once the client has closed
            return
        if attack == "hpack bomb":
            block = h2.encoder.encode([(":status", "200"), ("x-bomb", "A" * 4000)])
            writer.write(_headers(stream, block + b"\xbe" * 12_000, end=True))  # index 62
        elif attack == "header list":
            many = [(":status", "200")] + [(f"x-h{i}", "v" * 1000) for i in range(200)]
            block = h2.encoder.encode(many)
            pieces = [block[i : i + 16_000] for i in range(0, len(block), 16_000)]
            writer.write(_headers(stream, pieces[0], end=len(pieces) == 1))
            for i, piece in enumerate(pieces[1:], 2):
                writer.write(_continuation(stream, piece, end=i == len(pieces)))
        else:  # broken framing, once the client is past the head (its PING ACK says so)
            h2.send_headers(stream, [(":status", "200"), ("content-type", "text/event-stream")])
            h2.send_data(stream, b": nothing for a child to show\n\n")
            h2.ping(b"past-hd!")
            writer.write(h2.data_to_send())
            await writer.drain()
            while not any(
                isinstance(e, PingAckReceived) for e in h2.receive_data(await _read(reader))
            ):
                pass
            writer.write(_continuation(stream, b"\x00", end=True))
        await writer.drain()
        with contextlib.suppress(TimeoutError):  # until the client hangs up (bounded)
            async with asyncio.timeout(60):
                while await reader.read(65536):
                    pass


async def _read(reader: asyncio.StreamReader) -> bytes:
    data = await reader.read(65536)
    if not data:
        raise ConnectionError("the client hung up")
    return data


def _headers(stream: int, block: bytes, *, end: bool) -> bytes:
    frame = HeadersFrame(stream)
    frame.data = block
    if end:
        frame.flags.add("END_HEADERS")
    return bytes(frame.serialize())


def _continuation(stream: int, block: bytes, *, end: bool) -> bytes:
    frame = ContinuationFrame(stream)
    frame.data = block
    if end:
        frame.flags.add("END_HEADERS")
    return bytes(frame.serialize())
