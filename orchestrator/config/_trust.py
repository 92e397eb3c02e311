"""Folder trust: a project's configuration may only tighten until the user trusts it.

A cloned repository's ``agentcell.toml`` must not be able to switch approvals off, widen
the sandbox or send the user's API key to its own ``base_url``. Trust is the user's
decision (``agentcell trust DIR``), kept in the user's own config folder as the list of
resolved paths; a trusted folder covers everything beneath it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.config._trust_table import (
    ROUTING_KEYS,
    SETTINGS_TRUST,
    at_most,
    covering,
)


def trust_file(user_config: Path) -> Path:
    """Where the trusted folders are listed (beside the user's config.toml)."""
    return user_config.with_name("trusted.json")


def trusted_folders(user_config: Path) -> list[str]:
    path = trust_file(user_config)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path}: cannot read the trusted folders ({exc}); fix or delete it"
        ) from None
    folders = data.get("trusted", []) if isinstance(data, dict) else []
    return [f for f in folders if isinstance(f, str)]


def is_trusted(folder: Path, user_config: Path) -> bool:
    real = os.path.realpath(folder)
    folders = trusted_folders(user_config)
    return any(real == t or real.startswith(t.rstrip("/") + "/") for t in folders)


def _save(user_config: Path, folders: list[str]) -> None:
    path = trust_file(user_config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"trusted": sorted(set(folders))}, indent=2) + "\n")
    tmp.replace(path)


def trust(folder: Path, user_config: Path) -> str:
    """Trust ``folder`` (resolved); returns the path as stored."""
    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        raise ValueError(f"{folder}: no such directory")
    _save(user_config, [*trusted_folders(user_config), real])
    return real


def revoke(folder: Path, user_config: Path) -> bool:
    """Stop trusting ``folder``; False if it was not trusted."""
    real = os.path.realpath(folder)
    folders = trusted_folders(user_config)
    if real not in folders:
        return False
    _save(user_config, [f for f in folders if f != real])
    return True


def untrusted_layer(
    table: Mapping[str, Any], base: Mapping[str, Any], origin: str
) -> tuple[dict[str, Any], list[str]]:
    """The part of an untrusted project's table that only tightens ``base`` (the user's
    own settings), and one line for each key left out (see ``_trust_table``)."""
    notes: list[str] = []
    current = _merged(Settings().model_dump(), base)
    kept = _judge_table(table, current, (), origin, notes)
    return kept, notes


def _judge_table(
    table: Mapping[str, Any],
    current: Mapping[str, Any],
    prefix: tuple[str, ...],
    origin: str,
    notes: list[str],
) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in table.items():
        path = (*prefix, str(key))
        now: Any = current.get(key)
        entry = covering(SETTINGS_TRUST, path)
        if path == ("network",) and isinstance(value, list):  # hosts: narrowed, never widened
            narrowed, dropped = narrow_network(value, now)
            if dropped:
                why = "your own network setting does not allow it"
                notes.append(_ignored(origin, f"network {', '.join(dropped)}", why))
            kept[key] = narrowed
        elif path == ("model_options",) and isinstance(value, dict):
            options, dropped = _without_routing(value)
            kept[key] = options
            for name in dropped:
                notes.append(_ignored(origin, f"model_options.{name}", _ROUTING_WHY))
        elif entry is None and isinstance(value, dict):  # a table whose keys have rows
            kept[key] = _judge_table(value, now or {}, path, origin, notes)
        elif entry is None or entry.neutral:
            kept[key] = value  # an unknown key: validation names it
        elif path == ("bash_credentials",):
            notes.append(f"{origin}: bash_credentials ignored: only your own config may set it")
        elif entry.tightens and isinstance(value, list) and isinstance(now, list):
            # Rules: added to the user's. (A list for a limit is validation's to name.)
            kept[key] = [*now, *(rule for rule in value if rule not in now)]
        elif entry.tightens:
            if (entry.as_tight or at_most)(value, now):
                kept[key] = value
            else:
                notes.append(_ignored(origin, ".".join(path), f"{value!r} is looser than {now!r}"))
        elif _repeats(value, now):
            kept[key] = value
        else:
            notes.append(_ignored(origin, ".".join(path), entry.why))
    return kept


_ROUTING_WHY = "it could send your API key to another host"


def _ignored(origin: str, key: str, why: str) -> str:
    return (
        f"{origin}: {key} ignored: {why}; this folder is not trusted (run "
        f"'agentcell trust' in it to honour its configuration)"
    )


def _repeats(value: Any, current: Any) -> bool:
    """Whether a loosening value says nothing the user's own settings do not."""
    if isinstance(value, dict) and isinstance(current, dict):
        return all(k in current and _repeats(v, current[k]) for k, v in value.items())
    return bool(value == current)


def _merged(defaults: dict[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in base.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _without_routing(options: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for provider, table in options.items():
        if not isinstance(table, dict):
            kept[provider] = table
            continue
        rest = {}
        for key, value in table.items():
            if key.lower() in ROUTING_KEYS:
                dropped.append(f"{provider}.{key}")
            else:
                rest[key] = value
        if rest:
            kept[provider] = rest
    return kept, dropped


def narrow_network(value: list[str], user: bool | list[str]) -> tuple[list[str], list[str]]:
    """An untrusted ``network:`` list narrowed to the user's own: (kept, dropped). Under
    the user's ``true`` all of it is kept; under a list only its entries; else none."""
    if isinstance(user, list):
        allowed = {entry.strip().lower() for entry in user}
    elif user:
        return list(value), []
    else:
        allowed = set()
    kept = [entry for entry in value if entry.strip().lower() in allowed]
    return kept, [entry for entry in value if entry not in kept]
