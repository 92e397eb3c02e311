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
    Retry,
    TransportResponse,
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
        return ModelError(
            ModelErrorKind.CONFIG,
            # (not httpx's words: they quote the header, the key with it)
            f"{p}: the request could not be sent (an illegal character in a header or the "
            f"URL): check {where.key_env} "
            f"and {where.base_env} for stray characters",
        )
    if isinstance(exc, httpx.DecodingError):
        return ModelError(ModelErrorKind.PROTOCOL, f"{p}: undecodable response body ({exc})")
    if isinstance(exc, httpx.ConnectTimeout):
        cause = f"cannot reach {base}: connecting timed out after {where.timeout:g} s"
        return Retry(ModelErrorKind.TIMEOUT, f"{cause}; check {where.base_env}")
    if isinstance(exc, httpx.PoolTimeout):
        return Retry(
            ModelErrorKind.TIMEOUT,
            f"all {where.max_connections} connections of this model stayed busy for "
            f"{where.timeout:g} s",
        )
    if isinstance(exc, httpx.TimeoutException):
        return Retry(
            ModelErrorKind.TIMEOUT,
            f"no answer from {base} within the {where.timeout:g} s timeout",
            midstream=f"the stream from {base} stalled mid-stream for {where.timeout:g} s",
        )
    if isinstance(exc, httpx.ConnectError):
        why = _connect_cause(exc)
        hint = "is the server running?" if why == "connection refused" else "check"
        return Retry(
            ModelErrorKind.CONNECTION, f"cannot reach {base}: {why}; {hint} ({where.base_env})"
        )
    # read/write errors, a peer that closed the connection, proxy failures
    detail = str(exc) or type(exc).__name__
    return Retry(
        ModelErrorKind.CONNECTION,
        f"the connection to {base} failed ({detail})",
        midstream=f"the connection to {base} dropped mid-stream ({detail})",
    )
