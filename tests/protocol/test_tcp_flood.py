"""The TCP listener under a flood of idle connections (issue 21, item 8): it holds at most
``max_pending`` unauthenticated connections, a real sub-agent still gets in meanwhile, and
an idle connection is closed at the handshake deadline.

Every connection here is this test process's own, to a listener it started, and closed at
the end whatever happens."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.backends.ray._backend import RayBackend
from agentcell.protocol import Heartbeat, TcpListener, tcp_connect

CAP = 8
FLOOD = 3 * CAP


@contextlib.asynccontextmanager
async def idle_connections(
    listener: TcpListener, count: int
) -> AsyncIterator[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    """``count`` connections that never say a word, all closed on the way out."""
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for _ in range(count):
            opened.append(await asyncio.open_connection(*listener.address))
        yield opened
    finally:
        for _, writer in opened:
            writer.transport.abort()


async def test_a_flood_of_idle_connections_holds_at_most_the_cap_and_a_real_peer_gets_in() -> None:
    # A long deadline: what bounds the flood here is the cap alone.
    listener = await TcpListener(handshake_timeout=300, max_pending=CAP).start()
    try:
        async with idle_connections(listener, FLOOD) as flood:
            async with asyncio.timeout(60):
                await listener.wait_for(lambda: listener.accepted == FLOOD)
            assert listener.pending == CAP
            assert listener.evicted == FLOOD - CAP
            # The oldest went at once (connections are accepted in the order they were
            # made): their peers read the end of the stream.
            async with asyncio.timeout(60):
                for reader, _ in flood[: FLOOD - CAP]:
                    assert await reader.read() == b""
            # While the flood holds every slot, the real sub-agent connects and proves
            # itself, and its channel works.
            token = listener.expect("real")
            async with asyncio.timeout(60):
                client = await tcp_connect(*listener.address, agent_id="real", token=token)
                server = await listener.accept("real")
            try:
                await client.send(Heartbeat(seq=1))
                async with asyncio.timeout(60):
                    assert await server.recv() == Heartbeat(seq=1)
            finally:
                client.close()
                server.close()
            assert listener.pending <= CAP
            assert listener.accepted == FLOOD + 1
    finally:
        await listener.aclose()


def _server_tls() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(context)
    return context


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_an_idle_connection_is_closed_at_the_handshake_deadline(tls: bool) -> None:
    # Over TLS too: the TLS handshake is inside the deadline and the cap, not before them
    # (asyncio's own TLS handshake timeout is 60 s, and those connections were not counted).
    listener = await TcpListener(
        handshake_timeout=0.2, max_pending=CAP, ssl_context=_server_tls() if tls else None
    ).start()
    try:
        async with idle_connections(listener, CAP // 2) as idle:
            async with asyncio.timeout(30):
                await listener.wait_refused(CAP // 2)  # each ran out of time
                await listener.wait_for(lambda: listener.pending == 0)
                for reader, _ in idle:
                    assert await reader.read() == b""  # closed by the listener
            assert listener.evicted == 0
    finally:
        await listener.aclose()


def test_the_ray_backend_gives_connections_a_short_deadline_and_a_cap() -> None:
    # Not its connect timeout (60 s, for Ray to place an actor): 1,021 idle connections
    # held for a minute each took the parent to its descriptor limit.
    options = RayBackend().options
    assert options.handshake_timeout <= 10 < options.connect_timeout
    assert options.max_pending_connections <= 128


def test_the_listener_settings_reach_the_ray_backend(tmp_path: Path) -> None:
    settings = Settings(
        backend="ray", ray={"handshake_timeout_s": 2.5, "max_pending_connections": 16}
    )
    orch = Orchestrator(settings=settings, workdir=tmp_path, load_agent_files=False, record=False)
    assert orch.ray is not None  # made, not started: no Ray here
    options = orch.ray.options
    assert (options.handshake_timeout, options.max_pending_connections) == (2.5, 16)
