"""HTTP plumbing shared by the streaming providers: retries, deadline, caps, errors, SSE.

One ``SSEClient`` per model instance runs each model call: the attempt loop (retries
with backoff, ``Retry-After``, one permit per attempt), the total deadline, the size cap
and bounded inflating (``BodyDecoder``), SSE decoding, and feeding the provider's
``StreamHandler``. Each attempt goes through a ``ModelTransport`` (``_transport``): by
default its own small httpx pool (made by ``_client``, with the block guard, proxies
and TLS), in a sub-agent the link to the parent. Everything a provider needs from the
network is here, so the providers are only (de)serialisation.

CPU per model turn matters (hundreds of agents share a few cores), so the hot path is
one generator layer deep per attempt, parses SSE on bytes with ``bytes.splitlines`` and
leaves JSON to msgspec in the providers.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agentcell.worker.models._base import (
    ModelError,
    ModelErrorKind,
    ModelResponse,
    StreamItem,
    TextPart,
    ToolCallStart,
)
from agentcell.worker.models._content_coding import CodingError, ContentDecoder
from agentcell.worker.models._gate import Permit, RequestGate, estimate_tokens, request_gate
from agentcell.worker.models._http_options import (
    HttpOptions,
)
from agentcell.worker.models.transports._base import (
    Endpoint,
    ModelTransport,
    Retry,
    TransportResponse,
)
from agentcell.worker.models.transports._error_body import error_code, error_message

if TYPE_CHECKING:  # imported where a model sends directly (never in a sub-agent's process)
    import httpx
    from agentcell.worker.models.transports._direct import HttpxTransport

#: Awaited between attempts. Tests replace it to observe the delays without waiting.
sleep: Callable[[float], Any] = asyncio.sleep

_MAX_BACKOFF_S = 30.0  # cap of one exponential backoff step
_MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After fails at once: waiting is pointless
_MAX_ERROR_BODY = 64 * 1024  # bytes of an error body read to find the server's message
_MAX_LINE = 4 * 1024 * 1024  # an SSE line longer than this is not an event stream
_HEAD_BYTES = 200  # bytes kept from the start of a body for error messages
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one event's data, all its lines together

_RETRY_STATUS = frozenset({408, 409, 429})


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds asked for by ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP-date)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            seconds = float(value) / 1000.0
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def backoff_delay(attempt: int, base: float) -> float:
    """Exponential backoff with full jitter: uniform in [0, base * 2**attempt], capped."""
    return random.uniform(0.0, min(_MAX_BACKOFF_S, base * (2**attempt)))


class SSEDecoder:
    """Incremental ``text/event-stream`` parser working on bytes.

    ``feed`` takes whatever the socket gave and returns the events it completed as
    ``(event_name, data)`` pairs (``event_name`` is ``b""`` when the event had none).
    Multi-line data is joined with ``\\n``; comments and ``id:``/``retry:`` lines are
    ignored, as are events without data.
    """

    __slots__ = ("_cr", "_data", "_data_size", "_event", "_tail", "head", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        # Every buffer grows by appending (linear in what arrives, however it is split):
        # an incomplete line, and the data lines of the event being read.
        self._tail = bytearray()
        self._event = b""
        self._data: list[bytes] | None = None
        self._data_size = 0
        self._cr = False  # the last chunk ended in \r: a leading \n is its \r\n's end
        self.head = b""  # the first bytes of the body, quoted in error messages
        self.max_event_bytes = max_event_bytes

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if len(self.head) < _HEAD_BYTES:
            self.head += chunk[: _HEAD_BYTES - len(self.head)]
        if b"\n" not in chunk and b"\r" not in chunk:  # the middle of a long line
            self._tail += chunk
            self._check_line()
            return []
        if self._tail:
            self._tail += chunk
            buf = bytes(self._tail)
            self._tail.clear()
        else:
            buf = chunk
        lines = buf.splitlines()
        last = buf[-1]
        if last in (10, 13):  # \n or \r: every line is complete
            self._cr = last == 13
        else:
            self._tail += lines.pop()
            self._check_line()
        events: list[tuple[bytes, bytes]] = []
        for line in lines:
            if not line:
                if self._data is not None:
                    events.append((self._event, b"\n".join(self._data)))
                    self._data = None
                    self._data_size = 0
                self._event = b""
            elif line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                if self._data is None:
                    self._data = []
                self._data.append(value)
                self._data_size += len(value) + 1
                if self._data_size > self.max_event_bytes:
                    raise ModelError(
                        ModelErrorKind.PROTOCOL,
                        f"the server sent an event of more than {self.max_event_bytes} bytes "
                        "(the limit of one event): not a sane event stream",
                    )
            elif line.startswith(b"event:"):
                self._event = line[6:].strip()
        return events

    def _check_line(self) -> None:
        if len(self._tail) > _MAX_LINE:
            raise ModelError(
                ModelErrorKind.PROTOCOL,
                f"the server sent a line of more than {_MAX_LINE} bytes: not an event stream",
            )

    def close(self) -> list[tuple[bytes, bytes]]:
        """Events left at the end of the body: a last event missing its blank line."""
        if self._data is None:
            return []
        data, self._data = b"\n".join(self._data), None
        return [(self._event, data)]


class Inflater:
    """The body's bytes, decoded in bounded steps (we ask for identity; a server or
    proxy may compress anyway): every layer of its ``Content-Encoding``, at most 64 KiB
    per step (``_content_coding``). httpx would inflate a whole chunk at once: a gzip
    bomb's 64 KiB chunk becomes gigabytes in one call that blocks the event loop."""

    __slots__ = ("_decoder", "_provider")

    def __init__(self, encoding: str, provider: str) -> None:
        self._provider = provider
        try:
            self._decoder = ContentDecoder(encoding)
        except CodingError as exc:
            raise self._error(exc) from None

    def pieces(self, raw: bytes) -> Iterator[bytes]:
        if self._decoder.identity:
            yield raw
            return
        try:
            yield from self._decoder.pieces(raw)
        except CodingError as exc:
            raise self._error(exc) from None

    def _error(self, exc: CodingError) -> ModelError:
        return ModelError(
            ModelErrorKind.PROTOCOL,
            f"{self._provider}: the server compressed the stream (agentcell asks for "
            f"identity): {exc}",
        )


class BodyDecoder:
    """A response body's raw bytes in, its events out: inflated in bounded steps, its
    size capped (after inflating), split into SSE events. ``too_large`` makes the error
    for a body past ``max_bytes``."""

    __slots__ = ("_inflater", "_too_large", "max_bytes", "received", "sse")

    def __init__(
        self,
        encoding: str,
        provider: str,
        max_bytes: int,
        too_large: Callable[[], Exception],
        *,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self._inflater = Inflater(encoding, provider)
        self._too_large = too_large
        self.max_bytes = max_bytes
        self.received = 0
        self.sse = SSEDecoder(max_event_bytes)

    def feed(self, raw: bytes) -> list[tuple[bytes, bytes]]:
        events: list[tuple[bytes, bytes]] = []
        for chunk in self._inflater.pieces(raw):
            self.received += len(chunk)
            if self.received > self.max_bytes:
                raise self._too_large()
            events += self.sse.feed(chunk)
        return events

    def close(self) -> list[tuple[bytes, bytes]]:
        return self.sse.close()


class _Attempt:
    """What one attempt has done so far: its handler, whether text went out, its answer."""

    __slots__ = ("handler", "response", "streamed")

    def __init__(self, handler: StreamHandler) -> None:
        self.handler = handler
        self.streamed = False
        self.response: ModelResponse | None = None


class _DeadlinePassed(Exception):
    """The request's total deadline passed (bytes may still have been trickling in)."""


async def aiter_until(chunks: AsyncIterator[bytes], deadline: float) -> AsyncIterator[bytes]:
    """``chunks`` until the loop time ``deadline``; then ``_DeadlinePassed``.

    The idle timeout resets on every byte: a server sending one byte a second would
    otherwise hold a request (and its sub-agent) for ever.
    """
    loop = asyncio.get_running_loop()
    iterator = aiter(chunks)
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise _DeadlinePassed
        try:
            async with asyncio.timeout(remaining):
                chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if loop.time() >= deadline:
                raise _DeadlinePassed from None
            raise
        yield chunk


class StreamHandler(Protocol):
    """What a provider supplies per attempt to turn events into a response."""

    #: events seen so far; none at all means the body was not an event stream
    events: int

    def feed(self, event: bytes, data: bytes) -> str | list[ToolCallStart] | None:
        """Take one event; return assistant text to stream, if it carried some, or the
        tool calls whose names it brought (announced before their arguments are whole).

        Raises ``ModelError`` for a final failure and ``Retry`` for one that may be
        retried if no text has been streamed yet (an overloaded error event).
        """
        ...

    def finish(self) -> ModelResponse | None:
        """The whole response, or None if the stream ended before it was complete."""
        ...


class SSEClient:
    """Runs model calls over HTTP for one provider instance; see the module docstring.

    ``provider`` prefixes every error message ("openai"); ``key_env``/``base_env`` are the
    environment variables the messages tell the user to check.
    """

    def __init__(
        self,
        *,
        provider: str,
        model_name: str,
        base_url: str,
        key_env: str,
        base_env: str,
        options: HttpOptions,
    ) -> None:
        """``base_url``: the model's, resolved (``options.base_url`` and ``api_key`` are
        the model's business: the key travels in the headers of each ``stream``)."""
        timeout, max_retries = options.timeout, options.max_retries
        retry_base_delay, max_connections = options.retry_base_delay, options.max_connections
        if max_retries < 0 or timeout <= 0 or retry_base_delay < 0 or max_connections < 1:
            raise ModelError(
                ModelErrorKind.CONFIG,
                f"{provider}: invalid options: max_retries={max_retries}, timeout={timeout}, "
                f"retry_base_delay={retry_base_delay}, max_connections={max_connections}",
            )
        self.provider = provider
        self.model_name = model_name
        self.base_url = base_url
        self.key_env = key_env
        self.base_env = base_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.max_connections = max_connections
        deadline, max_response_bytes = options.deadline, options.max_response_bytes
        if deadline <= 0 or max_response_bytes < 1:
            raise ModelError(
                ModelErrorKind.CONFIG,
                f"{provider}: invalid options: deadline={deadline}, "
                f"max_response_bytes={max_response_bytes}",
            )
        self.deadline = deadline
        self.max_response_bytes = max_response_bytes
        self._client: httpx.AsyncClient | None = None
        self._pid = 0
        self._closed = False
        #: Where attempts go; None: the direct route, from this model's own httpx pool.
        self.transport = options.transport

    @property
    def client(self) -> httpx.AsyncClient:
        """The httpx client, made on first use and again in a forked child.

        Made lazily so that building a model costs nothing, and per process so that a
        child never shares its parent's pooled sockets.
        """
        if self._closed:
            raise ModelError(
                ModelErrorKind.CONFIG, f"{self.provider}: the model was closed (aclose)"
            )
        pid = os.getpid()
        if self._client is None or self._pid != pid:
            from agentcell.worker.models.transports._client import _adopt_prepared, make_client

            self._client = _adopt_prepared(
                self.base_url, self.timeout, self.max_connections
            ) or make_client(
                self.base_url,
                timeout=self.timeout,
                max_connections=self.max_connections,
                hint=self.base_env,
            )
            self._pid = pid
        return self._client

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(
            provider=self.provider,
            base_url=self.base_url,
            base_env=self.base_env,
            key_env=self.key_env,
            timeout=self.timeout,
            max_connections=self.max_connections,
        )

    def http_transport(self, url: str, headers: Mapping[str, str]) -> HttpxTransport:
        """The direct route: POST ``url`` from this model's own pool (``client``)."""
        from agentcell.worker.models.transports._direct import HttpxTransport

        return HttpxTransport(lambda: self.client, url, headers, self.endpoint)

    async def aclose(self) -> None:
        self._closed = True
        if self.transport is not None:
            await self.transport.aclose()
        client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            await client.aclose()

    async def stream(
        self,
        url: str,
        headers: dict[str, str],
        prepare: Callable[[], bytes],
        new_handler: Callable[[], StreamHandler],
    ) -> AsyncIterator[StreamItem]:
        """POST the body ``prepare()`` returns and stream the answer, with retries.

        ``prepare`` runs inside the generator so that configuration errors surface
        where the caller iterates, like every other model error. ``url`` and ``headers``
        serve the direct route only: a ``transport`` given at construction has its own.
        """
        body = prepare()
        if self._closed:
            raise ModelError(
                ModelErrorKind.CONFIG, f"{self.provider}: the model was closed (aclose)"
            )
        transport = self.transport or self.http_transport(url, headers)
        gate = request_gate.get()
        attempt = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline  # the deadline covers every attempt
        while True:
            if loop.time() >= deadline:
                raise self._deadline_passed()
            state = _Attempt(new_handler())
            failure: Retry | None = None
            # Every attempt is a request the provider counts: each takes its own permit.
            permit = await self._permit(gate, body)
            try:
                async for item in self._attempt(transport, body, state, deadline):
                    yield item
            except Retry as exc:
                failure = exc
            except _DeadlinePassed:
                raise self._deadline_passed() from None
            finally:
                # Before the answer is handed on: the caller may hold it for a long time.
                if permit is not None:
                    _release(permit, state.response, failure)
            if failure is None:
                assert state.response is not None
                yield state.response
                return
            delay = self._retry_delay(failure, attempt, streamed=state.streamed)
            attempt += 1
            await sleep(delay)

    async def _attempt(
        self, transport: ModelTransport, body: bytes, state: _Attempt, deadline: float
    ) -> AsyncIterator[StreamItem]:
        """One attempt: send, check the head, decode the body, feed the handler. Sets
        ``state.response``; raises ``Retry`` for what another attempt may fix."""
        resp = await transport.open(body)
        try:
            ctype = await self._check_head(resp)
            decoder = BodyDecoder(
                resp.headers.get("content-encoding", ""),
                self.provider,
                self.max_response_bytes,
                self._too_large,
            )
            handler = state.handler
            async for raw in aiter_until(resp.chunks(), deadline):
                for event, data in decoder.feed(raw):
                    out = handler.feed(event, data)
                    if out:
                        if isinstance(out, str):
                            state.streamed = True
                            yield TextPart(text=out)
                        else:  # named tool calls: a retry may repeat them
                            for start in out:
                                yield start
            for item in _fed(handler, decoder.close()):
                state.streamed = state.streamed or isinstance(item, TextPart)
                yield item
            state.response = handler.finish()
            if state.response is None:
                raise self._incomplete(handler, decoder.sse, ctype)
        finally:
            await resp.aclose()

    async def _check_head(self, resp: TransportResponse) -> str:
        """The response's content type; raises for an error status or a body that is not
        an event stream."""
        if resp.status != 200:
            raise await self._status_failure(resp)
        ctype = resp.headers.get("content-type", "")
        if ctype and not ctype.startswith("text/event-stream"):
            raise await self._not_a_stream(resp, ctype)
        return ctype

    def _deadline_passed(self) -> ModelError:
        return ModelError(
            ModelErrorKind.TIMEOUT,
            f"{self.provider}: the request to {self.base_url} did not finish within "
            f"its {self.deadline:g} s deadline (the 'deadline' model option)",
        )

    def _retry_delay(self, failure: Retry, attempt: int, *, streamed: bool) -> float:
        """How long to wait before trying again; raises when it is not tried again."""
        if streamed:
            raise ModelError(
                failure.kind,
                f"{self.provider}: {failure.midstream or failure.cause + ' mid-stream'}, "
                "after part of the answer was streamed; not retried because that text "
                "was already shown",
                status=failure.status,
            ) from failure
        if attempt >= self.max_retries:
            tried = f" (gave up after {attempt + 1} attempts)" if attempt else ""
            raise ModelError(
                failure.kind, f"{self.provider}: {failure.cause}{tried}", status=failure.status
            ) from failure
        delay = failure.retry_after
        return backoff_delay(attempt, self.retry_base_delay) if delay is None else delay

    def _too_large(self) -> ModelError:
        return ModelError(
            ModelErrorKind.PROTOCOL,
            f"{self.provider}: the answer from {self.base_url} passed "
            f"{self.max_response_bytes} bytes (the max_response_bytes model option)",
        )

    async def _permit(self, gate: RequestGate | None, body: bytes) -> Permit | None:
        if gate is None:
            return None
        return await gate.acquire(f"{self.provider}:{self.model_name}", estimate_tokens(body))

    # -- classifying failures -------------------------------------------------------

    async def _read_head(self, resp: TransportResponse) -> bytes:
        body = b""
        inflater = Inflater(resp.headers.get("content-encoding", ""), self.provider)
        async for raw in resp.chunks():
            for chunk in inflater.pieces(raw):
                body += chunk
                if len(body) >= _MAX_ERROR_BODY:
                    return body
        return body

    async def _status_failure(self, resp: TransportResponse) -> Exception:
        """A ``Retry`` or a final ``ModelError`` for a non-200 answer."""
        status = resp.status
        body = await self._read_head(resp)
        said = error_message(body)
        said_part = f"; the server said: {said}" if said else ""
        p = self.provider
        if status in _RETRY_STATUS or status >= 500:
            if status == 429:
                if "insufficient_quota" in error_code(body):
                    return ModelError(
                        ModelErrorKind.RATE_LIMIT,
                        f"{p}: the account's quota is used up (HTTP 429): check the plan and "
                        f"billing of the key in {self.key_env}{said_part}",
                        status=status,
                    )
                kind, cause = ModelErrorKind.RATE_LIMIT, "rate limited (HTTP 429)"
            elif status == 408:
                kind, cause = ModelErrorKind.TIMEOUT, "the server timed out the request (HTTP 408)"
            elif status == 409:
                kind, cause = ModelErrorKind.SERVER, "the server reported a conflict (HTTP 409)"
            else:
                kind, cause = ModelErrorKind.SERVER, f"the server failed (HTTP {status})"
            retry_after = parse_retry_after(resp.headers)
            if retry_after is not None and retry_after > _MAX_RETRY_AFTER_S:
                return ModelError(
                    kind,
                    f"{p}: {cause}{said_part}; it asks to retry after {retry_after:.0f} s, "
                    "too long to wait",
                    status=status,
                )
            return Retry(kind, f"{cause}{said_part}", status=status, retry_after=retry_after)
        if status == 401 or (status == 400 and _about_the_key(error_code(body), said_part)):
            rejected = f"{p}: the server rejected the API key (HTTP {status}): check "
            return ModelError(
                ModelErrorKind.AUTH, rejected + self.key_env + said_part, status=status
            )
        if status == 403:
            return ModelError(
                ModelErrorKind.AUTH,
                f"{p}: the API key may not use model '{self.model_name}' (HTTP 403): check "
                f"{self.key_env} and that key's permissions{said_part}",
                status=status,
            )
        if status == 404:
            return ModelError(
                ModelErrorKind.NOT_FOUND,
                f"{p}: unknown model '{self.model_name}' or wrong base URL '{self.base_url}' "
                f"(HTTP 404): check the model name and {self.base_env}{said_part}",
                status=status,
            )
        if status == 413:
            return ModelError(
                ModelErrorKind.BAD_REQUEST,
                f"{p}: the request is too large (HTTP 413): the conversation must be "
                f"shortened{said_part}",
                status=status,
            )
        if 300 <= status < 400:
            where = resp.headers.get("location", "elsewhere")
            return ModelError(
                ModelErrorKind.PROTOCOL,
                f"{p}: the server redirects to {where} (HTTP {status}): set {self.base_env} "
                "to the final URL",
                status=status,
            )
        if 200 < status < 300:
            return ModelError(
                ModelErrorKind.PROTOCOL,
                f"{p}: unexpected HTTP {status} instead of an event stream{said_part}",
                status=status,
            )
        # 400, 422 and any other 4xx: the request itself was refused; retrying won't help
        return ModelError(
            ModelErrorKind.BAD_REQUEST,
            f"{p}: the server refused the request (HTTP {status}){said_part}: check the model "
            f"'{self.model_name}' supports the options and tools used",
            status=status,
        )

    async def _not_a_stream(self, resp: TransportResponse, ctype: str) -> Exception:
        body = await self._read_head(resp)
        said = error_message(body) if ctype.startswith("application/json") else ""
        if said:
            return ModelError(
                ModelErrorKind.PROTOCOL,
                f"{self.provider}: the server answered with an error instead of an event "
                f"stream: {said}",
            )
        return ModelError(
            ModelErrorKind.PROTOCOL,
            f"{self.provider}: {self.base_url} answered with {ctype}, not an event stream "
            f"(it sent {body[:_HEAD_BYTES]!r}): check {self.base_env} points at the "
            f"{self.provider} API",
        )

    def _incomplete(self, handler: StreamHandler, decoder: SSEDecoder, ctype: str) -> Exception:
        if handler.events == 0:
            return ModelError(
                ModelErrorKind.PROTOCOL,
                f"{self.provider}: {self.base_url} did not send an event stream "
                f"(content-type {ctype or 'missing'}, body {decoder.head!r}): check "
                f"{self.base_env} points at the {self.provider} API",
            )
        cause = f"the stream from {self.base_url} ended before the response was complete"
        return Retry(
            ModelErrorKind.CONNECTION,
            cause,
            midstream=f"the connection to {self.base_url} dropped mid-stream ({cause})",
        )


def _release(permit: Permit, response: ModelResponse | None, failure: Retry | None) -> None:
    """An attempt's permit back, with the tokens it used and the wait the server asked."""
    permit.release(
        tokens=response.usage.input_tokens + response.usage.output_tokens
        if response is not None
        else 0,
        retry_after=failure.retry_after if failure is not None else None,
    )


def _fed(handler: StreamHandler, events: list[tuple[bytes, bytes]]) -> list[StreamItem]:
    """What the handler makes of the last events (those ``SSEDecoder.close`` completes)."""
    items: list[StreamItem] = []
    for event, data in events:
        out = handler.feed(event, data)
        if not out:
            continue
        if isinstance(out, str):
            items.append(TextPart(text=out))
        else:
            items.extend(out)
    return items


#: Words of an error that is about the API key, whatever its HTTP status (some gateways
#: answer a bad key with a 400: the key's fault, not the model options').
_KEY_WORDS = ("api key", "api_key", "apikey", "authentication", "unauthorized", "invalid_key")


def _about_the_key(code: str, said: str) -> bool:
    text = f"{code} {said}".lower()
    return any(word in text for word in _KEY_WORDS)
