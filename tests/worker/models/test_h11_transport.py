"""The parent relay's plain-HTTP route (``H11Pool``): HTTP/1.1 keep-alive connections
of its own, against raw servers written here byte by byte — streaming as the bytes
arrive, reuse and its limits, every failure in the same words as the httpx route, and
the block guard on every request."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from agentcell.orchestrator.model_relay._relay import ModelPools
from agentcell.worker.models import (
    Endpoint,
    H11Pool,
    HttpxTransport,
    ModelError,
    ModelErrorKind,
    Retry,
    h11_route,
)
from raw_http import RawServer, pool_for, post, read_request

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-request-id: r-7\r\n"
    b"set-cookie: s=1\r\ntransfer-encoding: chunked\r\n\r\n"
)


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def read_all(response: object) -> bytes:
    chunks: AsyncIterator[bytes] = response.chunks()  # type: ignore[attr-defined]
    return b"".join([piece async for piece in chunks])


async def seen_closed(pool: H11Pool) -> None:
    """Until the pool's idle connections have had the server's FIN (a reuse racing it
    would fail as any dropped connection does, a ``Retry``)."""
    for _ in range(500):
        if all(connection.reader.at_eof() for connection in pool._idle):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server's close never reached the client")


async def answer_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive: answer every request on the connection with its own body, streamed."""
    while True:
        try:
            _head, body = await read_request(reader)
        except asyncio.IncompleteReadError:
            return
        writer.write(SSE_HEAD + chunked(b"data: " + body + b"\n\n") + b"0\r\n\r\n")
        await writer.drain()


async def test_a_request_is_one_post_its_head_and_body_written_together() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, body = await read_request(reader)
        seen.extend([head, body])
        writer.write(SSE_HEAD + chunked(b"data: ok\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        pool = pool_for(server.base_url)
        headers = {"authorization": "Bearer k", "x-custom": "1", "Host": "elsewhere"}
        response = await post(pool, b'{"model":"m"}', headers)
        data = await read_all(response)
        await response.aclose()
        await pool.aclose()
    head = seen[0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert "authorization: Bearer k\r\n" in head and "content-length: 13\r\n" in head
    assert "x-custom: 1\r\n" in head and "elsewhere" not in head  # the URL's host only
    assert f"host: {server.base_url.split('/')[2]}\r\n" in head
    assert seen[1] == b'{"model":"m"}'
    assert response.status == 200 and data == b"data: ok\n\n"
    # only the allow-listed response headers are handed on
    assert response.headers == {"content-type": "text/event-stream", "x-request-id": "r-7"}


async def test_the_answer_streams_as_its_bytes_arrive() -> None:
    more = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunked(b"data: first\n\n"))
        await writer.drain()
        await more.wait()  # the rest only once the client holds the first part
        writer.write(chunked(b"data: second\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        pool = pool_for(server.base_url)
        response = await post(pool)
        chunks = response.chunks()
        assert await asyncio.wait_for(anext(chunks), 5) == b"data: first\n\n"
        more.set()
        assert [piece async for piece in chunks] == [b"data: second\n\n"]
        await response.aclose()
        await pool.aclose()


async def test_requests_one_after_another_reuse_one_connection() -> None:
    async with RawServer(answer_each) as server:
        pool = pool_for(server.base_url)
        for n in range(3):
            response = await post(pool, b'{"n":%d}' % n)
            assert await read_all(response) == b'data: {"n":%d}\n\n' % n
            await response.aclose()
        await pool.aclose()
    assert server.accepted == 1 and pool.connections_made == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunked(b"data: ok\n\n") + b"0\r\n\r\n")
        await writer.drain()
        writer.close()  # keep-alive expiry, server side

    async with RawServer(once) as server:
        pool = pool_for(server.base_url)
        response = await post(pool)
        await read_all(response)
        await response.aclose()
        await asyncio.wait_for(server.closed_by_client.wait(), 5)
        await seen_closed(pool)
        response = await post(pool)
        assert await read_all(response) == b"data: ok\n\n"
        await response.aclose()
        await pool.aclose()
    assert server.accepted == 2


async def test_a_connection_the_server_says_it_closes_is_not_reused() -> None:
    async def close_after(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        body = b"data: ok\n\n"
        writer.write(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        await writer.drain()

    async with RawServer(close_after) as server:
        pool = pool_for(server.base_url, connections=1)  # the closed one gives its place back
        for _ in range(2):
            response = await post(pool)
            assert await read_all(response) == b"data: ok\n\n"
            await response.aclose()
            assert pool.connections_open == 0  # dropped, its place counted back once
        await pool.aclose()
    assert server.accepted == 2


async def test_an_answer_given_up_midway_closes_its_connection() -> None:
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunked(b"data: first\n\n"))
        await writer.drain()
        await reader.read()  # until the client hangs up

    async with RawServer(endless) as server:
        pool = pool_for(server.base_url, connections=1)
        response = await post(pool)
        assert await anext(response.chunks()) == b"data: first\n\n"
        await response.aclose()  # the relay's cancel: the request ends upstream
        await asyncio.wait_for(server.closed_by_client.wait(), 5)
        server.handler = answer_each
        response = await post(pool)  # its place in the pool was given back
        assert await read_all(response) == b"data: {}\n\n"
        await response.aclose()
        await pool.aclose()


async def test_a_refused_connection_is_a_retry_in_the_httpx_routes_words() -> None:
    pool = pool_for("http://127.0.0.1:9/v1")
    with pytest.raises(Retry) as caught:
        await post(pool)
    assert caught.value.kind is ModelErrorKind.CONNECTION
    assert caught.value.cause == (
        "cannot reach http://127.0.0.1:9/v1: connection refused; is the server running? "
        "(OPENAI_BASE_URL)"
    )


async def test_a_server_that_never_answers_is_a_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()

    async with RawServer(silent) as server:
        pool = pool_for(server.base_url, timeout=0.3)
        with pytest.raises(Retry) as caught:
            await post(pool)
        await pool.aclose()
    assert caught.value.kind is ModelErrorKind.TIMEOUT
    assert caught.value.cause == f"no answer from {server.base_url} within the 0.3 s timeout"


async def test_a_stream_that_stalls_midway_is_a_midstream_timeout() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunked(b"data: first\n\n"))
        await writer.drain()
        await reader.read()

    async with RawServer(stall) as server:
        pool = pool_for(server.base_url, timeout=0.3)
        response = await post(pool)
        with pytest.raises(Retry) as caught:
            await read_all(response)
        await response.aclose()
        await pool.aclose()
    assert caught.value.kind is ModelErrorKind.TIMEOUT
    assert (
        caught.value.midstream == f"the stream from {server.base_url} stalled mid-stream for 0.3 s"
    )


async def test_a_request_waits_for_a_busy_pool_only_as_long_as_the_timeout() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        await writer.drain()
        await reader.read()

    async with RawServer(stall) as server:
        pool = pool_for(server.base_url, timeout=0.3, connections=1)
        held = await post(pool)
        started = asyncio.get_running_loop().time()
        with pytest.raises(Retry) as caught:
            await post(pool)
        waited = asyncio.get_running_loop().time() - started
        await held.aclose()
        assert waited >= 0.3
        await pool.aclose()
    assert caught.value.cause == "all 1 connections of this model stayed busy for 0.3 s"
    assert server.accepted == 1


async def test_a_waiter_gets_the_connection_a_finished_request_gives_back() -> None:
    async with RawServer(answer_each) as server:
        pool = pool_for(server.base_url, connections=1)
        first = await post(pool, b'{"n":1}')
        waiting = asyncio.create_task(post(pool, b'{"n":2}'))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert await read_all(first) == b'data: {"n":1}\n\n'
        await first.aclose()
        second = await asyncio.wait_for(waiting, 5)
        assert await read_all(second) == b'data: {"n":2}\n\n'
        await second.aclose()
        await pool.aclose()
    assert server.accepted == 1


async def test_broken_framing_from_the_server_is_a_connection_failure() -> None:
    async def garbled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + b"zz-not-a-chunk-size\r\nhello\r\n")
        await writer.drain()
        await reader.read()

    async with RawServer(garbled) as server:
        pool = pool_for(server.base_url)
        response = await post(pool)
        with pytest.raises(Retry) as caught:
            await read_all(response)
        await response.aclose()
        # never reused: what the server sends next would be read as another answer
        await asyncio.wait_for(server.closed_by_client.wait(), 5)
        await pool.aclose()
    assert caught.value.kind is ModelErrorKind.CONNECTION
    assert (caught.value.midstream or "").startswith(
        f"the connection to {server.base_url} dropped mid-stream"
    )


async def test_a_key_with_a_stray_character_is_refused_without_spelling_it_out() -> None:
    async with RawServer(answer_each) as server:
        pool = pool_for(server.base_url)
        with pytest.raises(ModelError) as caught:
            await post(pool, headers={"authorization": "Bearer sk-secret\n"})
        await pool.aclose()
    assert caught.value.kind is ModelErrorKind.CONFIG
    assert "sk-secret" not in str(caught.value)
    assert "check OPENAI_API_KEY and OPENAI_BASE_URL for stray characters" in str(caught.value)
    assert server.accepted == 0  # refused before any connection was taken


async def test_the_block_guard_refuses_a_real_host_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTCELL_BLOCK_REAL_MODELS", "1")
    pool = pool_for("http://203.0.113.7:8000/v1")
    with pytest.raises(ModelError) as caught:
        await post(pool)
    assert caught.value.kind is ModelErrorKind.BLOCKED
    assert pool.connections_made == 0


def test_only_plain_http_without_a_proxy_takes_this_route(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTCELL_BLOCK_REAL_MODELS", raising=False)
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert h11_route("http://models.internal:8000/v1")
    assert not h11_route("https://api.openai.com/v1")  # HTTPS: httpx, HTTP/2 offered
    assert not h11_route("ftp://models.internal/v1")  # httpx says it is not http(s)
    # user:password@ is Basic auth to httpx; this route would put it in the Host header.
    assert not h11_route("http://proxyuser:proxy-pass-0123456@models.internal:8000/v1")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert not h11_route("http://models.internal:8000/v1")  # httpx speaks to the proxy
    assert h11_route("http://127.0.0.1:8000/v1")  # loopback never goes through a proxy


def test_the_relay_sends_plain_http_on_its_own_connections_and_https_on_httpx() -> None:
    pools = ModelPools()

    def endpoint(base: str) -> Endpoint:
        return Endpoint("openai", base, "OPENAI_BASE_URL", "OPENAI_API_KEY", 5, 4)

    plain = pools.transport("http://127.0.0.1:1/v1/x", {}, endpoint("http://127.0.0.1:1/v1"), 0)
    tls = pools.transport("https://127.0.0.1:1/v1/x", {}, endpoint("https://127.0.0.1:1/v1"), 0)
    assert not isinstance(plain, HttpxTransport) and isinstance(tls, HttpxTransport)
    again = pools.transport("http://127.0.0.1:1/v1/x", {}, endpoint("http://127.0.0.1:1/v1"), 0)
    other = pools.transport("http://127.0.0.1:1/v1/x", {}, endpoint("http://127.0.0.1:1/v1"), 1)
    assert again._pool is plain._pool and other._pool is not plain._pool  # type: ignore[attr-defined]


async def test_refused_connections_give_their_place_back() -> None:
    pool = pool_for("http://127.0.0.1:9/v1", timeout=0.3, connections=1)
    for _ in range(2):  # the second connects again: not "all 1 connections stayed busy"
        with pytest.raises(Retry) as caught:
            await post(pool)
        assert "connection refused" in caught.value.cause
        assert pool.connections_open == 0


async def test_a_name_that_does_not_resolve_says_so_and_port_80_is_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, int]] = []

    async def unresolvable(host: str, port: int, **_: object) -> None:
        asked.append((host, port))
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(asyncio, "open_connection", unresolvable)  # nothing is contacted
    monkeypatch.delenv("AGENTCELL_BLOCK_REAL_MODELS", raising=False)
    pool = pool_for("http://models.internal/v1")
    with pytest.raises(Retry) as caught:
        await post(pool)
    assert asked == [("models.internal", 80)]
    assert caught.value.cause == (
        "cannot reach http://models.internal/v1: the host name does not resolve; check "
        "(OPENAI_BASE_URL)"
    )


async def test_an_informational_response_before_the_answer_is_skipped() -> None:
    async def continue_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + SSE_HEAD + chunked(b"data: ok\n\n"))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(continue_first) as server:
        pool = pool_for(server.base_url)
        response = await post(pool)
        assert response.status == 200 and await read_all(response) == b"data: ok\n\n"
        await response.aclose()
        await pool.aclose()


async def test_a_request_cancelled_while_it_waits_for_the_head_is_cancelled_not_failed() -> None:
    arrived = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        arrived.set()
        await reader.read()

    async with RawServer(silent) as server:
        pool = pool_for(server.base_url, connections=1)
        request = asyncio.create_task(post(pool))
        await asyncio.wait_for(arrived.wait(), 5)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await asyncio.wait_for(server.closed_by_client.wait(), 5)  # the request ended
        await pool.aclose()


async def test_a_waiter_cancelled_as_it_is_woken_passes_the_connection_on() -> None:
    async with RawServer(answer_each) as server:
        pool = pool_for(server.base_url, connections=1)
        first = await post(pool, b'{"n":1}')
        woken = asyncio.create_task(post(pool, b'{"n":2}'))
        after = asyncio.create_task(post(pool, b'{"n":3}'))
        await asyncio.sleep(0.05)  # both wait for the one connection
        await read_all(first)
        await first.aclose()  # wakes the first waiter...
        woken.cancel()  # ...which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await woken
        third = await asyncio.wait_for(after, 5)
        assert await read_all(third) == b'data: {"n":3}\n\n'
        await third.aclose()
        await pool.aclose()
