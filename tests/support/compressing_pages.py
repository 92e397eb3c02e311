"""A page server that compresses, as most real servers do (the other tests' never does):
each path answers one body with its ``Content-Encoding``, the codings applied in the order
the header lists them (RFC 9110 §8.4), plus bombs: a few hundred bytes to 128 MiB."""

from __future__ import annotations

import functools
import gzip
import http.server
import zlib
from collections.abc import Callable
from typing import Any

import brotli

TEXT = "COMPRESSED-PAGE-TEXT"
HTML = f"<html><body><h1>Title</h1><p>{TEXT} " + "filler words " * 2000 + "</p></body></html>"
BOMB_BYTES = 128 * 1024 * 1024  # a bomb's size, decoded


def deflate_raw(data: bytes) -> bytes:
    """Deflate without the zlib header and trailer (what many servers send as deflate)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


CODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
}


def encoded(data: bytes, header: str) -> bytes:
    """``data`` with the codings of ``header`` applied, first listed first."""
    for name in header.split(","):
        data = CODERS[name.strip().lower()](data)
    return data


@functools.cache
def gzip_bomb() -> bytes:
    """About 128 KiB that gzip-decode to ``BOMB_BYTES`` of zeros."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(BOMB_BYTES >> 20)) + packer.flush()


@functools.cache
def br_bomb() -> bytes:
    """A few hundred bytes that br-decode to ``BOMB_BYTES`` of zeros."""
    packer = brotli.Compressor(quality=5)
    zeros = bytes(1 << 20)
    return b"".join(packer.process(zeros) for _ in range(BOMB_BYTES >> 20)) + packer.finish()


#: name: (Content-Encoding, body) of each bomb.
BOMBS: dict[str, Callable[[], tuple[str, bytes]]] = {
    "gzip": lambda: ("gzip", gzip_bomb()),
    "gzip-gzip": lambda: ("gzip, gzip", gzip.compress(gzip_bomb())),
    "br": lambda: ("br", br_bomb()),
}


def compressing(
    pages: dict[str, tuple[str, bytes]],
) -> type[http.server.BaseHTTPRequestHandler]:
    """A handler answering each path with its (Content-Encoding, body) as HTML; 404 for
    any other path."""

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path not in pages:
                self.send_error(404)
                return
            coding, body = pages[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            if coding:
                self.send_header("Content-Encoding", coding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a client that stopped reading (a bomb refused)

        def log_message(self, *args: Any) -> None:
            pass

    return Pages
