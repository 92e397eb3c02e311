"""``agentcell agents list|show|validate``."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from agentcell.orchestrator._text import literal, one_line, visible
from agentcell.orchestrator.cli._display import output_console
from agentcell.orchestrator.config._claude_settings import BLOCK_WRITES_HONOURED
from agentcell.orchestrator.config._hooks import parse_hooks
from agentcell.orchestrator.config._load import load_settings
from agentcell.orchestrator.config._sandbox_policy import untrusted_project_file
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._claude_compat import subagent_mode
from agentcell.orchestrator.definitions._loader import Diagnostic
from agentcell.orchestrator.definitions._model import AgentDefinition, resolve_model_alias
from agentcell.orchestrator.definitions._registry import AgentRegistry, agent_dirs
from agentcell.orchestrator.definitions._skills import find_skill
from agentcell.orchestrator.definitions._tool_policy import COORDINATION_TOOLS, resolve_tools
from agentcell.orchestrator.delegation._prepare import Preparer
from agentcell.orchestrator.delegation._task_args import task_tool_spec
from agentcell.orchestrator.mcp_host._servers import agent_mcp_servers
from agentcell.orchestrator.mcp_host._shared import SharedMcp
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.network._web_fetch import web_search_options, web_tool_warnings
from agentcell.orchestrator.prompt._skill_offer import skills_for
from agentcell.worker.tools import BUILTIN_TOOL_NAMES
from rich.table import Table
from rich.text import Text

#: What the main agent has, so ``resolve_tools`` shows what a sub-agent would get.
MAIN_TOOLS = [*BUILTIN_TOOL_NAMES, *sorted(COORDINATION_TOOLS)]


class _Here:
    """What ``agents`` commands judge a definition against: the settings, the registry
    and the project folder, as a run here would have them."""

    def __init__(
        self, workdir: Path, agents_dirs: Sequence[Path], registry: AgentRegistry | None = None
    ) -> None:
        self.workdir = workdir
        self.settings, _ = load_settings(workdir=workdir)
        if registry is None:
            registry = AgentRegistry.load(workdir, extra_dirs=list(agents_dirs))
        self.registry = registry
        self.main_model = self.settings.model or "(no main model set)"
        self._preparer: Preparer | None = None

    def model(self, definition: AgentDefinition) -> str:
        """The PROVIDER:NAME it runs on, or "unresolved: why"."""
        aliases = self.settings.aliases
        try:
            return resolve_model_alias(
                definition.model, parent_model=self.main_model, aliases=aliases
            )
        except ValueError as exc:
            return f"unresolved: {exc}"

    def preparer(self) -> Preparer:
        """The runner's own ``Preparer``: what it offers a child is what is listed."""
        if self._preparer is None:
            registry = self.registry
            self._preparer = Preparer(
                settings=self.settings,
                registry=registry,
                workdir=str(self.workdir),
                home=Path.home(),
                limiter=ProviderLimiter(self.settings.limits),
                model_objects={},
                custom_tools={},
                task_tool_spec=lambda allowed: task_tool_spec(registry, allowed=allowed),
            )
        return self._preparer


def offered_tools(definition: AgentDefinition, here: _Here, model: str) -> list[str]:
    """The tools a sub-agent of the main agent is offered, by name, from the code that
    builds its spec (``Preparer.spec``): its own tools, those its parent answers for it
    (``task``, ``web_fetch``, the team's), Anthropic's web_search, and per MCP server it
    starts or inherits the tool patterns granted (a server's tools are known once it
    runs)."""
    skills = skills_for(definition, here.workdir)
    denied = [*definition.disallowed_tools, *skills.disallowed_tools]
    tools = resolve_tools(definition.tools, denied, MAIN_TOOLS).tools
    tools += ["skill"] if skills.index else []
    max_depth = min(d for d in (here.settings.max_depth, definition.max_depth) if d is not None)
    remote = here.preparer()._remote_tools(definition, 1, max_depth)
    tools += [tool.name for tool in remote]
    if _runs_on(model) and web_search_options(definition, model):
        tools.append("web_search")
    servers, _missing = agent_mcp_servers(
        definition, here.settings.mcp_servers, project_dir=str(here.workdir)
    )
    shared = SharedMcp.for_settings(here.settings, str(here.workdir))  # nothing started
    servers += shared.inherits(definition, named={server.name for server in servers})
    for server in servers:
        own = f"mcp__{server.name}__"
        granted = [own + "*"] if server.allow is None else server.allow
        tools += [
            own + "*" if p == "mcp__*" else p for p in granted if p.startswith(own) or p == "mcp__*"
        ]
    return list(dict.fromkeys(tools))


def _runs_on(model: str) -> bool:
    """Whether ``model`` is a model a run would use (not "unresolved: …", no main model)."""
    return ":" in model and not model.startswith("unresolved")


def mode_not_applied(definition: AgentDefinition, settings: Settings, workdir: Path) -> str:
    """Why a definition's ``permissionMode`` is not the mode it runs in ('' when it is,
    or it names none): the runner's own rule (``subagent_mode``), and an untrusted
    project's ``acceptEdits`` dropped at load (``distrust_project_agents``)."""
    if definition.permission_mode is None:
        return ""
    if definition.permission_mode == "accept_edits" and untrusted_project_file(definition, workdir):
        return (
            "permissionMode acceptEdits is not applied: this folder is not trusted; run "
            "`agentcell trust` in it to honour it"
        )
    parent, chosen = settings.permission_mode, settings.mode_chosen
    return subagent_mode(parent, definition.permission_mode, session_set=chosen)[1]


def mode_diagnostics(
    registry: AgentRegistry, settings: Settings, workdir: Path
) -> list[Diagnostic]:
    """One line per definition whose permissionMode is not applied here."""
    found = []
    for definition in registry.definitions():
        why = mode_not_applied(definition, settings, workdir)
        if why:
            found.append(Diagnostic("warning", definition.source, why, at_run=True))
    return found


def web_search_diagnostics(here: _Here) -> list[Diagnostic]:
    """One line per definition that names WebSearch where its model is offered none."""
    found = []
    for definition in here.registry.definitions():
        model = here.model(definition)
        if _runs_on(model):
            lines = web_tool_warnings(definition, model)
            found += [Diagnostic("warning", definition.source, line) for line in lines]
    return found


def _describe(definition: AgentDefinition, here: _Here) -> dict[str, Any]:
    workdir = here.workdir
    resolved = resolve_tools(definition.tools, definition.disallowed_tools, MAIN_TOOLS)
    model = here.model(definition)
    return {
        "name": definition.name,
        "description": definition.description,
        "source": _short_source(definition.source, workdir),
        "model": definition.model,
        "resolved_model": model,
        "tools": offered_tools(definition, here, model),
        "unknown_tools": resolved.unknown,
        "disallowed_tools": list(definition.disallowed_tools),
        "max_turns": definition.max_turns,
        "background": definition.background,
        "permission_mode": definition.permission_mode,
        # Why the mode above is not the one it runs in, or None when it is.
        "permission_mode_not_applied": (
            mode_not_applied(definition, here.settings, workdir) or None
        ),
        "timeout_s": definition.timeout_s,
        "context": definition.context,
        "isolation": definition.isolation,
        "task_agents": definition.task_agents,
        "denied_task_agents": list(definition.denied_task_agents),
        "mcp_servers": definition.mcp_server_names,
        "skills": [_skill_line(name, workdir) for name in definition.skills],
        "memory": definition.memory,
        "effort": definition.effort,
        "initial_prompt": definition.initial_prompt or None,
        "color": definition.color or None,
        "auto_compact_window": definition.auto_compact_window,
        "hooks": [
            f"{event} ({len(entries) if isinstance(entries, list) else 1})"
            for event, entries in definition.hooks.items()
        ],
        # Why the hooks above never run, or None when they do.
        "hooks_ignored": hooks_ignored(definition, workdir) or None,
        "extra": definition.extra,
    }


def hooks_ignored(definition: AgentDefinition, workdir: Path) -> str:
    """Why a definition's hooks are not honoured here ("" when they are): an agent file of
    an untrusted project may not run commands on this machine."""
    if not definition.hooks or not untrusted_project_file(definition, workdir):
        return ""
    count = len(parse_hooks(definition.hooks, definition.source, notes=[]))
    return (
        f"{count} ignored — this folder is not trusted; run `agentcell trust` in it to honour them"
    )


def hook_diagnostics(registry: AgentRegistry, workdir: Path) -> list[Diagnostic]:
    """One warning per definition whose hooks this folder's trust setting turns off, and
    one per hook taken that can never run (a matcher that is no valid expression, an
    event agentcell does not fire)."""
    found = []
    for definition in registry.definitions():
        why = hooks_ignored(definition, workdir)
        if why:
            found.append(Diagnostic("warning", definition.source, f"hooks: {why}"))
        notes: list[str] = []
        with contextlib.suppress(ValueError):  # a bad shape failed the file's load already
            parse_hooks(definition.hooks, "frontmatter", notes=notes)
        found += [Diagnostic("warning", definition.source, note) for note in notes]
    return found


def settings_diagnostics(settings: Settings) -> list[Diagnostic]:
    """What the settings every agent here runs under hold that a run takes without a
    word: a hook's ``onFailure: "block"`` on an event that cannot block (a warning),
    ``blockWritesOutsideWorkingDirectories`` and how it is honoured (a note)."""
    notes: list[str] = []
    with contextlib.suppress(ValueError):  # a bad shape failed the settings' load already
        parse_hooks(settings.hooks, "settings", notes=notes)
    found = []
    for note in notes:  # "FILE: hooks.EVENT: ...", the file it came from first
        source, _, message = note.partition(": ")
        found.append(Diagnostic("warning", source, message))
    if settings.block_writes_outside:
        found.append(Diagnostic("info", "settings", BLOCK_WRITES_HONOURED))
    return found


def _skill_line(name: str, workdir: Path) -> str:
    """A skill as `agents show` lists it: where it is found, or that it is not."""
    skill = find_skill(name, workdir)
    if isinstance(skill, str):
        return f"{name} (not found)"
    return f"{name} ({_short_source(skill.path, workdir)})"


def skill_diagnostics(registry: AgentRegistry, workdir: Path) -> list[Diagnostic]:
    """One warning per skill a definition names that is not found (it runs without it)."""
    found = []
    for definition in registry.definitions():
        for name in definition.skills:
            skill = find_skill(name, workdir)
            if isinstance(skill, str):
                found.append(Diagnostic("warning", definition.source, f"skills: {skill}"))
    return found


def mcp_diagnostics(registry: AgentRegistry, workdir: Path) -> list[Diagnostic]:
    """One warning per server a definition names that no config here provides."""
    configured = load_settings(workdir=workdir)[0].mcp_servers
    found = []
    for definition in registry.definitions():
        for entry in definition.mcp_servers:
            if isinstance(entry, str) and entry not in configured:
                found.append(
                    Diagnostic(
                        "warning",
                        definition.source,
                        f"mcpServers: {entry!r} is not configured here: add [mcp_servers."
                        f"{entry}] to your config or .mcp.json, or the agent runs without it",
                    )
                )
    return found


def configured_rules(workdir: Path) -> list[str]:
    """The permission rules and hooks of the settings here, each with the file it came
    from ("deny bash(wget *)  (from ~/.claude/settings.json)")."""
    provenance: dict[str, str] = {}
    settings, _ = load_settings(workdir=workdir, provenance=provenance)
    lines = []
    for key in ("allow_rules", "deny_rules", "ask_rules"):
        for rule in getattr(settings, key):
            origin = _short_source(provenance.get(f"{key} {rule}", "?"), workdir)
            lines.append(f"{key.removesuffix('_rules')} {rule}  (from {origin})")
    for hook in parse_hooks(settings.hooks, "config", notes=[]):
        origin = hook.origin
        if origin == "config":
            origin = provenance.get(f"hooks {hook.event}", origin)
        matcher = f"[{hook.matcher}]" if hook.matcher else ""
        where = _short_source(origin, workdir)
        lines.append(f"hook {hook.event}{matcher} {hook}  (from {where})")
    return lines


def _short_source(source: str, workdir: Path) -> str:
    path = Path(source)
    if not path.is_absolute():
        return source
    for base, label in ((workdir, ""), (Path.home(), "~/")):
        try:
            return label + str(path.relative_to(base))
        except ValueError:
            continue
    return source


def problems(registry: AgentRegistry) -> list[Diagnostic]:
    """What `agents list` counts and `agents validate` reports as problems."""
    return [d for d in registry.diagnostics if d.level in ("warning", "error")]


def _diagnostic_json(diagnostic: Diagnostic) -> dict[str, str]:
    return {"level": diagnostic.level, "path": diagnostic.path, "message": diagnostic.message}


def list_agents(workdir: Path, agents_dirs: Sequence[Path], *, as_json: bool) -> None:
    here = _Here(workdir, agents_dirs)
    registry = here.registry
    rows = [_describe(d, here) for d in registry.definitions()]
    if as_json:
        notes = [d for d in registry.diagnostics if d.level == "info"]
        document = {
            "agents": rows,
            "problems": [_diagnostic_json(d) for d in problems(registry)],
            "notes": [_diagnostic_json(d) for d in notes],
        }
        click.echo(json.dumps(document, indent=2))
        return
    console = output_console()
    table = Table(box=None, pad_edge=False)
    for column in ("name", "source", "model", "tools", "description"):
        table.add_column(column, no_wrap=column in ("name", "source", "model"))
    for row in rows:
        tools = literal(", ".join(row["tools"]) if row["tools"] else "(none)")
        if row["unknown_tools"]:
            tools.append_text(literal(f"  (unknown: {', '.join(row['unknown_tools'])})", "yellow"))
        model = (
            row["model"]
            if row["model"] == row["resolved_model"]
            else f"{row['model']} → {row['resolved_model']}"
        )
        table.add_row(
            literal(row["name"]),
            literal(row["source"]),
            literal(model),
            tools,
            literal(one_line(row["description"], 60)),
        )
    console.print(table)
    found = problems(registry)
    if found:
        console.print(
            Text(
                f"\n{len(found)} problem(s) while loading; see: agentcell agents validate",
                style="yellow",
            )
        )


def show_agent(name: str, workdir: Path, agents_dirs: Sequence[Path], *, as_json: bool) -> None:
    here = _Here(workdir, agents_dirs)
    definition = here.registry.get(name)
    if definition is None:
        available = ", ".join(here.registry.names())
        raise LookupError(f"no agent named {name!r}; available: {available}")
    row = _describe(definition, here)
    row["system_prompt"] = definition.system_prompt
    row["configured"] = configured_rules(workdir)
    if as_json:
        click.echo(json.dumps(row, indent=2))
        return
    console = output_console()
    console.print(literal(row["name"], "bold") + literal(f"  ({row['source']})"))
    console.print(literal(row["description"].strip()))
    console.print()
    for key in (
        "model",
        "resolved_model",
        "tools",
        "disallowed_tools",
        "unknown_tools",
        "max_turns",
        "background",
        "permission_mode",
        "timeout_s",
        "context",
        "isolation",
        "task_agents",
        "denied_task_agents",
        "mcp_servers",
        "skills",
        "memory",
        "effort",
        "initial_prompt",
        "color",
        "auto_compact_window",
        "hooks",
    ):
        value = row[key]
        if value in (None, [], {}):
            continue
        shown = ", ".join(value) if isinstance(value, list) else value
        if key == "hooks" and row["hooks_ignored"]:
            shown = f"{row['hooks_ignored']} ({shown})"
        if key == "permission_mode" and row["permission_mode_not_applied"]:
            shown = f"{shown} ({row['permission_mode_not_applied']})"
        console.print(literal(f"  {key.replace('_', ' '):18} {shown}"))
    if row["extra"]:
        console.print(literal(f"  {'other keys':18} {', '.join(sorted(row['extra']))}"))
    for line in row["configured"]:  # the settings every agent here runs under
        console.print(literal(f"  {'configured':18} {line}"))
    console.print(Text("\nSystem prompt", style="bold"))
    console.print(literal(definition.system_prompt or "(empty)"))


def validate_agents(
    paths: Sequence[Path], workdir: Path, agents_dirs: Sequence[Path] = (), *, verbose: bool = False
) -> int:
    """Print one line per problem (and, ``verbose``, per note: overrides of built-ins and
    of other sources, values read with the tolerant parser); 1 if a file that looks like
    an agent file (it has a frontmatter, or cannot be read) failed to load, else 0. A
    ``.md`` file with no frontmatter is no agent file: one line counts them.

    With `paths`: those files and folders (then each --agents-dir) over the built-ins.
    Without: the project's agent folders and each --agents-dir, as `agents list` sees them.
    """
    verbose = verbose or bool(os.environ.get("AGENTCELL_VERBOSE"))
    if paths:
        here = _Here(workdir, (), registry=AgentRegistry.from_paths([*paths, *agents_dirs]))
    else:
        if not agents_dirs and not any(d.is_dir() for d in agent_dirs(workdir)):
            click.echo(
                "no agent folders here (.claude/agents, .agentcell/agents, ...): nothing to check"
            )
            return 0
        here = _Here(workdir, agents_dirs)
    registry = here.registry
    registry.diagnostics.extend(skill_diagnostics(registry, workdir))
    registry.diagnostics.extend(mcp_diagnostics(registry, workdir))
    registry.diagnostics.extend(hook_diagnostics(registry, workdir))
    registry.diagnostics.extend(mode_diagnostics(registry, here.settings, workdir))
    registry.diagnostics.extend(web_search_diagnostics(here))
    registry.diagnostics.extend(settings_diagnostics(here.settings))
    broken = {d.path for d in registry.diagnostics if d.level == "error"}
    checked = len({d.source for d in registry.loaded} | broken)
    notes = [d for d in registry.diagnostics if d.level == "info"]
    for diagnostic in registry.diagnostics:
        if verbose or diagnostic.level != "info":
            click.echo(
                visible(f"{_rel(diagnostic.path)}: {diagnostic.level}: {diagnostic.message}")
            )
    if verbose:
        for path in registry.no_frontmatter:
            click.echo(visible(f"{_rel(path)}: skipped: no frontmatter, not an agent file"))
        for definition in registry.loaded:
            click.echo(visible(f"{_rel(definition.source)}: ok: {definition.name}"))
    if registry.no_frontmatter:
        click.echo(
            f"{len(registry.no_frontmatter)} .md file(s) without frontmatter skipped: not agent "
            "files (Claude Code skips them too)"
        )
    if notes and not verbose:
        click.echo(f"{len(notes)} note(s) not shown: --verbose shows them")
    click.echo(
        f"{checked} file(s) checked, {len(broken)} failed, {len(problems(registry))} problem(s)"
    )
    return 1 if broken else 0


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path
