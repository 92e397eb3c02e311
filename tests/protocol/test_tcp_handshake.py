"""The TCP transport's handshake: only the holder of an agent's one-time token gets in,
and a sub-agent only talks to a parent that holds it too."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import ssl
import struct
from collections.abc import AsyncIterator

import pytest
import trustme
from agentcell.protocol import Heartbeat, TcpListener, tcp_connect
from agentcell.protocol._tcp import HandshakeError


@pytest.fixture
async def listener() -> AsyncIterator[TcpListener]:
    server = await TcpListener(handshake_timeout=2.0).start()
    try:
        yield server
    finally:
        await server.aclose()


async def _accept(listener: TcpListener, agent_id: str) -> object:
    async with asyncio.timeout(5):
        return await listener.accept(agent_id)


async def test_the_token_holder_gets_a_working_channel(listener: TcpListener) -> None:
    token = listener.expect("a1")
    client = await tcp_connect(*listener.address, agent_id="a1", token=token)
    server = await _accept(listener, "a1")
    await client.send(Heartbeat(seq=7))
    assert await server.recv() == Heartbeat(seq=7)  # type: ignore[attr-defined]
    client.close()
    server.close()  # type: ignore[attr-defined]


async def test_a_wrong_token_is_refused_and_the_real_agent_still_gets_in(
    listener: TcpListener,
) -> None:
    token = listener.expect("a1")
    with pytest.raises(HandshakeError, match="could not prove"):
        await tcp_connect(*listener.address, agent_id="a1", token=secrets.token_bytes(32))
    async with asyncio.timeout(5):
        await listener.wait_refused(1)
    real = await tcp_connect(*listener.address, agent_id="a1", token=token)
    server = await _accept(listener, "a1")
    real.close()
    server.close()  # type: ignore[attr-defined]


async def test_a_token_is_bound_to_its_agent(listener: TcpListener) -> None:
    token_a1 = listener.expect("a1")
    listener.expect("a2")
    with pytest.raises(HandshakeError):
        await tcp_connect(*listener.address, agent_id="a2", token=token_a1)


async def test_an_unknown_agent_is_refused(listener: TcpListener) -> None:
    with pytest.raises(HandshakeError, match="refused"):
        await tcp_connect(*listener.address, agent_id="a9", token=secrets.token_bytes(32))


async def test_a_token_works_once(listener: TcpListener) -> None:
    token = listener.expect("a1")
    first = await tcp_connect(*listener.address, agent_id="a1", token=token)
    server = await _accept(listener, "a1")
    with pytest.raises(HandshakeError):
        await tcp_connect(*listener.address, agent_id="a1", token=token)
    first.close()
    server.close()  # type: ignore[attr-defined]


async def test_a_recorded_proof_cannot_be_replayed(listener: TcpListener) -> None:
    """The client's proof covers the server's fresh nonce: one copied from an earlier
    connection (or computed for another nonce) opens nothing."""
    token = listener.expect("a1")
    host, port = listener.address
    reader, writer = await asyncio.open_connection(host, port)
    nonce = secrets.token_bytes(32)
    writer.write(b"AGC1" + struct.pack(">H", 2) + b"a1" + nonce)
    await reader.readexactly(32 + 32)
    stale_server_nonce = secrets.token_bytes(32)  # as if recorded from another session
    message = b"agentcell-client\0a1\0" + stale_server_nonce + nonce
    writer.write(hmac.new(token, message, hashlib.sha256).digest())
    await writer.drain()
    async with asyncio.timeout(5):
        assert await reader.read() == b""  # dropped without a word
    writer.close()
    real = await tcp_connect(host, port, agent_id="a1", token=token)
    server = await _accept(listener, "a1")
    real.close()
    server.close()  # type: ignore[attr-defined]


async def test_a_sub_agent_refuses_an_impostor_parent() -> None:
    """A listener that does not hold the agent's token cannot pose as the parent."""
    impostor = await TcpListener().start()
    impostor.expect("a1")  # it knows the id, not the token
    try:
        with pytest.raises(HandshakeError, match="not our parent"):
            await tcp_connect(*impostor.address, agent_id="a1", token=secrets.token_bytes(32))
    finally:
        await impostor.aclose()


async def test_a_silent_or_garbage_client_is_dropped() -> None:
    # A listener of its own, with a short deadline: the silent client waits it out.
    listener = await TcpListener(handshake_timeout=0.5).start()
    try:
        listener.expect("a1")
        host, port = listener.address
        _, silent = await asyncio.open_connection(host, port)
        reader, garbage = await asyncio.open_connection(host, port)
        garbage.write(b"GET / HTTP/1.1\r\n\r\n")
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        async with asyncio.timeout(10):  # the handshake deadline (0.5 s) drops the silent one
            await listener.wait_refused(2)
        silent.close()
        garbage.close()
    finally:
        await listener.aclose()


async def test_over_tls_the_handshake_and_frames_work() -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    listener = await TcpListener(ssl_context=server_ctx).start()
    try:
        token = listener.expect("a1")
        client = await tcp_connect(
            *listener.address, agent_id="a1", token=token, ssl_context=client_ctx
        )
        server = await _accept(listener, "a1")
        await server.send(Heartbeat(seq=3))  # type: ignore[attr-defined]
        assert await client.recv() == Heartbeat(seq=3)
        assert client._writer.get_extra_info("ssl_object") is not None
        client.close()
        server.close()  # type: ignore[attr-defined]
    finally:
        await listener.aclose()
