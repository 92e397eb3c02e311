"""The direct route of a model request: one POST from a guarded httpx pool.

Kept apart from ``_transport`` so that importing the model classes does not import
httpx: a sub-agent's process sends its requests through the parent and never needs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping

import httpx
from agentcell.worker.models._base import ModelError, ModelErrorKind
from agentcell.worker.models.transports._base import (
    Endpoint,
    TransportResponse,
    cannot_connect,
    connect_timed_out,
    connection_failed,
    illegal_header,
    no_answer,
    pool_busy,
    relayed_headers,
)
from agentcell.worker.models.transports._client import _connect_cause

try:  # httpx speaks HTTP/2 through h2 where it is installed (the parent offers it)
    from h2.exceptions import ProtocolError as _H2ProtocolError

    _H2_ERRORS: tuple[type[Exception], ...] = (_H2ProtocolError,)
except ImportError:  # pragma: no cover - h2 is a dependency of the parent's extra
    _H2_ERRORS = ()
#: Characters no header value may hold: h11 refuses them, h2 sends them as they are (a
#: value with CR LF in it would be two headers to a server or proxy that speaks HTTP/1.1).
_SPLITTING = ("\r", "\n", "\0")


class HttpxTransport:
    """An attempt as one POST from an httpx client (made by ``client()`` when first
    needed: building a model costs nothing, and a forked child makes its own)."""

    def __init__(
        self,
        client: Callable[[], httpx.AsyncClient],
        url: str,
        headers: Mapping[str, str],
        endpoint: Endpoint,
    ) -> None:
        self._client = client
        self._url = url
        self._headers = dict(headers)
        self.endpoint = endpoint
        # Checked here for both protocols, in our words (which never quote the key).
        self._illegal = any(c in v for v in self._headers.values() for c in _SPLITTING)

    async def open(self, body: bytes) -> TransportResponse:
        if self._illegal:
            raise illegal_header(self.endpoint)
        client = self._client()
        request = client.build_request("POST", self._url, content=body, headers=self._headers)
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise transport_failure(exc, self.endpoint) from exc
        return _HttpxResponse(response, self.endpoint)

    async def aclose(self) -> None:
        """The client belongs to whoever made it (``client``): nothing to close here."""


class _HttpxResponse:
    __slots__ = ("_endpoint", "_response", "headers", "status")

    def __init__(self, response: httpx.Response, endpoint: Endpoint) -> None:
        self._response = response
        self._endpoint = endpoint
        self.status = response.status_code
        self.headers = relayed_headers(response.headers)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for raw in self._response.aiter_raw():
                yield raw
        except httpx.HTTPError as exc:
            raise transport_failure(exc, self._endpoint) from exc
        except _H2_ERRORS as exc:  # httpcore passes h2's own error on mid-body, unmapped
            raise connection_failed(self._endpoint, exc) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


def transport_failure(exc: httpx.HTTPError, where: Endpoint) -> Exception:
    """The ``Retry`` (or final ``ModelError``) for an httpx failure to reach ``where``."""
    base, p = where.base_url, where.provider
    if isinstance(exc, httpx.UnsupportedProtocol):
        return ModelError(
            ModelErrorKind.CONFIG,
            f"{p}: the base URL '{base}' is not an http(s) URL: check {where.base_env}",
        )
    if isinstance(exc, httpx.LocalProtocolError):
        # httpcore wraps whatever h2 raised as a "local" error; our headers are checked
        # before sending (HttpxTransport), so it is the server's: a header list past h2's
        # limits, a CONTINUATION flood, broken framing. Not the key's fault, nor final.
        broken = _h2_error(exc)
        return illegal_header(where) if broken is None else connection_failed(where, broken)
    if isinstance(exc, httpx.DecodingError):
        return ModelError(ModelErrorKind.PROTOCOL, f"{p}: undecodable response body ({exc})")
    if isinstance(exc, httpx.ConnectTimeout):
        return connect_timed_out(where, where.timeout)
    if isinstance(exc, httpx.PoolTimeout):
        return pool_busy(where.max_connections, where.timeout)
    if isinstance(exc, httpx.TimeoutException):
        return no_answer(where)
    if isinstance(exc, httpx.ConnectError):
        return cannot_connect(where, _connect_cause(exc))
    return connection_failed(where, exc)  # read/write errors, a closed peer, proxy failures


def _h2_error(exc: httpx.HTTPError) -> Exception | None:
    """The h2 error under httpx's ``LocalProtocolError`` (httpcore's holds it as its
    argument), None for h11's own (an illegal header it refused to send)."""
    cause = exc.__cause__
    inner = cause.args[0] if cause is not None and cause.args else None
    return inner if isinstance(inner, _H2_ERRORS) else None
