"""A body's content codings (RFC 9110 §8.4) undone in bounded steps.

``Content-Encoding: gzip, br`` lists the codings in the order they were applied (gzip
first, then br): they are undone last to first (br, then gzip). Each layer gives at most
``STEP`` bytes per decompress call and the layers pull from each other lazily, so a
bomb (a few hundred bytes to gigabytes, or ``gzip, gzip`` squaring the ratio) costs a
caller only what it asks for, and one call never runs long: a caller caps the decoded
size as the pieces come. httpx would decode each chunk whole, unbounded.

Codings read: gzip (x-gzip), deflate (the zlib format, as RFC 9110 says, or raw deflate,
which many servers send), br and identity. Another, more than ``MAX_LAYERS``, or a
corrupt stream is a ``CodingError`` whose message is one line.

Used by the model route (``Inflater``) and by the parent's web_fetch.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any

STEP = 64 * 1024  #: decoded bytes given by one decompress call, at most
MAX_LAYERS = 3  #: codings stacked on one body, at most
ACCEPT_ENCODING = "gzip, deflate, br"  #: an Accept-Encoding naming what is read here

#: brotli's ``output_buffer_limit`` is a size past which its output buffer stops growing,
#: and the buffer grows in blocks (32 KiB, then 64 KiB, 256 KiB, …): asking for a quarter
#: step stops it after its first block, well within ``STEP``.
_BROTLI_LIMIT = STEP // 4


class CodingError(Exception):
    """A body that cannot be decoded; the message is one line, fit for a user."""


class ContentDecoder:
    """The decoded bytes of a body whose ``Content-Encoding`` header is ``header``.

    ``pieces(raw)`` gives the decoded bytes of the next raw chunk, lazily, in pieces of
    at most ``STEP`` bytes; ``finish()`` at the body's end says whether every layer's
    stream was whole. Both raise ``CodingError``, as does the constructor for a coding
    not read or more than ``MAX_LAYERS`` of them.
    """

    __slots__ = ("_layers",)

    def __init__(self, header: str) -> None:
        names = [n.strip().lower() for n in header.split(",")]
        names = [n for n in names if n and n != "identity"]
        if len(names) > MAX_LAYERS:
            raise CodingError(
                f"the body is encoded {len(names)} times ({header.strip()}); "
                f"at most {MAX_LAYERS} content codings are read"
            )
        # Applied first to last, so undone last to first (RFC 9110 §8.4).
        self._layers = [_layer(name) for name in reversed(names)]

    @property
    def identity(self) -> bool:
        """No coding at all: ``pieces`` passes chunks on as they are (of any size)."""
        return not self._layers

    def pieces(self, raw: bytes) -> Iterator[bytes]:
        if not self._layers:
            if raw:
                yield raw
            return
        stream: Iterable[bytes] = (raw,)
        for layer in self._layers:
            stream = layer.run(stream)
        yield from stream

    def finish(self) -> None:
        """Raises ``CodingError`` when a layer's stream ended before its end."""
        for layer in self._layers:
            if not layer.finished():
                raise CodingError(f"the {layer.name} stream ends early (truncated)")


def _layer(name: str) -> _Layer:
    if name in ("gzip", "x-gzip"):
        return _Gzip(name)
    if name == "deflate":
        return _Deflate(name)
    if name == "br":
        return _Brotli(name)
    raise CodingError(f"the content coding {name!r} is not supported (gzip, deflate, br are)")


class _Layer:
    """One coding undone: ``feed`` gives the decoded pieces of one chunk of its input."""

    name: str

    def run(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            yield from self.feed(chunk)

    def feed(self, data: bytes) -> Iterator[bytes]:
        raise NotImplementedError

    def finished(self) -> bool:
        raise NotImplementedError

    def corrupt(self, exc: Exception) -> CodingError:
        said = " ".join(str(exc).split())
        return CodingError(f"the {self.name} stream is corrupt ({said})")


class _Zlib(_Layer):
    def __init__(self, name: str, wbits: int) -> None:
        self.name = name
        self._wbits = wbits
        self._z: Any = zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._z.eof:
            rest = self._after_end(data)
            if rest is None:
                return  # (dropped, not held: zlib would keep it all as unused_data)
            data = rest
        z = self._z
        while True:
            try:
                out = z.decompress(data, STEP)
            except zlib.error as exc:
                raise self.corrupt(exc) from None
            if out:
                yield out
            data = z.unconsumed_tail
            if z.eof:
                rest = self._after_end(z.unused_data)
                if rest is None:
                    return
                z, data = self._z, rest
            elif not data and len(out) < STEP:
                # All input taken and the step not filled: nothing is held back (a
                # full step may leave output pending inside zlib: asked for again).
                return

    def _after_end(self, rest: bytes) -> bytes | None:
        """What is decoded next once the stream has ended; None: nothing."""
        return None  # bytes after a zlib or deflate stream: ignored, as httpx does

    def finished(self) -> bool:
        return bool(self._z.eof)


class _Gzip(_Zlib):
    def __init__(self, name: str) -> None:
        super().__init__(name, 16 + zlib.MAX_WBITS)

    def _after_end(self, rest: bytes) -> bytes | None:
        if not rest:
            return None
        # A gzip body may be several members (RFC 1952 §2.2): the next one starts here.
        self._z = zlib.decompressobj(self._wbits)
        return rest


class _Deflate(_Zlib):
    """``deflate`` is the zlib format (RFC 9110 §8.4.1.2), but many servers send raw
    deflate: the first two bytes tell (a zlib header, or zlib refuses them)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, zlib.MAX_WBITS)
        self._head: bytes | None = b""  # the first bytes, until they are judged

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._head is not None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return
            self._head = None
            try:
                zlib.decompressobj(zlib.MAX_WBITS).decompress(data[:2])
            except zlib.error:
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # no zlib header: raw
        yield from super().feed(data)

    def finished(self) -> bool:
        return self._head is None and super().finished()


class _Brotli(_Layer):
    """br, with Google's ``brotli`` (1.2 and later): its ``Decompressor.process`` takes
    an ``output_buffer_limit`` and keeps the input it did not reach for the next calls
    (``can_accept_more_data``), so one call's output is bounded (``brotlicffi`` has the
    same interface; ``brotli`` is the reference binding, a C extension with wheels)."""

    def __init__(self, name: str) -> None:
        import brotli  # type: ignore[import-untyped]  # (only when a body is br)

        self.name = name
        self._error: type[Exception] = brotli.error
        self._d: Any = brotli.Decompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        d = self._d
        while True:
            try:
                out = d.process(data, output_buffer_limit=_BROTLI_LIMIT)
            except self._error as exc:
                raise self.corrupt(exc) from None
            data = b""
            for at in range(0, len(out), STEP):  # (within one step as it is; in case)
                yield out[at : at + STEP]
            # Output may be pending while the buffer was full (the limit reached), and
            # input is held while it is: asked for with empty input until neither.
            if not out or (len(out) < _BROTLI_LIMIT and d.can_accept_more_data()):
                return

    def finished(self) -> bool:
        return bool(self._d.is_finished())
