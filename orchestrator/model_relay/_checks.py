"""What a relayed model request may cost: the body's cost-bearing keys, checked.

A sub-agent's request goes upstream with the parent's key, so whatever in its body makes
the provider spend is the parent's to bound, not the child's: a server-side tool (run by
the provider, for an agent that may have no network at all), the output limit, the
thinking budget and the reasoning effort. ``check_costs`` reads them in the body's top
level as the relay decoded it (each value a ``msgspec.Raw``: only these few values are
decoded again, never the whole body) and writes back what it clamps:

* ``tools``: a function tool passes (the child runs it); a server-side tool only where
  the definition grants it — ``WebSearch``: the spec's ``web_search`` model option, the
  searches allowed per request (``_web_fetch.web_search_options``; Anthropic only) — its
  ``max_uses`` clamped to the grant; any other typed tool is refused. The list goes
  upstream re-encoded from what was read, so a key given twice in a tool
  (``{"type": "custom", …, "type": "web_search_20250305"}``) means one thing here and
  there.
* ``tool_choice``: none, auto, any/required, or one tool the request itself sends.
* ``max_tokens`` / ``max_completion_tokens``: clamped to the agent's model options (else
  the limit agentcell itself sends: ``DEFAULT_MAX_TOKENS``, raised for a thinking
  effort as the provider code raises it) and to what the run's token budget has left;
  a request with neither under a budget gets the budget left as its limit (in the key
  its provider code uses: ``limit_key``); a budget used up refuses the request.
* ``thinking.budget_tokens``: clamped under that output limit.
* ``reasoning_effort`` (OpenAI), ``output_config.effort`` (Anthropic): no higher than
  the definition's ``effort`` gives (else the provider's default).

A refusal is one line naming the key and the fix; a clamp is silent to the child and
returned for the relay to log.
"""

from __future__ import annotations

from typing import Any

import msgspec
from agentcell.protocol import AgentSpec
from agentcell.worker.models import ADAPTIVE_EFFORT as _ADAPTIVE_EFFORT
from agentcell.worker.models import DEFAULT_ANTHROPIC_MAX_TOKENS as DEFAULT_MAX_TOKENS
from agentcell.worker.models import (
    OFFICIAL_OPENAI_URL,
    THINKING_BUDGETS,
    WEB_SEARCH_TOOL,
    thinking_max_tokens,
)

#: The characters of a child's string a refusal repeats.
SHOWN_CHARS = 60
#: ``reasoning_effort`` levels, lowest first (OpenAI's default is "medium").
OPENAI_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
OPENAI_DEFAULT_EFFORT = "medium"
#: ``output_config.effort`` levels, lowest first (Anthropic's default is "high").
ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")
ANTHROPIC_DEFAULT_EFFORT = "high"
#: The tool choices that force no particular tool, per provider.
FREE_CHOICES = {"openai": ("auto", "none", "required"), "anthropic": ("auto", "any", "none")}
#: Which key of a forced choice names its tool ("function"'s name, or the choice's own).
FORCING = {"openai": "function", "anthropic": "tool"}

_decode_tools = msgspec.json.Decoder(list[dict[str, msgspec.Raw]]).decode
_decode_int = msgspec.json.Decoder(int | None).decode
_decode_str = msgspec.json.Decoder(str | None).decode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.encode


class _Named(msgspec.Struct, gc=False):
    name: str = ""


_decode_named = msgspec.json.Decoder(_Named).decode


class Refused(Exception):
    """A request the parent will not send: its one line."""


def shown(text: str) -> str:
    """``text`` as a refusal repeats it: quoted, cut (the child chose its length)."""
    return repr(text[:SHOWN_CHARS]) + ("…" if len(text) > SHOWN_CHARS else "")


def check_costs(
    spec: AgentSpec, provider: str, top: dict[str, msgspec.Raw], tokens_left: int | None = None
) -> tuple[str, list[str]]:
    """Why the parent will not send this body ("" if it will), and what it clamped in
    ``top`` (rewritten in place), one entry a key. ``tokens_left``: what the run's token
    budget has left (None: no budget)."""
    clamped: list[str] = []
    try:
        names = _tools(spec, provider, top, clamped)
        _tool_choice(provider, top, names)
        limit = _output_limit(spec, provider, top, tokens_left, clamped)
        _thinking(top, limit, clamped)
        _effort(spec, provider, top)
    except Refused as refused:
        return str(refused), clamped
    return "", clamped


def output_cap(spec: AgentSpec, provider: str) -> int:
    """The output limit agentcell itself sends for this agent's model: its ``max_tokens``
    option, else ``DEFAULT_MAX_TOKENS``; a thinking effort raises it as
    ``thinking_max_tokens`` does (the thinking budget plus room for the answer)."""
    options = spec.model_options
    limit = options.get("max_tokens")
    limit = limit if isinstance(limit, int) else None
    effort = options.get("effort" if provider == "anthropic" else "reasoning_effort")
    if effort in THINKING_BUDGETS:
        return thinking_max_tokens(effort, limit)
    return limit or DEFAULT_MAX_TOKENS


def _decoded(decode: Any, raw: msgspec.Raw, key: str, shape: str) -> Any:
    try:
        return decode(raw)
    except msgspec.MsgspecError:
        raise Refused(f"the request's {key} is not {shape}") from None


def _tools(
    spec: AgentSpec, provider: str, top: dict[str, msgspec.Raw], clamped: list[str]
) -> set[str]:
    """The names of the request's tools, once each is one the agent may send."""
    if "tools" not in top:
        return set()
    tools = _decoded(_decode_tools, top["tools"], "tools", "a list of objects")
    granted = spec.model_options.get("web_search") if provider == "anthropic" else None
    names: set[str] = set()
    searches = 0
    for tool in tools:
        kind = _field(tool, "type", _decode_str, "a string")
        if provider == "openai":
            if kind != "function":
                raise Refused(_ungranted(kind, granted))
            function = tool.get("function", msgspec.Raw(b"{}"))
            names.add(_decoded(_decode_named, function, "tools", "a list of functions").name)
            continue
        name = _field(tool, "name", _decode_str, "a string") or ""
        if kind not in (None, "custom"):
            searches += 1
            if kind != WEB_SEARCH_TOOL or not granted or searches > 1:
                raise Refused(_ungranted(kind, granted))
            uses = _field(tool, "max_uses", _decode_int, "an integer")
            if uses is None or uses > granted:
                tool["max_uses"] = msgspec.Raw(_encode(granted))
                clamped.append(f"web_search max_uses {uses} -> {granted}")
        names.add(name)
    top["tools"] = msgspec.Raw(_encode(tools))
    return names


def _field(tool: dict[str, msgspec.Raw], key: str, decode: Any, shape: str) -> Any:
    return _decoded(decode, tool[key], f"tool {key}", shape) if key in tool else None


def _ungranted(kind: str | None, granted: int | None) -> str:
    if kind == WEB_SEARCH_TOOL and not granted:
        return (
            f"the request's tools include {kind!r} (Anthropic's server-side web search), "
            "which this agent's definition does not grant: add WebSearch to its tools"
        )
    offered = "function tools and one web_search" if granted else "function tools only"
    return (
        f"the request's tools include a tool of type {shown(str(kind))}, which agentcell "
        f"does not send: this agent may send {offered}"
    )


def _tool_choice(provider: str, top: dict[str, msgspec.Raw], names: set[str]) -> None:
    """A choice forces nothing, or one of the request's own (checked) tools."""
    if "tool_choice" not in top:
        return
    choice = _decode_any(top["tool_choice"])  # JSON already (the body's decoder checked it)
    forced = _forced(provider, choice)
    if forced is not None and forced not in names:
        raise Refused(
            f"the request's tool_choice forces {shown(forced)}, which is not one of the "
            "tools it sends: force one of those, or none"
        )
    top["tool_choice"] = msgspec.Raw(_encode(choice))


def _forced(provider: str, choice: Any) -> str | None:
    """The tool ``choice`` forces (None: none in particular)."""
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in FREE_CHOICES[provider]:
            return None
        named = choice.get("function") if provider == "openai" else choice
        if kind == FORCING[provider] and isinstance(named, dict):
            name = named.get("name")
            if isinstance(name, str):
                return name
    elif choice in FREE_CHOICES[provider] and provider == "openai":
        return None
    raise Refused(
        f"the request's tool_choice {shown(str(choice))} is not one agentcell sends: use "
        f"{' / '.join(FREE_CHOICES[provider])}, or force one of the request's tools"
    )


def _output_limit(
    spec: AgentSpec,
    provider: str,
    top: dict[str, msgspec.Raw],
    tokens_left: int | None,
    clamped: list[str],
) -> int:
    """The request's output limits clamped to the cap (``output_cap``, and the budget
    left); returns the lowest limit it now has (the cap when it sets none)."""
    cap = output_cap(spec, provider)
    if tokens_left is not None:
        if tokens_left < 1:
            raise Refused(
                "the run's token budget is used up (budgets.max_tokens): no more model "
                "requests are sent for it"
            )
        cap = min(cap, tokens_left)
    limit = cap
    for key in ("max_tokens", "max_completion_tokens"):
        if key not in top:
            continue
        given = _decoded(_decode_int, top[key], key, "an integer")
        if given is None or given > cap:
            top[key] = msgspec.Raw(_encode(cap))
            clamped.append(f"{key} {given} -> {cap}")
            given = cap
        limit = min(limit, given)
    if tokens_left is not None and not {"max_tokens", "max_completion_tokens"} & set(top):
        # No limit at all is the model's own maximum, past any budget: the budget left
        # goes as the limit. Not logged: an OpenAI request of agentcell's own sets none.
        top[limit_key(spec, provider)] = msgspec.Raw(_encode(tokens_left))
    return limit


def limit_key(spec: AgentSpec, provider: str) -> str:
    """The key of the output limit this agent's provider code sends (``OpenAIChatModel``'s
    ``max_tokens_field``: ``max_completion_tokens`` for the official API, else
    ``max_tokens``, unless the model options name one)."""
    if provider != "openai":
        return "max_tokens"
    named = spec.model_options.get("max_tokens_field")
    if named in ("max_tokens", "max_completion_tokens"):
        return str(named)
    base = str(spec.model_options.get("base_url") or OFFICIAL_OPENAI_URL).rstrip("/")
    return "max_completion_tokens" if base == OFFICIAL_OPENAI_URL else "max_tokens"


def _thinking(top: dict[str, msgspec.Raw], limit: int, clamped: list[str]) -> None:
    """``thinking.budget_tokens`` under the output limit (which counts the thinking)."""
    if "thinking" not in top:
        return
    thinking = _decoded(_decode_object, top["thinking"], "thinking", "an object")
    budget = thinking.get("budget_tokens")
    if budget is not None:
        if not isinstance(budget, int):
            raise Refused("the request's thinking.budget_tokens is not an integer")
        if budget >= limit:
            thinking["budget_tokens"] = limit - 1
            clamped.append(f"thinking.budget_tokens {budget} -> {limit - 1}")
    top["thinking"] = msgspec.Raw(_encode(thinking))


def _effort(spec: AgentSpec, provider: str, top: dict[str, msgspec.Raw]) -> None:
    """No more reasoning than the definition's ``effort`` gives (else the default)."""
    options = spec.model_options
    if provider == "openai":
        if "reasoning_effort" in top:
            given = _decoded(_decode_str, top["reasoning_effort"], "reasoning_effort", "a string")
            granted = options.get("reasoning_effort") or OPENAI_DEFAULT_EFFORT
            _at_most("reasoning_effort", given, granted, OPENAI_EFFORTS)
        return
    if "output_config" not in top:
        return
    config = _decoded(_decode_object, top["output_config"], "output_config", "an object")
    if "effort" in config:
        granted = _ADAPTIVE_EFFORT.get(str(options.get("effort")), ANTHROPIC_DEFAULT_EFFORT)
        _at_most("output_config.effort", config["effort"], granted, ANTHROPIC_EFFORTS)
    top["output_config"] = msgspec.Raw(_encode(config))


def _at_most(key: str, given: Any, granted: str, levels: tuple[str, ...]) -> None:
    allowed = levels[: levels.index(granted) + 1] if granted in levels else (granted,)
    if given in allowed:
        return
    raise Refused(
        f"the request sets {key} {shown(str(given))}, more than this agent's {granted!r} "
        f"(its definition's effort): send {granted!r} or lower"
    )
