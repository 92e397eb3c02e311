"""The parent's egress proxy: a sub-agent's bash reaches the hosts of its ``network:`` list.

One proxy per sub-agent run with a list, on the parent's ``127.0.0.1``. bash's commands
run in a network namespace whose only way out is a relay to this proxy
(``worker.sandbox._egress_relay``), with ``HTTP(S)_PROXY`` pointing at it. Each connection
names its host once, in the
``CONNECT host:port`` line (HTTPS and anything tunnelled) or in the absolute URL of a plain
HTTP request (whose ``Host`` header must agree, as a tunnel's TLS server name must); the
proxy allows it only if an entry of the list matches, resolves the name itself, and
connects to the address it checked (no second lookup for a rebinding DNS server to answer
differently). A name that resolves to a private,
loopback, link-local or otherwise special address is refused unless the entry names that
address itself (``127.0.0.1:8080``) or is ``localhost``, loopback by definition (RFC 6761):
``localhost:8080`` reaches ``127.0.0.1:8080`` (or ``[::1]:8080``), no other port, named
``localhost``, ``127.0.0.1`` or ``[::1]`` (the same sockets), and the name is never
resolved. A refusal is a ``403`` whose status line and body name the host, the agent
and the setting that would allow it (a request the proxy forwards to no host, a
malformed or chunked one, gets a ``400`` or ``411``).

A plain HTTP connection carries one request (its head, then ``Content-Length`` bytes of
body; a chunked body is refused): what the client sends after it is dropped, so a second,
pipelined request cannot name a Host that was never checked. A tunnel to a host name whose
client starts with a TLS record must send a whole ClientHello (joined across records) that
names that host (SNI); one that names another, none, or cannot be read is closed.

Entries: ``pypi.org`` (ports 80 and 443), ``github.com:443`` (that port only),
``*.example.com`` (any name below example.com, not example.com itself), an IP address
with or without a port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from agentcell.orchestrator.network._host_rules import LOCALHOST, ip_of, parse_rules
from agentcell.protocol import gather_owned

_HEAD_LIMIT = 16 * 1024
_HEAD_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 15.0
_CHUNK = 64 * 1024
_LOG_MAX = 500
_FIRST_WAIT_S = 5.0  # for a tunnel's client's first bytes (its TLS ClientHello)
_MAX_CONNECTIONS = 64  # open at once, per sub-agent: more wait for one to end
_TLS_HANDSHAKE = 0x16  # the content type of a TLS record that carries handshake messages
_CLIENT_HELLO = 0x01
_SERVER_NAME = 0x0000  # the extension
_HOST_NAME = 0x00  # the one kind of name in a server_name list
_DROPPED_HEADERS = frozenset(
    {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}
)

# A request line and a header line as RFC 9112 spells them: a token method, a header name
# of token characters right before its colon (``Host :`` or a folded line is refused, as
# a lenient upstream might read it as a Host the check never saw).
_REQUEST_LINE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+ [^ ]+ HTTP/1\.[01]")
_FIELD_LINE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+:")
_DIGITS = re.compile(r"[0-9]+")  # str.isdigit() also takes "²", which int() does not
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a bare CR or LF ends a line upstream

Resolver = Callable[[str, int], Awaitable[list[str]]]


def _special(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


async def _system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class Refused(Exception):
    """Why a connection is not allowed (the 403's reason)."""


class Malformed(Refused):
    """A request the proxy forwards to no host, allowed or not: ``status`` and the reason."""

    def __init__(self, reason: str, status: str = "400 Bad Request") -> None:
        super().__init__(reason)
        self.status = status


class EgressProxy:
    """The proxy of one sub-agent run: ``start`` gives its port, ``log`` what it saw."""

    def __init__(
        self,
        entries: list[str],
        *,
        agent_id: str,
        agent_type: str,
        resolver: Resolver | None = None,
    ) -> None:
        self.rules = parse_rules(entries)
        self.agent_id = agent_id
        self.agent_type = agent_type
        self.log: list[str] = []
        self._resolve = resolver or _system_resolver
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            async with self._slots:
                await self._one_connection(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _one_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        async with asyncio.timeout(_HEAD_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _HEAD_LIMIT:
            return
        shown = "?"
        try:
            method, target, version, headers = _parse_head(head)
            shown = target
            host, port, forwarded = _destination(method, target, version, headers)
            shown = f"{host}:{port}"
            address = await self.check(host, port)
            # None: a tunnel, whose bytes are copied as they come
            body_length = None if forwarded is None else _body_length(headers)
        except Refused as exc:
            self._note(f"refused {shown}: {exc}")
            writer.write(self._refusal(shown, exc))
            await writer.drain()
            return
        if forwarded is None:  # a tunnel: its TLS server name must be the CONNECT host
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            forwarded = await _first_bytes(reader)
            if why := _tunnel_refusal(host, forwarded):
                self._note(f"refused {shown}: {why}")
                return
        up_reader, up_writer = await _open_upstream(host, address, port)
        self._note(f"reached {shown}")
        up_writer.write(forwarded)
        client_side = (
            _copy(reader, up_writer)
            if body_length is None
            else self._one_request_body(reader, up_writer, body_length, shown)
        )
        try:
            await gather_owned(client_side, _copy(up_reader, writer))
        finally:
            up_writer.close()

    async def _one_request_body(
        self,
        reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        body_length: int,
        shown: str,
    ) -> None:
        """The client's side of a plain HTTP connection after its head: ``body_length``
        bytes of body go upstream, then nothing: a second request on the connection would
        name a Host nobody checked, so what follows is read and dropped (not left unread:
        the client's end still reaches the upstream, as on a tunnel, once it comes)."""
        try:
            await _copy_exactly(reader, up_writer, body_length)
            dropped = 0
            while data := await reader.read(_CHUNK):
                dropped += len(data)
            if dropped:
                self._note(
                    f"dropped {dropped} bytes sent to {shown} after its request"
                    " (one request per connection)"
                )
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                if up_writer.can_write_eof():
                    up_writer.write_eof()

    async def check(self, host: str, port: int) -> str:
        """The address to connect to for ``host:port``, or Refused with the reason."""
        rule = next((r for r in self.rules if r.matches(host, port)), None)
        if rule is None:
            raise Refused("it is not in the agent's network: list")
        if ip_of(host) is not None:  # named by its address: that address, as the entry says
            return host.strip("[]")
        if host == LOCALHOST:  # loopback by definition (RFC 6761): never asked of DNS
            return "127.0.0.1"
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:
            raise Refused(f"the name does not resolve ({exc})") from None
        special = [a for a in addresses if _special(a)]
        if special or not addresses:
            raise Refused(
                f"it resolves to the private or loopback address {special[0] if special else '?'}"
                " (only an entry that names an address itself, such as 127.0.0.1:8080, "
                "or localhost:PORT reaches one)"
            )
        return addresses[0]

    def _refusal(self, shown: str, refused: Refused) -> bytes:
        if isinstance(refused, Malformed):
            status = f"{refused.status} (agentcell sandbox proxy)"
            body = f"agentcell sandbox proxy: the request for {shown} is not sent: {refused}.\n"
        else:
            status = (
                f"403 agentcell sandbox refused {shown} for agent {self.agent_type}: "
                "not allowed by its network: list"
            )
            body = (
                f"agentcell sandbox refused {shown} for agent {self.agent_type} ({self.agent_id}):"
                f" {refused}. Its bash reaches only the hosts of its network: list; to allow"
                " this one, add it to the agent file's `network:` list (or the `network`"
                " setting).\n"
            )
        data = body.encode()
        return (
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        ).encode() + data

    def _note(self, line: str) -> None:
        if len(self.log) < _LOG_MAX:
            self.log.append(line)


async def _open_upstream(
    host: str, address: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The connection to the checked ``address``; for ``localhost``, ``::1`` when nothing
    listens on ``127.0.0.1`` at that port (a server that bound "localhost" may hold only
    the IPv6 one)."""
    async with asyncio.timeout(_CONNECT_TIMEOUT_S):
        if host != LOCALHOST:
            return await asyncio.open_connection(address, port)
        try:
            return await asyncio.open_connection(address, port)
        except OSError:
            return await asyncio.open_connection("::1", port)


async def _first_bytes(reader: asyncio.StreamReader) -> bytes:
    """What a tunnel's client sends first: when it starts a TLS record, the records up to
    the end of its first handshake message (the ClientHello, joined across records), at
    most ``_HEAD_LIMIT`` bytes; other bytes as they come; b"" for a protocol whose server
    speaks first (nothing in ``_FIRST_WAIT_S``). A ClientHello cut short by the limit or
    the wait is returned as it is, and refused for it: dropping what came would let the
    rest of the stream through unchecked."""
    data = bytearray()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_FIRST_WAIT_S):
            while _client_hello_wants_more(data):
                more = await reader.read(_CHUNK)
                if not more:
                    break
                data += more
    return bytes(data)


def _client_hello_wants_more(data: bytes | bytearray) -> bool:
    if not data:
        return True
    if data[0] != _TLS_HANDSHAKE or len(data) >= _HEAD_LIMIT:
        return False
    try:
        return _handshake_message(bytes(data)) is None
    except ValueError:  # malformed: nothing more will make it a ClientHello
        return False


def _tunnel_refusal(host: str, first: bytes) -> str | None:
    """Why a tunnel to ``host`` whose client sent ``first`` is closed; None if it goes on.
    Bytes that are not TLS (SSH, say) or none at all (a server-first protocol) are not
    checked. A client names no server (SNI) when it connects to an address, so a tunnel
    to an IP literal may carry none; a name it carries must still be that address."""
    if first[:1] != bytes([_TLS_HANDSHAKE]):
        return None
    try:
        named = tls_client_hello_server_name(first)
    except ValueError as exc:
        return f"its TLS ClientHello cannot be read ({exc})"
    if named is None:
        if ip_of(host) is not None:
            return None
        return "its TLS ClientHello names no server (SNI)"
    if named != host:
        return f"its TLS server name {named!r} is another host"
    return None


class _Cursor:
    """Reads the length-prefixed fields of a TLS message, front to back; ValueError when a
    field runs past the end (a length that lies)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise ValueError("a field runs past its end")
        self.at += size
        return self.data[self.at - size : self.at]

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, length_size: int) -> bytes:
        return self.take(self.number(length_size))

    def done(self) -> bool:
        return self.at == len(self.data)


def _handshake_message(data: bytes) -> bytes | None:
    """The first handshake message (type, 3-byte length, body) carried by the TLS
    handshake records at the start of ``data``, joined across records (a message may span
    several); None while its records have not all come. ValueError when another kind of
    record comes first."""
    joined = bytearray()
    at = 0
    while len(joined) < 4 or len(joined) < 4 + int.from_bytes(joined[1:4], "big"):
        if at + 5 > len(data):
            return None
        if data[at] != _TLS_HANDSHAKE:
            raise ValueError(f"a record of type {data[at]} inside the handshake")
        size = int.from_bytes(data[at + 3 : at + 5], "big")
        if at + 5 + size > len(data):
            return None
        joined += data[at + 5 : at + 5 + size]
        at += 5 + size
    return bytes(joined[: 4 + int.from_bytes(joined[1:4], "big")])


def tls_client_hello_server_name(data: bytes) -> str | None:
    """The server name (SNI) of the TLS ClientHello at the start of ``data``, lower case;
    None when it names none. ValueError when ``data`` holds no whole, well-formed
    ClientHello, or one whose names a server might read differently (two server_name
    extensions, two host names)."""
    message = _handshake_message(data)
    if message is None:
        raise ValueError("it ends before its last record")
    hello = _Cursor(message)
    if hello.number(1) != _CLIENT_HELLO:
        raise ValueError("its first handshake message is not a ClientHello")
    hello.take(3 + 2 + 32)  # length (already used), client_version, random
    hello.vector(1)  # session id
    hello.vector(2)  # cipher suites
    hello.vector(1)  # compression methods
    if hello.done():
        return None  # no extensions at all (TLS 1.2 allows it): no name
    extensions = _Cursor(hello.vector(2))
    if not hello.done():
        raise ValueError("bytes after its extensions")
    names: list[str] = []
    kinds: set[int] = set()
    while not extensions.done():
        kind, body = extensions.number(2), extensions.vector(2)
        if kind in kinds:
            raise ValueError(f"extension {kind} twice")
        kinds.add(kind)
        if kind == _SERVER_NAME:
            names = _host_names(body)
    if len(names) > 1:
        raise ValueError(f"{len(names)} server names")
    return names[0] if names else None


def _host_names(extension: bytes) -> list[str]:
    """The host names of a server_name extension, lower case."""
    outer = _Cursor(extension)
    entries = _Cursor(outer.vector(2))
    if not outer.done():
        raise ValueError("bytes after its server name list")
    names = []
    while not entries.done():
        kind, name = entries.number(1), entries.vector(2)
        if kind == _HOST_NAME:
            try:
                names.append(name.decode("ascii").lower())
            except UnicodeDecodeError:
                raise ValueError("a server name that is not ASCII") from None
    return names


def tls_server_name(data: bytes) -> str | None:
    """The server name (SNI) of a TLS ClientHello at the start of ``data``, lower case;
    None when it is no whole ClientHello or names no server."""
    try:
        return tls_client_hello_server_name(data)
    except ValueError:
        return None


def _parse_head(head: bytes) -> tuple[str, str, str, list[str]]:
    """(method, target, version, header lines) of a request head, or Refused. Any control
    character but a tab is refused: an upstream that ends a line at a bare LF would read a
    header (a Host) hidden inside one of ours."""
    lines = head.decode("latin-1").removesuffix("\r\n\r\n").split("\r\n")
    if _CONTROL.search(lines[0]) or not _REQUEST_LINE.fullmatch(lines[0]):
        raise Refused("it is not an HTTP proxy request")
    method, target, version = lines[0].split(" ")
    headers = lines[1:]
    for line in headers:
        if _CONTROL.search(line) or not _FIELD_LINE.match(line):
            raise Malformed(f"a malformed header line {line[:60]!r}")
    return method, target, version, headers


def _field_values(headers: list[str], name: str) -> list[str]:
    """The values of the header ``name`` (lower case), lower case."""
    return [
        line.split(":", 1)[1].strip().lower()
        for line in headers
        if line.split(":", 1)[0].lower() == name
    ]


def _body_length(headers: list[str]) -> int:
    """How many bytes of body follow a plain request's head: its ``Content-Length``.
    A chunked body (``Transfer-Encoding``) is refused, not parsed: the request's end is
    where the proxy stops forwarding, and a length it has to work out from the client's
    chunks is one an upstream might work out differently."""
    if _field_values(headers, "transfer-encoding"):
        raise Malformed(
            "a request body with Transfer-Encoding; send it with a Content-Length",
            "411 Length Required",
        )
    lengths = set(_field_values(headers, "content-length"))
    if not lengths:
        return 0
    if len(lengths) > 1 or not _DIGITS.fullmatch(next(iter(lengths))):
        raise Malformed(f"its Content-Length {sorted(lengths)!r} is not one number")
    return int(lengths.pop())


def _destination(
    method: str, target: str, version: str, headers: list[str]
) -> tuple[str, int, bytes | None]:
    """(host, port, the request to forward or None for a tunnel) of a request head."""
    if method == "CONNECT":
        host, port = _split_authority(target, 443)
        return host, port, None
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise Refused("only absolute http:// URLs and CONNECT go through this proxy")
    try:
        host, port = url.hostname.lower(), url.port or 80
    except ValueError:  # a port that is no number, or out of range
        raise Refused(f"{target[:60]!r} has no valid port") from None
    named = _field_values(headers, "host")
    if any(_split_authority(value, 80) != (host, port) for value in named):
        raise Refused(f"its Host header {named[0]!r} names another host than its URL")
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    kept = [h for h in headers if h.split(":", 1)[0].strip().lower() not in _DROPPED_HEADERS]
    request = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
    return host, port, request.encode("latin-1")


def _split_authority(text: str, default: int) -> tuple[str, int]:
    text = text.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        number = rest.removeprefix(":")
    else:
        host, _, number = text.rpartition(":") if ":" in text else (text, "", "")
    if number and not _DIGITS.fullmatch(number):
        raise Refused(f"{text!r} has no valid port")
    return host, int(number) if number else default


async def _copy_exactly(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int
) -> None:
    """``size`` bytes from ``reader`` to ``writer`` (fewer if the reader ends first)."""
    while size > 0 and (data := await reader.read(min(_CHUNK, size))):
        writer.write(data)
        await writer.drain()
        size -= len(data)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()


def network_value(
    settings_value: bool | list[str], definition_value: bool | list[str] | None
) -> bool | list[str]:
    """The network a run's bash gets: the definition's, else the setting's."""
    return settings_value if definition_value is None else definition_value


def bash_network(
    settings_value: bool | list[str], definition_value: bool | list[str] | None
) -> bool:
    """Whether bash gets the whole network (``true``); a list is checked here, so that a
    bad entry refuses the run in one line before anything starts."""
    value = network_value(settings_value, definition_value)
    if isinstance(value, list):
        parse_rules(value)
    return value is True


async def open_proxy(
    value: bool | list[str],
    *,
    sandbox: str,
    agent_id: str,
    agent_type: str,
    backend: str = "local",
) -> EgressProxy | None:
    """The run's proxy when its network is a list and a sandbox walls bash in (under
    ``off`` nothing walls it: the list cannot be kept, and bash has the network anyway).
    Only for sub-agents on this machine: on another node, 127.0.0.1:PORT is not ours."""
    if not isinstance(value, list) or not value or sandbox == "off" or backend != "local":
        return None
    proxy = EgressProxy(value, agent_id=agent_id, agent_type=agent_type)
    proxy.port = await proxy.start()
    return proxy
