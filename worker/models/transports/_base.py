"""How one model request attempt reaches a server: the ``ModelTransport`` interface.

The SSE client (``_http``) decides what to send and what an answer means (retries, the
deadline, size caps, inflating, SSE decoding); a transport only carries one attempt:
given the request body it answers with a status, a few response headers and the raw
body bytes, and can be closed (which cancels the request). The split is httpx's own
client/transport model, one level up:

- ``HttpxTransport`` (``_httpx_transport``) POSTs to the provider's URL with its headers
  (and key) from a guarded httpx pool (``_client.make_client``): the main agent in the
  parent, the in-process engine, and the parent's relay of its children's requests use
  it. It is the only piece that needs httpx, which a sub-agent's process never imports
  (the fork server's template is ~12 MiB smaller without the HTTP stack);
- the link transport (``transports._parent``) sends the body to the parent as
  a frame and gets the answer back as frames: a sub-agent process never holds a key nor
  opens a connection to a model server.

A transport reports a failure to reach the server as ``Retry`` (another attempt may
work) or ``ModelError`` (it will not), with the same words on either route.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from agentcell.worker.models._base import ModelError, ModelErrorKind

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


# A failure to reach the server in the same words on every route (``HttpxTransport``,
# the relay's ``H11Pool``): a child cannot tell which one carried its request.


def illegal_header(where: Endpoint) -> ModelError:
    """A header (the key, say) or the URL with a character HTTP forbids. Not the HTTP
    library's words: they quote the header, the key with it."""
    return ModelError(
        ModelErrorKind.CONFIG,
        f"{where.provider}: the request could not be sent (an illegal character in a header "
        f"or the URL): check {where.key_env} and {where.base_env} for stray characters",
    )


def connect_timed_out(where: Endpoint, seconds: float) -> Retry:
    return Retry(
        ModelErrorKind.TIMEOUT,
        f"cannot reach {where.base_url}: connecting timed out after {seconds:g} s; "
        f"check {where.base_env}",
    )


def cannot_connect(where: Endpoint, why: str) -> Retry:
    """``why``: the cause in words (``_client._connect_cause``)."""
    hint = "is the server running?" if why == "connection refused" else "check"
    return Retry(
        ModelErrorKind.CONNECTION,
        f"cannot reach {where.base_url}: {why}; {hint} ({where.base_env})",
    )


def pool_busy(connections: int, seconds: float) -> Retry:
    return Retry(
        ModelErrorKind.TIMEOUT,
        f"all {connections} connections of this model stayed busy for {seconds:g} s",
    )


def no_answer(where: Endpoint) -> Retry:
    base, seconds = where.base_url, where.timeout
    return Retry(
        ModelErrorKind.TIMEOUT,
        f"no answer from {base} within the {seconds:g} s timeout",
        midstream=f"the stream from {base} stalled mid-stream for {seconds:g} s",
    )


def connection_failed(where: Endpoint, exc: BaseException) -> Retry:
    """Read and write errors, a peer that closed the connection, broken framing."""
    base, detail = where.base_url, str(exc) or type(exc).__name__
    return Retry(
        ModelErrorKind.CONNECTION,
        f"the connection to {base} failed ({detail})",
        midstream=f"the connection to {base} dropped mid-stream ({detail})",
    )
