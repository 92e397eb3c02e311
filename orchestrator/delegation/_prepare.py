"""Prepare: a definition and the operator's settings become what a child is sent.

The first of a delegation's three phases (then ``_relay``, then ``_settle``). Everything
here is decided before a process is taken: which tools, model, turns and walls the child
gets, what its system prompt says, the ``Start`` message and whether it fits the pipe.
Nothing here starts a process; it reads skill and instruction files and makes the memory
folder, so it is tested with a ``Preparer`` and plain definitions (tests/test_prepare.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dill
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.backends._environment_cache import EnvironmentCache
from agentcell.orchestrator.config._hooks import parse_hooks
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._claude_compat import subagent_mode
from agentcell.orchestrator.definitions._model import AgentDefinition, resolve_model_alias
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.definitions._tool_policy import normalize_tool_names, resolve_tools
from agentcell.orchestrator.delegation._request import DelegationRequest, Scope
from agentcell.orchestrator.mcp_host._servers import agent_mcp_servers
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.model_relay._route import route_model
from agentcell.orchestrator.network._egress import bash_network
from agentcell.orchestrator.network._web_fetch import (
    web_search_options,
    web_tool_warnings,
    web_tools,
)
from agentcell.orchestrator.prompt._context import (
    gets_instructions,
    memory_dir,
    memory_prompt,
    prepare_memory,
)
from agentcell.orchestrator.prompt._instruction_cache import InstructionCache
from agentcell.orchestrator.prompt._skill_offer import skilled_prompt, skills_for
from agentcell.orchestrator.records._key import key_for
from agentcell.orchestrator.teams._tools import team_remote_tools
from agentcell.orchestrator.workspace._code_files import (
    code_entries,
    mcp_commands,
    module_files,
)
from agentcell.protocol import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    AgentSpec,
    FrameTooLarge,
    Limits,
    Message,
    RemoteTool,
    Start,
    encode_frame,
)
from agentcell.worker import (
    known_secrets,
    secret_digests,
    stricter_sandbox,
    workdir_owner_note,
)
from agentcell.worker.models import ToolSpec, thinking_control, thinking_max_tokens
from agentcell.worker.tools import Tool

AGENT_HANDLER = "agentcell.worker.child._agent:run_agent"

# The name predates the split: operators filter on it.
log = logging.getLogger("agentcell.runner")


@dataclasses.dataclass(slots=True)
class Prepared:
    """What a child will be sent, and the lines its result carries (a server or skill
    missing)."""

    spec: AgentSpec
    limits: Limits
    model: str
    warnings: list[str]


class Preparer:
    """Turns a definition, a request and the delegating scope into a child's spec."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: AgentRegistry,
        workdir: str,
        home: Path,
        limiter: ProviderLimiter,
        model_objects: dict[str, Any],
        custom_tools: dict[str, Tool],
        task_tool_spec: Callable[[Callable[[str], bool] | None], ToolSpec] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.workdir = workdir
        self.home = home
        self.limiter = limiter
        self.model_objects = model_objects
        self.custom_tools = custom_tools
        self.task_tool_spec = task_tool_spec
        self._blobs: dict[tuple[str, tuple[str, ...]], bytes | None] = {}
        self._effort_noted: set[tuple[str, str]] = set()
        self._code_entries: dict[tuple[str, str, str, tuple[str, ...]], list[str]] = {}
        # What is the same for every sub-agent until the files or the environment change.
        self.instructions = InstructionCache()
        self.environments = EnvironmentCache()
        self._owner_note: str | None = None  # workdir_owner_note, looked up once

    def _sandbox(self, definition: AgentDefinition) -> tuple[str, list[str]]:
        """The child's sandbox mode, and the line a walled child gets when the workdir
        belongs to another uid (no capability: it gets what the mode bits give)."""
        settings = self.settings
        sandbox = stricter_sandbox(
            "workspace" if settings.sandbox == "required" else settings.sandbox,
            definition.sandbox,
        )
        if sandbox == "off":
            return sandbox, []
        if self._owner_note is None:
            self._owner_note = workdir_owner_note(self.workdir)
        return sandbox, [self._owner_note] if self._owner_note else []

    def spec(
        self,
        definition: AgentDefinition,
        request: DelegationRequest,
        scope: Scope,
        agent_id: str,
        background: bool,
        *,
        run_dir: str,
    ) -> Prepared:
        """The child's spec and walls. Raises ``ValueError`` for an override that would
        widen the definition (a model, more turns)."""
        settings = self.settings
        model = self.narrow_model(definition, request, scope)
        max_turns = _max_turns(definition, request, settings)
        depth = scope.depth + 1
        max_depth = min(
            d for d in (settings.max_depth, scope.max_depth, definition.max_depth) if d is not None
        )
        mode, mode_note = _permission_mode(scope, settings, definition)
        env, bash_env = self.environments.environments(
            model, bash_gets_credentials=bash_credentials(settings, definition)
        )
        mcp_servers, warnings = agent_mcp_servers(
            definition, settings.mcp_servers, project_dir=self.workdir
        )
        skills = skills_for(definition, Path(self.workdir))
        sandbox, owner = self._sandbox(definition)
        warnings = [*warnings, *skills.warnings, *web_tool_warnings(definition, model), *owner]
        for line in warnings:
            log.warning("%s: %s", definition.name, line)
        warnings += [mode_note] if mode_note else []  # run and chat said it at the start
        spec = AgentSpec(
            agent_id=agent_id,
            agent_type=definition.name,
            prompt=request.prompt,
            system_prompt=skilled_prompt(system_prompt(definition, self.workdir), skills),
            history=scope.history() if definition.context == "fork" and scope.history else [],
            tools=resolve_tools(
                definition.tools,
                [*definition.disallowed_tools, *skills.disallowed_tools],
                list(scope.tools),
            ).tools,
            remote_tools=self._remote_tools(definition, depth, max_depth),
            model=model,
            model_options={
                **settings.model_options.get(model.partition(":")[0], {}),
                **web_search_options(definition, model),  # Anthropic's server-side search
            },
            max_turns=max_turns,
            timeout_s=_capped(definition.timeout_s, settings.subagent_timeout_s),
            permission_mode=mode,
            allow_rules=list(settings.allow_rules),
            deny_rules=list(settings.deny_rules),
            ask_rules=list(settings.ask_rules),
            workdir=self.workdir,
            run_dir=run_dir,
            record_key=key_for(run_dir, agent_id) if run_dir else b"",
            depth=depth,
            max_depth=max_depth,
            background=background,
            env=env,
            bash_env=bash_env,
            sandbox=sandbox,
            network=bash_network(settings.network, definition.network),
            max_processes=definition.max_processes or settings.max_processes,
            tmp_size_mb=settings.tmp_size_mb,
            read_paths=[*settings.sandbox_read, *skills.read_paths],
            skills=skills.index,
            compact_at_tokens=compact_threshold(settings, definition),
            # The keys it does not get, so that it can still redact them from its records.
            redactions=secret_digests(v for v in known_secrets().values() if v not in env.values()),
            mcp_servers=mcp_servers,
            model_permits=self.limiter.applies(model),
        )
        route_model(spec, settings, definition.backend, custom=model in self.model_objects)
        return Prepared(
            spec=spec, limits=definition_limits(definition), model=model, warnings=warnings
        )

    def _remote_tools(
        self, definition: AgentDefinition, depth: int, max_depth: int
    ) -> list[RemoteTool]:
        """The tools the parent answers for the child: ``task``, when it may delegate."""
        may_delegate = (definition.tools is None or "task" in definition.tools) and (
            "task" not in definition.disallowed_tools
        )
        # Task(a, b) in its tools: the schema it is offered lists only those agent types
        # (and none at all if none of them is registered).
        limited = definition.task_agents is not None or bool(definition.denied_task_agents)
        allowed = definition.may_start if limited else None
        if allowed is not None and not any(allowed(name) for name in self.registry.names()):
            may_delegate = False
        # web_fetch and the team's tools: run by the parent, for the sub-agent.
        web = web_tools(definition) + team_remote_tools(_granted(definition))
        if depth >= max_depth or not may_delegate or self.task_tool_spec is None:
            return web
        task = self.task_tool_spec(allowed)
        return [
            RemoteTool(name=task.name, description=task.description, parameters=task.parameters),
            *web,
        ]

    def narrow_model(
        self, definition: AgentDefinition, request: DelegationRequest, scope: Scope
    ) -> str:
        aliases = self.settings.aliases
        pinned = resolve_model_alias(definition.model, parent_model=scope.model, aliases=aliases)
        if request.model is None:
            return pinned
        wanted = resolve_model_alias(request.model, parent_model=scope.model, aliases=aliases)
        if definition.model != "inherit" and wanted != pinned:
            raise ValueError(
                f"{definition.name} runs on {pinned}; a model override may only narrow a "
                f"definition, so {request.model!r} is refused"
            )
        return wanted

    def in_worktree(self, spec: AgentSpec, definition: AgentDefinition, workdir: str) -> None:
        """The spec moved to the child's own worktree: its prompt names that folder."""
        spec.workdir = workdir
        skills = skills_for(definition, Path(self.workdir))
        spec.system_prompt = skilled_prompt(system_prompt(definition, workdir), skills)

    def complete(
        self,
        spec: AgentSpec,
        definition: AgentDefinition,
        request: DelegationRequest,
        hooks: HookRunner,
        history: list[Message] | None,
    ) -> None:
        """What the definition's Claude Code keys add to the spec: hooks, memory, instruction
        files, effort, the initial prompt; and, for a continuation, the earlier session."""
        spec.hooked_tools = hooks.hooked_tools(
            [*spec.tools, *(tool.name for tool in spec.remote_tools)]
        )
        spec.hook_patterns = hooks.hook_patterns() if spec.mcp_servers else {}
        spec.code_entries = self.code_entries(spec.workdir, hooks)
        workdir = Path(self.workdir)
        extra = []
        if self.settings.instruction_files and gets_instructions(definition):
            extra.append(self.instructions.prompt(workdir, self.home))
        folder = memory_dir(definition, workdir, self.home)
        if folder is not None:
            prepare_memory(folder)
            spec.memory_dir = str(folder)
            extra.append(memory_prompt(folder))
        extra = [part for part in extra if part]
        if extra:
            spec.system_prompt = "\n\n".join([spec.system_prompt, *extra])
        if definition.effort is not None:
            self.apply_effort(spec, definition)
        if history is not None:
            spec.history = history
        elif definition.initial_prompt.strip():
            spec.prompt = f"{definition.initial_prompt.strip()}\n\n{spec.prompt}"

    def code_entries(self, workdir: str, hooks: HookRunner) -> list[str]:
        """The entries of ``workdir`` holding code that runs outside the walls
        (``_code_files``): ``hooks`` and every agent's own (the parent runs another
        agent's hook too), every stdio MCP server configured, the custom tools' modules."""
        commands: list[list[str] | str] = [command.spawned for command in hooks.commands]
        servers: list[object] = list(self.settings.mcp_servers.values())
        for definition in self.registry.definitions():
            if definition.hooks:  # an untrusted project's were dropped at load
                own = parse_hooks(definition.hooks, definition.source, notes=[])
                commands += [command.spawned for command in own]
            for entry in definition.mcp_servers:
                if isinstance(entry, dict):
                    servers += entry.values()
        commands += mcp_commands(servers)
        # A preloaded module is imported once, by the fork server, before any sub-agent
        # runs: a child finds it loaded and reads nothing of it again.
        tools = self.custom_tools.values()
        modules = sorted(set(module_files(tools, preloaded=self.settings.preload)))
        if not commands and not modules:
            return []  # nothing to look up (the usual case: no stat at all)
        # The same for every sub-agent of a workdir: what a sub-agent could change on the
        # way to these files is inside the entries held, so the answer holds.
        key = (workdir, hooks.project_dir, repr(commands), tuple(modules))
        found = self._code_entries.get(key)
        if found is None:
            found = code_entries(commands, modules, cwd=workdir, project_dir=hooks.project_dir)
            self._code_entries[key] = found
        return list(found)

    def apply_effort(self, spec: AgentSpec, definition: AgentDefinition) -> None:
        """A definition's ``effort`` as its provider's reasoning control: OpenAI's
        ``reasoning_effort``, Anthropic's extended thinking (``AnthropicModel`` builds the
        request). One note per definition and model where it has no such control, or where
        thinking raises the ``max_tokens`` the user set."""
        effort = definition.effort or "medium"
        provider, _, name = spec.model.partition(":")
        if provider == "openai":
            spec.model_options["reasoning_effort"] = _OPENAI_EFFORT[effort]
            return
        control = thinking_control(name) if provider == "anthropic" else None
        if control is not None:
            spec.model_options["effort"] = effort
            limit = spec.model_options.get("max_tokens")
            raised = thinking_max_tokens(effort, limit if isinstance(limit, int) else None)
            if isinstance(limit, int) and raised > limit:
                self._note_effort(
                    definition,
                    spec.model,
                    f"{definition.name}: effort {effort} raises max_tokens from {limit} to "
                    f"{raised} for {spec.model}: thinking and the answer share it (set "
                    f"model_options.anthropic.max_tokens to {raised} or more to silence this)",
                )
            return
        self._note_effort(
            definition,
            spec.model,
            f"{definition.name}: effort {definition.effort} ignored: its model {spec.model} "
            "has no reasoning control agentcell sets (openai models take reasoning_effort, "
            "Claude 3.7 Sonnet and Claude 4 and later extended thinking)",
        )

    def _note_effort(self, definition: AgentDefinition, model: str, note: str) -> None:
        if (definition.name, model) not in self._effort_noted:
            self._effort_noted.add((definition.name, model))
            log.warning("%s", note)

    def start(self, prepared: Prepared) -> Start:
        """The first frame the child gets."""
        spec = prepared.spec
        return Start(
            protocol_version=PROTOCOL_VERSION,
            run_id=spec.agent_id,
            handler=AGENT_HANDLER,
            spec=spec,
            limits=prepared.limits,
            objects=self.objects_blob(prepared.model, spec.tools),
        )

    def objects_blob(self, model: str, tools: Sequence[str]) -> bytes | None:
        """Custom objects the child needs (a model object, custom tools), pickled once."""
        custom = tuple(name for name in tools if name in self.custom_tools)
        key = (model, custom)
        if key not in self._blobs:
            objects: dict[str, Any] = {}
            if model in self.model_objects:
                objects["model"] = self.model_objects[model]
            if custom:
                objects["tools"] = [self.custom_tools[name] for name in custom]
            self._blobs[key] = dill.dumps(objects, recurse=True) if objects else None
        return self._blobs[key]


def too_large(start: Start, limit: int = MAX_FRAME_BYTES) -> str:
    """Why ``start`` cannot cross the pipe ("" if it can): said before a process is
    taken, in words that name the cause and the limit."""
    try:
        encode_frame(start, limit)
    except FrameTooLarge:
        spec = start.spec
        prompt = len(spec.prompt.encode()) if spec is not None else 0
        cap = f"one frame may carry at most {limit / 2**20:g} MiB (MAX_FRAME_BYTES)"
        if prompt * 2 >= limit:
            return (
                f"the prompt is too large to send to a sub-agent: {prompt / 2**20:.1f} MiB, "
                f"and {cap}; put the material in a file and pass its path instead"
            )
        return (
            "the sub-agent's start message is too large to send (its forked history or "
            f"its custom tools and model objects), and {cap}"
        )
    return ""


def definition_limits(definition: AgentDefinition) -> Limits:
    """The walls the parent enforces on the child's process."""
    return Limits(
        address_space_bytes=definition.memory_limit_mb * 1024 * 1024
        if definition.memory_limit_mb
        else None,
        cpu_seconds=definition.cpu_limit_s,
        max_tool_calls=definition.max_tool_calls,
        max_tool_output_bytes=definition.max_tool_output_bytes,
    )


def _max_turns(definition: AgentDefinition, request: DelegationRequest, settings: Settings) -> int:
    # The operator's subagent_* settings are caps as well as defaults.
    max_turns = min(
        definition.max_turns or settings.subagent_max_turns, settings.subagent_max_turns
    )
    if request.max_turns is None:
        return max_turns
    if request.max_turns > max_turns:
        raise ValueError(
            f"max_turns {request.max_turns} is more than {definition.name} allows "
            f"({max_turns}); overrides may only narrow a definition"
        )
    return request.max_turns


#: A definition's ``effort`` as OpenAI's ``reasoning_effort`` (it has no "max"). Anthropic's
#: thinking budgets are ``THINKING_BUDGETS`` in agentcell.worker.models, by the request.
_OPENAI_EFFORT = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "high",
}


def _permission_mode(
    scope: Scope, settings: Settings, definition: AgentDefinition
) -> tuple[str, str]:
    """An agent file's mode as Claude Code applies it, bypass never (``subagent_mode``)."""
    parent = scope.permission_mode or settings.permission_mode
    return subagent_mode(parent, definition.permission_mode, session_set=settings.mode_chosen)


def _capped(value: float | None, cap: float | None) -> float | None:
    """A definition's value, never above the operator's cap (the cap when it sets none)."""
    if value is None or cap is None:
        return value if cap is None else cap
    return min(value, cap)


def bash_credentials(settings: Settings, definition: AgentDefinition) -> bool:
    """Does bash get the model keys? From the user's own config, or a definition made in
    code (never from an agent file: a cloned repository must not hand them out)."""
    if settings.bash_credentials:
        return True
    return definition.source == "programmatic" and bool(definition.extra.get("bash_credentials"))


def system_prompt(definition: AgentDefinition, workdir: str) -> str:
    prompt = definition.system_prompt.strip()
    return (
        f"{prompt}\n\nWorking directory: {workdir}" if prompt else f"Working directory: {workdir}"
    )


def _granted(definition: AgentDefinition) -> set[str]:
    """The tools its definition names and does not deny, by our names."""
    denied = set(normalize_tool_names(definition.disallowed_tools))
    return set(normalize_tool_names(definition.tools or [])) - denied


def compact_threshold(settings: Settings, definition: AgentDefinition) -> int:
    """When a sub-agent's conversation is compacted (the child does it: worker
    ``_compaction``): the token count to compact at — the agent's own
    ``autoCompactWindow`` if it has one, else ``subagent_compact_at``, a fraction of
    ``subagent_context_window`` (<= 1) or a count (> 1); 0: never."""
    if definition.auto_compact_window:
        return definition.auto_compact_window
    setting = settings.subagent_compact_at
    if setting <= 0:
        return 0
    if setting <= 1:
        return int(setting * settings.subagent_context_window)
    return int(setting)
