"""bash's one way out under a ``network:`` list: a relay on its own loopback.

bash's commands run in a network namespace of their own with only ``lo`` (no route out).
The sub-agent has that namespace made once, owned by a user namespace of its own
(``_bash_userns``: bash's preexec, holding no capability, could not join it otherwise),
enters it from a short-lived thread (a network namespace is per thread: the rest of the
process stays in the host's), brings ``lo`` up there and
binds a listener on the namespace's ``127.0.0.1:PORT``, where PORT is the parent's proxy
port. A socket stays in the namespace it was made in, so the sub-agent's own event loop
(in the host's namespace) accepts on it and copies each connection to the parent's proxy
on the host's ``127.0.0.1:PORT``. bash's preexec only ``setns``-es into the namespaces: no
socket is made after the seccomp filter that refuses ``AF_UNIX`` is in place, and the
Landlock layers allow TCP to PORT alone (the child's layer to reach the proxy, bash's to
reach the relay), so a connection that bypasses the proxy has nowhere to go.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import struct
import threading

from agentcell.protocol import gather_owned

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFF_RUNNING = 0x40
_CHUNK = 64 * 1024


class Namespace:
    """The network namespace bash's commands join, and the relay's listener in it."""

    def __init__(self, userfd: int, nsfd: int, listener: socket.socket, port: int) -> None:
        self.userfd = userfd  # the user namespace that owns it (bash joins that first)
        self.nsfd = nsfd
        self.listener = listener
        self.port = port
        self._server: asyncio.AbstractServer | None = None

    async def start_relay(self) -> None:
        """Accept on the namespace's loopback and copy each connection to the proxy."""
        if self._server is None:
            self._server = await asyncio.start_server(self._relay, sock=self.listener)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            writer.close()
            return
        try:
            await gather_owned(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            up_writer.close()
            writer.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.listener.close()
        for fd in (self.nsfd, self.userfd):
            with contextlib.suppress(OSError):
                os.close(fd)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()


def make_namespace(port: int, userfd: int, nsfd: int) -> Namespace | str:
    """The network namespace ``nsfd`` (owned by the user namespace ``userfd``, both made
    by ``_bash_userns``) with ``lo`` up and a listener on its 127.0.0.1:``port``, or why
    not (one line). The namespace keeps both descriptors."""
    found: list[tuple[socket.socket] | str] = []
    thread = threading.Thread(target=_in_namespace, args=(nsfd, port, found), daemon=True)
    thread.start()
    thread.join()
    answer = found[0] if found else "the namespace thread ended without an answer"
    if isinstance(answer, str):
        os.close(nsfd)
        return answer
    return Namespace(userfd, nsfd, answer[0], port)


def _in_namespace(nsfd: int, port: int, found: list[tuple[socket.socket] | str]) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(nsfd, _CLONE_NEWNET) != 0:  # this thread only: the process stays outside
        found.append(f"setns(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}")
        return
    try:
        _bring_up_loopback()
        listener = socket.create_server(("127.0.0.1", port), backlog=64)
        listener.setblocking(False)
    except OSError as exc:
        found.append(f"loopback relay: {exc.strerror or exc}")
        return
    found.append((listener,))


def _bring_up_loopback() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(
            sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP | _IFF_RUNNING)
        )


def proxy_env(port: int) -> dict[str, str]:
    """The variables that send bash's HTTP(S) clients (curl, pip, npm, git) to the relay."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    env = {name: url for name in names} | {name.lower(): url for name in names}
    # Nothing goes around the proxy: there is no other way out to go around it by.
    env |= {"NO_PROXY": "", "no_proxy": "", "PIP_PROXY": url}
    env |= {"npm_config_proxy": url, "npm_config_https_proxy": url}
    return env


#: What HTTP clients print when the network is walled off (pip, urllib, requests, curl,
#: git, npm, name resolution): a failing command with one of these gets a hint.
_NETWORK_FAILURES = (
    "No matching distribution found",
    "urlopen error",
    "Failed to establish a new connection",
    "NewConnectionError",
    "ProxyError",
    "Tunnel connection failed",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Failed to connect to",
    "Couldn't connect to server",
    "CONNECT tunnel failed",
    "getaddrinfo",
    "ENOTFOUND",
    "ECONNREFUSED",
    "ConnectionRefusedError",
    "in create_connection",
    "not allowed by network:",
)


def network_hint(text: str, *, walled: bool, proxied: bool) -> str | None:
    """One line pointing at the sandbox and ``network:`` when ``text`` (a failed
    command's output) looks like a refused connection; None otherwise."""
    if not (walled or proxied) or not any(sign in text for sign in _NETWORK_FAILURES):
        return None
    if proxied:
        return (
            "[sandbox: bash reaches only the hosts of this agent's `network:` list, through "
            "the proxy in HTTPS_PROXY; any other host is refused (403) and direct "
            "connections fail: add the host to the agent's `network:` list to allow it]"
        )
    return (
        "[sandbox: this agent's bash has no network; name the hosts it needs in its "
        'definition, e.g. network: ["pypi.org", "files.pythonhosted.org"]]'
    )
