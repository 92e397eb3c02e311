"""The egress proxy's checks at their edges (``make mutants MUTANTS=egress``): each case is
one a mutant of ``orchestrator/network/_egress.py`` survived in the proxy's own tests.
Plain functions and one proxy on 127.0.0.1; no child, no other host."""

from __future__ import annotations

import pytest
from agentcell.orchestrator.network._egress import (
    EgressProxy,
    Refused,
    _client_hello_wants_more,
    _Cursor,
    _destination,
    _handshake_message,
    _parse_head,
    _special,
    _system_resolver,
    _tunnel_refusal,
    bash_network,
    open_proxy,
    tls_client_hello_server_name,
)
from egress_wire import (
    ESTABLISHED,
    Setup,
    built_client_hello,
    connect,
    exchange,
    server_name_extension,
    setup,
)

__all__ = ["setup"]  # the fixture, shared with test_egress_smuggling

#: A request head's limit (``_HEAD_LIMIT``) written out: read from the module, it would move
#: with a mutant of it.
HEAD_LIMIT = 16 * 1024


def _record(body: bytes, kind: int = 0x16) -> bytes:
    return bytes([kind, 3, 1]) + len(body).to_bytes(2, "big") + body


def test_special_addresses() -> None:
    assert not _special("8.8.8.8") and not _special("::ffff:8.8.8.8")
    for address in ("127.0.0.1", "10.0.0.1", "::ffff:127.0.0.1", "224.0.0.1", "::1"):
        assert _special(address), address


async def test_the_system_resolver_gives_addresses() -> None:
    assert "127.0.0.1" in await _system_resolver("localhost", 80)


async def test_a_name_that_does_not_resolve_is_refused() -> None:
    async def failing(host: str, port: int) -> list[str]:
        raise OSError("no such name")

    proxy = EgressProxy(["nowhere.test:443"], agent_id="a", agent_type="t", resolver=failing)
    with pytest.raises(Refused, match="does not resolve"):
        await proxy.check("nowhere.test", 443)


def test_the_log_is_bounded() -> None:
    proxy = EgressProxy(["a.test"], agent_id="a", agent_type="t")
    for n in range(600):
        proxy._note(f"line {n}")
    assert len(proxy.log) == 500  # written out: read from the module, it would move too


async def test_a_name_that_resolves_to_a_special_address_is_refused() -> None:
    async def to_loopback(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    proxy = EgressProxy(["inside.test:80"], agent_id="a", agent_type="t", resolver=to_loopback)
    with pytest.raises(Refused, match="private or loopback address 127.0.0.1"):
        await proxy.check("inside.test", 80)


def test_when_a_tunnels_first_bytes_are_whole() -> None:
    hello = built_client_hello(server_name_extension("a.test"))
    assert not _client_hello_wants_more(b"SSH-2.0-x\r\n")  # not TLS: as it comes
    assert _client_hello_wants_more(b"") and _client_hello_wants_more(b"\x16\x03")
    assert _client_hello_wants_more(hello[:-1]) and not _client_hello_wants_more(hello)
    inside = _record(b"\x01\x00\x00\x10") + _record(b"x", kind=0x17)
    assert not _client_hello_wants_more(inside)  # malformed: no more will mend it
    head_limit = b"\x16\x03\x01\xff\xff" + bytes(HEAD_LIMIT - 5)
    assert not _client_hello_wants_more(head_limit)
    assert not _client_hello_wants_more(head_limit + bytes(10))  # a read past the limit
    assert _client_hello_wants_more(head_limit[:-1])


def test_a_handshake_message_at_its_record_edges() -> None:
    message = b"\x01\x00\x00\x03abc"
    assert _handshake_message(_record(message)) == message
    assert _handshake_message(_record(message + b"extra")) == message  # only the message
    assert _handshake_message(_record(b"\x01\x00\x00\x00")) == b"\x01\x00\x00\x00"
    split = _record(message[:-1]) + _record(message[-1:])  # all but its last byte first
    assert _handshake_message(split) == message
    assert _handshake_message(_record(b"\x01\x00\x00\x10")) is None  # the next record is due
    assert _handshake_message(_record(message)[:-2]) is None  # its record cut short
    with pytest.raises(ValueError, match="a record of type 23"):
        _handshake_message(_record(b"\x01\x00\x00\x10") + _record(b"x", kind=0x17))
    long = b"\x01" + (300).to_bytes(3, "big") + bytes(300)  # a length of more than a byte
    assert _handshake_message(_record(long[:300]) + _record(long[300:])) == long


def test_a_cursor_refuses_a_field_past_its_end() -> None:
    cursor = _Cursor(b"abc")
    assert cursor.take(1) == b"a"
    with pytest.raises(ValueError):
        cursor.take(3)


def test_only_a_client_hello_names_a_server() -> None:
    hello = built_client_hello(server_name_extension("a.test"))
    request = hello[:5] + b"\x00" + hello[6:]  # handshake type 0: a HelloRequest
    with pytest.raises(ValueError, match="not a ClientHello"):
        tls_client_hello_server_name(request)


def test_only_a_host_name_entry_names_a_server() -> None:
    other_kind = b"\x01" + len(b"a.test").to_bytes(2, "big") + b"a.test"
    body = len(other_kind).to_bytes(2, "big") + other_kind
    extension = b"\x00\x00" + len(body).to_bytes(2, "big") + body
    assert tls_client_hello_server_name(built_client_hello(extension)) is None


def test_a_server_name_sorting_before_the_host_is_another_host() -> None:
    hello = built_client_hello(server_name_extension("aaa.example"))
    assert _tunnel_refusal("zzz.test", hello) == "its TLS server name 'aaa.example' is another host"
    assert _tunnel_refusal("aaa.example", hello) is None


def test_a_request_line_and_its_destination() -> None:
    with pytest.raises(Refused):
        _parse_head(b"GET http://a.test/\x01 HTTP/1.1\r\nHost: a.test\r\n\r\n")
    with pytest.raises(Refused, match="only absolute http"):
        _destination("GET", "ftp://a.test/", "HTTP/1.1", [])
    with pytest.raises(Refused, match="has no valid port"):
        _destination("GET", "http://a.test:99999/", "HTTP/1.1", [])
    with pytest.raises(Refused, match="only absolute http"):
        _destination("GET", "https://a.test/", "HTTP/1.1", [])
    with pytest.raises(Refused, match="only absolute http"):
        _destination("ACL", "a.test:443", "HTTP/1.1", [])  # only CONNECT makes a tunnel
    assert _destination("CONNECT", "a.test", "HTTP/1.1", []) == ("a.test", 443, None)
    assert _destination("CONNECT", "[::1]:8080", "HTTP/1.1", []) == ("::1", 8080, None)
    for url, header in (("a.test", "b.test"), ("b.test", "a.test")):
        with pytest.raises(Refused, match="names another host"):
            _destination("GET", f"http://{url}/", "HTTP/1.1", [f"Host: {header}"])
    headers = ["Host: a.test", "Proxy-Authorization: Basic x", "Connection: keep-alive", "X: 1"]
    host, port, forwarded = _destination("GET", "http://a.test/p?q=1", "HTTP/1.1", headers)
    assert (host, port) == ("a.test", 80) and forwarded is not None
    assert forwarded == (
        b"GET /p?q=1 HTTP/1.1\r\nHost: a.test\r\nX: 1\r\nConnection: close\r\n\r\n"
    )


def test_bash_network() -> None:
    assert bash_network(True, None) is True
    assert bash_network(False, None) is False
    assert bash_network(True, ["a.test"]) is False  # a list: through the proxy, not whole


@pytest.mark.parametrize(
    ("value", "sandbox", "backend", "made"),
    [
        (["a.test"], "workspace", "local", True),
        (["a.test"], "off", "local", False),
        (["a.test"], "workspace", "ray", False),
        ([], "workspace", "local", False),
        (True, "workspace", "local", False),
    ],
)
async def test_which_runs_get_a_proxy(
    value: bool | list[str], sandbox: str, backend: str, made: bool
) -> None:
    proxy = await open_proxy(value, sandbox=sandbox, agent_id="a", agent_type="t", backend=backend)
    try:
        assert (proxy is not None) is made
        if proxy is not None:
            assert proxy.port > 0
    finally:
        if proxy is not None:
            await proxy.close()


def _request_of(setup: Setup, size: int) -> bytes:
    """A plain request to the upstream whose head is exactly ``size`` bytes."""
    start = (
        f"GET http://127.0.0.1:{setup.upstream.port}/ HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{setup.upstream.port}\r\nX-Pad: "
    )
    return (start + "p" * (size - len(start) - 4) + "\r\n\r\n").encode()


async def test_a_head_past_the_limit_is_not_forwarded(setup: Setup) -> None:
    request = _request_of(setup, HEAD_LIMIT + 1)
    assert len(request) == HEAD_LIMIT + 1
    await exchange(setup.proxy.port, request)
    assert not setup.upstream.received
    tunnel = await exchange(setup.proxy.port, connect("127.0.0.1", setup.upstream.port), end=True)
    assert tunnel.startswith(ESTABLISHED)  # the proxy itself goes on
    await exchange(setup.proxy.port, _request_of(setup, HEAD_LIMIT))
    # A head of the limit itself goes through (the tunnel's connection came before it).
    assert [r[:14] for r in setup.upstream.received] == [b"", b"GET / HTTP/1.1"]


async def test_a_refusal_is_a_403_and_a_body_goes_whole(setup: Setup) -> None:
    answer = await exchange(
        setup.proxy.port, b"GET http://elsewhere.test/ HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 403 agentcell sandbox refused elsewhere.test:80")
    port = setup.upstream.port
    post = (
        f"POST http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Length: 1\r\n\r\nx"
    ).encode()
    await exchange(setup.proxy.port, post)
    assert setup.upstream.received[-1].endswith(b"\r\n\r\nx")  # its one byte of body
