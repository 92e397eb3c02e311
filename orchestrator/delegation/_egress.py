"""The parent's egress proxy: a sub-agent's bash reaches the hosts of its ``network:`` list.

One proxy per sub-agent run with a list, on the parent's ``127.0.0.1``. bash's commands run
in a network namespace whose only way out is a relay to this proxy (``worker._egress_relay``),
with ``HTTP(S)_PROXY`` pointing at it. Each connection names its host once, in the
``CONNECT host:port`` line (HTTPS and anything tunnelled) or in the absolute URL of a plain
HTTP request (whose ``Host`` header must agree, as a tunnel's TLS server name must); the
proxy allows it only if an entry of the list matches, resolves the name itself, and
connects to the address it checked (no second lookup for a rebinding DNS server to answer
differently). A name that resolves to a private,
loopback, link-local or otherwise special address is refused unless the entry names that
address itself (``127.0.0.1:8080``). A refusal is a ``403`` whose status line and body name
the host, the agent and the setting that would allow it.

Entries: ``pypi.org`` (ports 80 and 443), ``github.com:443`` (that port only),
``*.example.com`` (any name below example.com, not example.com itself), an IP address
with or without a port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from agentcell.orchestrator._host_rules import ip_of, parse_rules
from agentcell.orchestrator._tasks import gather_owned

_HEAD_LIMIT = 16 * 1024
_HEAD_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 15.0
_CHUNK = 64 * 1024
_LOG_MAX = 500
_FIRST_WAIT_S = 5.0  # for a tunnel's client's first bytes (its TLS ClientHello)
_MAX_CONNECTIONS = 64  # open at once, per sub-agent: more wait for one to end
_DROPPED_HEADERS = frozenset(
    {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}
)

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
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = (lines[0].split(" ") + ["", "", ""])[:3]
        headers = [line for line in lines[1:] if line]
        shown = target
        try:
            host, port, forwarded = _destination(method, target, version, headers)
            shown = f"{host}:{port}"
            address = await self.check(host, port)
        except Refused as exc:
            self._note(f"refused {shown}: {exc}")
            writer.write(self._refusal(shown, str(exc)))
            await writer.drain()
            return
        if forwarded is None:  # a tunnel: its TLS server name must be the CONNECT host
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            forwarded = await _first_bytes(reader)
            named = tls_server_name(forwarded)
            if named is not None and named != host:
                self._note(f"refused {shown}: its TLS server name {named!r} is another host")
                return
        async with asyncio.timeout(_CONNECT_TIMEOUT_S):
            up_reader, up_writer = await asyncio.open_connection(address, port)
        self._note(f"reached {host}:{port}")
        up_writer.write(forwarded)
        try:
            await gather_owned(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            up_writer.close()

    async def check(self, host: str, port: int) -> str:
        """The address to connect to for ``host:port``, or Refused with the reason."""
        rule = next((r for r in self.rules if r.matches(host, port)), None)
        if rule is None:
            raise Refused("it is not in the agent's network: list")
        if ip_of(host) is not None:  # named by its address: that address, as the entry says
            return host.strip("[]")
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:
            raise Refused(f"the name does not resolve ({exc})") from None
        special = [a for a in addresses if _special(a)]
        if special or not addresses:
            raise Refused(
                f"it resolves to the private or loopback address {special[0] if special else '?'}"
                " (only an entry that names an address itself, such as 127.0.0.1:8080, "
                "reaches one)"
            )
        return addresses[0]

    def _refusal(self, shown: str, reason: str) -> bytes:
        body = (
            f"agentcell sandbox refused {shown} for agent {self.agent_type} ({self.agent_id}):"
            f" {reason}. Its bash reaches only the hosts of its network: list; to allow this"
            f" one, add it to the agent file's `network:` list (or the `network` setting).\n"
        )
        data = body.encode()
        status = (
            f"HTTP/1.1 403 agentcell sandbox refused {shown} for agent {self.agent_type}: "
            "not allowed by its network: list"
        )
        return (
            f"{status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        ).encode() + data

    def _note(self, line: str) -> None:
        if len(self.log) < _LOG_MAX:
            self.log.append(line)


async def _first_bytes(reader: asyncio.StreamReader) -> bytes:
    """What a tunnel's client sends first: a whole TLS record when it starts one (its
    ClientHello), b"" for a protocol whose server speaks first (after ``_FIRST_WAIT_S``)."""
    try:
        async with asyncio.timeout(_FIRST_WAIT_S):
            data = await reader.read(_CHUNK)
            while _tls_record_wants(data):
                more = await reader.read(_CHUNK)
                if not more:
                    break
                data += more
    except TimeoutError:
        return b""
    return data


def _tls_record_wants(data: bytes) -> bool:
    if len(data) < 5 or data[0] != 0x16:
        return data[:1] == b"\x16" and len(data) < 5
    return len(data) < min(5 + int.from_bytes(data[3:5], "big"), _HEAD_LIMIT)


def tls_server_name(data: bytes) -> str | None:
    """The server name (SNI) of a TLS ClientHello at the start of ``data``, lower case;
    None when it is no ClientHello or names no server."""
    if len(data) < 9 or data[0] != 0x16 or data[5] != 0x01:
        return None
    at = 9 + 2 + 32  # record and handshake headers, client_version, random
    try:
        at += 1 + data[at]  # session id
        at += 2 + int.from_bytes(data[at : at + 2], "big")  # cipher suites
        at += 1 + data[at]  # compression methods
        end = at + 2 + int.from_bytes(data[at : at + 2], "big")
        at += 2
        while at + 4 <= min(end, len(data)):
            kind, size = (
                int.from_bytes(data[at : at + 2], "big"),
                int.from_bytes(data[at + 2 : at + 4], "big"),
            )
            if kind == 0:  # server_name: list length, name type (0: host name), name
                length = int.from_bytes(data[at + 7 : at + 9], "big")
                return data[at + 9 : at + 9 + length].decode("ascii").lower()
            at += 4 + size
    except (IndexError, UnicodeDecodeError):
        return None
    return None


def _destination(
    method: str, target: str, version: str, headers: list[str]
) -> tuple[str, int, bytes | None]:
    """(host, port, the request to forward or None for a tunnel) of a request head."""
    if not version.startswith("HTTP/"):
        raise Refused("it is not an HTTP proxy request")
    if method == "CONNECT":
        host, port = _split_authority(target, 443)
        return host, port, None
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise Refused("only absolute http:// URLs and CONNECT go through this proxy")
    host, port = url.hostname.lower(), url.port or 80
    named = [h.split(":", 1)[1].strip().lower() for h in headers if h.lower().startswith("host:")]
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
    if number and not number.isdigit():
        raise Refused(f"{text!r} has no valid port")
    return host, int(number) if number else default


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
