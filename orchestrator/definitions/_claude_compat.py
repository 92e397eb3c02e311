"""Claude Code frontmatter values agentcell has no exact equivalent for, mapped to the
nearest behaviour that is never less safe, with the line that says so.

A file written for Claude Code must load (skipping it would lose its guards with it), and
whatever is approximated or left out is named once per file, so nobody relies on it
unawares. ``claude_mode_stand_in`` (config's: settings files read it too) and
``claude_effort`` return the value to use and
that line ('' when the value is Claude Code's exactly): the model's validators use the
value, the loader the line (``claude_notes``). ``claude_hooks`` changes nothing that
needs saying: Claude Code converts ``Stop`` for a sub-agent too. ``subagent_mode`` is
the mode a sub-agent runs in, its file's ``permissionMode`` applied as Claude Code
applies it, as far as it is ever safe to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentcell.orchestrator.config._claude_modes import claude_mode_stand_in
from agentcell.worker import PermissionMode

#: Claude Code's effort levels agentcell has no level of: (the level to use, why).
_EFFORT_STAND_INS: dict[str, tuple[str, str]] = {
    # Between high and max in Claude Code; high spends no more than was asked for.
    "xhigh": ("high", "Claude Code's xhigh has no agentcell level: the agent runs at high"),
}


def claude_effort(value: object) -> tuple[object, str]:
    """The effort level to validate for a frontmatter ``effort``, and the line saying
    what was approximated."""
    if not isinstance(value, str):
        return value, ""
    return _EFFORT_STAND_INS.get(value.strip().lower(), (value, ""))


def claude_hooks(value: object) -> object:
    """A frontmatter ``hooks:`` table as agentcell runs it: ``Stop`` becomes
    ``SubagentStop`` (joining any given there), as Claude Code converts it for a
    sub-agent (sub-agents.md), and a definition always runs as one. Claude Code events
    agentcell does not raise are kept: the hooks' parser names them where they are read.
    Any other value is returned as given, for validation to judge."""
    if not isinstance(value, Mapping) or "Stop" not in value:
        return value
    hooks: dict[Any, Any] = {}
    for event, entries in value.items():
        target = "SubagentStop" if event == "Stop" else event
        if target in hooks:  # Stop and SubagentStop both given: both run
            hooks[target] = [*_listed(hooks[target]), *_listed(entries)]
        else:
            hooks[target] = entries
    return hooks


def _listed(entries: object) -> list[Any]:
    """An event's entries as a list (a single entry may be written as a table)."""
    if isinstance(entries, list):
        return entries
    return [entries]


def claude_notes(values: Mapping[str, Any], spelled: Mapping[str, str]) -> list[tuple[str, str]]:
    """(field, line) per frontmatter value that is approximated or left out, each line
    starting with the key as written (``values``: the frontmatter by field name;
    ``spelled``: each field's key as the file spells it)."""
    lines: list[tuple[str, str]] = []
    for field, translate in (
        ("permission_mode", claude_mode_stand_in),
        ("effort", claude_effort),
    ):
        _value, line = translate(values.get(field))
        if line:
            lines.append((field, f"{spelled.get(field, field)} {values[field]!r}: {line}"))
    return lines


#: Permission modes from the strictest to the loosest.
MODE_STRICTNESS: tuple[str, ...] = tuple(
    m.value
    for m in (
        PermissionMode.PLAN,
        PermissionMode.DEFAULT,
        PermissionMode.ACCEPT_EDITS,
        PermissionMode.BYPASS,
    )
)
_DEFAULT, _ACCEPT_EDITS, _BYPASS = "default", "accept_edits", "bypass"


def subagent_mode(parent: str, wanted: str | None, *, session_set: bool) -> tuple[str, str]:
    """The mode a sub-agent runs in, and the line saying why its definition's mode
    (``wanted``) is not the one it runs in ('' when it is, or names none).

    ``parent``: the delegating agent's mode; ``session_set``: the session's mode was
    chosen (``--permission-mode``, a ``permission_mode`` setting, Claude Code's
    ``defaultMode``). A stricter mode always applies. ``acceptEdits`` applies, as in
    Claude Code, where the parent runs in a default mode nobody chose: whoever chose
    one (or plan) is not overruled by an agent file. ``bypassPermissions`` never applies
    from a definition: one file must not switch every question off. An untrusted
    project's ``acceptEdits`` is dropped before this (``distrust_project_agents``).
    """
    parent = PermissionMode.parse(parent).value
    if wanted is None:
        return parent, ""
    wanted = PermissionMode.parse(wanted).value
    stricter = min(parent, wanted, key=MODE_STRICTNESS.index)
    if stricter == wanted or parent == _BYPASS and wanted == _BYPASS:
        return stricter, ""
    if wanted == _ACCEPT_EDITS and parent == _DEFAULT and not session_set:
        return wanted, ""
    spelled = "acceptEdits" if wanted == _ACCEPT_EDITS else "bypassPermissions"
    if wanted == _BYPASS:
        why = "an agent file never switches approvals off"
    elif parent == "plan":
        why = "its parent runs in plan mode, which an agent file does not loosen"
    else:
        why = (
            "the session's permission mode was chosen (--permission-mode or "
            "permission_mode), and an agent file does not overrule it"
        )
    return parent, f"permissionMode {spelled} is not applied: {why}; it runs in {parent} mode"
