"""Hooks around tool execution, and the default permission policy.

A before-hook sees each tool call (with validated arguments) and may allow it, deny it
(the reason becomes the tool result) or ask for approval; the first deny wins, then any
ask. An after-hook may rewrite a tool's output.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import posixpath
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar

import msgspec
from agentcell.protocol import ToolCall
from agentcell.worker._shell import plain_commands
from agentcell.worker.tools import Tool, ToolError, ToolOutput


class Decision(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    reason: str = ""
    # A hook's rewrite of the call's arguments (JSON text); the call runs with these,
    # after the other hooks have judged them too (see ``judge``).
    arguments: str | None = None


ALLOW = Verdict(Decision.ALLOW)


class Hook:
    """Base class: override either or both methods."""

    #: True for a hook whose verdict may carry rewritten arguments (it is not asked
    #: again about its own rewrite).
    rewrites_input: ClassVar[bool] = False

    async def before_tool(self, call: ToolCall, tool: Tool, args: Any) -> Verdict | None:
        """Return None for "no opinion"."""
        return None

    async def after_tool(self, call: ToolCall, tool: Tool, output: ToolOutput) -> ToolOutput:
        return output


#: Asked when a hook says ASK: (call, reason) → (approved, reason).
Approver = Callable[[ToolCall, str], Awaitable[tuple[bool, str]]]


class PermissionMode(enum.StrEnum):
    DEFAULT = "default"  # read-only tools run; anything that changes things asks
    ACCEPT_EDITS = "accept_edits"  # file edits run too; shell commands still ask
    BYPASS = "bypass"  # everything runs (deny rules still apply)
    PLAN = "plan"  # read-only: anything that changes things is denied

    @classmethod
    def parse(cls, value: str) -> PermissionMode:
        aliases = {"acceptedits": "accept_edits", "bypasspermissions": "bypass"}
        key = value.strip().lower().replace("-", "_")
        try:
            return cls(aliases.get(key.replace("_", ""), key))
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown permission mode {value!r}: use one of {choices}") from None


_EDIT_TOOLS = frozenset({"write_file", "edit_file"})
_RULE = re.compile(r"^\s*([A-Za-z0-9_.:*-]+)\s*(?:\((.*)\))?\s*$")


# Deny and ask rules are judged on every piece a line could run, found generously (this
# splitting is only ever used to catch more, never to allow).
_SHELL_SEPARATORS = re.compile(r"\s*(?:&&|\|\||;|\||&|\n|\$\(|`|<\(|>\(|\))\s*")
_ASSIGNMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")


def command_segments(command: str) -> list[str]:
    """Every piece of a shell line that could be a command, with leading ``VAR=x``
    assignments dropped and the program reduced to a base name (``/bin/rm -rf x`` →
    ``rm -rf x``). For deny and ask rules only: it over-approximates what runs."""
    segments = []
    for raw in _SHELL_SEPARATORS.split(command):
        part = _ASSIGNMENT.sub("", raw.strip()).strip("() ")
        if not part:
            continue
        program, _, rest = part.partition(" ")
        program = program.rsplit("/", 1)[-1]
        segments.append(f"{program} {rest}".strip())
    return segments


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """``tool`` or ``tool(pattern)``; the pattern is a glob on the call's main argument."""

    tool: str
    pattern: str | None = None

    @classmethod
    def parse(cls, text: str) -> Rule:
        match = _RULE.match(text)
        if match is None:
            raise ValueError(
                f"bad permission rule {text!r}: write 'tool' or 'tool(pattern)', e.g. 'bash(git *)'"
            )
        tool, pattern = match.group(1), match.group(2)
        return cls(tool, pattern.strip() if pattern is not None else None)

    def _applies(self, call: ToolCall) -> bool:
        return fnmatch.fnmatchcase(call.name, self.tool)

    def allows(self, call: ToolCall, args: Any) -> bool:
        """For allow rules: true only if the whole call is covered by the pattern."""
        if not self._applies(call):
            return False
        if self.pattern is None:
            return True
        command = getattr(args, "command", None)
        if isinstance(command, str):
            commands = plain_commands(command)  # None: not provably plain, so ask
            return commands is not None and all(
                fnmatch.fnmatchcase(" ".join(words), self.pattern) for words in commands
            )
        subject = main_argument(args)
        return subject is not None and fnmatch.fnmatchcase(_clean_path(subject), self.pattern)

    def catches(self, call: ToolCall, args: Any) -> bool:
        """For deny and ask rules: true if any part of the call matches the pattern."""
        if not self._applies(call):
            return False
        if self.pattern is None:
            return True
        command = getattr(args, "command", None)
        if isinstance(command, str):
            pieces = [command.strip(), *command_segments(command)]
            return any(fnmatch.fnmatchcase(p, self.pattern) for p in pieces)
        subject = main_argument(args)
        if subject is None:
            return False
        return any(fnmatch.fnmatchcase(p, self.pattern) for p in (subject, _clean_path(subject)))


def _clean_path(subject: str) -> str:
    """``./src/../src/a.py`` → ``src/a.py``, so a path rule cannot be dodged by spelling."""
    cleaned = posixpath.normpath(subject)
    return cleaned[2:] if cleaned.startswith("./") else cleaned


def main_argument(args: Any) -> str | None:
    """What a rule pattern is matched against: the command, the path, or the pattern."""
    for field in ("command", "path", "file_path", "pattern", "url", "subagent_type"):
        value = getattr(args, field, None)
        if isinstance(value, str):
            return value
    return None


class PermissionPolicy(Hook):
    """Mode plus rules. Precedence: deny rules, ask rules, allow rules, then the mode."""

    def __init__(
        self,
        mode: PermissionMode | str = PermissionMode.DEFAULT,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        ask: Iterable[str] = (),
    ) -> None:
        self.mode = mode if isinstance(mode, PermissionMode) else PermissionMode.parse(mode)
        self.allow = [Rule.parse(r) for r in allow]
        self.deny = [Rule.parse(r) for r in deny]
        self.ask = [Rule.parse(r) for r in ask]

    async def before_tool(self, call: ToolCall, tool: Tool, args: Any) -> Verdict | None:
        for rule in self.deny:
            if rule.catches(call, args):
                return Verdict(Decision.DENY, f"denied by the rule {_show(rule)}")
        if self.mode is PermissionMode.PLAN and not tool.read_only:
            return Verdict(Decision.DENY, f"{tool.name} changes things and plan mode is read-only")
        for rule in self.ask:
            if rule.catches(call, args):
                return Verdict(Decision.ASK, f"the rule {_show(rule)} asks for approval")
        for rule in self.allow:
            if rule.allows(call, args):
                return ALLOW
        if tool.read_only or self.mode is PermissionMode.BYPASS:
            return ALLOW
        if self.mode is PermissionMode.ACCEPT_EDITS and tool.name in _EDIT_TOOLS:
            return ALLOW
        return Verdict(Decision.ASK, f"{tool.name} may change files or run commands")


def _show(rule: Rule) -> str:
    return rule.tool if rule.pattern is None else f"{rule.tool}({rule.pattern})"


class DenyTools(Hook):
    """Deny calls to the named tools whatever the registry holds (a second, independent layer)."""

    def __init__(self, names: Iterable[str], reason: str) -> None:
        self.names = frozenset(names)
        self.reason = reason

    async def before_tool(self, call: ToolCall, tool: Tool, args: Any) -> Verdict | None:
        if call.name in self.names:
            return Verdict(Decision.DENY, self.reason)
        return None


async def decide(hooks: Iterable[Hook], call: ToolCall, tool: Tool, args: Any) -> Verdict:
    """Combine before-hooks: the first deny wins, else the first ask, else allow; the
    first rewrite of the arguments is kept on the result."""
    asked: Verdict | None = None
    rewrite: str | None = None
    for hook in hooks:
        verdict = await hook.before_tool(call, tool, args)
        if verdict is None:
            continue
        if verdict.decision is Decision.DENY:
            return verdict
        if rewrite is None:
            rewrite = verdict.arguments
        if verdict.decision is Decision.ASK and asked is None:
            asked = verdict
    result = asked or ALLOW
    return result if rewrite is None else dataclasses.replace(result, arguments=rewrite)


async def judge(
    hooks: Sequence[Hook], call: ToolCall, tool: Tool, args: Any
) -> tuple[Verdict, ToolCall, Any]:
    """``decide``, then, when a hook rewrote the arguments (a PreToolUse hook's
    ``updatedInput``), judge the rewritten call again by every hook that does not
    rewrite, so a rewrite cannot slip past a deny rule. Returns the call to run."""
    verdict = await decide(hooks, call, tool, args)
    if verdict.decision is Decision.DENY or verdict.arguments is None:
        return verdict, call, args
    rewritten = ToolCall(id=call.id, name=call.name, arguments=verdict.arguments)
    try:
        new_args = tool.parse_args(rewritten.arguments)
    except ToolError as exc:
        refused = Verdict(
            Decision.DENY, f"a hook rewrote the call into one that is not valid: {exc}"
        )
        return refused, call, args
    again = await decide([h for h in hooks if not h.rewrites_input], rewritten, tool, new_args)
    if again.decision is Decision.DENY:
        return again, rewritten, new_args
    if verdict.decision is Decision.ASK:
        return Verdict(Decision.ASK, verdict.reason), rewritten, new_args
    return dataclasses.replace(again, arguments=None), rewritten, new_args


def describe_arguments(arguments: str, limit: int = 300) -> str:
    """A short, readable rendering of a call's JSON arguments for approval prompts."""
    try:
        text = msgspec.json.encode(msgspec.json.decode(arguments)).decode()
    except msgspec.DecodeError:
        text = arguments
    return text if len(text) <= limit else text[: limit - 1] + "…"
