"""How one model request attempt reaches a server: the ``ModelTransport`` interface.

The SSE client (``_http``) decides what to send and what an answer means (retries, the
deadline, size caps, inflating, SSE decoding); a transport only carries one attempt:
given the request body it answers with a status, a few response headers and the raw
body bytes, and can be closed (which cancels the request). The split is httpx's own
client/transport model, one level up:

- ``HttpxTransport`` POSTs to the provider's URL with its headers (and key) from a
  guarded httpx pool (``_client.make_client``): the main agent in the parent, the
  in-process engine, and the parent's relay of its children's requests use it;
- the link transport (``agentcell.worker._model_link``) sends the body to the parent as
  a frame and gets the answer back as frames: a sub-agent process never holds a key nor
  opens a connection to a model server.

A transport reports a failure to reach the server as ``Retry`` (another attempt may
work) or ``ModelError`` (it will not), with the same words on either route.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

import httpx
from agentcell.worker.models._base import ModelError, ModelErrorKind
from agentcell.worker.models._client import _connect_cause

#: The response headers a transport hands on (lower-case). The client reads no others,
#: and a relayed answer carries no others to the child.
RELAYED_HEADERS = (
    "content-type",
    "content-encoding",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "x-request-id",
    "request-id",
    "location",
)


class Retry(Exception):
    """A failure that another attempt may fix, if nothing was streamed yet.

    ``cause`` names what went wrong; ``midstream`` replaces it when text had already
    been shown (then there is no retry: the caller would see the text twice).
    """

    def __init__(
        self,
        kind: ModelErrorKind,
        cause: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        midstream: str | None = None,
    ) -> None:
        super().__init__(cause)
        self.kind = kind
        self.cause = cause
        self.status = status
        self.retry_after = retry_after
        self.midstream = midstream


class TransportResponse(Protocol):
    """One attempt's answer: its head at once, its body as it arrives."""

    status: int
    headers: dict[str, str]  # only RELAYED_HEADERS, lower-case names

    def chunks(self) -> AsyncIterator[bytes]:
        """The raw body bytes (still compressed if the server compressed them); raises
        ``Retry``/``ModelError`` if the transport fails on the way."""
        ...

    async def aclose(self) -> None:
        """Done with it: an unfinished request is cancelled."""
        ...


class ModelTransport(Protocol):
    async def open(self, body: bytes) -> TransportResponse:
        """Send one attempt; return once the response head is in."""
        ...

    async def aclose(self) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a transport sends, and the names its error messages tell the user to check."""

    provider: str  # "openai": every message starts with it
    base_url: str
    base_env: str  # "OPENAI_BASE_URL"
    key_env: str  # "OPENAI_API_KEY"
    timeout: float
    max_connections: int


def relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed subset of a response's headers."""
    return {name: headers[name] for name in RELAYED_HEADERS if name in headers}


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
