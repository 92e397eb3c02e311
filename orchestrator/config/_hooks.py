"""Lifecycle hooks as configured: Claude Code's command hooks, read from a settings table
or an agent file's ``hooks:`` frontmatter.

Two spellings are accepted for each event's list of entries::

    [[hooks.PreToolUse]]              # agentcell.toml / config.toml: flat
    matcher = "bash"
    command = "./check.sh"
    timeout = 10

    hooks:                            # an agent file, as Claude Code writes it
      PreToolUse:
        - matcher: Bash
          hooks:
            - type: command
              command: ./check.sh

Every Claude Code event is accepted. Those agentcell does not raise (``UNFIRED_EVENTS``)
and hooks of a type other than ``command`` (Claude Code's ``prompt``/``agent``) are taken,
named once in a warning line, and do not run: a setup copied from Claude Code never
rejects the whole file. A name that is no Claude Code event is an error (a typo).

Parsing only checks the shape; running them is the delegation package's job.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from collections.abc import Mapping
from typing import Any

from agentcell.worker import matcher_matches, matcher_problem

#: Every hook event Claude Code defines (its hooks reference, 2026).
HOOK_EVENTS: tuple[str, ...] = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "PermissionRequest",
    "PermissionDenied",
    "Notification",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "MessageDisplay",
    "SessionStart",
    "SessionEnd",
    "Setup",
    "InstructionsLoaded",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "TaskCreated",
    "TaskCompleted",
    "TeammateIdle",
    "PreCompact",
    "PostCompact",
    "ConfigChange",
    "CwdChanged",
    "DirectoryAdded",
    "FileChanged",
    "WorktreeCreate",
    "WorktreeRemove",
    "Elicitation",
    "ElicitationResult",
)
#: The events agentcell raises; their hooks run.
RAISED_EVENTS = frozenset(
    {
        "PreToolUse",
        "PostToolUse",
        "Notification",
        "UserPromptSubmit",
        "SessionStart",
        "SessionEnd",
        "Stop",
        "SubagentStart",
        "SubagentStop",
        "PreCompact",
        "TaskCreated",
        "TaskCompleted",
        "TeammateIdle",
    }
)
#: The events agentcell does not raise (yet), and why; their hooks are taken and named.
UNFIRED_EVENTS: dict[str, str] = {
    "PostToolUseFailure": "PostToolUse runs for failed calls too (tool_response says so)",
    "PermissionRequest": "approvals are asked through agentcell's own channel (a "
    "Notification hook with matcher permission_prompt runs as one is asked)",
}
UNFIRED_EVENTS.update(
    (event, "agentcell has no such moment")
    for event in HOOK_EVENTS
    if event not in RAISED_EVENTS and event not in UNFIRED_EVENTS
)
#: The events whose hooks see one tool call (``if`` is evaluated on these alone).
TOOL_HOOK_EVENTS = frozenset(
    {"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PermissionDenied"}
)
log = logging.getLogger("agentcell.hooks")
_named: set[str] = set()  # warnings already given, so each is given once
#: Claude Code's defaults: a hook that runs longer is stopped, and decides nothing.
DEFAULT_HOOK_TIMEOUT_S = 600.0
_DEFAULT_TIMEOUTS_S = {"UserPromptSubmit": 30.0}


@dataclasses.dataclass(frozen=True, slots=True)
class HookCommand:
    """One command to run on one event, when ``matcher`` matches ("" or "*": always).
    With ``args`` (Claude Code's exec form) ``command`` is a program, run with them as
    its arguments and no shell; without, ``command`` is a shell line."""

    event: str
    command: str
    matcher: str = ""
    timeout_s: float = DEFAULT_HOOK_TIMEOUT_S
    origin: str = ""  # where it was configured, for the log line when it fails
    args: tuple[str, ...] | None = None
    condition: str = ""  # Claude Code's ``if``: a permission rule the tool call must meet
    # Claude Code's ``onFailure``: "block" reads a hook that cannot start, times out, is
    # killed or exits with neither 0 nor 2 as exit 2 (on the events that can block).
    on_failure: str = "continue"

    @property
    def spawned(self) -> list[str] | str:
        """What runs: the program and its arguments (exec form), or the shell line."""
        return self.command if self.args is None else [self.command, *self.args]

    def __str__(self) -> str:
        return self.command if self.args is None else shlex.join(self.spawned)

    def matches(self, *names: str) -> bool:
        """Claude Code's matcher (``matcher_matches``: names, or a regular expression
        searched for in the name); "" or "*" match everything, events without a name
        included."""
        if self.matcher in ("", "*"):
            return True
        return any(matcher_matches(self.matcher, name) for name in names if name)


def name_once(line: str, notes: list[str] | None = None) -> None:
    """Add ``line`` to ``notes``; without them, log it as a warning the first time."""
    if notes is not None:
        notes.append(line)
    elif line not in _named:
        _named.add(line)
        log.warning("%s", line)


def parse_hooks(table: Any, origin: str, notes: list[str] | None = None) -> list[HookCommand]:
    """Every command in a ``hooks`` table that agentcell runs; ``ValueError`` naming the
    first bad entry. What is taken but not run is named (``name_once``)."""
    if table is None:
        return []
    if not isinstance(table, Mapping):
        raise ValueError(
            f"hooks must be a table of events ({', '.join(HOOK_EVENTS)}), got {table!r}"
        )
    commands: list[HookCommand] = []
    for event, entries in table.items():
        if event not in HOOK_EVENTS:
            raise ValueError(f"unknown hook event {event!r}: use one of {', '.join(HOOK_EVENTS)}")
        listed = [entries] if isinstance(entries, Mapping) else entries
        if not isinstance(listed, list):
            raise ValueError(f"hooks.{event} must be a list of entries, got {entries!r}")
        found = [c for entry in listed for c in _entry_commands(event, entry, origin, notes)]
        if found and event in UNFIRED_EVENTS:
            name_once(
                f"{origin}: hooks.{event}: taken, but these hooks do not run: "
                f"{UNFIRED_EVENTS[event]}",
                notes,
            )
            continue
        commands += found
    return commands


def _entry_commands(
    event: str, entry: Any, origin: str, notes: list[str] | None
) -> list[HookCommand]:
    where = f"hooks.{event}"
    if isinstance(entry, Mapping) and isinstance(entry.get("origin"), str):
        origin = entry["origin"]  # a Claude Code settings file's, tagged when it was read
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: each entry is a table with a command, got {entry!r}")
    matcher = entry.get("matcher", "")
    if not isinstance(matcher, str):
        raise ValueError(f"{where}: matcher must be text (a tool-name pattern), got {matcher!r}")
    if problem := matcher_problem(matcher):
        # Taken, as Claude Code takes it, but a guard that never fires must not be silent.
        name_once(f"{origin}: {where}: {problem}", notes)
    inner = entry.get("hooks")
    specs = inner if isinstance(inner, list) else [entry]
    if inner is not None and not isinstance(inner, list):
        raise ValueError(f"{where}: hooks must be a list of {{type, command}}, got {inner!r}")
    commands = []
    for spec in specs:
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: a hook is a table with a command, got {spec!r}")
        kind = spec.get("type", "command")
        if kind != "command":
            name_once(
                f"{origin}: {where}: a {kind!r} hook is taken but does not run: agentcell "
                "runs command hooks only",
                notes,
            )
            continue
        command = spec.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"{where}: each hook needs a command (a shell line), got {command!r}")
        default = _DEFAULT_TIMEOUTS_S.get(event, DEFAULT_HOOK_TIMEOUT_S)
        timeout = spec.get("timeout", default)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"{where}: timeout must be a number of seconds > 0, got {timeout!r}")
        hook = HookCommand(event, command, matcher, float(timeout), origin, _args(spec, where))
        on_failure = _on_failure(spec, event, f"{origin}: {where}", notes)
        commands.append(
            dataclasses.replace(hook, condition=_condition(spec, where), on_failure=on_failure)
        )
    return commands


def _args(spec: Mapping[str, Any], where: str) -> tuple[str, ...] | None:
    """Claude Code's exec form: ``args``, a list of words (None: the shell form)."""
    args = spec.get("args")
    if args is None:
        return None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{where}: args must be a list of words (text), got {args!r}")
    return tuple(args)


#: The events a hook can block: where ``onFailure: "block"`` means something.
BLOCKING_EVENTS = frozenset({"PreToolUse", "UserPromptSubmit", "Stop", "SubagentStop"})


def _on_failure(spec: Mapping[str, Any], event: str, where: str, notes: list[str] | None) -> str:
    """Claude Code's ``onFailure``: "continue" (the default) or "block"."""
    value = spec.get("onFailure", "continue")
    if value not in ("continue", "block"):
        raise ValueError(f'{where}: onFailure must be "continue" or "block", got {value!r}')
    if value == "block" and event not in BLOCKING_EVENTS:
        name_once(
            f'{where}: onFailure "block" has no effect on {event}: only '
            f"{', '.join(sorted(BLOCKING_EVENTS))} can block",
            notes,
        )
        return "continue"
    return str(value)


def _condition(spec: Mapping[str, Any], where: str) -> str:
    """Claude Code's ``if``: one permission rule, such as ``Bash(git *)``."""
    condition = spec.get("if", "")
    if not isinstance(condition, str):
        raise ValueError(f"{where}: if must be one permission rule (text), got {condition!r}")
    return condition.strip()
