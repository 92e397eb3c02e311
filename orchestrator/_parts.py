"""What an ``Orchestrator`` builds when it is constructed, one function per part, and
``Parts``: what it built that its main agent and its runner share.

Split from ``_orchestrator`` so that the constructor there reads as the list of what an
orchestrator is made of; these are plain functions of the settings and the caller's
keywords.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

from agentcell.orchestrator._main_run import default_channel
from agentcell.orchestrator._reach import Reach
from agentcell.orchestrator.approvals._channel import ApprovalBroker, ApprovalChannel
from agentcell.orchestrator.approvals._hooks import HookRunner, SessionHooks, notification_hook
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends.ray._backend import RayBackend
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._events import EventBus
from agentcell.orchestrator.delegation._run_parts import ChildKit, RunPlaces, RunServices
from agentcell.orchestrator.delegation._runner import Runner
from agentcell.orchestrator.delegation._task_args import task_tool_spec
from agentcell.orchestrator.task_tools._tracker import TaskTracker
from agentcell.orchestrator.telemetry._tracing_setup import tracing_preload
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.worker import ChildBoot
from agentcell.worker.models import Model
from agentcell.worker.tools import Tool


@dataclasses.dataclass(slots=True, kw_only=True)
class Parts:
    """What the main agent runs with, and the runner is built from: the settings and the
    folders, the main model and the caller's tools and models, the agents, and the
    services every agent shares (hooks, approvals, events, tasks, usage, traces)."""

    settings: Settings
    workdir: Path
    home: Path
    model_name: str | None
    model_objects: dict[str, Model]
    custom_tools: list[Tool]
    registry: AgentRegistry
    hooks: HookRunner
    session_hooks: SessionHooks
    broker: ApprovalBroker
    bus: EventBus
    tracker: TaskTracker
    ledger: UsageLedger
    tracing: Any  # agentcell.worker.tracing.Tracing, or None: not traced
    reach: Reach = dataclasses.field(default_factory=Reach)  # agents left out, and why


def chosen_model(
    model: str | Model | None, models: dict[str, Model] | None, settings: Settings
) -> tuple[str | None, dict[str, Model]]:
    """The main agent's model (a name: the settings' when none is given), and the model
    objects by name: the caller's, and the main model when it is given as one."""
    objects: dict[str, Model] = dict(models or {})
    if isinstance(model, str) or model is None:
        return model or settings.model, objects
    objects[model.name] = model
    return model.name, objects


def configured_hooks(settings: Settings, workdir: Path) -> HookRunner:
    """The user's own and a trusted project's hooks (load_settings drops an untrusted
    project's); a definition's own are added per agent."""
    return HookRunner.from_table(
        settings.hooks,
        "config",
        cwd=str(workdir),
        session_id=str(uuid.uuid4()),
        permission_mode=settings.permission_mode,
    )


def approval_broker(
    settings: Settings, approval: ApprovalChannel | None, hooks: HookRunner
) -> ApprovalBroker:
    """The one broker every approval goes through: the caller's channel, else the
    settings' (``default_channel``); the Notification hooks hear each question."""
    broker = ApprovalBroker(
        approval or default_channel(settings),
        bubble_background=settings.approval == "bubble",
    )
    broker.notify = notification_hook(hooks)
    return broker


def worker_pool(settings: Settings, tracing: Any) -> WorkerPool:
    """The fork-server pool an orchestrator owns when the caller gives none."""
    return WorkerPool(
        max_workers=settings.max_workers,
        warm=settings.warm_spares,
        heartbeat_timeout=settings.heartbeat_timeout_s,
        boot=ChildBoot(),  # (no connection ahead: the parent sends its model requests)
        starters=settings.process_starters,
        preload=[*settings.preload, *(tracing_preload(tracing) or ())],
    )


def subagent_runner(
    parts: Parts, pool: WorkerPool, ray: RayBackend | None, run_dir: Path | None
) -> Runner:
    """The runner of every sub-agent: the parts it shares with the main agent, the pool
    (and the Ray backend) its processes come from, the run folder given (if any)."""
    registry, left_out = parts.registry, parts.reach.left_out

    def offered(allowed: Any) -> Any:  # a nested task tool lists no agent left out either
        return task_tool_spec(
            registry,
            allowed=lambda name: name not in left_out and (allowed is None or allowed(name)),
        )

    return Runner(
        RunServices(
            registry=registry,
            settings=parts.settings,
            broker=parts.broker,
            ledger=parts.ledger,
            bus=parts.bus,
            hooks=parts.hooks,
            tracing=parts.tracing,
        ),
        RunPlaces(
            pool=pool,
            workdir=str(parts.workdir),
            run_dir=str(run_dir) if run_dir else "",
            home=parts.home,
            backends={"ray": ray} if ray is not None else None,
        ),
        ChildKit(
            model_objects=parts.model_objects,
            custom_tools=parts.custom_tools,
            task_tool_spec=offered,
        ),
    )
