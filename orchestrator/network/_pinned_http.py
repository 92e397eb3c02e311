"""An httpx transport that connects only to the address agentcell checked for a host.

web_fetch checks each hop's name (``EgressProxy.check``: in the agent's list, resolving
to no private or loopback address) and used to let httpx connect by the name, which
resolves it again: a rebinding DNS server could answer public to the check and
``127.0.0.1`` to the connection, and the parent — unsandboxed — would fetch from the
user's local services. Here the connection goes to the checked address itself: the
network backend maps ``(host, port)`` to its pinned address and refuses a host that has
none. TLS still verifies the certificate against the name (httpcore sends the URL's host
as SNI and checks it), and the request's ``Host`` header is the name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore
import httpx


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """TCP connections to pinned addresses only (``pins[(host, port)] = address``)."""

    def __init__(self) -> None:
        self.pins: dict[tuple[str, int], str] = {}
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        address = self.pins.get((host, port))
        if address is None:  # never resolved here: only what was checked is reached
            raise httpcore.ConnectError(f"{host}:{port} was not checked before connecting")
        return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("web_fetch connects to no UNIX socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _as_httpx(exc: Exception) -> httpx.TransportError:
    """httpcore's error as httpx's of the same name (web_fetch reports httpx's)."""
    kind = getattr(httpx, type(exc).__name__, httpx.TransportError)
    if not (isinstance(kind, type) and issubclass(kind, httpx.TransportError)):
        kind = httpx.TransportError
    return kind(str(exc))


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError) as exc:
            raise _as_httpx(exc) from exc

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class PinnedTransport(httpx.AsyncBaseTransport):
    """httpx's transport over ``backend``: every connection to a pinned address."""

    def __init__(self, backend: PinnedBackend) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(), network_backend=backend
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = httpcore.URL(
            scheme=request.url.raw_scheme,
            host=request.url.raw_host,
            port=request.url.port,
            target=request.url.raw_path,
        )
        sent = httpcore.Request(
            request.method,
            url,
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            got = await self._pool.handle_async_request(sent)
        except (
            httpcore.NetworkError,
            httpcore.TimeoutException,
            httpcore.ProtocolError,
            httpcore.UnsupportedProtocol,
        ) as exc:
            raise _as_httpx(exc) from exc
        return httpx.Response(
            got.status, headers=got.headers, stream=_Body(got.stream), extensions=got.extensions
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
