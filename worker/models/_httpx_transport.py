"""The direct route of a model request: one POST from a guarded httpx pool.

Kept apart from ``_transport`` so that importing the model classes does not import
httpx: a sub-agent's process sends its requests through the parent and never needs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping

import httpx
from agentcell.worker.models._base import ModelError, ModelErrorKind
from agentcell.worker.models._client import _connect_cause
from agentcell.worker.models._transport import (
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

    async def open(self, body: bytes) -> TransportResponse:
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
        return illegal_header(where)
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
