"""The parent's side of the sandbox: refuse ``required`` where it cannot hold, say once
what is missing, and keep an untrusted project's agent files from loosening it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agentcell.orchestrator.config._load import user_config_path
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.config._trust import is_trusted, narrow_network
from agentcell.orchestrator.config._trust_table import AGENT_FILE_TRUST
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.worker import probe_sandbox, sandbox_missing

log = logging.getLogger("agentcell.sandbox")
_said: set[str] = set()


class SandboxUnavailable(ValueError):
    """``sandbox = "required"`` on a machine that cannot enforce ``workspace``."""


def check_sandbox(settings: Settings) -> list[str]:
    """What the configured mode cannot enforce here (said once per process, as a warning);
    raises ``SandboxUnavailable`` for ``required``."""
    if settings.sandbox == "off":
        return []
    missing = sandbox_missing("workspace", probe_sandbox())
    if missing and settings.sandbox == "required":
        raise SandboxUnavailable(
            f"sandbox = 'required' but this machine lacks {'; '.join(missing)}: run "
            "'agentcell sandbox' for details, or choose --sandbox workspace"
        )
    for item in missing:
        if item not in _said:
            _said.add(item)
            log.warning("the sandbox cannot enforce everything here: no %s", item)
    return missing


def untrusted_project_file(
    definition: AgentDefinition, workdir: Path, home: Path | None = None
) -> bool:
    """Whether ``definition`` was read from a file in ``workdir`` and that folder is not
    trusted: then its hooks and bash's network are not honoured (``agents show`` says so)."""
    return _inside(definition, workdir) and not is_trusted(workdir, user_config_path(home))


def _inside(definition: AgentDefinition, workdir: Path) -> bool:
    source = os.path.realpath(definition.source) if os.sep in definition.source else ""
    return source.startswith(os.path.realpath(workdir) + os.sep)


def distrust_project_agents(
    registry: AgentRegistry, workdir: Path, home: Path | None, settings: Settings | None = None
) -> None:
    """An untrusted project's agent files keep no loosening key (``AGENT_FILE_TRUST``): no
    network for bash, no hooks or inline MCP servers (they would run commands here, outside
    every sandbox), no Ray backend, no process bound above ``max_processes``, no
    ``permissionMode: acceptEdits`` (edits without asking); a ``network:``
    list is narrowed to the hosts the user's own setting allows. One line each."""
    user = user_config_path(home)
    if is_trusted(workdir, user):
        return
    settings = settings or Settings()
    bound = settings.max_processes
    for found in registry.definitions():
        if not _inside(found, workdir):
            continue
        definition = found
        if isinstance(found.network, list):
            definition = _narrowed_network(registry, found, settings.network)
        dropped = _loosening_keys(definition, bound)
        for key, why in dropped.items():
            log.warning(
                "%s: %s ignored: %s; this folder is not trusted (run 'agentcell trust' "
                "in it to honour its configuration)",
                definition.source,
                key,
                why,
            )
        if dropped:
            update = {key: _tightened(definition, key) for key in dropped}
            registry.add(definition.model_copy(update=update))


def _narrowed_network(
    registry: AgentRegistry, definition: AgentDefinition, user_network: bool | list[str]
) -> AgentDefinition:
    """A project's ``network:`` list keeps only the hosts the user's own setting allows."""
    assert isinstance(definition.network, list)  # the caller's check
    kept, refused = narrow_network(definition.network, user_network)
    if not refused:
        return definition
    log.warning(
        "%s: network %s ignored: your own network setting does not allow it; this folder "
        "is not trusted (run 'agentcell trust' in it to honour its configuration)",
        definition.source,
        ", ".join(refused),
    )
    narrowed = definition.model_copy(update={"network": kept})
    registry.add(narrowed)
    return narrowed


def _loosening_keys(definition: AgentDefinition, max_processes: int) -> dict[str, str]:
    """The loosening keys ``definition`` sets, each with why it is dropped."""
    found: dict[str, str] = {}
    for key, entry in AGENT_FILE_TRUST.items():
        value = getattr(definition, key)
        if key == "max_processes":
            if value is not None and value > max_processes:
                found[key] = f"{value} is above max_processes ({max_processes})"
        elif key == "mcp_servers":
            if any(not isinstance(e, str) for e in value):
                found[key] = f"inline servers: {entry.why}"
        elif key == "backend":
            if value == "ray":
                found[key] = entry.why
        elif key == "memory":
            if value == "user":  # project and local are folders of the project's own
                found[key] = f"user: {entry.why.removeprefix('memory: user ')}"
        elif key == "permission_mode":
            if value == "accept_edits":
                found[key] = entry.why
        elif key == "network" and isinstance(value, list):
            continue  # narrowed above to what the user's own setting allows
        elif not (entry.tightens or entry.neutral) and value:
            # Set at all: a loosening key's default is the tight, unset one.
            found[key] = entry.why
    return found


_DEFAULTS = {name: field.default for name, field in AgentDefinition.model_fields.items()}


def _tightened(definition: AgentDefinition, key: str) -> object:
    if key == "mcp_servers":  # servers it names from your own config are kept
        return [e for e in definition.mcp_servers if isinstance(e, str)]
    if key == "memory":  # notes still, in a folder of the project's, never committed
        return "local"
    return _DEFAULTS[key]
