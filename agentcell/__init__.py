"""agentcell: run every sub-agent of an LLM agent in its own OS process.

    import agentcell

    async with agentcell.Orchestrator(settings=agentcell.Settings(model="scripted:echo")) as orch:
        report = await orch.run("Say hello")

The names here are the public API a program needs (the README's "Python API" lists
them): the ``Orchestrator``, the definition, settings and result types, the events, the
approval channels, the errors, and the tool interface; model test doubles are in
``agentcell.testing``. Everything under ``agentcell.protocol``, ``agentcell.worker`` and
``agentcell.orchestrator`` is internal: it may change without notice. The names load on
first use, so a sub-agent process importing ``agentcell.worker`` does not pay for the
orchestrator.
Sub-packages (internal): ``agentcell.protocol`` (the wire contract), ``agentcell.worker``
(the agent runtime), ``agentcell.orchestrator`` (the parent).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcell.orchestrator import (
        AgentActivity,
        AgentDefinition,
        AllowAll,
        ApprovalAnswer,
        ApprovalChannel,
        ApprovalQuery,
        Budgets,
        CallbackChannel,
        ConfigError,
        DenyAll,
        Orchestrator,
        OrchestratorEvent,
        PoolError,
        Price,
        RunReport,
        Settings,
        SubAgentEnded,
        SubAgentProcess,
        SubAgentResult,
        SubAgentStarted,
    )
    from agentcell.protocol import (
        AgentEvent,
        ApprovalNeeded,
        Notice,
        RunFinished,
        RunResult,
        RunStatus,
        TextDelta,
        ToolFinished,
        ToolStarted,
        TurnStarted,
        Usage,
        UsageUpdate,
    )
    from agentcell.worker.models import ModelError
    from agentcell.worker.tools import Tool, ToolContext, ToolError, ToolOutput, function_tool

__all__ = [
    "AgentActivity",
    "AgentDefinition",
    "AgentEvent",
    "AllowAll",
    "ApprovalAnswer",
    "ApprovalChannel",
    "ApprovalNeeded",
    "ApprovalQuery",
    "Budgets",
    "CallbackChannel",
    "ConfigError",
    "DenyAll",
    "ModelError",
    "Notice",
    "Orchestrator",
    "OrchestratorEvent",
    "PoolError",
    "Price",
    "RunFinished",
    "RunReport",
    "RunResult",
    "RunStatus",
    "Settings",
    "SubAgentEnded",
    "SubAgentProcess",
    "SubAgentResult",
    "SubAgentStarted",
    "TextDelta",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFinished",
    "ToolOutput",
    "ToolStarted",
    "TurnStarted",
    "Usage",
    "UsageUpdate",
    "function_tool",
]

#: The module each public name comes from (imported on first use).
_SOURCES: dict[str, str] = {
    "AgentActivity": "agentcell.orchestrator",
    "AgentDefinition": "agentcell.orchestrator",
    "AllowAll": "agentcell.orchestrator",
    "ApprovalAnswer": "agentcell.orchestrator",
    "ApprovalChannel": "agentcell.orchestrator",
    "ApprovalQuery": "agentcell.orchestrator",
    "Budgets": "agentcell.orchestrator",
    "CallbackChannel": "agentcell.orchestrator",
    "ConfigError": "agentcell.orchestrator",
    "DenyAll": "agentcell.orchestrator",
    "Orchestrator": "agentcell.orchestrator",
    "OrchestratorEvent": "agentcell.orchestrator",
    "PoolError": "agentcell.orchestrator",
    "Price": "agentcell.orchestrator",
    "RunReport": "agentcell.orchestrator",
    "Settings": "agentcell.orchestrator",
    "SubAgentEnded": "agentcell.orchestrator",
    "SubAgentProcess": "agentcell.orchestrator",
    "SubAgentResult": "agentcell.orchestrator",
    "SubAgentStarted": "agentcell.orchestrator",
    "AgentEvent": "agentcell.protocol",
    "ApprovalNeeded": "agentcell.protocol",
    "Notice": "agentcell.protocol",
    "RunFinished": "agentcell.protocol",
    "RunResult": "agentcell.protocol",
    "RunStatus": "agentcell.protocol",
    "TextDelta": "agentcell.protocol",
    "ToolFinished": "agentcell.protocol",
    "ToolStarted": "agentcell.protocol",
    "TurnStarted": "agentcell.protocol",
    "Usage": "agentcell.protocol",
    "UsageUpdate": "agentcell.protocol",
    "ModelError": "agentcell.worker.models",
    "Tool": "agentcell.worker.tools",
    "ToolContext": "agentcell.worker.tools",
    "ToolError": "agentcell.worker.tools",
    "ToolOutput": "agentcell.worker.tools",
    "function_tool": "agentcell.worker.tools",
}


def __getattr__(name: str) -> Any:
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module 'agentcell' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next look-up is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
