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

Parsing only checks the shape; running them is the delegation package's job.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

#: The events agentcell raises, by Claude Code's names.
HOOK_EVENTS: tuple[str, ...] = (
    "PreToolUse",
    "PostToolUse",
    "SubagentStart",
    "SubagentStop",
    "UserPromptSubmit",
    "Stop",
)
#: Claude Code's default: a hook that runs longer is stopped and counts as an error.
DEFAULT_HOOK_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class HookCommand:
    """One command to run on one event, when ``matcher`` matches ("" or "*": always)."""

    event: str
    command: str
    matcher: str = ""
    timeout_s: float = DEFAULT_HOOK_TIMEOUT_S
    origin: str = ""  # where it was configured, for the log line when it fails

    def matches(self, *names: str) -> bool:
        """Claude Code's matcher: a regular expression over the whole name ("Edit|Write")."""
        if self.matcher in ("", "*"):
            return True
        try:
            pattern = re.compile(self.matcher)
        except re.error:
            return any(name == self.matcher for name in names)
        return any(pattern.fullmatch(name) for name in names if name)


def parse_hooks(table: Any, origin: str) -> list[HookCommand]:
    """Every command in a ``hooks`` table; ``ValueError`` naming the first bad entry."""
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
        for entry in listed:
            commands += _entry_commands(event, entry, origin)
    return commands


def _entry_commands(event: str, entry: Any, origin: str) -> list[HookCommand]:
    where = f"hooks.{event}"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: each entry is a table with a command, got {entry!r}")
    matcher = entry.get("matcher", "")
    if not isinstance(matcher, str):
        raise ValueError(f"{where}: matcher must be text (a tool-name pattern), got {matcher!r}")
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
            raise ValueError(f"{where}: only command hooks are supported, got type {kind!r}")
        command = spec.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"{where}: each hook needs a command (a shell line), got {command!r}")
        timeout = spec.get("timeout", DEFAULT_HOOK_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"{where}: timeout must be a number of seconds > 0, got {timeout!r}")
        commands.append(HookCommand(event, command, matcher, float(timeout), origin))
    return commands
