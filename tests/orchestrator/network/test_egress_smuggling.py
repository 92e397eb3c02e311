"""The egress proxy checks what a connection names, however the client packs it.

A tunnel's TLS ClientHello is read whole (a handshake message may span several TLS
records) and must name the CONNECT host; a plain HTTP connection carries one request, so a
second, pipelined one cannot name a Host nobody checked. Every server here is the test's
own, on 127.0.0.1; a client reads the proxy's answer to its end, which comes after the
proxy has decided (a refusal is made before it connects upstream).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

import pytest
from agentcell.orchestrator.network import _egress
from egress_wire import (
    ANSWER,
    ESTABLISHED,
    NAME,
    Setup,
    built_client_hello,
    connect,
    exchange,
    server_name_extension,
    setup,
)

__all__ = ["setup"]  # the fixture

EVIL = "evil.example"


# --- TLS ClientHellos ------------------------------------------------------------------


def real_client_hello(server_name: str | None) -> bytes:
    """The first flight of Python's own TLS client (one record), naming ``server_name``."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def split_into_records(record: bytes, *cuts: int) -> bytes:
    """The handshake message of one TLS record, carried by several records instead, cut at
    ``cuts`` (offsets into the message): legal TLS, as a client may send it."""
    header, message = record[:3], record[5:]
    bounds = [0, *cuts, len(message)]
    pieces = [message[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    return b"".join(header + len(p).to_bytes(2, "big") + p for p in pieces)


def refused_line(setup: Setup, host: str) -> list[str]:
    return [line for line in setup.proxy.log if line.startswith(f"refused {host}:")]


async def reached_with(setup: Setup, host: str, first: bytes) -> bool:
    """Whether a tunnel to ``host`` whose client sends ``first`` reaches the upstream with
    those bytes; False when the proxy closes it before connecting."""
    answer = await exchange(setup.proxy.port, connect(host, setup.upstream.port) + first)
    assert answer.startswith(ESTABLISHED), answer
    if answer == ESTABLISHED:  # closed with nothing from upstream
        assert not setup.upstream.received, setup.upstream.received
        return False
    assert answer == ESTABLISHED + ANSWER, answer
    assert setup.upstream.received.pop() == first
    return True


@pytest.mark.parametrize("cuts", [(40,), (2,), (1, 3, 50, 51)], ids=["40", "2", "four"])
async def test_a_client_hello_split_over_records_is_read_whole(
    setup: Setup, cuts: tuple[int, ...]
) -> None:
    """Red before: only the first record was parsed; it held no server name, and no name
    counted as allowed, so the tunnel reached the upstream with ``evil.example`` in it."""
    evil = split_into_records(real_client_hello(EVIL), *cuts)
    assert not await reached_with(setup, NAME, evil)
    assert not await reached_with(setup, "127.0.0.1", evil)
    lines = refused_line(setup, NAME) + refused_line(setup, "127.0.0.1")
    assert len(lines) == 2 and all(f"server name '{EVIL}' is another host" in x for x in lines)
    # The same split, naming the host itself, goes through whole.
    assert await reached_with(setup, NAME, split_into_records(real_client_hello(NAME), *cuts))


async def test_a_tunnel_to_a_name_whose_client_hello_names_none_is_closed(setup: Setup) -> None:
    """Red before: a ClientHello without a server name (SNI) went through unchecked. A
    client names no server when it connects to an address, so there it still goes through;
    bytes that are not TLS (SSH here) are not checked, as before."""
    nameless = real_client_hello(None)
    assert not await reached_with(setup, NAME, nameless)
    assert "its TLS ClientHello names no server (SNI)" in refused_line(setup, NAME)[0]
    assert await reached_with(setup, "127.0.0.1", nameless)
    assert await reached_with(setup, NAME, b"SSH-2.0-OpenSSH_9.6\r\n")
    assert not refused_line(setup, "127.0.0.1")


@pytest.mark.parametrize(
    "extensions",
    [
        (server_name_extension(NAME, EVIL),),
        (server_name_extension(NAME), server_name_extension(EVIL)),
    ],
    ids=["two-names-in-one-list", "two-server-name-extensions"],
)
async def test_a_client_hello_with_two_names_is_closed(
    setup: Setup, extensions: tuple[bytes, ...]
) -> None:
    """Red before: the first name was checked, and a server that reads another got it."""
    assert await reached_with(setup, NAME, built_client_hello(server_name_extension(NAME)))
    assert not await reached_with(setup, NAME, built_client_hello(*extensions))
    assert "its TLS ClientHello cannot be read" in refused_line(setup, NAME)[0]


@pytest.mark.parametrize("host", [NAME, "127.0.0.1"])
@pytest.mark.parametrize("how", ["the-client-ends", "the-wait-ends"])
async def test_a_client_hello_cut_short_is_closed(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, host: str, how: str
) -> None:
    """Red before: a ClientHello that never came whole was let through unchecked (its
    client's end), or dropped and the stream then copied on unchecked (the wait's end:
    the rest of it, naming any host, could follow)."""
    monkeypatch.setattr(_egress, "_FIRST_WAIT_S", 0.5)
    hello = real_client_hello(EVIL)
    head = hello[:60]  # in the one write with the CONNECT line: there before the wait starts
    answer = await exchange(
        setup.proxy.port, connect(host, setup.upstream.port) + head, end=how == "the-client-ends"
    )
    assert answer == ESTABLISHED
    assert not setup.upstream.received
    assert "its TLS ClientHello cannot be read" in refused_line(setup, host)[0]


def test_the_server_name_parser_refuses_what_it_cannot_read() -> None:
    """A length that runs past its field, a record of another type inside the handshake,
    a message that is no ClientHello: each is unreadable, not "no name"."""
    read = _egress.tls_client_hello_server_name
    hello = real_client_hello(EVIL)
    assert read(hello) == EVIL and read(split_into_records(hello, 7, 100)) == EVIL
    assert read(built_client_hello()) is None
    lying = bytearray(hello)
    lying[5 + 4 + 2 + 32] = 200  # a session id longer than the message
    not_a_hello = hello[:5] + b"\x02" + hello[6:]
    alert_inside = split_into_records(hello, 30)
    alert_inside = alert_inside[:35] + b"\x15" + alert_inside[36:]
    # a host name whose length (50) runs past its list (7 bytes)
    name_past_its_list = built_client_hello(b"\x00\x00\x00\x09\x00\x07\x00\x00\x32evil")
    for unreadable in bytes(lying), not_a_hello, alert_inside, hello[:-1], name_past_its_list:
        with pytest.raises(ValueError):
            read(unreadable)


# --- plain HTTP ----------------------------------------------------------------------


def get(port: int, path: str, host_header: str, *extra: str) -> bytes:
    lines = [f"GET http://127.0.0.1:{port}{path} HTTP/1.1", f"Host: {host_header}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


Request = Callable[[int], bytes]
BODY = bytes(range(256)) * 400  # 100 KiB: more than one read's worth


@pytest.mark.parametrize(
    ("first", "forwarded"),
    [
        (
            lambda port: get(port, "/ok", f"127.0.0.1:{port}"),
            lambda port: (
                f"GET /ok HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
            ),
        ),
        (
            lambda port: (
                f"POST http://127.0.0.1:{port}/up HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
                + BODY
            ),
            lambda port: (
                f"POST /up HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n".encode()
                + BODY
            ),
        ),
    ],
    ids=["get", "post-with-body"],
)
async def test_a_pipelined_second_request_never_reaches_the_upstream(
    setup: Setup, first: Request, forwarded: Request
) -> None:
    """Red before: after the first request's head the client's bytes were copied as they
    came, so a second request on the connection reached the allowed address with a Host of
    its own choosing."""
    port = setup.upstream.port
    second = b"GET /admin HTTP/1.1\r\nHost: internal-admin.corp\r\n\r\n"
    answer = await exchange(setup.proxy.port, first(port) + second)
    assert answer == ANSWER
    assert setup.upstream.received == [forwarded(port)]
    assert f"dropped {len(second)} bytes sent to 127.0.0.1:{port}" in setup.proxy.log[-1]


async def test_a_chunked_request_body_is_refused_with_411(setup: Setup) -> None:
    """Red before: a chunked body was copied on unparsed (and a request after it with it)."""
    port = setup.upstream.port
    chunked = get(port, "/", f"127.0.0.1:{port}", "Transfer-Encoding: chunked") + b"0\r\n\r\n"
    answer = await exchange(setup.proxy.port, chunked)
    assert answer.startswith(b"HTTP/1.1 411 "), answer
    assert b"Content-Length" in answer and not setup.upstream.received


@pytest.mark.parametrize(
    "head",
    [
        "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nX-A: a\nHost: internal-admin.corp\r\n\r\n",
        "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost : internal-admin.corp\r\n\r\n",
        "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nX-A: a\r\n Host: internal-admin.corp\r\n\r\n",
        "GET http://127.0.0.1:{port}/ HTTP/1.1\nHost: internal-admin.corp\r\n\r\n",
        "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 9\r\n\r\n",
        "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n",
        "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:\xb2\r\n\r\n",
    ],
    ids=[
        "bare-lf",
        "space-before-colon",
        "folded",
        "lf-in-request-line",
        "two-lengths",
        "superscript-length",
        "superscript-port",
    ],
)
async def test_a_header_an_upstream_might_read_otherwise_is_refused(
    setup: Setup, head: str
) -> None:
    """Red before: a Host hidden behind a bare LF, a space or a fold was never seen by the
    check, and went upstream, where a lenient parser reads it as the Host; a length that
    disagrees with itself went too; a "digit" int() cannot read ("²", latin-1 0xb2) ended
    the connection with an exception instead of an answer."""
    data = head.format(port=setup.upstream.port).encode("latin-1")
    answer = await exchange(setup.proxy.port, data)
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 403 ")), answer
    assert not setup.upstream.received
