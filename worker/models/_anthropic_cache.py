"""Prompt-caching breakpoints for the Anthropic Messages API.

Anthropic caches a request's prefix up to each block marked ``cache_control`` (the order
is tools, then system, then messages; at most four breakpoints). A later request whose
prefix is byte-identical up to a breakpoint reads it from the cache at a tenth of the input
price; writing it costs 1.25× the input price (5 minutes' TTL, the default) or 2× (one hour,
``{"type": "ephemeral", "ttl": "1h"}``). From Anthropic's prompt-caching documentation
(platform.claude.com, build-with-claude/prompt-caching, as of 2026).

What sub-agents of one type share comes first in every request they send: the tools, then
the system prompt, then — for ``context: fork`` — the parent's history they were forked
with; each gets a breakpoint, so every sub-agent after the first reads that prefix from the
cache. One more on the last block makes an agent's next turn read its own conversation so
far. Four in all, the API's limit.
"""

from __future__ import annotations

from typing import Any, Literal

PromptCache = Literal["5m", "1h", "off"]
PROMPT_CACHE_CHOICES: tuple[str, ...] = ("5m", "1h", "off")


def cache_control(ttl: PromptCache) -> dict[str, str]:
    """The marker for ``ttl`` (5 minutes is the API's default and needs no field)."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def add_breakpoints(
    body: dict[str, Any],
    ends: list[dict[str, Any] | None],
    ttl: PromptCache,
) -> None:
    """Mark ``body`` (a Messages API request) in place.

    ``ends`` holds, for each of our messages in order, the last API content block it became
    (None: it became none, or the system field). Breakpoints go on the last tool, on the
    system prompt, on the end of everything before the last message (the forked history,
    or the turns before this one) and on the last block.
    """
    if ttl == "off":
        return
    marker = cache_control(ttl)
    tools = body.get("tools")
    if tools:
        tools[-1]["cache_control"] = marker
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": marker}]
    blocks = [block for block in ends if block is not None]
    before_last = next((b for b in reversed(ends[:-1]) if b is not None), None) if ends else None
    if before_last is not None and before_last is not (blocks[-1] if blocks else None):
        before_last["cache_control"] = marker
    if blocks:
        blocks[-1]["cache_control"] = marker
