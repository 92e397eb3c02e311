"""The httpx client a model instance talks through: the block guard, proxies, TLS, and
connections a spare process opens before its run (``prepare_connection``).

Split from ``_http`` (the request loop and SSE parsing), which imports it only when a
model sends directly: a sub-agent's process, whose requests go through the parent,
never imports httpx.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import os
import socket
import ssl
import urllib.request

import httpx
from agentcell.worker.models._base import ModelError, ModelErrorKind

#: Set to "1" to make every request to a non-loopback host fail before it is sent.
BLOCK_ENV = "AGENTCELL_BLOCK_REAL_MODELS"
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: the only hosts allowed when blocked."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_not_blocked(url: httpx.URL, hint: str = "") -> None:
    """Raise BLOCKED for a non-loopback URL while AGENTCELL_BLOCK_REAL_MODELS=1."""
    if os.environ.get(BLOCK_ENV) == "1" and not is_loopback(url.host):
        where = f"point {hint} at a local server or " if hint else ""
        raise ModelError(
            ModelErrorKind.BLOCKED,
            f"real model requests are blocked ({BLOCK_ENV}=1): refused a request to "
            f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}; only loopback hosts "
            f"(127.0.0.1, ::1, localhost) are allowed: {where}unset {BLOCK_ENV}",
        )


class _GuardedTransport(httpx.AsyncBaseTransport):
    """Wraps the real transport so that the block guard runs for every request sent.

    Sitting under the client (not in the provider code) means no code path that uses
    this client, redirects and ad-hoc requests included, can reach a real model.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, hint: str) -> None:
        self._inner = inner
        self._hint = hint

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        check_not_blocked(request.url, self._hint)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@functools.cache
def _shared_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs tens of milliseconds; do it once per process, not per
    # model, and only when some model actually talks https.
    return httpx.create_ssl_context(trust_env=True)


def _env_proxy(url: httpx.URL) -> str | None:
    """The proxy the environment asks for this URL (HTTPS_PROXY, NO_PROXY, ...), if any.

    Loopback never goes through a proxy: a CI proxy must not swallow test servers.
    """
    if is_loopback(url.host) or os.environ.get(BLOCK_ENV) == "1":
        return None  # (a blocked host is never contacted, so it needs no proxy lookup)
    if urllib.request.proxy_bypass(url.host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(url.scheme) or proxies.get("all")


_UNUSED_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def make_client(
    base_url: str,
    *,
    timeout: float,
    max_connections: int = 4,
    hint: str = "",
    http2: bool = False,
) -> httpx.AsyncClient:
    """An httpx client for one model instance, with the block guard in its transport.

    The pool is deliberately small: httpx 0.28 rescans every pooled connection on each
    request, so one big pool shared by many agents costs time quadratic in its size.
    ``timeout`` bounds connecting and each wait for bytes (not the whole stream).
    """
    url = httpx.URL(base_url)
    # TLS is never used for an http:// base URL (redirects are not followed): give it a
    # context made once, at import — in the fork server — rather than let httpx build one
    # (OpenSSL set-up, milliseconds) for every client in every child.
    verify = _shared_ssl_context() if url.scheme == "https" else _UNUSED_TLS
    try:
        inner = httpx.AsyncHTTPTransport(
            verify=verify,
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                # tools often run longer than httpx's 5 s default between two turns; a
                # new TLS handshake per turn would cost more CPU than the whole stream
                keepalive_expiry=60.0,
            ),
            proxy=_env_proxy(url),
            http2=http2,  # offered in TLS's ALPN; plain http stays HTTP/1.1
        )
    except ImportError as exc:  # e.g. a socks:// proxy without httpx[socks]
        raise ModelError(
            ModelErrorKind.CONFIG, f"cannot use the proxy from the environment: {exc}"
        ) from exc
    return httpx.AsyncClient(
        transport=_GuardedTransport(inner, hint),
        timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)),
        headers={"user-agent": "agentcell", "accept-encoding": "identity"},
        follow_redirects=False,
        trust_env=False,  # proxies are resolved above; no .netrc lookups per request
    )


#: Clients a spare process connected before its run, by base URL, with the settings
#: they were made with; the first model on that URL adopts one (``SSEClient.client``).
_prepared: dict[str, tuple[httpx.AsyncClient, float, int, str | None]] = {}
#: The longest a spare spends connecting ahead: a slow endpoint must not hold its Hello.
PREPARE_TIMEOUT_S = 2.0


async def prepare_connection(
    base_url: str, *, client_timeout: float = 600, max_connections: int = 4, hint: str = ""
) -> bool:
    """Open a connection to ``base_url`` (TCP, and TLS for https) before any model
    needs it, so a sub-agent's first request does not pay the handshake.

    One unauthenticated GET of the base URL does it (no key is in a spare yet; whatever
    it answers, the connection stays in the pool). A connection the server closes while
    it idles is dropped by the pool at the next request and a new one made: never an
    error. False if nothing could be opened (the endpoint is down, slow or blocked)."""
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https"):
        return False
    try:
        client = make_client(
            base_url, timeout=client_timeout, max_connections=max_connections, hint=hint
        )
    except ModelError:
        return False
    try:
        async with asyncio.timeout(PREPARE_TIMEOUT_S):
            response = await client.get(base_url)
            await response.aread()
    except (httpx.HTTPError, ModelError, TimeoutError, OSError):
        await client.aclose()
        return False
    replaced = _prepared.pop(base_url, None)
    if replaced is not None:
        await replaced[0].aclose()
    _prepared[base_url] = (client, client_timeout, max_connections, _env_proxy(url))
    return True


def _adopt_prepared(
    base_url: str, timeout: float, max_connections: int
) -> httpx.AsyncClient | None:
    """The client ``prepare_connection`` made for this URL, if it was made the same way
    (and the environment still asks for the same proxy)."""
    found = _prepared.get(base_url)
    if found is None:
        return None
    client, made_timeout, made_connections, proxy = found
    if (made_timeout, made_connections, proxy) != (
        timeout,
        max_connections,
        _env_proxy(httpx.URL(base_url)),
    ):
        return None  # kept for a model that is made the same way
    del _prepared[base_url]
    return client


def _connect_cause(exc: BaseException) -> str:
    """Why a connection could not be made, in words, from the exception chain."""
    seen: BaseException | None = exc
    while seen is not None:
        refused = getattr(seen, "errno", None) == errno.ECONNREFUSED
        if refused or isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "the host name does not resolve"
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    if "refused" in text.lower() or "all connection attempts failed" in text.lower():
        return "connection refused"
    return text or type(exc).__name__
