"""What a sub-agent is: `AgentDefinition`, model-string rules, and readable validation errors.

A definition comes from a Markdown file (see `_loader`), from the built-ins, or from code.
Every field validator raises a ValueError whose text completes a sentence that starts with
the field's name ("must be a whole number ≥ 1, got 'ten'"), so `validation_messages` can
name the key exactly as the user wrote it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from agentcell.orchestrator.config._claude_modes import claude_mode_stand_in
from agentcell.orchestrator.config._hooks import parse_hooks
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.definitions._claude_compat import (
    claude_effort,
    claude_hooks,
)
from agentcell.orchestrator.definitions._tool_policy import (
    KNOWN_TOOLS,
    is_mcp_tool,
    means_all_tools,
    normalize_tool_names,
    split_tool_entries,
    task_entry_agents,
)
from agentcell.worker import PermissionMode
from agentcell.worker.models import PROVIDERS
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

#: The model aliases that configuration maps to PROVIDER:NAME strings.
MODEL_ALIASES: tuple[str, ...] = ("sonnet", "opus", "haiku", "fable")
INHERIT = "inherit"

# Prefixes of bare model ids whose provider is unambiguous.
_ANTHROPIC_PREFIXES = ("claude-",)
_OPENAI_PREFIXES = ("gpt-", "chatgpt-", "o1", "o3", "o4")
_PROVIDER_MODEL = re.compile(r"^[A-Za-z][\w.-]*:\S+$")

# Names are what the main agent types to pick a sub-agent, so no spaces or punctuation that
# would need quoting; '.' is allowed because real names use it ("powershell-5.1-expert").
NAME_MAX = 64
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

_MODES = ", ".join(m.value for m in PermissionMode)
# An MCP server's name is part of its tools' names (mcp__<server>__<tool>): no "__" games.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")


def is_agent_name(name: str) -> bool:
    """True for a name an agent may have as it is (``code-reviewer``, ``Explore``)."""
    return len(name) <= NAME_MAX and _NAME.match(name) is not None


def agent_slug(name: str) -> str:
    """``name`` folded for matching, and the name a file whose name is none loads under:
    lower case, each run of characters other than letters, digits and '.' one '-'
    ("Python DevOps/CI-CD Expert" → "python-devops-ci-cd-expert"). Two spellings of one
    agent have the same slug, so lookups are case- and separator-insensitive."""
    slug = re.sub(r"[^a-z0-9.]+", "-", name.strip().lower()).strip("-.")
    return slug[:NAME_MAX].rstrip("-.")


def normalize_model(value: object) -> str:
    """The canonical model string: 'inherit', an alias, or PROVIDER:NAME (else as given).

    None/''/'inherit' → 'inherit'; sonnet/opus/haiku in any case → the lower-case alias;
    'claude-…' → 'anthropic:claude-…'; 'gpt-…', 'chatgpt-…', 'o1…', 'o3…', 'o4…' →
    'openai:…'; 'provider:name' is kept. Anything else is kept as given: `model_problem`
    says what is wrong with it, and the loader reports that as a warning.
    """
    if value is None:
        return INHERIT
    if not isinstance(value, str):
        raise ValueError(f"must be a model name such as sonnet or openai:gpt-4o, got {value!r}")
    text = value.strip()
    lowered = text.lower()
    if lowered in ("", INHERIT):
        return INHERIT
    if lowered in MODEL_ALIASES:
        return lowered
    if _PROVIDER_MODEL.match(text):
        return text
    if lowered.startswith(_ANTHROPIC_PREFIXES):
        return f"anthropic:{text}"
    if lowered.startswith(_OPENAI_PREFIXES):
        return f"openai:{text}"
    return text


def model_problem(model: str) -> str | None:
    """Why a normalised model string will not resolve, or None when it is well-formed."""
    if model == INHERIT or model in MODEL_ALIASES:
        return None
    if _PROVIDER_MODEL.match(model):
        provider = model.partition(":")[0]
        if provider in PROVIDERS:
            return None
        return (
            f"model {model!r} names no provider agentcell has ({', '.join(PROVIDERS)}); it "
            "is kept as given and must be configured as a model alias to run"
        )
    return (
        f"model {model!r} is not PROVIDER:NAME (e.g. openai:gpt-4o-mini), an alias "
        f"({', '.join(MODEL_ALIASES)}) or inherit; it is kept as given and must be configured "
        "as a model alias to run"
    )


def resolve_model_alias(model: str, *, parent_model: str, aliases: Mapping[str, str]) -> str:
    """The PROVIDER:NAME string to run: inherit → parent_model, alias → aliases[alias].

    Any key of `aliases` works as an alias, not only sonnet/opus/haiku. Raises ValueError
    naming the alias and how to configure it when a built-in alias has no mapping.
    """
    model = normalize_model(model)
    if model == INHERIT:
        model = normalize_model(parent_model)
        if model == INHERIT:
            raise ValueError("the parent's model is 'inherit': the main agent needs a real model")
    target = aliases.get(model, aliases.get(model.lower()))
    if target is None:
        if model in MODEL_ALIASES:
            raise ValueError(
                f"model alias {model!r} is not configured: map it to a PROVIDER:NAME string in "
                "the model aliases (e.g. sonnet → anthropic:claude-sonnet-4-5), or give the "
                "agent a full model string"
            )
        return model
    resolved = normalize_model(target)
    if resolved == INHERIT or resolved in MODEL_ALIASES or resolved in aliases:
        raise ValueError(
            f"model alias {model!r} maps to {target!r}, another alias: map it to a "
            "PROVIDER:NAME string instead"
        )
    return resolved


#: The largest value each numeric field accepts: beyond these a number is a typo or an
#: attack (a 10^23 MiB memory limit is no limit at all), never a real setting.
FIELD_MAXIMA: dict[str, int] = {
    "max_turns": 100_000,
    "timeout_s": 7 * 24 * 3600,
    "max_depth": 16,
    "memory_limit_mb": 1024 * 1024,  # 1 TiB
    "cpu_limit_s": 7 * 24 * 3600,
    "max_tool_calls": 1_000_000,
    "max_tool_output_bytes": 8 * 1024 * 1024,  # a tool result crosses a 16 MiB frame
    "max_processes": 1_000_000,
}


def _at_most(value: float | None, field: str) -> None:
    maximum = FIELD_MAXIMA[field]
    if value is not None and value > maximum:
        raise ValueError(f"must be at most {maximum}, got {value!r}")


def _whole(value: object, minimum: int) -> int | None:
    """An int ≥ minimum from an int, an integral float, or a string of digits."""
    if value is None:
        return None
    number: int | None = None
    if isinstance(value, bool):
        number = None  # True is an int to Python, not a count to a person
    elif isinstance(value, int):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value)
    ):
        number = int(value)
    if number is None or number < minimum:
        raise ValueError(f"must be a whole number ≥ {minimum}, got {value!r}")
    return number


def _tool_list(value: object, *, allow_all: bool) -> list[str] | None:
    """A comma string, a list of names, or (allowlist only) '*'/'all' for "inherit all"."""
    if value is None:
        return None
    hint = "a comma-separated string or a list of tool names (e.g. Read, Grep)"
    if isinstance(value, str):
        items = _string_entries(value)
    elif isinstance(value, list | tuple):
        for position, item in enumerate(value, 1):
            if not isinstance(item, str):
                raise ValueError(f"must be {hint}; item {position} is {item!r}")
        items = list(value)
    else:
        raise ValueError(f"must be {hint}, got {value!r}")
    names = [item.strip() for item in items if item.strip()]
    if any(means_all_tools(name) for name in names):
        if not allow_all:
            raise ValueError(
                f"cannot be {value!r}: to take every tool away write 'tools: []' instead"
            )
        if len(names) > 1:
            raise ValueError(
                f"'*' means all of the parent's tools and must stand alone, got {value!r}: "
                "remove '*' or the other names"
            )
        return None
    return normalize_tool_names(names)


def _string_entries(value: str) -> list[str]:
    """The entries of a tools string; a flow list that strict YAML could not read arrives
    as its raw text ("[Read, 'Bash'"). Commas inside ``Task(a, b)`` do not split."""
    text = value.strip().removeprefix("[").removesuffix("]")
    return [entry.strip().strip("'\"").strip() for entry in split_tool_entries(text)]


def _entries(value: object) -> list[str] | None:
    """The raw entries of a tools value, or None when it is not a string or list of them."""
    if isinstance(value, str):
        return _string_entries(value)
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


class AgentDefinition(BaseModel):
    """One sub-agent.

    `tools` is an allowlist applied to the parent's tools: None inherits all of them, an
    empty list gives the agent NO tools (it can only answer from its prompt), and names are
    mapped from Claude Code spellings (Read → read_file). `disallowed_tools` always wins.
    `source` is "builtin", the definition file's path, or "programmatic" for code.

    ``Task(a, b)`` (or ``Agent(a, b)``) in `tools` grants ``task`` limited to the agent
    types a and b (`task_agents`); in `disallowed_tools` it denies only those types
    (`denied_task_agents`). Names match case- and separator-insensitively. A bare
    ``Task`` next to ``Task(a)`` adds no other types: the limit holds.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    system_prompt: str = ""
    tools: list[str] | None = None
    disallowed_tools: list[str] = []
    model: str = INHERIT
    max_turns: int | None = None
    background: bool = False
    permission_mode: str | None = None
    timeout_s: float | None = None
    context: Literal["fresh", "fork"] = "fresh"
    max_depth: int | None = None
    isolation: Literal["none", "worktree"] = "none"
    backend: Literal["local", "ray"] | None = None  # None: the operator's choice
    memory_limit_mb: int | None = None
    cpu_limit_s: int | None = None
    max_tool_calls: int | None = None
    max_tool_output_bytes: int | None = None
    task_agents: list[str] | None = None  # None: any agent type (when it may delegate)
    denied_task_agents: list[str] = []
    sandbox: Literal["workspace", "read-only", "off"] | None = None  # may only narrow
    # bash commands' network under the sandbox: true (all of it) or the hosts it may reach
    network: bool | list[str] | None = None
    max_processes: int | None = None
    # Claude Code's `mcpServers`: names of configured servers, or {name: {command, ...}}.
    mcp_servers: list[str | dict[str, McpServerConfig]] = []
    skills: list[str] = []  # preloaded into the system prompt (see _skills)
    # Claude Code's `autoCompactWindow`: compact this agent's conversation at this many
    # tokens (None: the operator's subagent_compact_at).
    auto_compact_window: int | None = Field(default=None, ge=1_000)
    # Claude Code's lifecycle hooks (run by the parent, outside the sandbox), memory
    # folder, reasoning effort, first user turn and display colour.
    hooks: dict[str, Any] = {}
    memory: Literal["user", "project", "local"] | None = None
    effort: Literal["minimal", "low", "medium", "high", "max"] | None = None
    initial_prompt: str = ""
    color: str = ""
    extra: dict[str, Any] = {}
    source: str = "programmatic"

    @property
    def unknown_tools(self) -> list[str]:
        """Names in tools/disallowed_tools that are none of ours (MCP tools, WebFetch, …)."""
        names = [*(self.tools or []), *self.disallowed_tools]
        return [
            name
            for name in dict.fromkeys(names)
            if name not in KNOWN_TOOLS and not is_mcp_tool(name)
        ]

    @property
    def mcp_server_names(self) -> list[str]:
        """Every server this agent names, configured elsewhere or inline, in order."""
        names: list[str] = []
        for entry in self.mcp_servers:
            names += [entry] if isinstance(entry, str) else list(entry)
        return list(dict.fromkeys(names))

    def may_start(self, agent_type: str) -> bool:
        """Whether this agent's ``task`` may start `agent_type` (its Task(...) limits)."""
        key = agent_slug(agent_type)
        if any(agent_slug(name) == key for name in self.denied_task_agents):
            return False
        return self.task_agents is None or any(agent_slug(n) == key for n in self.task_agents)

    @model_validator(mode="before")
    @classmethod
    def _task_limits(cls, data: Any) -> Any:
        """Take ``Task(a, b)`` entries out of the tool lists into the task limits."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        limits = (("tools", "task_agents", "Task"), ("disallowed_tools", "denied_task_agents", ""))
        for field, limit, replacement in limits:
            entries = _entries(data.get(field))
            named = [task_entry_agents(entry) for entry in entries or []]
            if entries is None or all(names is None for names in named):
                continue
            data[field] = [
                entry if names is None else replacement
                for entry, names in zip(entries, named, strict=True)
                if names is None or replacement
            ]
            given = data.get(limit) or []
            found = [name for names in named for name in names or []]
            data[limit] = list(dict.fromkeys([*given, *found]))
        return data

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: object) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # `name: 404` is the text the person wrote
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"must be a non-empty text such as 'code-reviewer', got {value!r}")
        name = value.strip()
        if not is_agent_name(name):
            suggestion = agent_slug(name)
            fix = f": try {suggestion!r}" if suggestion else ""
            raise ValueError(
                f"must be 1–{NAME_MAX} letters, digits, '-', '_' or '.', starting with a letter "
                f"or digit, got {name!r}{fix}"
            )
        return name

    @field_validator("hooks", mode="before")
    @classmethod
    def _hooks(cls, value: object) -> dict[str, Any]:
        if value is None:
            return {}
        hooks = claude_hooks(value)  # Claude Code's Stop is SubagentStop for a sub-agent
        parse_hooks(hooks, "hooks", notes=[])  # the shape; running them is the parent's job
        return dict(hooks)  # type: ignore[call-overload]

    @field_validator("memory", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("effort", mode="before")
    @classmethod
    def _effort(cls, value: object) -> object:
        level, _approximated = claude_effort(value)  # the loader says what changed
        return level.strip().lower() if isinstance(level, str) else level

    @field_validator("description", "system_prompt", "initial_prompt", "color", mode="before")
    @classmethod
    def _text(cls, value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise ValueError(f"must be text, got {type(value).__name__} {value!r}")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: object) -> list[str] | None:
        return _tool_list(value, allow_all=True)

    @field_validator("disallowed_tools", mode="before")
    @classmethod
    def _disallowed(cls, value: object) -> list[str]:
        return _tool_list(value, allow_all=False) or []

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: object) -> str:
        return normalize_model(value)

    @field_validator(
        "max_turns",
        "memory_limit_mb",
        "cpu_limit_s",
        "max_tool_calls",
        "max_tool_output_bytes",
        "max_processes",
        mode="before",
    )
    @classmethod
    def _at_least_one(cls, value: object, info: ValidationInfo) -> int | None:
        number = _whole(value, 1)
        _at_most(number, info.field_name or "")
        return number

    @field_validator("max_depth", mode="before")
    @classmethod
    def _depth(cls, value: object) -> int | None:
        number = _whole(value, 0)
        _at_most(number, "max_depth")
        return number

    @field_validator("background", mode="before")
    @classmethod
    def _flag(cls, value: object) -> bool:
        if value is None:
            return False
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("false", "no", "off"):
            return False
        raise ValueError(f"must be true or false, got {value!r}")

    @field_validator("permission_mode", mode="before")
    @classmethod
    def _permission_mode(cls, value: object) -> str | None:
        if value is None:
            return None
        # Claude Code's auto, dontAsk, manual: the nearest mode that is not looser (the
        # loader says which).
        mode, _approximated = claude_mode_stand_in(value)
        try:
            if not isinstance(mode, str):
                raise ValueError
            return PermissionMode.parse(mode).value
        except ValueError:
            raise ValueError(
                f"must be one of {_MODES} (or Claude's acceptEdits, bypassPermissions, auto, "
                f"dontAsk, manual), got {value!r}"
            ) from None

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> float | None:
        if value is None:
            return None
        seconds: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        elif isinstance(value, str):
            try:
                seconds = float(value.strip().removesuffix("s"))
            except ValueError:
                seconds = None
        if seconds is None or not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"must be a number of seconds > 0, got {value!r}")
        _at_most(seconds, "timeout_s")
        return seconds

    @field_validator("context", mode="before")
    @classmethod
    def _context(cls, value: object) -> str:
        return _choice(value, ("fresh", "fork"))

    @field_validator("backend", mode="before")
    @classmethod
    def _backend(cls, value: object) -> str | None:
        return None if value is None else _choice(value, ("local", "ray"))

    @field_validator("isolation", mode="before")
    @classmethod
    def _isolation(cls, value: object) -> str:
        return _choice(value, ("none", "worktree"))

    @field_validator("task_agents", "denied_task_agents", mode="before")
    @classmethod
    def _agent_types(cls, value: object, info: ValidationInfo) -> list[str] | None:
        if value is None:
            return None if info.field_name == "task_agents" else []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"must be a list of agent names, got {value!r}")
        return list(dict.fromkeys(v.strip() for v in value if v.strip()))

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _mcp_servers(cls, value: object) -> list[Any]:
        hint = "a list of server names or {name: {command, args, env}} entries"
        if value is None:
            return []
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        elif isinstance(value, dict):
            value = [value]
        if not isinstance(value, list | tuple):
            raise ValueError(f"must be {hint}, got {value!r}")
        entries: list[Any] = []
        for position, entry in enumerate(value, 1):
            if isinstance(entry, str) and entry.strip():
                entries.append(entry.strip())
            elif isinstance(entry, dict) and entry:
                entries += [{str(name): config} for name, config in entry.items()]
            elif not (isinstance(entry, str) and not entry.strip()):
                raise ValueError(f"must be {hint}; item {position} is {entry!r}")
        for entry in entries:
            name = entry if isinstance(entry, str) else next(iter(entry))
            if not _SERVER_NAME.match(name):
                raise ValueError(
                    f"names a server {name!r}: a server name is letters, digits, '-' and '_' "
                    "(it becomes part of the tool names, mcp__<server>__<tool>)"
                )
        return entries

    @field_validator("skills", mode="before")
    @classmethod
    def _skills(cls, value: object) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            value = value.split(",")
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"must be a list of skill names, got {value!r}")
        return list(dict.fromkeys(v.strip() for v in value if v.strip()))

    @field_validator("extra", mode="before")
    @classmethod
    def _extra(cls, value: object) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"must be a mapping of extra keys, got {value!r}")
        return {str(key): item for key, item in value.items()}


def _choice(value: object, choices: tuple[str, ...]) -> str:
    if value is None:
        return choices[0]
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    options = " or ".join(repr(c) for c in choices)
    raise ValueError(f"must be {options}, got {value!r}")


def validation_messages(
    error: ValidationError, *, keys: Mapping[str, str] | None = None
) -> list[str]:
    """One line per problem, starting with the key as the user wrote it (`keys` maps each
    field name to that spelling), e.g. "maxTurns must be a whole number ≥ 1, got 'ten'"."""
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "definition"
        top = str(item["loc"][0]) if item["loc"] else field
        label = (keys or {}).get(top, top) + field[len(top) :]
        cause = item.get("ctx", {}).get("error")
        if item["type"] == "value_error" and cause is not None:
            lines.append(f"{label} {cause}")
        elif item["type"] == "missing":
            lines.append(f"{label} is required")
        elif item["type"] == "extra_forbidden":
            lines.append(f"{label} is not a field of an agent definition: remove it")
        else:
            lines.append(f"{label}: {item['msg']}")
    return lines
