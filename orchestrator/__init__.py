"""The agentcell parent: the ``Orchestrator`` and the rooms it is made of.

_orchestrator  the ``Orchestrator``, a facade over: _parts (what the main agent and the
               runner share, and their builders), _main_agent (the main run, its engines),
               _direct_runs (``delegate``, ``map``), _calls (records between calls)
_main_run, _run_stream, _text   the report and tools around the main run, ``run_stream``,
               text made safe for a terminal
_resume_run    ``Orchestrator.resume``: a killed run finished from its journal
delegation/    one delegation: prepare → relay → settle
model_relay/   a child's model requests, sent from the parent
network/       what a sub-agent reaches through the parent (egress proxy, web_fetch)
workspace/     worktrees and git as the parent runs it
prompt/        instruction files, memory and skills a prompt carries
approvals/     a person's or the user's hooks' say over a child's tool call
task_tools/    the main agent's ``task`` tools and background sub-agents
telemetry/     usage, budgets, traces
records/       run records on disk
mcp_host/      MCP servers as the parent sees them
journal/       a run's journal: what a killed run's resume goes on from
teams/         the room of the next issue (empty)
backends/      where a sub-agent's process comes from (fork server, ray/)
config/, definitions/, cli/   settings, agent definitions, the command line

The names here are what ``agentcell`` re-exports (its public API); everything else is
internal, imported from its own module inside this layer.
"""

from agentcell.orchestrator._main_run import RunReport
from agentcell.orchestrator._orchestrator import Orchestrator
from agentcell.orchestrator.approvals._channel import (
    AllowAll,
    ApprovalAnswer,
    ApprovalChannel,
    ApprovalQuery,
    CallbackChannel,
    DenyAll,
)
from agentcell.orchestrator.backends._forkserver import PoolError
from agentcell.orchestrator.config._load import ConfigError
from agentcell.orchestrator.config._settings import Budgets, Price, Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    OrchestratorEvent,
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._results import SubAgentResult

__all__ = [
    "AgentActivity",
    "AgentDefinition",
    "AllowAll",
    "ApprovalAnswer",
    "ApprovalChannel",
    "ApprovalQuery",
    "Budgets",
    "CallbackChannel",
    "ConfigError",
    "DenyAll",
    "Orchestrator",
    "OrchestratorEvent",
    "PoolError",
    "Price",
    "RunReport",
    "Settings",
    "SubAgentEnded",
    "SubAgentProcess",
    "SubAgentResult",
    "SubAgentStarted",
]
