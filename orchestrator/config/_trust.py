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
from agentcell.worker import PermissionMode

_APPROVAL_LOOSENESS = ["deny", "ask", "bubble", "allow"]
_PERMISSION_LOOSENESS = ["plan", "default", "accept_edits", "bypass"]
_SANDBOX_LOOSENESS = ["read-only", "required", "workspace", "off"]
#: Keys of a provider's model_options that decide where requests (and the key) go.
_ROUTING_KEYS = ("base_url", "url", "host", "endpoint", "headers", "default_headers")


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
    own settings), and one line for each key left out."""
    kept: dict[str, Any] = {}
    notes: list[str] = []
    defaults = Settings()

    def current(key: str) -> Any:
        return base.get(key, getattr(defaults, key))

    def ignore(key: str, why: str) -> None:
        notes.append(
            f"{origin}: {key} ignored: {why}; this folder is not trusted (run "
            f"'agentcell trust' in it to honour its configuration)"
        )

    for key, value in table.items():
        looser = _looser(key, value, current(key) if key in Settings.model_fields else None)
        if key == "bash_credentials":
            notes.append(f"{origin}: bash_credentials ignored: only your own config may set it")
        elif key == "allow_rules" and value:
            ignore(key, "allow rules let commands run without asking")
        elif key in ("mcp_servers", "main_mcp_servers") and value:
            ignore(key, "MCP servers run commands outside the sub-agents' sandboxes")
        elif key == "hooks" and value:
            ignore(key, "hooks run commands on this machine")
        elif key == "webfetch_allow" and value:
            ignore(key, "it lets sub-agents fetch pages without asking")
        elif key == "sandbox_read" and value:
            ignore(key, "it widens what sub-agents may read")
        elif key == "network" and value is True and current(key) is not True:
            ignore(key, "it gives sub-agents' commands the network")
        elif key == "network" and isinstance(value, list):
            narrowed, dropped = narrow_network(value, current(key))
            if dropped:
                ignore(
                    f"network {', '.join(dropped)}", "your own network setting does not allow it"
                )
            kept[key] = narrowed
        elif key == "model_options" and isinstance(value, dict):
            options, dropped = _without_routing(value)
            kept[key] = options
            for name in dropped:
                ignore(f"model_options.{name}", "it could send your API key to another host")
        elif looser:
            ignore(key, f"{value!r} is looser than {current(key)!r}")
        else:
            kept[key] = value
    return kept, notes


def _looser(key: str, value: Any, current: Any) -> bool:
    scales = {
        "approval": _APPROVAL_LOOSENESS,
        "permission_mode": _PERMISSION_LOOSENESS,
        "sandbox": _SANDBOX_LOOSENESS,
    }
    if key in scales:
        scale = scales[key]
        norm = _normal_mode(value) if key == "permission_mode" else value
        cur = _normal_mode(current) if key == "permission_mode" else current
        if norm not in scale or cur not in scale:
            return False  # not a known value: validation names it
        return scale.index(norm) > scale.index(cur)
    if key in ("max_processes", "max_depth") and isinstance(value, int):
        return isinstance(current, int) and value > current
    return False


def _normal_mode(value: Any) -> Any:
    try:
        return PermissionMode.parse(value).value if isinstance(value, str) else value
    except ValueError:
        return value


def _without_routing(options: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for provider, table in options.items():
        if not isinstance(table, dict):
            kept[provider] = table
            continue
        rest = {}
        for key, value in table.items():
            if key.lower() in _ROUTING_KEYS:
                dropped.append(f"{provider}.{key}")
            else:
                rest[key] = value
        if rest:
            kept[provider] = rest
    return kept, dropped


def narrow_network(value: list[str], user: bool | list[str]) -> tuple[list[str], list[str]]:
    """An untrusted ``network:`` list narrowed to the user's own: (kept, dropped). Under
    the user's ``true`` all of it is kept; under a list only its entries; else none."""
    if user is True:
        return list(value), []
    allowed = {entry.strip().lower() for entry in user} if isinstance(user, list) else set()
    kept = [entry for entry in value if entry.strip().lower() in allowed]
    return kept, [entry for entry in value if entry not in kept]
