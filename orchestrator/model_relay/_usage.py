"""What a relayed model answer cost, read by the parent from the stream it relays.

The child parses the answer; the parent only needs the token counts the server reports
in it, for the provider limiter (a tokens-per-minute limit charges what a request really
cost) and the ledger. A bounded scan: ``SSEDecoder`` (with its caps) splits the stream's
two ends into events, and only events that mention ``usage`` are decoded, into the usage
fields alone. OpenAI reports it in the last chunk (``stream_options.include_usage``); Anthropic
in ``message_start`` and (cumulatively) ``message_delta``. A server that reports none
costs what the child's estimate said.

A call that ends unfinished (the child gave it up, left, or the run ended) may never
reach its usage: ``given_up`` charges it what the server reported so far, never less
than the request's estimated input and the output relayed (``BYTES_PER_TOKEN`` bytes a
token).
"""

from __future__ import annotations

import collections

import msgspec
from agentcell.protocol import Usage
from agentcell.worker.models import ModelError, SSEDecoder

#: The largest event the scan decodes (usage events are small).
MAX_SCANNED_EVENT = 64 * 1024
#: The relayed bytes an output token is charged for, in an answer given up unfinished.
BYTES_PER_TOKEN = 4


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _Counts(msgspec.Struct, gc=False):
    # OpenAI
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    # Anthropic
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class _Message(msgspec.Struct, gc=False):
    usage: _Counts | None = None


class _Event(msgspec.Struct, gc=False):
    usage: _Counts | None = None
    message: _Message | None = None  # Anthropic's message_start


_decode = msgspec.json.Decoder(_Event).decode


class UsageScan:
    """Feed it the relayed raw bytes, then ``finish``; ``tokens`` is input + output as
    last reported.

    Only the stream's first and last ``EDGE`` bytes are kept and parsed, once, at the end:
    that is where both APIs report usage (OpenAI's last chunk; Anthropic's first event and
    its last ``message_delta``), and splitting every relayed byte into events would cost
    the parent as much CPU again as relaying them."""

    EDGE = 16 * 1024

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self._head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_bytes = 0
        self.input = 0  # every prompt token, cached ones included
        self.output = 0
        self.cache_read = 0
        self.cache_write = 0
        self._uncached = 0  # Anthropic's input_tokens: the prompt beyond the cache
        self.relayed = 0  # body bytes fed

    @property
    def tokens(self) -> int:
        return self.input + self.output

    @property
    def usage(self) -> Usage:
        """The counts as the child reports them (``Usage``: input includes the cache)."""
        return Usage(
            input_tokens=self.input,
            output_tokens=self.output,
            cache_read_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
        )

    def given_up(self, estimate: int) -> Usage:
        """What an answer given up unfinished costs: each count as the server reported it
        so far, never less than the request's ``estimate`` (input) and the bytes relayed
        (output)."""
        self.finish()
        return Usage(
            input_tokens=max(self.input, estimate),
            output_tokens=max(self.output, self.relayed // BYTES_PER_TOKEN),
            cache_read_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
        )

    def feed(self, raw: bytes) -> None:
        self.relayed += len(raw)
        if len(self._head) < self.EDGE:
            self._head += raw[: self.EDGE - len(self._head)]
        tail = self._tail
        tail.append(raw)
        self._tail_bytes += len(raw)
        while len(tail) > 1 and self._tail_bytes - len(tail[0]) >= self.EDGE:
            self._tail_bytes -= len(tail.popleft())

    def finish(self) -> None:
        """Read the usage from the stream's two ends (its events, cut to whole ones)."""
        tail = b"".join(self._tail)
        cut = tail.find(b"\n\n")
        for part in (bytes(self._head), tail[cut + 2 :] if cut >= 0 else b""):
            sse = SSEDecoder(max_event_bytes=MAX_SCANNED_EVENT)
            try:
                events = sse.feed(part) + sse.close()
            except ModelError:  # not a sane stream: the child will say so
                continue
            for _, data in events:
                if b'"usage"' in data:
                    self._take(data)

    def _take(self, data: bytes) -> None:
        try:
            event = _decode(data)
        except msgspec.MsgspecError:
            return
        counts = event.usage or (event.message.usage if event.message else None)
        if counts is None:
            return
        if self.provider == "openai":
            self.input = counts.prompt_tokens or self.input
            self.output = counts.completion_tokens or self.output
            details = counts.prompt_tokens_details
            if details is not None and details.cached_tokens is not None:
                self.cache_read = details.cached_tokens
            return
        # Anthropic: input_tokens excludes the cache; a value present replaces the old one
        # (message_start reports all three, a message_delta may repeat them cumulatively)
        if counts.cache_read_input_tokens is not None:
            self.cache_read = counts.cache_read_input_tokens
        if counts.cache_creation_input_tokens is not None:
            self.cache_write = counts.cache_creation_input_tokens
        if counts.input_tokens is not None:
            self._uncached = counts.input_tokens
        self.input = self._uncached + self.cache_read + self.cache_write
        if counts.output_tokens is not None:
            self.output = counts.output_tokens
