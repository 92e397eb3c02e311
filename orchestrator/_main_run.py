"""What the ``Orchestrator`` builds around the main agent: its tools and hooks, its report,
and the parts chosen from the settings (the approval channel, the Ray backend).

Split from ``_orchestrator`` so that the class there reads as the API it is; these are
plain functions of the settings and what a run has gathered.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.approvals._channel import (
    AllowAll,
    ApprovalChannel,
    DenyAll,
    TerminalPrompt,
)
from agentcell.orchestrator.approvals._hooks import HookRunner, local_tool_hooks
from agentcell.orchestrator.backends.ray._backend import RayBackend, RayOptions
from agentcell.orchestrator.config._sandbox_policy import distrust_project_agents
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._request import RunAccount
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.delegation._settle import unstarted
from agentcell.orchestrator.mcp_host._servers import wire_server
from agentcell.orchestrator.records._key import key_for
from agentcell.orchestrator.records._store import subagent_json, write_summary_or_say
from agentcell.orchestrator.task_tools._tools import (
    TaskControlTool,
    TaskStatusTool,
    TaskTool,
    TaskWaitTool,
)
from agentcell.orchestrator.task_tools._tracker import TaskTracker
from agentcell.orchestrator.teams._mail import Team
from agentcell.orchestrator.teams._tools import hooks_of, main_team_tools
from agentcell.protocol import McpServer, RunResult, RunStatus, Usage
from agentcell.worker import Hook, PermissionPolicy, Redactor, Transcript
from agentcell.worker.tools import Tool, builtin_tools

log = logging.getLogger("agentcell.orchestrator")


@dataclasses.dataclass(slots=True)
class RunReport:
    """What one main-agent run produced (the CLI's ``--json`` object).

    ``usage`` and ``cost_usd`` cover this run alone (the main agent and every sub-agent it
    started); ``Orchestrator.total_usage`` / ``total_cost_usd`` add up the orchestrator's
    whole life.
    """

    status: RunStatus
    final_text: str
    error: str
    usage: Usage
    cost_usd: float | None
    duration_ms: float
    run_dir: str
    subagents: list[SubAgentResult]
    main: RunResult
    # A resume: what the killed run spent that this one did not spend again (in ``usage``
    # too, which counts the whole run).
    carried_usage: Usage | None = None

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.COMPLETED


def blocked_report(reason: str, started: float) -> RunReport:
    """The report of a run whose prompt a ``UserPromptSubmit`` hook blocked."""
    return RunReport(
        status=RunStatus.DENIED,
        final_text="",
        error=f"the prompt was blocked by a UserPromptSubmit hook: {reason}",
        usage=Usage(),
        cost_usd=None,
        duration_ms=(time.perf_counter() - started) * 1000,
        run_dir="",
        subagents=[],
        main=RunResult(status=RunStatus.DENIED, error=reason),
    )


def run_report(
    result: RunResult, account: RunAccount, started: float, run_dir: Path | None
) -> RunReport:
    """The report of a main-agent run that ran: its answer, and what the call gathered.
    A sub-agent that never got a process makes a completed run an error."""
    status, error = result.status, result.error
    missed = unstarted(account.results)
    if missed and status is RunStatus.COMPLETED:
        status, error = RunStatus.ERROR, missed
    return RunReport(
        status=status,
        final_text=result.text,
        error=error,
        usage=account.ledger.total,
        cost_usd=account.ledger.cost_usd,
        duration_ms=(time.perf_counter() - started) * 1000,
        run_dir=str(run_dir) if run_dir else "",
        subagents=account.results,
        main=result,
    )


def write_call_summary(
    run_dir: Path,
    account: RunAccount,
    returned: list[SubAgentResult],
    started: float,
    *,
    kind: str,
    agent: str,
    model: str,
    prompt: str,
) -> None:
    """``summary.json`` of a ``delegate`` or ``map``: its status is that of what the call
    returned (nothing returned: it was cancelled); ``subagents`` lists every sub-agent it
    ran, nested ones included."""
    failed = [r for r in returned if not r.ok]
    if not returned:
        status, error = RunStatus.CANCELLED.value, "cancelled before it returned"
    elif not failed:
        status, error = RunStatus.COMPLETED.value, ""
    elif len(returned) == 1:
        status, error = failed[0].status.value, failed[0].error
    else:
        status, error = "partial", f"{len(failed)} of {len(returned)} failed"
    write_summary_or_say(
        run_dir,
        {
            "kind": kind,
            "status": status,
            "final_text": returned[0].text if kind == "delegate" and returned else "",
            "error": error,
            "usage": msgspec.to_builtins(account.ledger.total),
            "cost_usd": account.ledger.cost_usd,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            "run_dir": str(run_dir),
            "agent_type": agent,
            "model": model,
            "prompt": prompt,
            "subagents": [subagent_json(r) for r in account.results],
        },
    )


def main_tools(
    custom: Sequence[Tool],
    servers: Sequence[Tool],
    task_tool: TaskTool,
    tracker: TaskTracker,
    team: tuple[Team | None, HookRunner],
) -> list[Tool]:
    """The main agent's tools: the built-ins, the caller's, its MCP servers', the four
    coordination tools over its sub-agents, and its team's two."""
    return [
        *builtin_tools(),
        *custom,
        *servers,
        task_tool,
        TaskStatusTool(tracker),
        TaskWaitTool(tracker),
        TaskControlTool(tracker),
        *main_team_tools(team[0], hooks_of(team[1])),
    ]


def main_hooks(settings: Settings, hooks: HookRunner, tools: Sequence[Tool]) -> list[Hook]:
    """The permission policy of the settings (with ``block_writes_outside``, writes kept
    to the workdir and ``sandbox_read``), then the configured tool hooks."""
    found: list[Hook] = [
        PermissionPolicy(
            settings.permission_mode,
            allow=settings.allow_rules,
            deny=settings.deny_rules,
            ask=settings.ask_rules,
            workdir=hooks.cwd,
            write_roots=settings.sandbox_read if settings.block_writes_outside else None,
        )
    ]
    tool_hooks = local_tool_hooks(hooks, [tool.name for tool in tools])
    if tool_hooks is not None:
        found.append(tool_hooks)
    return found


def ray_backend(settings: Settings, registry: AgentRegistry) -> RayBackend | None:
    """A Ray backend when the operator chose Ray or a definition asks for it."""
    wanted = settings.backend == "ray" or any(d.backend == "ray" for d in registry.definitions())
    if not wanted:
        return None
    ray = settings.ray
    address = ray.address
    if address == "auto" and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
    options = RayOptions(
        address=address,
        connect_timeout=ray.connect_timeout_s,
        num_cpus=ray.num_cpus,
        resources=ray.resources,
        listen_host=ray.listen_host,
        listen_port=ray.listen_port,
        advertise_host=ray.advertise_host,
        handshake_timeout=ray.handshake_timeout_s,
        max_pending_connections=ray.max_pending_connections,
        node_ip_address="127.0.0.1" if _is_loopback(ray.listen_host) else None,
    )
    return RayBackend(
        options=options,
        heartbeat_timeout=settings.heartbeat_timeout_s,
        max_workers=settings.max_workers,
    )


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def tee(first: Any, second: Any) -> Any:
    def both(event: Any) -> None:
        first(event)
        second(event)

    return both


def report_json(report: RunReport, *, prompt: str = "", model: str = "") -> dict[str, Any]:
    """The ``--json`` object (and ``summary.json``)."""
    return {
        "status": report.status.value,
        "final_text": report.final_text,
        "error": report.error,
        "usage": msgspec.to_builtins(report.usage),
        "cost_usd": report.cost_usd,
        "duration_ms": round(report.duration_ms, 1),
        "run_dir": report.run_dir,
        "model": model,
        "prompt": prompt,
        "subagents": [subagent_json(r) for r in report.subagents],
        **(
            {"carried_usage": msgspec.to_builtins(report.carried_usage)}
            if report.carried_usage is not None
            else {}
        ),
    }


def default_channel(settings: Settings) -> ApprovalChannel:
    if settings.approval == "allow":
        return AllowAll()
    if settings.approval == "deny":
        return DenyAll()
    import sys

    if sys.stdin.isatty():
        return TerminalPrompt()
    return DenyAll("no terminal to ask on, so approvals are denied (use --approve allow or deny)")


def main_mcp_servers(settings: Settings) -> list[McpServer]:
    """The configured MCP servers the main agent starts (``main_mcp_servers``, default:
    all); a name that is no configured server is logged as one line and skipped."""
    names = (
        list(settings.mcp_servers)
        if settings.main_mcp_servers is None
        else settings.main_mcp_servers
    )
    wanted = []
    for name in names:
        config = settings.mcp_servers.get(name)
        if config is None:
            log.warning("main_mcp_servers: %r is not a configured MCP server", name)
            continue
        wanted.append(wire_server(name, config, allow=None, deny=[]))
    return wanted


def main_transcript_path(run_dir: Path | None) -> str:
    """Where the main agent's transcript of a run goes ("" when nothing is recorded)."""
    return str(run_dir / "main.jsonl") if run_dir is not None else ""


def main_transcript(run_dir: Path | None, prompt: str, model: str | None) -> Transcript | None:
    """The main agent's record of one run (``main.jsonl``, chained under its own key)."""
    if run_dir is None:
        return None
    key = key_for(run_dir, "main")
    transcript = Transcript(
        Path(main_transcript_path(run_dir)), "main", redact=Redactor.from_env(), key=key
    )
    transcript.write("start", agent_type="main", model=model, prompt=prompt)
    return transcript


def load_registry(
    workdir: Path,
    *,
    agents: Sequence[AgentDefinition],
    agents_dirs: Sequence[str | Path],
    home: Path | None,
    load_agent_files: bool,
    settings: Settings,
) -> AgentRegistry:
    """The built-in agents, the agent files found (an untrusted project's distrusted),
    then the caller's own definitions."""
    if not load_agent_files:
        registry = AgentRegistry.builtin()
    else:
        registry = AgentRegistry.load(workdir, home=home, extra_dirs=[Path(d) for d in agents_dirs])
        distrust_project_agents(registry, workdir, home, settings)
    for definition in agents:
        registry.add(definition)
    return registry
