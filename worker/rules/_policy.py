"""Hooks around tool execution, and the default permission policy.

A before-hook sees each tool call (with validated arguments) and may allow it, deny it
(the reason becomes the tool result) or ask for approval; the first deny wins, then any
ask. An after-hook may rewrite a tool's output.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import functools
import glob
import itertools
import posixpath
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import msgspec
from agentcell.protocol import ToolCall
from agentcell.worker.rules._deny_words import LineWords, simple_commands
from agentcell.worker.rules._shell import plain_commands
from agentcell.worker.rules._wrappers import inner_commands, too_long_to_unwrap
from agentcell.worker.rules._write_wall import WriteWall
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

    def hides_from_walks(self, spellings: Sequence[str]) -> bool:
        """True for a file glob and grep must pass over when they walk a folder (one
        file, spelled relative to the working directory and absolute)."""
        return False


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
#: Arguments that name a file: a rule's pattern on them is a path glob.
_PATH_FIELDS = ("path", "file_path")
#: The tool whose rules say which files may not be read (Claude Code's ``Read`` rules).
READ_TOOL = "read_file"
#: The tool whose rules say which files may not be changed (Claude Code's ``Edit`` rules).
EDIT_TOOL = "edit_file"
#: Bash programs whose file arguments a read rule covers too (Claude Code's list).
FILE_READERS = frozenset({"cat", "head", "tail", "sed", "less", "more"})
#: Bash programs whose file arguments an edit rule covers: ``tee`` writes its files,
#: ``sed -i`` rewrites them (Claude Code checks the file commands it recognises).
FILE_WRITERS = frozenset({"tee", "sed"})
#: Output redirections that write no file of the workdir (Claude Code does not check them).
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
#: ``param:value`` in a rule: a deny or ask rule on one named argument of the call.
_PARAMETER = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$", re.DOTALL)
#: ``domain:host`` in a rule: a web rule on the URL's host (Claude Code's WebFetch rules).
DOMAIN_PREFIX = "domain:"


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


@functools.lru_cache(maxsize=64)  # one line, judged by every rule in turn
def command_pieces(command: str) -> tuple[str, ...] | None:
    """What a deny or ask rule is matched against: the whole line, each segment as
    written, every simple command as the shell reads it (``_deny_words``: quotes taken
    off, inside compound commands and substitutions), and each command one of those runs
    through a wrapper (``nohup timeout 5 rm x`` → ``rm x``); None for a wrapper line too
    long to take apart (``too_long_to_unwrap``): every deny and ask rule catches it, as a
    line nobody can say is not theirs."""
    pieces = [command.strip()]
    commands = [segment.split() for segment in command_segments(command)]
    commands += map(list, simple_commands(command).commands)
    for words in commands:
        if too_long_to_unwrap(words):
            return None
        pieces += [" ".join([_base(inner[0]), *inner[1:]]) for inner in inner_commands(words)]
    return tuple(pieces)


def _base(program: str) -> str:
    return program.rsplit("/", 1)[-1]


@functools.lru_cache(maxsize=64)  # the parse alone: what a glob names changes
def read_paths(command: str) -> tuple[str, ...]:
    """Best effort, for read rules: the arguments of the file readers a line runs
    (``cat .env``, ``timeout 5 head -n1 .env``, ``xargs -n1 tail``, ``if …; then cat
    .env; fi``) and the files it redirects in (``< .env``). Options are left out; other
    words (``sed``'s script, ``head``'s count) are kept: extra subjects can only make a
    deny rule catch more."""
    line = simple_commands(command)
    return (*line.inputs, *_file_arguments(line, lambda words: words[0] in FILE_READERS))


@functools.lru_cache(maxsize=64)  # the parse alone, as for read_paths
def write_paths(command: str) -> tuple[str, ...]:
    """Best effort, for edit rules: the files a line writes by redirection (``>``,
    ``>>``, ``2>``, ``&>``, ``>|``; ``/dev/null`` and the like left out, as Claude Code
    leaves them) and those ``tee`` or ``sed -i`` name. Extra subjects only catch more."""
    line = simple_commands(command)
    outputs = [target for target in line.outputs if target not in _NOT_FILES]
    return (*outputs, *_file_arguments(line, _writes_its_files))


def _file_arguments(line: LineWords, picked: Callable[[list[str]], bool]) -> list[str]:
    """The words that are no option of every command ``line`` runs (wrappers seen
    through, the program by its base name) that ``picked`` takes; every word of a
    wrapper line too long to take apart (linear, and more subjects only catch more)."""
    paths: list[str] = []
    for words in map(list, line.commands):
        if too_long_to_unwrap(words):
            paths += words
            continue
        for inner in inner_commands(words):
            if inner and picked([_base(inner[0]), *inner[1:]]):
                paths += [word for word in inner[1:] if not word.startswith("-")]
    return paths


def _writes_its_files(words: list[str]) -> bool:
    return words[0] == "tee" or (words[0] == "sed" and any(map(_sed_in_place, words[1:])))


def _sed_in_place(word: str) -> bool:
    return word.startswith("--in-place") or (
        word.startswith("-") and not word.startswith("--") and "i" in word[1:]
    )


#: Files a glob among a line's read subjects may name, at most (what bash would expand).
MAX_GLOBBED = 256


def globbed(words: Sequence[str], workdir: str) -> list[str]:
    """What the globs among ``words`` name from ``workdir``, as bash expands them
    (``.e*`` → ``.env``), hidden files included; at most ``MAX_GLOBBED``."""
    found: list[str] = []
    for word in words:
        if any(c in word for c in "*?[") and len(found) < MAX_GLOBBED:
            named = glob.iglob(word, root_dir=workdir or None, include_hidden=True)
            found += itertools.islice(named, MAX_GLOBBED - len(found))
    return found


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
        return self.applies_to(call.name)

    def applies_to(self, tool: str) -> bool:
        return fnmatch.fnmatchcase(tool, self.tool)

    def allows(self, call: ToolCall, args: Any) -> bool:
        """For allow rules: true only if the whole call is covered by the pattern."""
        if not self._applies(call):
            return False
        if self.pattern is None:
            return True
        url = getattr(args, "url", None)
        if self.pattern.startswith(DOMAIN_PREFIX) and isinstance(url, str):
            return host_matches(url, self.pattern.removeprefix(DOMAIN_PREFIX))
        command = getattr(args, "command", None)
        if isinstance(command, str):
            commands = plain_commands(command)  # None: not provably plain, so ask
            return commands is not None and all(
                fnmatch.fnmatchcase(" ".join(words), self.pattern) for words in commands
            )
        main = _main_field(args)
        if main is None:
            return False
        field, subject = main
        if field in _PATH_FIELDS:
            # A path glob as Claude Code reads it: ``*`` stays within one folder.
            return path_glob_matches(_clean_path(subject), self.pattern)
        return fnmatch.fnmatchcase(subject, self.pattern)

    def catches(self, call: ToolCall, args: Any) -> bool:
        """For deny and ask rules: true if any part of the call matches the pattern."""
        if not self._applies(call):
            return False
        if self.pattern is None:
            return True
        url = getattr(args, "url", None)
        if self.pattern.startswith(DOMAIN_PREFIX) and isinstance(url, str):
            return host_matches(url, self.pattern.removeprefix(DOMAIN_PREFIX))
        parameter = _parameter_rule(self.pattern, args)
        if parameter is not None:
            return _parameter_matches(args, *parameter)
        command = getattr(args, "command", None)
        if isinstance(command, str):
            pieces = command_pieces(command)
            return pieces is None or any(fnmatch.fnmatchcase(p, self.pattern) for p in pieces)
        subject = main_argument(args)
        return subject is not None and self.covers_path(subject)

    def covers_path(self, path: str) -> bool:
        """For deny and ask rules: true if the pattern matches ``path`` as written or
        cleaned (broad: ``*`` crosses folders here)."""
        if self.pattern is None:
            return False
        return any(fnmatch.fnmatchcase(p, self.pattern) for p in (path, _clean_path(path)))


def _clean_path(subject: str) -> str:
    """``./src/../src/a.py`` → ``src/a.py``, so a path rule cannot be dodged by spelling."""
    cleaned = posixpath.normpath(subject)
    return cleaned[2:] if cleaned.startswith("./") else cleaned


def path_glob_matches(path: str, pattern: str) -> bool:
    """A path glob as gitignore (and Claude Code's path rules) reads it: ``*`` and ``?``
    within one path segment, ``**`` across any number of them. Any other character,
    ``[`` included, is itself (narrower than a class: this is for allow rules)."""
    return re.fullmatch(_path_glob_regex(pattern), path, re.DOTALL) is not None


def _path_glob_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            char = pattern[i]
            out.append({"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char)))
            i += 1
    return "".join(out)


def host_matches(url: str, domain: str) -> bool:
    """Claude Code's ``domain:`` rule on a URL's host: case-insensitive, a trailing dot
    ignored; ``*`` alone is every host, a leading ``*.`` any subdomain (not the domain
    itself), any other ``*`` the text within one label (``example.*`` is not
    ``example.evil.com``)."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return False
    if not host:
        return False
    host, domain = host.rstrip(".").lower(), domain.strip().rstrip(".").lower()
    if domain == "*":
        return True
    if domain.startswith("*."):
        return _labels_match(host, domain[2:], suffix=True)
    return _labels_match(host, domain, suffix=False)


def _labels_match(host: str, domain: str, *, suffix: bool) -> bool:
    """Label by label; with ``suffix``, ``domain`` is matched against the host's last
    labels and at least one more label must come before them."""
    host_labels, rule_labels = host.split("."), domain.split(".")
    if suffix:
        if len(host_labels) <= len(rule_labels):
            return False
        host_labels = host_labels[-len(rule_labels) :]
    if len(host_labels) != len(rule_labels):
        return False
    return all(fnmatch.fnmatchcase(h, r) for h, r in zip(host_labels, rule_labels, strict=True))


def _main_field(args: Any) -> tuple[str, str] | None:
    for field in ("command", "path", "file_path", "pattern", "url", "subagent_type"):
        value = getattr(args, field, None)
        if isinstance(value, str):
            return field, value
    return None


def main_argument(args: Any) -> str | None:
    """What a rule pattern is matched against: the command, the path, or the pattern."""
    main = _main_field(args)
    return None if main is None else main[1]


def _parameter_rule(pattern: str, args: Any) -> tuple[str, str] | None:
    """``(name, value glob)`` when ``pattern`` is ``name:value`` and ``name`` is an
    argument of this call's tool (Claude Code's ``Agent(model:opus)``); None otherwise,
    so ``task(plugin:agent)`` still names an agent type and ``bash(git:*)`` a command."""
    match = _PARAMETER.match(pattern)
    if match is None:
        return None
    name = match.group(1)
    main = _main_field(args)
    if (main is not None and main[0] == name) or name not in _argument_names(args):
        return None
    return name, match.group(2).strip()


def _argument_names(args: Any) -> Iterable[str]:
    """The arguments a call's tool takes (a parent or MCP tool's: those given)."""
    declared = getattr(type(args), "__struct_fields__", None)
    if declared is not None:
        return declared
    return _given_arguments(args).keys()


def _given_arguments(args: Any) -> dict[str, Any]:
    fields = getattr(args, "fields", None)  # an MCP tool's arguments
    if isinstance(fields, dict):
        return fields
    text = getattr(args, "text", None)  # a parent tool's arguments, as JSON text
    if isinstance(text, str):
        try:
            decoded = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def _parameter_matches(args: Any, name: str, value: str) -> bool:
    """The argument against the rule's value glob, for deny and ask rules: whatever its
    case and spaces, and a ``model`` by any word of its id too (``Agent(model:opus)``
    catches ``Opus`` and ``anthropic:claude-opus-4-1``, which the parent resolves alike;
    an attack review sent those past it). An argument left out (None) never matches."""
    if hasattr(type(args), "__struct_fields__"):
        given = getattr(args, name, None)
    else:
        given = _given_arguments(args).get(name)
    if given is None or isinstance(given, (dict, list)):
        return False
    shown = given if isinstance(given, str) else msgspec.json.encode(given).decode()
    shown, value = shown.strip().lower(), value.strip().lower()
    if fnmatch.fnmatchcase(shown, value):
        return True
    words = _MODEL_WORDS.split(shown) if name == "model" else []
    return any(fnmatch.fnmatchcase(word, value) for word in words)


#: What a model id's words are separated by (``anthropic:claude-opus-4-1``).
_MODEL_WORDS = re.compile(r"[-:/._\s]+")


class PermissionPolicy(Hook):
    """Mode plus rules. Precedence: deny rules, ask rules, allow rules, then the mode."""

    def __init__(
        self,
        mode: PermissionMode | str = PermissionMode.DEFAULT,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        ask: Iterable[str] = (),
        workdir: str = "",
        write_roots: Sequence[str] | None = None,
    ) -> None:
        """``workdir``: where bash runs, so where a glob in a line names files;
        ``write_roots`` (blockWritesOutsideWorkingDirectories): folders besides it that
        writes may reach, none elsewhere (None: writes are not kept in)."""
        self.mode = mode if isinstance(mode, PermissionMode) else PermissionMode.parse(mode)
        self.allow = [Rule.parse(r) for r in allow]
        self.deny = [Rule.parse(r) for r in deny]
        self.ask = [Rule.parse(r) for r in ask]
        self._read_rules = [*self.deny, *self.ask]  # either keeps a file out of walks
        self._reads = any(rule.applies_to(READ_TOOL) for rule in self._read_rules)
        self._writes = any(rule.applies_to(EDIT_TOOL) for rule in self._read_rules)
        self.workdir = workdir
        self._wall = None if write_roots is None else WriteWall(Path(workdir or "."), write_roots)

    async def before_tool(self, call: ToolCall, tool: Tool, args: Any) -> Verdict | None:
        if self._wall is not None and (walled := self._wall.refusal(tool.name, args)):
            return Verdict(Decision.DENY, walled)
        for rule in self.deny:
            if rule.catches(call, args):
                return Verdict(Decision.DENY, f"denied by the rule {_show(rule)}")
        read = _read_subjects(call, args, self.workdir) if self._reads else []
        for rule in _covering(self.deny, read):
            return Verdict(Decision.DENY, f"denied by the rule {_show(rule)} (no reading it)")
        written = _written_subjects(call, args, self.workdir) if self._writes else []
        for rule in _covering(self.deny, written, EDIT_TOOL):
            return Verdict(Decision.DENY, f"denied by the rule {_show(rule)} (no writing it)")
        if self.mode is PermissionMode.PLAN and not tool.read_only:
            return Verdict(Decision.DENY, f"{tool.name} changes things and plan mode is read-only")
        for rule in self.ask:
            if rule.catches(call, args):
                return Verdict(Decision.ASK, f"the rule {_show(rule)} asks for approval")
        for rule in _covering(self.ask, read):
            return Verdict(Decision.ASK, f"the rule {_show(rule)} asks for approval")
        for rule in _covering(self.ask, written, EDIT_TOOL):
            return Verdict(Decision.ASK, f"the rule {_show(rule)} asks for approval")
        for rule in self.allow:
            if rule.allows(call, args):
                return ALLOW
        if tool.read_only or self.mode is PermissionMode.BYPASS:
            return ALLOW
        if self.mode is PermissionMode.ACCEPT_EDITS and tool.name in _EDIT_TOOLS:
            return ALLOW
        return Verdict(Decision.ASK, f"{tool.name} may change files or run commands")

    def hides_from_walks(self, spellings: Sequence[str]) -> bool:
        """A file a read deny or ask rule covers is not listed nor searched by a walk
        (Claude Code applies its Read rules to Grep and Glob)."""
        return any(True for _ in _covering(self._read_rules, spellings))


def _read_subjects(call: ToolCall, args: Any, workdir: str) -> list[str]:
    """The paths a call reads or replaces that a read rule also covers: the file
    ``edit_file`` and ``write_file`` change (Claude Code's Read deny blocks Edit and Write
    on that path), the files ``cat``/``head``/… name in a bash line (best effort)."""
    if call.name in _EDIT_TOOLS:
        path = main_argument(args)
        return [path] if path is not None else []
    command = getattr(args, "command", None)
    if not isinstance(command, str):
        return []
    paths = read_paths(command)
    return [*paths, *globbed(paths, workdir)]


def _written_subjects(call: ToolCall, args: Any, workdir: str) -> list[str]:
    """The files a bash line writes that an edit rule also covers (Claude Code checks an
    output redirection's target as a file write; best effort: ``write_paths``)."""
    command = getattr(args, "command", None)
    if call.name != "bash" or not isinstance(command, str):
        return []
    paths = write_paths(command)
    return [*paths, *globbed(paths, workdir)]


def _covering(rules: Iterable[Rule], paths: Sequence[str], tool: str = READ_TOOL) -> Iterable[Rule]:
    """The rules for ``tool`` (``read_file``, or ``edit_file`` for writes) with a path
    that cover one of ``paths``."""
    if not paths:
        return
    for rule in rules:
        if rule.applies_to(tool) and any(rule.covers_path(path) for path in paths):
            yield rule


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
