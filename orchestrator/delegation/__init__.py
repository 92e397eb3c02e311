"""Delegation: running sub-agents, the task tools, background tracking, approvals, usage.

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.orchestrator.approvals._channel import (
    AllowAll,
    ApprovalAnswer,
    ApprovalBroker,
    ApprovalChannel,
    ApprovalQuery,
    CallbackChannel,
    DenyAll,
    TerminalPrompt,
)
from agentcell.orchestrator.approvals._hooks import (
    HookOutcome,
    HookRunner,
    SessionHooks,
    SubagentStopHooks,
    local_tool_hooks,
    notification_hook,
    stop_hook,
)
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    EventBus,
    EventStream,
    OrchestratorEvent,
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._prepare import stricter_mode
from agentcell.orchestrator.delegation._relay import MAX_OPEN_REQUESTS
from agentcell.orchestrator.delegation._request import (
    DelegationRequest,
    RunAccount,
    Scope,
)
from agentcell.orchestrator.delegation._results import (
    SubAgentResult,
)
from agentcell.orchestrator.delegation._resume import read_session
from agentcell.orchestrator.delegation._runner import RunHandle, Runner
from agentcell.orchestrator.delegation._settle import unstarted
from agentcell.orchestrator.delegation._task_args import (
    TaskArgs,
    parse_task_arguments,
    task_tool_spec,
)
from agentcell.orchestrator.mcp_host._servers import agent_mcp_servers, wire_server
from agentcell.orchestrator.prompt._context import (
    MEMORY_MAX_CHARS,
    MEMORY_MAX_LINES,
    instructions_prompt,
    memory_dir,
)
from agentcell.orchestrator.task_tools._delivery import ResultDelivery
from agentcell.orchestrator.task_tools._start_ahead import StartAhead
from agentcell.orchestrator.task_tools._tools import (
    TaskControlTool,
    TaskStatusTool,
    TaskTool,
    TaskWaitTool,
    background_finisher,
    background_injector,
)
from agentcell.orchestrator.task_tools._tracker import (
    TaskRecord,
    TaskState,
    TaskTracker,
)
from agentcell.orchestrator.telemetry._usage import (
    AgentUsage,
    BudgetExceeded,
    UsageLedger,
)

__all__ = [
    "MAX_OPEN_REQUESTS",
    "agent_mcp_servers",
    "wire_server",
    "AgentActivity",
    "AgentUsage",
    "AllowAll",
    "ApprovalAnswer",
    "ApprovalBroker",
    "ApprovalChannel",
    "ApprovalQuery",
    "BudgetExceeded",
    "CallbackChannel",
    "DelegationRequest",
    "DenyAll",
    "EventBus",
    "EventStream",
    "HookOutcome",
    "HookRunner",
    "SessionHooks",
    "SubagentStopHooks",
    "MEMORY_MAX_CHARS",
    "MEMORY_MAX_LINES",
    "OrchestratorEvent",
    "RunAccount",
    "RunHandle",
    "Runner",
    "Scope",
    "StartAhead",
    "SubAgentEnded",
    "SubAgentProcess",
    "SubAgentResult",
    "SubAgentStarted",
    "TaskArgs",
    "ResultDelivery",
    "TaskControlTool",
    "TaskRecord",
    "TaskState",
    "TaskStatusTool",
    "TaskTool",
    "TaskTracker",
    "TaskWaitTool",
    "TerminalPrompt",
    "UsageLedger",
    "background_finisher",
    "background_injector",
    "instructions_prompt",
    "local_tool_hooks",
    "notification_hook",
    "memory_dir",
    "parse_task_arguments",
    "read_session",
    "stop_hook",
    "stricter_mode",
    "task_tool_spec",
    "unstarted",
]
