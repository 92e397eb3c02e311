"""The parent's side of the sandbox: refuse ``required`` where it cannot hold, say once
what is missing, and keep an untrusted project's agent files from loosening it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agentcell.orchestrator.config import Settings, is_trusted, narrow_network, user_config_path
from agentcell.orchestrator.definitions import AgentDefinition, AgentRegistry
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
    registry: AgentRegistry,
    workdir: Path,
    home: Path | None,
    user_network: bool | list[str] = False,
) -> None:
    """An untrusted project's agent files may not give bash the network, nor hooks (they
    would run commands here, outside every sandbox); a ``network:`` list is narrowed to
    the hosts ``user_network`` (the user's own setting) allows."""
    user = user_config_path(home)
    if is_trusted(workdir, user):
        return
    for definition in registry.definitions():
        if not _inside(definition, workdir):
            continue
        dropped: dict[str, object] = {}
        if isinstance(definition.network, list):
            kept, refused = narrow_network(definition.network, user_network)
            if refused:
                dropped["network"] = kept
        elif definition.network:
            dropped["network"] = None
        if definition.hooks:
            dropped["hooks"] = {}
        for key in dropped:
            log.warning(
                "%s: %s ignored: this folder is not trusted (run 'agentcell trust' "
                "in it to honour its configuration)",
                definition.source,
                key,
            )
        if dropped:
            registry.add(definition.model_copy(update=dropped))
