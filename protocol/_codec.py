"""Frame encoding and stream framing.

Framing is the one ``multiprocess.Connection.send_bytes`` uses for messages under 2 GiB:
a 4-byte big-endian signed length, then the body. A frame written here can be read with
``Connection.recv_bytes`` and the other way round. The body is msgpack from one reused
``Encoder``; bodies are decoded by a ``Decoder`` typed with the ``Frame`` union, so a
decoded frame is already validated.
"""

from __future__ import annotations

import struct

import msgspec
from agentcell.protocol._frames import Frame

#: Largest frame body accepted. Checked on the length header, before any body is read.
MAX_FRAME_BYTES = 16 * 1024 * 1024

_HEADER = struct.Struct("!i")
HEADER_SIZE = _HEADER.size


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame (garbage, oversize, truncated)."""


class FrameTooLarge(ProtocolError):
    """A frame's declared or actual size is over the limit."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Frame)


def encode_frame(frame: Frame, max_bytes: int = MAX_FRAME_BYTES) -> bytearray:
    """Return header + body for ``frame``. Raises ``FrameTooLarge`` over ``max_bytes``."""
    buf = bytearray(HEADER_SIZE)
    try:
        _encoder.encode_into(frame, buf, HEADER_SIZE)
    except (TypeError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        raise ProtocolError(f"cannot encode {type(frame).__name__}: {exc}") from None
    size = len(buf) - HEADER_SIZE
    if size > max_bytes:
        raise FrameTooLarge(f"frame of {size} bytes is over the {max_bytes}-byte limit")
    _HEADER.pack_into(buf, 0, size)
    return buf


def encode_body(frame: Frame) -> bytes:
    """The frame body alone (what ``Connection.send_bytes`` would be given)."""
    try:
        return _encoder.encode(frame)
    except (TypeError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        raise ProtocolError(f"cannot encode {type(frame).__name__}: {exc}") from None


def decode_body(body: bytes | bytearray | memoryview) -> Frame:
    """Decode one frame body. Anything malformed raises ``ProtocolError``."""
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise ProtocolError(f"undecodable frame: {exc}") from None
    except RecursionError:
        raise ProtocolError("undecodable frame: nested too deeply") from None


class FrameParser:
    """Incremental parser: feed bytes as they arrive, take whole frames out.

    The length header is checked against the limit before the body is buffered, so an
    oversize (or garbage) header fails at once without allocating its declared size.
    Frames that precede a bad one in the same chunk are still returned; the error is
    then kept in ``error`` and raised by the next ``feed``.
    """

    __slots__ = ("_buf", "error", "max_bytes")

    def __init__(self, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self.max_bytes = max_bytes
        self.error: ProtocolError | None = None

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self.error is not None:
            raise self.error
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        start = 0
        end = len(buf)
        try:
            while end - start >= HEADER_SIZE:
                (size,) = _HEADER.unpack_from(buf, start)
                if size < 0 or size > self.max_bytes:
                    raise FrameTooLarge(
                        f"peer announced a frame of {size} bytes (limit {self.max_bytes})"
                    )
                if end - start - HEADER_SIZE < size:
                    break
                body_start = start + HEADER_SIZE
                # Both views are released on the way out, even when decoding fails, so
                # the buffer can be resized afterwards.
                with memoryview(buf) as view, view[body_start : body_start + size] as body:
                    frames.append(decode_body(body))
                start = body_start + size
        except ProtocolError as exc:
            self.error = exc
            buf.clear()
            if not frames:
                raise
            return frames
        if start:
            del buf[:start]
        return frames
