"""The agentcell parent: the ``Orchestrator``, and the pieces it is made of.

Sub-packages, by concern: ``config`` (settings and where they come from), ``backends``
(where a sub-agent's process comes from), ``definitions`` (agent definitions, files and
the registry), ``delegation`` (running sub-agents, task tools, tracker, approvals, usage)
and ``cli`` (the ``agentcell`` command).

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.orchestrator._main_run import RunReport, report_json
from agentcell.orchestrator._orchestrator import Orchestrator
from agentcell.orchestrator.backends import (
    ChildOutcome,
    Lease,
    OutcomeKind,
    PoolError,
    WorkerPool,
    WorkerStartError,
    WorkerState,
)
from agentcell.orchestrator.config import Budgets, ConfigError, Price, Settings, load_settings
from agentcell.orchestrator.definitions import (
    COORDINATION_TOOLS,
    AgentDefinition,
    AgentRegistry,
    Diagnostic,
    ResolvedTools,
    load_agent_file,
    load_agents_dir,
    normalize_model,
    resolve_model_alias,
    resolve_tools,
    validation_messages,
)
from agentcell.orchestrator.delegation import (
    AgentActivity,
    AgentUsage,
    AllowAll,
    ApprovalAnswer,
    ApprovalBroker,
    ApprovalChannel,
    ApprovalQuery,
    BudgetExceeded,
    CallbackChannel,
    DelegationRequest,
    DenyAll,
    EventBus,
    OrchestratorEvent,
    RunHandle,
    Runner,
    Scope,
    SubAgentEnded,
    SubAgentProcess,
    SubAgentResult,
    SubAgentStarted,
    TaskRecord,
    TaskState,
    TaskTracker,
    TerminalPrompt,
    UsageLedger,
)

__all__ = [
    "COORDINATION_TOOLS",
    "AgentActivity",
    "AgentDefinition",
    "AgentRegistry",
    "AgentUsage",
    "AllowAll",
    "ApprovalAnswer",
    "ApprovalBroker",
    "ApprovalChannel",
    "ApprovalQuery",
    "Budgets",
    "BudgetExceeded",
    "CallbackChannel",
    "ChildOutcome",
    "ConfigError",
    "DelegationRequest",
    "DenyAll",
    "Diagnostic",
    "EventBus",
    "Lease",
    "Orchestrator",
    "OrchestratorEvent",
    "OutcomeKind",
    "PoolError",
    "Price",
    "ResolvedTools",
    "RunHandle",
    "RunReport",
    "Runner",
    "Scope",
    "Settings",
    "SubAgentEnded",
    "SubAgentProcess",
    "SubAgentResult",
    "SubAgentStarted",
    "TaskRecord",
    "TaskState",
    "TaskTracker",
    "TerminalPrompt",
    "UsageLedger",
    "WorkerPool",
    "WorkerStartError",
    "WorkerState",
    "load_agent_file",
    "load_agents_dir",
    "load_settings",
    "normalize_model",
    "report_json",
    "resolve_model_alias",
    "resolve_tools",
    "validation_messages",
]
