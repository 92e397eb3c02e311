"""Where settings come from, merged in increasing precedence:

1. ``~/.claude/settings.json`` (Claude Code's: its hooks and permissions, see
   ``_claude_settings``), then ``~/.config/agentcell/config.toml`` (or
   ``$XDG_CONFIG_HOME/agentcell/config.toml``)
2. the project: ``.mcp.json``, ``.claude/settings.json``, ``.claude/settings.local.json``
   (those three only in a trusted folder, but for the settings files' deny and ask
   rules, which hold anywhere), then ``agentcell.toml``, or ``[tool.agentcell]``
   in ``pyproject.toml`` — until the user trusts the folder (``agentcell trust``), only
   the keys that tighten the user's settings; each key left out is named in one line
   (see ``_trust``)
3. environment variables (``AGENTCELL_MODEL``, ``AGENTCELL_MAX_WORKERS``, ...)
4. command-line flags

The project file beats the user file because it is the more specific of the two. Tables
(``budgets``, ``aliases``, ``prices``, ``model_options``) merge key by key. A Claude Code
settings file adds to what is below it, as in Claude Code: its hooks and rules join the
lists already there rather than replace them. API keys never
belong in these files: providers read them from the environment.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args, get_origin
from urllib.parse import urlsplit

from agentcell.orchestrator.config._claude_settings import claude_settings_layers
from agentcell.orchestrator.config._hooks import name_once
from agentcell.orchestrator.config._mcp import McpServerConfig, config_problems, read_mcp_json
from agentcell.orchestrator.config._settings import Settings, means_no_limit
from agentcell.orchestrator.config._trust import is_trusted, untrusted_layer
from agentcell.worker import OutsideRoot, read_beneath
from pydantic import BaseModel, ValidationError


class ConfigError(Exception):
    """Bad configuration: one line per problem, each naming where it is and the fix."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


#: Environment variables that set a setting, and how to read their text.
ENV_SETTINGS: dict[str, tuple[str, type]] = {
    "AGENTCELL_MODEL": ("model", str),
    "AGENTCELL_MAX_WORKERS": ("max_workers", int),
    "AGENTCELL_WARM_SPARES": ("warm_spares", int),
    "AGENTCELL_APPROVE": ("approval", str),
    "AGENTCELL_MAX_DEPTH": ("max_depth", int),
    "AGENTCELL_PERMISSION_MODE": ("permission_mode", str),
    "AGENTCELL_SANDBOX": ("sandbox", str),
}

log = logging.getLogger("agentcell.config")

_SECRET_KEYS = {"api_key", "apikey", "key", "token", "secret", "password"}


def user_config_path(home: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME")
    root = Path(base) if base else (home or Path.home()) / ".config"
    return root / "agentcell" / "config.toml"


def project_config(workdir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The project's settings table and where it came from, if it has one."""
    own = workdir / "agentcell.toml"
    if own.is_file():
        return own, _read_toml(own, root=workdir)
    pyproject = workdir / "pyproject.toml"
    if pyproject.is_file():
        table = _read_toml(pyproject, root=workdir).get("tool", {}).get("agentcell")
        if isinstance(table, dict):
            return pyproject, table
    return None


def load_settings(
    *,
    workdir: Path,
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    notices: list[str] | None = None,
    provenance: dict[str, str] | None = None,
) -> tuple[Settings, list[str]]:
    """The merged, validated settings and the list of sources that contributed.

    ``provenance``, when given, is filled with where each permission rule and each
    event's hooks came from (see ``record_provenance``).

    Keys of an untrusted project that were ignored are logged, one line each, and added
    to ``notices`` when given."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    sources: list[str] = []
    problems: list[str] = []
    layers: list[tuple[str, dict[str, Any]]] = []
    user = user_config_path(home, env)
    trusted = is_trusted(workdir, user)
    claude_user, claude_project, claude_notes = claude_settings_layers(
        workdir, home or Path.home(), trusted=trusted
    )
    additive = {origin for origin, _ in [*claude_user, *claude_project]}
    layers += claude_user
    user_table: dict[str, Any] = {}
    if user.is_file():
        user_table = _read_toml(user)
        layers.append((str(user), user_table))
    mcp_layer, mcp_notes = _mcp_json_layer(workdir, trusted=trusted, env=env)
    for line in [*mcp_notes, *claude_notes]:
        name_once(line)  # once a process, however often the settings are read
    if notices is not None:
        notices.extend([*mcp_notes, *claude_notes])
    if mcp_layer is not None:
        layers.append(mcp_layer)
    layers += claude_project
    project = _project_layer(workdir, user_table, trusted=trusted, notices=notices)
    if project is not None:
        layers.append(project)
    for origin, table in layers:
        problems += _secret_problems(table, origin)
        _validate_layer(table, origin, problems)
        _merge(merged, table, additive=origin in additive)
        sources.append(origin)
        if provenance is not None:
            record_provenance(provenance, table, origin)
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    from_env = _env_layer(env, problems, flagged=set(given))
    if from_env:
        _merge(merged, from_env)
        sources.append("environment")
    if given:
        for field, value in given.items():  # each named as the person typed it
            _validate_layer({field: value}, f"{_flag(field)} {value}", problems)
        _merge(merged, given)
        sources.append("flags")
    if problems:
        raise ConfigError(problems)
    try:
        return Settings.model_validate(merged), sources
    except ValidationError as exc:
        raise ConfigError(settings_messages(exc, "settings")) from None


def _project_layer(
    workdir: Path, user_table: dict[str, Any], *, trusted: bool, notices: list[str] | None
) -> tuple[str, dict[str, Any]] | None:
    """The project's own settings file as a layer: in an untrusted folder only the keys
    that tighten the user's; each key left out logged (and added to ``notices``)."""
    found = project_config(workdir)
    if found is None:
        return None
    path, table = found
    name = f"{path} [tool.agentcell]" if path.name == "pyproject.toml" else str(path)
    if trusted:
        ignored = []
        if "bash_credentials" in table:
            table = {k: v for k, v in table.items() if k != "bash_credentials"}
            ignored.append(f"{name}: bash_credentials ignored: only your own config may set it")
    else:
        # A 0 for "no limit" is judged as the None it means: the loosest value, where as
        # a number it would pass for the tightest (and the user's own 0 would too).
        table, ignored = untrusted_layer(
            _no_limit_as_none(table), _no_limit_as_none(user_table), name
        )
    for line in ignored:
        log.warning("%s", line)
    if notices is not None:
        notices.extend(ignored)
    return name, table


#: Settings whose 0 in a file means no limit (None to validation).
_ZERO_IS_NO_LIMIT = ("subagent_timeout_s",)


def _no_limit_as_none(table: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: None if k in _ZERO_IS_NO_LIMIT and means_no_limit(v) else v for k, v in table.items()
    }


def _mcp_json_layer(
    workdir: Path, *, trusted: bool, env: Mapping[str, str]
) -> tuple[tuple[str, dict[str, Any]] | None, list[str]]:
    """The project's ``.mcp.json`` as a settings layer (below its agentcell.toml), with
    every server that is not usable left out and named; nothing in an untrusted folder.
    Its ``${VAR}`` references are expanded from ``env`` only past the trust check: an
    untrusted file could send the user's keys anywhere in a URL or a header."""
    path = workdir / ".mcp.json"
    if not path.is_file():
        return None, []
    if not trusted:
        return None, [
            f"{path}: MCP servers ignored: they run commands outside the sub-agents' "
            "sandboxes; this folder is not trusted (run 'agentcell trust' in it to use them)"
        ]
    tables, notes = read_mcp_json(path, root=workdir, environ=env)
    servers: dict[str, Any] = {}
    for name, table in tables.items():
        try:
            McpServerConfig.model_validate(table)
        except ValidationError as exc:
            notes.append(f"{path}: MCP server {name!r} skipped: {config_problems(exc)}")
            continue
        servers[name] = table
    return ((str(path), {"mcp_servers": servers}) if servers else None), notes


#: The settings whose entries ``record_provenance`` traces to their file.
RULE_SETTINGS = ("allow_rules", "deny_rules", "ask_rules")


def record_provenance(provenance: dict[str, str], table: Mapping[str, Any], origin: str) -> None:
    """``"deny_rules bash(rm *)"`` and ``"hooks PreToolUse"`` → the layer that set it
    (a later layer that sets it again takes it over, as it does the value)."""
    for key in RULE_SETTINGS:
        for rule in table.get(key) or ():
            if key in ALWAYS_JOINED:  # kept from the first file that set it
                provenance.setdefault(f"{key} {rule}", origin)
            else:
                provenance[f"{key} {rule}"] = origin
    hooks = table.get("hooks")
    if isinstance(hooks, Mapping):
        for event in hooks:
            provenance[f"hooks {event}"] = origin


def _validate_layer(table: dict[str, Any], origin: str, problems: list[str]) -> None:
    """Check one file on its own, so that a message can name the file at fault."""
    try:
        Settings.model_validate(table)
    except ValidationError as exc:
        problems += settings_messages(exc, origin)


def _env_layer(env: Mapping[str, str], problems: list[str], *, flagged: set[str]) -> dict[str, Any]:
    """The settings the environment sets, less those a flag (in ``flagged``) sets again."""
    layer: dict[str, Any] = {}
    for name, (field, kind) in ENV_SETTINGS.items():
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        found: list[str] = []
        value = _env_value(name, raw, field, kind, found)
        if field in flagged:
            # The flag is what this run uses, so a bad variable must not stop it (a flag is
            # how one works round a stale export); it is named, as it breaks runs without.
            for line in found:
                log.warning("%s (ignored: %s is given)", line, _flag(field))
            continue
        problems += found
        if not found:
            layer[field] = value
    return layer


def _env_value(name: str, raw: str, field: str, kind: type, problems: list[str]) -> Any:
    """A variable's text read as its setting's value, and checked on its own."""
    if kind is int:
        try:
            value: Any = int(raw)
        except ValueError:
            problems.append(f"{name}={raw!r}: must be a whole number")
            return None
    else:
        value = raw
    _validate_layer({field: value}, f"{name}={raw!r}", problems)
    return value


def _flag(field: str) -> str:
    """The command-line flag that sets ``field``, as the person typed it."""
    return "--" + FLAG_NAMES.get(field, field).replace("_", "-")


#: Lists no later layer can shorten: a deny or ask rule set anywhere holds (as in Claude
#: Code, whose rules merge over every scope), so a project file cannot drop the user's.
ALWAYS_JOINED = frozenset({"deny_rules", "ask_rules"})


def _merge(into: dict[str, Any], layer: Mapping[str, Any], *, additive: bool = False) -> None:
    """``layer`` over ``into``; ``additive``: its lists join those already there."""
    for key, value in layer.items():
        joined = additive or key in ALWAYS_JOINED
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, additive=additive)
        elif joined and isinstance(value, list) and isinstance(into.get(key), list):
            into[key] = [*into[key], *(item for item in value if item not in into[key])]
        else:
            into[key] = value


def _read_toml(path: Path, *, root: Path | None = None) -> dict[str, Any]:
    """A TOML file; with ``root`` (a project's folder) opened beneath it, no link out."""
    try:
        if root is not None:
            return tomllib.loads(read_beneath(root, path).decode("utf-8"))
        with path.open("rb") as f:
            return tomllib.load(f)
    except OutsideRoot as exc:
        raise ConfigError([str(exc)]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not valid UTF-8 ({exc.reason}): save it as UTF-8"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read it: {exc.strerror}"]) from None


#: An MCP server's own environment and headers: a TOKEN there is the server's (Claude
#: Code's .mcp.json fills it from the environment with ``${VAR}``), not a model key.
_SERVER_OWN = re.compile(r"mcp_servers\.[^.]+\.(?:env|headers)\.")


def _secret_problems(table: Mapping[str, Any], origin: str, prefix: str = "") -> list[str]:
    if _SERVER_OWN.fullmatch(prefix):
        return []
    found = []
    for key, value in table.items():
        where = f"{prefix}{key}"
        if isinstance(value, dict):
            found += _secret_problems(value, origin, f"{where}.")
        elif key.lower() in _SECRET_KEYS or key.lower().endswith("_api_key"):
            found.append(
                f"{origin}: {where}: API keys do not belong in configuration files; set "
                "OPENAI_API_KEY or ANTHROPIC_API_KEY in the environment instead"
            )
    return found


#: Settings whose command-line flag is not named after the setting.
FLAG_NAMES = {"approval": "approve", "aliases": "model_alias"}


def settings_messages(exc: ValidationError, origin: str) -> list[str]:
    """One readable line per problem: where, what is wrong, and what was given."""
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            lines.append(f"{origin}: unknown setting {where!r}{_suggestion(error['loc'])}")
            continue
        given = error.get("input")
        if error["type"] == "value_error" and "error" in error.get("ctx", {}):
            message = str(error["ctx"]["error"])  # our own text, without pydantic's prefix
        else:
            message = error["msg"][0].lower() + error["msg"][1:]
        lines.append(f"{origin}: {where}: {message} (got {given!r})")
    return lines


def _suggestion(loc: tuple[int | str, ...]) -> str:
    """The near key of the same table (``[budgets] max_tokenz``: ``max_tokens``)."""
    name = str(loc[-1])
    keys = _table_keys(loc[:-1])
    if len(loc) > 1 and name in Settings.model_fields and name not in keys:
        # TOML puts every key below a [table] header into that table.
        return f": {name!r} is a top-level setting: move it above the first [table] header"
    near = difflib.get_close_matches(name, keys, n=1, cutoff=0.6)
    if near:
        return f": did you mean {near[0]!r}?"
    return " (the README's Configuration section lists the settings)"


def _table_keys(path: tuple[int | str, ...]) -> list[str]:
    """The keys of the settings table at ``path`` (``("limits", "openai")``), if any."""
    kind: Any = Settings
    for part in path:
        if get_origin(kind) is dict:  # [limits.NAME]: NAME is an entry, not a key
            kind = get_args(kind)[1]
        elif _is_table(kind) and str(part) in kind.model_fields:
            kind = kind.model_fields[str(part)].annotation
        else:
            return []
        optional = [arg for arg in get_args(kind) if arg is not type(None)]
        if get_origin(kind) is not dict and len(optional) == 1:  # `X | None`: X
            kind = optional[0]
    return list(kind.model_fields) if _is_table(kind) else []


def _is_table(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def base_url_problem(model: object, settings: Settings) -> str | None:
    """What makes the URL a model sends to unusable (no http(s) scheme, no host), as
    one line naming where it was set; None when it is usable, or the model has none."""
    base = getattr(model, "base_url", None)
    if not isinstance(base, str) or _is_http_url(base):
        return None
    provider = str(getattr(model, "name", "")).partition(":")[0]
    configured = settings.model_options.get(provider, {}).get("base_url")
    if configured:
        given, where = str(configured), f"model_options.{provider}.base_url = {configured!r}"
    else:
        variable = str(getattr(model, "base_env", "the base URL"))
        given = os.environ.get(variable, base)
        where = f"{variable}={given!r}"
    example = f"http://{given}" if "://" not in given else "http://127.0.0.1:8000/v1"
    return f"{where}: not an http:// or https:// URL with a host: write one, e.g. {example}"


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
