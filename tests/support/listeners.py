"""A TCP listener on 127.0.0.1 that records every connection it got: where a sub-agent
must not reach (an attacker's port, a host not on its network list)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def recording_listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """(its port, the connections it accepted): read them after the test's run."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    accepted: list[socket.socket] = []
    try:
        yield server.getsockname()[1], accepted
    finally:
        while True:
            try:
                accepted.append(server.accept()[0])
            except BlockingIOError:
                break
        for conn in accepted:
            conn.close()
        server.close()
