"""Token counts as they are billed: input (read from no cache), cache read, cache write,
output. ``Usage.input_tokens`` counts every prompt token (cached ones too, as OpenAI's
``prompt_tokens`` does), so the uncached part is what is left of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentcell.protocol import Usage


def split_counts(usage: Usage | Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(input, cache read, cache write, output); a mapping is a recorded ``usage`` object
    (whatever a record holds: anything not a count reads as 0)."""
    if isinstance(usage, Usage):
        total, read, write = usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens
        out = usage.output_tokens
    else:
        total, read, write, out = (
            _count(usage.get(key))
            for key in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
        )
    return max(total - read - write, 0), read, write, out


def usage_split(usage: Usage | Mapping[str, Any]) -> str:
    """``in 120 · cache read 3000 · cache write 0 · out 40`` (no cache part when none)."""
    uncached, read, write, out = split_counts(usage)
    text = f"in {uncached}"
    if read or write:
        text += f" · cache read {read} · cache write {write}"
    return f"{text} · out {out}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
