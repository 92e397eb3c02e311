"""The entries of a ``network:`` list (settings or an agent file): host names, host:port,
``*.domain`` and IP addresses, each a ``HostRule``.

Read by the egress proxy and ``web_fetch`` when a run starts, and by the agent-file
loader, so that ``agents validate`` names an entry that would refuse the agent's start.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

DEFAULT_PORTS = (80, 443)
LOCALHOST = "localhost"  # names loopback (RFC 6761): the proxy connects there unresolved
#: What a ``localhost`` entry reaches by any of its names: the same sockets.
_LOOPBACK = frozenset({LOCALHOST, "127.0.0.1", "::1"})
_NAME = re.compile(
    r"^(\*\.)?([a-z0-9_]([a-z0-9_-]*[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$"
)


@dataclass(frozen=True)
class HostRule:
    """One entry of a ``network:`` list."""

    host: str  # lower case; "*.example.com" for a wildcard; an IP address as written
    port: int | None  # None: 80 and 443

    @property
    def address(self) -> bool:
        return ip_of(self.host) is not None

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port is not None else DEFAULT_PORTS):
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        if self.host == LOCALHOST:  # `curl 127.0.0.1:PORT` for a server "on localhost:PORT"
            return host.strip("[]") in _LOOPBACK
        return host == self.host

    def __str__(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


def parse_rules(entries: list[str]) -> list[HostRule]:
    """The rules of a ``network:`` list; ValueError (one line) for an entry that is none."""
    return [_parse_rule(entry) for entry in entries]


def _parse_rule(entry: str) -> HostRule:
    text = entry.strip().lower()
    if "/" in text:
        raise ValueError(
            f"network: entry {entry!r} is a URL or a path: write its host, or host:port "
            "(github.com, github.com:443)"
        )
    host, port = text, None
    if text.startswith("["):  # [::1]:8080
        host, _, rest = text[1:].partition("]")
        port = _port(entry, rest.removeprefix(":")) if rest else None
    elif text.count(":") == 1:
        host, _, number = text.partition(":")
        port = _port(entry, number)
    if ip_of(host) is None and not _NAME.match(host):
        raise ValueError(
            f"network: entry {entry!r} is not a host name, host:port, *.domain or IP address"
        )
    return HostRule(host, port)


def _port(entry: str, number: str) -> int:
    if not number.isdigit() or not 0 < int(number) < 65536:
        raise ValueError(f"network: entry {entry!r} has no valid port after the ':'")
    return int(number)


def ip_of(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
