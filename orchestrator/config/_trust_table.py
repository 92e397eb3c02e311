"""What each setting and each agent-file key may do from a folder the user has not trusted.

Every key is one of three kinds:

- ``tightening``: it can only narrow what runs (a lower limit, a stricter mode). From an
  untrusted project it is honoured when it is at least as tight as the user's own value
  and ignored, with one line, when it would loosen it.
- ``loosening``: it names a host, a cluster, a command, a model alias or a price, or
  widens what agents may do. From an untrusted project it is ignored, with one line,
  unless it only repeats the user's own value.
- ``neutral``: it changes how work is done, not what may be done, and is honoured.

``tests/orchestrator/config/test_trust_table.py`` walks the settings model (every nested
table) and the frontmatter fields against these tables, so a new key cannot be left out. A
row for a table of tables (``prices``, ``mcp_servers``) covers every key beneath it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, Literal

from agentcell.worker import PermissionMode
from pydantic import BaseModel, TypeAdapter, ValidationError

Kind = Literal["tightening", "loosening", "neutral"]
_TIGHTENING: frozenset[str] = frozenset({"tightening"})
_NEUTRAL: frozenset[str] = frozenset({"neutral"})

APPROVAL_LOOSENESS = ["deny", "ask", "bubble", "allow"]
PERMISSION_LOOSENESS = ["plan", "default", "accept_edits", "bypass"]
SANDBOX_LOOSENESS = ["read-only", "required", "workspace", "off"]


@dataclasses.dataclass(frozen=True)
class TrustEntry:
    """One key's kind, why, and (for a tightening key) whether a value is as tight as
    another: ``as_tight(value, current)``."""

    kind: Kind
    why: str
    as_tight: Callable[[Any, Any], bool] | None = None

    # Membership, not ``==``: the kinds sort "loosening" < "neutral" < "tightening", so
    # ``kind >= "tightening"`` would read the same (an equivalent mutant, never killed).
    @property
    def tightens(self) -> bool:
        return self.kind in _TIGHTENING

    @property
    def neutral(self) -> bool:
        return self.kind in _NEUTRAL


def on_scale(scale: list[str]) -> Callable[[Any, Any], bool]:
    def as_tight(value: Any, current: Any) -> bool:
        if value not in scale or current not in scale:
            return True  # not a known value: validation names it
        return scale.index(value) <= scale.index(current)

    return as_tight


def _permission_mode(value: Any) -> Any:
    try:
        return PermissionMode.parse(value).value if isinstance(value, str) else value
    except ValueError:
        return value


def stricter_or_same_mode(value: Any, current: Any) -> bool:
    scale = on_scale(PERMISSION_LOOSENESS)
    return scale(_permission_mode(value), _permission_mode(current))


def at_most(value: Any, current: Any) -> bool:
    """A limit (None: unlimited) no higher than the current one, each read as validation
    will read it: to it ``"64"`` and ``true`` are numbers."""
    if value is None:
        return current is None
    number = _number(value)
    if number is None:
        return True  # not a number to validation either: it names it
    limit = _number(current)
    return limit is None or number <= limit


def at_least(value: Any, current: Any) -> bool:
    """A span (a rate limit's window) no shorter than the current one."""
    number, span = _number(value), _number(current)
    return number is None or span is None or number >= span


def not_on(value: Any, current: Any) -> bool:
    """A switch that loosens when on (as validation reads it: ``1`` and ``"yes"`` are on)."""
    return not _switched_on(value) or _switched_on(current)


_NUMBER = TypeAdapter(float)
_SWITCH = TypeAdapter(bool)


def _number(value: Any) -> float | None:
    try:
        return _NUMBER.validate_python(value)
    except ValidationError:
        return None


def _switched_on(value: Any) -> bool:
    try:
        return _SWITCH.validate_python(value)
    except ValidationError:
        return False  # not a switch (a list of hosts, a typo validation names)


def on_or_was_off(value: Any, current: Any) -> bool:
    """A switch that tightens when on: as tight unless it turns off what was on."""
    return _switched_on(value) or not _switched_on(current)


def _tight(why: str, as_tight: Callable[[Any, Any], bool] = at_most) -> TrustEntry:
    return TrustEntry("tightening", why, as_tight)


def _capped(why: str) -> TrustEntry:
    """A tightening key the runner bounds by the operator's value whoever wrote it."""
    return TrustEntry("tightening", why)


def _loose(why: str) -> TrustEntry:
    return TrustEntry("loosening", why)


def _neutral(why: str) -> TrustEntry:
    return TrustEntry("neutral", why)


_LIMIT = "a lower limit only narrows"
_HOST = "it names a host agentcell connects to or listens on"

#: Every setting by its dotted path (``ray.address``; ``limits.*.max_concurrent`` for a
#: key of each entry of a table of tables).
SETTINGS_TRUST: dict[str, TrustEntry] = {
    "model": _neutral("one of your own providers' models, reached as your config says"),
    "aliases": _loose("a model alias decides which model (and provider) a name reaches"),
    "model_options": _neutral("request options; its routing keys are loosening, see below"),
    "max_workers": _neutral("how many processes run at once"),
    "warm_spares": _neutral("processes started ahead"),
    "call_ahead": _neutral("a sub-agent's first model request sent while its process starts"),
    "start_ahead": _neutral("when processes start"),
    "process_starters": _neutral("how many fork servers start processes"),
    "approval": _tight("a stricter approval only narrows", on_scale(APPROVAL_LOOSENESS)),
    "permission_mode": _tight("a stricter permission mode only narrows", stricter_or_same_mode),
    "allow_rules": _loose("allow rules let commands run without asking"),
    "deny_rules": _tight("deny rules are added to yours, never replace them"),
    "ask_rules": _tight("ask rules are added to yours, never replace them"),
    "max_depth": _tight(_LIMIT),
    "max_turns": _tight(_LIMIT),
    "subagent_max_turns": _tight(_LIMIT),
    "subagent_timeout_s": _tight(_LIMIT),
    "subagent_compact_at": _neutral("when a long sub-agent's history is summarised"),
    "subagent_context_window": _neutral("the context size compaction is measured against"),
    "webfetch_allow": _loose("it lets sub-agents fetch pages without asking"),
    "webfetch_model": _loose("it names a model that fetched pages are sent to"),
    "timeout_grace_s": _neutral("how long a timed-out sub-agent may take to report"),
    "heartbeat_timeout_s": _neutral("when a silent sub-agent counts as hung"),
    "background_wait_s": _neutral("how long the main agent waits for background work"),
    "min_free_mb": _neutral("how full a disk may be before a run refuses to start"),
    "min_free_inodes": _neutral("how full a disk may be before a run refuses to start"),
    "teams.message_max_bytes": _tight(_LIMIT),
    "teams.mailbox_max": _tight(_LIMIT),
    "teams.messages_per_window": _tight(_LIMIT),
    "teams.window_s": _tight("a longer window lets fewer messages through", at_least),
    "teams.max_continuations": _tight(_LIMIT),
    "budgets.max_tokens": _tight(_LIMIT),
    "budgets.max_turns": _tight(_LIMIT),
    "budgets.max_subagents": _tight(_LIMIT),
    "prices": _loose("a price decides what a budget and a report count"),
    "limits.*.max_concurrent": _tight(_LIMIT),
    "limits.*.requests_per_minute": _tight(_LIMIT),
    "limits.*.tokens_per_minute": _tight(_LIMIT),
    "backend": _loose("it names where sub-agents run, and where their keys are sent"),
    "ray.address": _loose("it names the cluster that receives every sub-agent's start"),
    "ray.num_cpus": _neutral("the share of a node each sub-agent asks for"),
    "ray.resources": _neutral("custom resources each sub-agent asks for"),
    "ray.listen_host": _loose(_HOST),
    "ray.listen_port": _loose(_HOST),
    "ray.advertise_host": _loose(_HOST),
    "ray.connect_timeout_s": _neutral("how long the parent waits for an actor"),
    "ray.handshake_timeout_s": _tight(_LIMIT),  # longer or more: a flood holds the parent
    "ray.max_pending_connections": _tight(_LIMIT),
    "ray.model_route": _loose('"node" ships the model key to every node of the cluster'),
    "sandbox": _tight("a stricter sandbox only narrows", on_scale(SANDBOX_LOOSENESS)),
    "network": _tight("network off only narrows", not_on),
    "max_processes": _tight(_LIMIT),
    "tmp_size_mb": _tight(_LIMIT),
    "sandbox_read": _loose("it widens what sub-agents may read"),
    "block_writes_outside": _tight("it only forbids the main agent's writes", on_or_was_off),
    "bash_credentials": _loose("only your own config may give bash the model credentials"),
    "mcp_servers": _loose("MCP servers run commands outside the sub-agents' sandboxes"),
    "main_mcp_servers": _loose("it picks which servers run for the unsandboxed main agent"),
    "hooks": _loose("hooks run commands on this machine"),
    "instruction_files": _neutral("whether AGENTS.md / CLAUDE.md go into prompts"),
    "preload": _loose("the orchestrator's fork server imports (runs) these modules"),
}

#: Keys of a provider's ``model_options`` that decide where requests (and the key) go.
ROUTING_KEYS = ("base_url", "url", "host", "endpoint", "headers", "default_headers")

#: Every key an agent file's frontmatter may set, by its field name.
AGENT_FILE_TRUST: dict[str, TrustEntry] = {
    "name": _neutral("what the main agent calls it"),
    "description": _neutral("when the main agent picks it"),
    "tools": _neutral("resolved within the tools its parent has"),
    "disallowed_tools": _capped("it only takes tools away"),
    "model": _neutral("resolved through your own aliases and providers"),
    "max_turns": _capped("never above subagent_max_turns"),
    "auto_compact_window": _neutral("when its own long history is summarised"),
    "background": _neutral("whether the main agent waits for it"),
    # Loosening for acceptEdits alone (``_sandbox_policy``): a stricter mode only narrows,
    # and bypassPermissions is never taken from an agent file (``subagent_mode``).
    "permission_mode": _loose("acceptEdits lets the sub-agent edit files without asking"),
    "timeout_s": _capped("never above subagent_timeout_s"),
    "context": _neutral("whether it starts from its parent's conversation"),
    "max_depth": _capped("the smallest of the depth limits holds"),
    "isolation": _neutral("a worktree of its own"),
    "backend": _loose("it sends the sub-agent, and its key, to a Ray cluster"),
    "memory_limit_mb": _capped("a limit of its own (none by default)"),
    "cpu_limit_s": _capped("a limit of its own (none by default)"),
    "max_tool_calls": _capped("a limit of its own (none by default)"),
    "max_tool_output_bytes": _capped("a limit of its own (none by default)"),
    "sandbox": _capped("never looser than the configured sandbox"),
    "network": _loose("it gives the sub-agent's bash the network"),
    "max_processes": _tight("a bound above max_processes widens its process tree"),
    "mcp_servers": _loose("an inline server runs a command outside every sandbox"),
    "skills": _neutral("skills are read from your folders and the project's"),
    "hooks": _loose("hooks run commands on this machine"),
    # Loosening for "user" alone (``_sandbox_policy``): that folder is in your home, read
    # into the prompt of your own agent of the same name in every project.
    "memory": _loose("memory: user writes a folder in your home that your own agent reads"),
    "effort": _neutral("how hard its model reasons"),
    "initial_prompt": _neutral("its first user turn"),
    "color": _neutral("display only"),
}


def covering(table: dict[str, TrustEntry], path: tuple[str, ...]) -> TrustEntry | None:
    """The row for the key at ``path``: its own (``*`` in a row matches any one key), or
    that of the nearest table above it (``prices`` covers ``prices.openai.input``)."""
    found: list[tuple[int, TrustEntry]] = []
    for row, entry in table.items():
        parts = row.split(".")
        pairs = zip(parts, path, strict=False)  # a row names the path's first keys
        if len(parts) <= len(path) and all(r in ("*", p) for r, p in pairs):
            found.append((len(parts), entry))
    return max(found, key=lambda match: match[0])[1] if found else None


def setting_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key of ``model``, nested tables included, as a dotted path."""
    for name, field in model.model_fields.items():
        path = prefix + name
        nested = _model_in(field.annotation)
        if nested is None:
            yield path
            continue
        # A table of tables (``limits``) is keyed by any name: ``limits.*.max_concurrent``.
        below = _BELOW.get(typing.get_origin(field.annotation), ".")
        yield from setting_paths(nested, path + below)


_BELOW: dict[Any, str] = {dict: ".*."}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (dict, types.UnionType, typing.Union):
        for arg in args:
            found = _model_in(arg)
            if found is not None:
                return found
    return None
