"""What a runner is made of: what every run is given (``RunServices``), where its
sub-agents run (``RunPlaces``) and what a child may be handed besides its definition
(``ChildKit``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentcell.orchestrator.approvals._channel import ApprovalBroker
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._interface import Backend
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._events import EventBus
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.worker.models import ToolSpec
from agentcell.worker.tools import Tool


@dataclasses.dataclass(slots=True, kw_only=True)
class RunServices:
    """What every run is given: the agents it may start, the operator's settings, and the
    parent's shared services (approvals, the lifetime ledger, the event bus, hooks)."""

    registry: AgentRegistry
    settings: Settings
    broker: ApprovalBroker
    ledger: UsageLedger
    bus: EventBus
    hooks: HookRunner | None = None  # None: none configured
    tracing: Any = None  # agentcell.worker.tracing.Tracing, when runs are traced
    limiter: ProviderLimiter | None = None  # None: a new one, of settings.limits


@dataclasses.dataclass(slots=True, kw_only=True)
class RunPlaces:
    """Where its sub-agents run: the folders (work, records, home) and the backends their
    processes come from."""

    pool: WorkerPool
    workdir: str
    run_dir: str = ""  # "": not recorded, unless a call's account says where
    home: Path | None = None
    backends: dict[str, Backend] | None = None  # besides the pool (e.g. "ray")


@dataclasses.dataclass(slots=True, kw_only=True)
class ChildKit:
    """What a child may be handed besides its definition: the caller's model objects and
    custom tools, and the ``task`` tool's spec for a child that may delegate."""

    model_objects: dict[str, Any] | None = None
    custom_tools: Sequence[Tool] = ()
    task_tool_spec: Callable[[Callable[[str], bool] | None], ToolSpec] | None = None
