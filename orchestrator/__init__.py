"""The agentcell parent: worker pool, runner, task tool, registry, tracker, approvals, CLI."""

from orchestrator._approvals import (
    AllowAll,
    ApprovalAnswer,
    ApprovalBroker,
    ApprovalChannel,
    ApprovalQuery,
    CallbackChannel,
    DenyAll,
    TerminalPrompt,
)
from orchestrator._config import Budgets, Price, Settings
from orchestrator._definitions import (
    AgentDefinition,
    normalize_model,
    resolve_model_alias,
    validation_messages,
)
from orchestrator._events import (
    AgentActivity,
    EventBus,
    OrchestratorEvent,
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from orchestrator._loader import load_agent_file, load_agents_dir
from orchestrator._orchestrator import Orchestrator, RunReport
from orchestrator._outcome import ChildOutcome, OutcomeKind
from orchestrator._pool import Lease, PoolError, WorkerPool, WorkerStartError, WorkerState
from orchestrator._registry import AgentRegistry, Diagnostic
from orchestrator._results import SubAgentResult
from orchestrator._runner import DelegationRequest, RunHandle, Runner, Scope
from orchestrator._tool_policy import COORDINATION_TOOLS, ResolvedTools, resolve_tools
from orchestrator._tracker import TaskRecord, TaskState, TaskTracker
from orchestrator._usage import AgentUsage, BudgetExceeded, UsageLedger

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
    "normalize_model",
    "resolve_model_alias",
    "resolve_tools",
    "validation_messages",
]
