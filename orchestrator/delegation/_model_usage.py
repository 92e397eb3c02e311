"""What a relayed model answer cost, read by the parent from the stream it relays.

The child parses the answer; the parent only needs the token counts the server reports
in it, for the provider limiter (a tokens-per-minute limit charges what a request really
cost). A bounded scan: the relay's ``SSEDecoder`` (with its line and event caps) splits
the events, and only events that mention ``usage`` are decoded, into the usage fields
alone. OpenAI reports it in the last chunk (``stream_options.include_usage``); Anthropic
in ``message_start`` and (cumulatively) ``message_delta``. A server that reports none
costs what the child's estimate said.
"""

from __future__ import annotations

import msgspec
from agentcell.worker.models import ModelError, SSEDecoder

#: The largest event the scan decodes (usage events are small; a huge one is skipped).
MAX_SCANNED_EVENT = 64 * 1024


class _Counts(msgspec.Struct, gc=False):
    # OpenAI
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
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
    """Feed it the relayed raw bytes; ``tokens`` is input + output as last reported."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self._sse: SSEDecoder | None = SSEDecoder(max_event_bytes=16 * 1024 * 1024)
        self.input = 0
        self.output = 0

    @property
    def tokens(self) -> int:
        return self.input + self.output

    def feed(self, raw: bytes) -> None:
        if self._sse is None:
            return
        try:
            events = self._sse.feed(raw)
        except ModelError:  # not a sane stream: the child will say so; we stop counting
            self._sse = None
            return
        for _, data in events:
            if len(data) <= MAX_SCANNED_EVENT and b'"usage"' in data:
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
            return
        # Anthropic: input_tokens excludes the cache; a value present replaces the old one
        parts = (
            counts.input_tokens,
            counts.cache_read_input_tokens,
            counts.cache_creation_input_tokens,
        )
        if any(part is not None for part in parts):
            self.input = sum(part or 0 for part in parts)
        if counts.output_tokens is not None:
            self.output = counts.output_tokens
