"""Agent definition files: Markdown with a YAML frontmatter, the Claude Code format.

    ---
    name: code-reviewer
    description: Reviews a diff for bugs.
    tools: Read, Grep, Glob
    model: sonnet
    ---
    You are a careful code reviewer. ...

The frontmatter holds the fields, the body is the system prompt. We accept what real files
contain (a BOM, CRLF, blank lines or indentation around the delimiters, camelCase or
snake_case keys) and read frontmatter that strict YAML rejects but a person can read
(an unquoted "Triggers on: 'x'" inside a description) with a tolerant line-based fallback.
A file that still cannot become a definition is skipped with one diagnostic line per
problem; loading never stops because of one file. A ``.md`` file with no frontmatter at
all (a README, notes) is no agent file: it is skipped without a word, as Claude Code
skips it, and only counted (``LoadResult.no_frontmatter``: ``agents validate`` says how
many). Of the diagnostics, only those marked ``at_run`` are said by ``run`` and ``chat``:
an agent left out, or one that may do less than its file says.

A directory is searched recursively (Claude Code reads subfolders of .claude/agents/, and
real collections nest agents by category) for ``*.md`` files, in sorted path order, without
following symlinked directories.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
import textwrap
from pathlib import Path
from typing import Any, Literal

import yaml
from agentcell.orchestrator.definitions._claude_compat import claude_notes
from agentcell.orchestrator.definitions._model import (
    AgentDefinition,
    agent_slug,
    is_agent_name,
    model_problem,
    validation_messages,
)
from agentcell.orchestrator.definitions._tool_policy import (
    CLAUDE_TOOLS_LACKED,
    TEAM_LIFECYCLE,
    mcp_patterns,
)
from agentcell.orchestrator.network._host_rules import parse_rules
from agentcell.worker import OutsideRoot, read_beneath
from pydantic import ValidationError

Level = Literal["error", "warning", "info"]

# libyaml when present (same YAML, ~10x faster on a big agents folder).
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Fields a frontmatter may set; the rest come from elsewhere (the body, unknown keys, the
# path, and Task(...) entries in the tool lists).
_SETTABLE = frozenset(AgentDefinition.model_fields) - {
    "system_prompt",
    "extra",
    "source",
    "task_agents",
    "denied_task_agents",
}
#: Keys Claude Code honours that agentcell does not (yet), by their snake_case spelling,
#: and what ignoring each means: said once per file, so nobody relies on them unawares.
UNSUPPORTED_KEYS: dict[str, str] = {}
# Other keys real files use; with the fields and the ones above, a column-0 `Key:` line
# in the tolerant parser with one of these names always starts a new entry.
_OTHER_KEYS = frozenset({"color", "initial_prompt", "effort", "version", "category", "tags"})
# After `key:`: nothing, a block scalar's indicator, or a flow collection's opening.
_STRUCTURE = re.compile(r"\s*(?:$|#|[|>][-+0-9]*\s*(?:#.*)?$|[\[{])")
_TOP_KEY = re.compile(r"^([A-Za-z_][\w.-]*)[ \t]*:(?:\s|$)")


@dataclasses.dataclass(frozen=True, slots=True)
class Diagnostic:
    """One line about one file or source: what happened, and what to do about it."""

    level: Level
    path: str
    message: str
    #: Said by ``run`` and ``chat`` too, not only ``agents validate``: an agent is left
    #: out, or may do less than its file says (a permission, hook or server dropped).
    at_run: bool = False

    def __post_init__(self) -> None:
        # One line, whatever the file held (a tool name with a newline in it, say).
        if "\n" in self.message or "\r" in self.message:
            object.__setattr__(self, "message", " ".join(self.message.splitlines()))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass(slots=True)
class LoadResult:
    """The definitions that loaded, in file order, and everything worth telling the user."""

    definitions: list[AgentDefinition] = dataclasses.field(default_factory=list)
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    #: ``.md`` files with no frontmatter: not agent files (READMEs, notes), skipped.
    no_frontmatter: list[str] = dataclasses.field(default_factory=list)


class _NoFrontmatter(Exception):
    """The file has no frontmatter at all: no agent file, and nothing to say about it."""


class _Skip(Exception):
    """The file is not a definition; each message says why (one line per problem)."""

    def __init__(self, *messages: str, level: Level = "error") -> None:
        super().__init__(*messages)
        self.messages = messages
        self.level: Level = level


def _snake(key: str) -> str:
    """maxTurns, max-turns, max_turns → max_turns."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key.strip())
    return snake.replace("-", "_").lower()


def field_for_key(key: str) -> str | None:
    """The AgentDefinition field a frontmatter key sets (maxTurns, max-turns, max_turns)."""
    snake = _snake(key)
    return snake if snake in _SETTABLE else None


#: An agent file is a page of text; anything far larger is a mistake or an attack.
MAX_AGENT_FILE_BYTES = 1024 * 1024


def load_agent_file(path: Path, *, root: Path | None = None) -> LoadResult:
    """Read one file; never raises for anything about the file itself. With ``root``
    (a project's folder) it is opened beneath it: a link out of it skips the file."""
    try:
        data = _read_regular(path) if root is None else _read_beneath(root, path)
    except _NotReadable as exc:
        return _skipped(path, str(exc))
    except OutsideRoot as exc:
        return _skipped(path, str(exc))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return _skipped(path, f"cannot read the file ({reason}): check that it is a readable file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _skipped(
            path,
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
            "save the file as UTF-8",
        )
    return parse_agent_text(text, path=str(path))


def parse_agent_text(text: str, *, path: str) -> LoadResult:
    """Turn a file's text into a definition, or diagnostics saying why it is not one."""
    result = LoadResult()
    try:
        frontmatter, body, first_line = _split(text.removeprefix("\ufeff"))
        fields, notes = _parse_frontmatter(frontmatter, first_line)
        result.diagnostics.extend(Diagnostic("info", path, note) for note in notes)
        definition = _build(fields, body, path, result.diagnostics)
    except _NoFrontmatter:
        result.no_frontmatter.append(path)
        return result
    except _Skip as skip:
        left_out = skip.level == "error"
        result.diagnostics.extend(
            Diagnostic(skip.level, path, f"{m} (file skipped)", at_run=left_out)
            for m in skip.messages
        )
        return result
    result.definitions.append(definition)
    return result


def load_agents_dir(directory: Path, *, root: Path | None = None) -> LoadResult:
    """Every ``*.md`` under `directory` (recursively, sorted); a missing folder is empty.
    ``root``: each file is opened beneath it (see ``load_agent_file``)."""
    result = LoadResult()
    if not directory.is_dir():
        return result
    problems: list[OSError] = []
    files: list[Path] = []
    for where, _dirs, names in os.walk(directory, onerror=problems.append):
        files.extend(Path(where, name) for name in names if name.lower().endswith(".md"))
    for error in problems:
        where = error.filename or str(directory)
        reason = error.strerror or type(error).__name__
        result.diagnostics.append(
            Diagnostic(
                "warning", str(where), f"folder cannot be read ({reason}): skipped", at_run=True
            )
        )
    for file in sorted(files, key=lambda p: p.relative_to(directory).as_posix()):
        loaded = load_agent_file(file, root=root)
        result.definitions.extend(loaded.definitions)
        result.diagnostics.extend(loaded.diagnostics)
        result.no_frontmatter.extend(loaded.no_frontmatter)
    return result


class _NotReadable(Exception):
    """A file that is not one to read: a FIFO, a device, a socket, a huge file."""


def _read_regular(path: Path) -> bytes:
    # O_NONBLOCK: opening a FIFO nobody writes to would otherwise block for ever; the
    # fstat then tells what was opened (no race between a check and the open).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotReadable("not a regular file (a FIFO, device or socket): remove it")
        if info.st_size > MAX_AGENT_FILE_BYTES:
            raise _NotReadable(
                f"too large ({info.st_size} bytes; agent files are limited to "
                f"{MAX_AGENT_FILE_BYTES} bytes): shorten it"
            )
        data = f.read(MAX_AGENT_FILE_BYTES + 1)
    if len(data) > MAX_AGENT_FILE_BYTES:  # it grew while we read it
        raise _NotReadable(f"too large (agent files are limited to {MAX_AGENT_FILE_BYTES} bytes)")
    return data


def _read_beneath(root: Path, path: Path) -> bytes:
    """``_read_regular`` for a project's file: opened beneath ``root``, no link out."""
    try:
        data = read_beneath(root, path, MAX_AGENT_FILE_BYTES)
    except OutsideRoot:
        raise
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise _NotReadable("not a regular file (a FIFO, device or socket): remove it") from None
        raise
    if len(data) > MAX_AGENT_FILE_BYTES:
        raise _NotReadable(f"too large (agent files are limited to {MAX_AGENT_FILE_BYTES} bytes)")
    return data


def _refuse_aliases(text: str) -> None:
    """Aliases expand: nine nested ones make a billion-item value from a few lines.

    Agent files have no use for them, so any alias (or anchor) refuses the file. The
    scan reads tokens only (linear in the text), before anything is built.
    """
    try:
        for token in yaml.scan(text, Loader=_SafeLoader):
            if isinstance(token, yaml.AliasToken | yaml.AnchorToken):
                sigil = "&" if isinstance(token, yaml.AnchorToken) else "*"
                raise _Skip(
                    f"frontmatter uses a YAML alias or anchor ({sigil}{token.value}): "
                    "agent files may not use them; write the value out"
                )
    except yaml.YAMLError:
        return  # not YAML at all: the parsers below say so


def _skipped(path: Path, message: str) -> LoadResult:
    left_out = Diagnostic("error", str(path), f"{message} (file skipped)", at_run=True)
    return LoadResult(diagnostics=[left_out])


def _split(text: str) -> tuple[str, str, int]:
    """(frontmatter, body, the file line the frontmatter starts on).

    The opening delimiter is a '---' line, the closing one a line of three or more dashes;
    blank lines before, indentation and trailing spaces are allowed."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start == len(lines) or lines[start].strip() != "---":
        raise _NoFrontmatter
    indent = len(lines[start]) - len(lines[start].lstrip())
    # A closing line indented deeper than the opening one may sit inside a block scalar
    # (an example in `description: |`), so prefer one that is not; then take any.
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if _closes(lines[i]) and len(lines[i]) - len(lines[i].lstrip()) <= indent
        ),
        None,
    )
    if end is None:
        end = next((i for i in range(start + 1, len(lines)) if _closes(lines[i])), None)
    if end is None:
        raise _Skip(
            f"no closing '---' for the frontmatter opened on line {start + 1}: "
            "add a '---' line after the last key"
        )
    # Ends with a newline, as it would mid-file, so a final `key: |` keeps its line break.
    frontmatter = textwrap.dedent("".join(line + "\n" for line in lines[start + 1 : end]))
    body = lines[end + 1 :]
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    return frontmatter, "\n".join(body), start + 2


def _closes(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 3 and stripped == "-" * len(stripped)


def _parse_frontmatter(text: str, first_line: int) -> tuple[dict[Any, Any], list[str]]:
    """The frontmatter mapping, and notes (the tolerant parser was needed)."""
    _refuse_aliases(text)
    try:
        data = yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        strict_error = _yaml_problem(exc, first_line)
        fields = _tolerant(text)
        if fields is None:
            raise _Skip(
                f"frontmatter is not valid YAML ({strict_error}): fix or quote it"
            ) from None
        return fields, [
            f"frontmatter is not strict YAML ({strict_error}); read with the tolerant parser "
            "— quote that value to silence this"
        ]
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise _Skip(f"frontmatter is {kind}, not a mapping: write one 'key: value' line per field")
    return data, []


def _yaml_problem(exc: yaml.YAMLError, first_line: int) -> str:
    """PyYAML's message in one line: the problem and the file line it is on."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + first_line}" if mark is not None else ""
        return f"{exc.problem or exc.context or 'syntax error'}{where}"
    return " ".join(str(exc).split())


def _tolerant(text: str) -> dict[str, Any] | None:
    """Top-level `key: value` entries, each parsed by YAML alone where it can be.

    An entry is a key line plus the lines that continue it (indented lines, list items,
    blank lines, and a column-0 ``Word:`` line that is prose: a capitalised word that is no
    key agent files use, like "Examples:" inside a long description). An entry YAML still
    rejects is a plain scalar: the text after the key, as a person reads it — lines of a
    paragraph joined with spaces, paragraphs kept apart by a blank line. None when the text
    has no key line or something before the first key.
    """
    entries: list[list[str]] = []
    for line in text.split("\n"):
        top = _TOP_KEY.match(line)
        if top and (not entries or _starts_entry(top.group(1), line[top.end() :])):
            entries.append([line])
        elif line.startswith("#"):
            continue  # a top-level comment
        elif entries:
            entries[-1].append(line)
        elif line.strip():
            return None
    if not entries:
        return None
    fields: dict[str, Any] = {}
    for entry in entries:
        key_match = _TOP_KEY.match(entry[0])
        assert key_match is not None
        key = key_match.group(1).strip()
        chunk = "".join(line + "\n" for line in entry)
        parsed = _yaml_or_none(chunk)
        if parsed is None:  # YAML forbids tabs for indentation; people use them
            parsed = _yaml_or_none(chunk.expandtabs(2))
        if isinstance(parsed, dict) and len(parsed) == 1:
            fields.update({str(k): v for k, v in parsed.items()})
            continue
        first = entry[0][key_match.end() :]
        fields[key] = _unquote(_as_prose([first, *entry[1:]]))
    return fields


def _starts_entry(key: str, rest: str) -> bool:
    """Whether a column-0 `key:` line starts a new entry rather than continuing the value
    before it: a key agent files define does, and another lower-case key whose value is
    YAML structure (``notes: |``, a list below). Any other line (``user:`` / ``assistant:``
    lines of an example, ``Examples:``, ``Context:``) is prose of the value above it."""
    snake = _snake(key)
    if not key[0].islower():  # "Context:" in an example is prose, not `context`
        return False
    if snake in _SETTABLE or snake in UNSUPPORTED_KEYS or snake in _OTHER_KEYS:
        return True
    return _STRUCTURE.match(rest) is not None


def _as_prose(lines: list[str]) -> str:
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return "\n\n".join(" ".join(words) for words in paragraphs if words)


def _yaml_or_none(text: str) -> Any:
    _refuse_aliases(text)
    try:
        return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        return None


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _build(
    fields: dict[Any, Any], body: str, path: str, diagnostics: list[Diagnostic]
) -> AgentDefinition:
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    extra: dict[str, Any] = {}
    if not {field_for_key(str(key)) for key in fields} & {"name", "description"}:
        # Docs pages carry frontmatter too (title, layout); an agent has a name or description.
        raise _Skip(
            "not an agent definition: the frontmatter has neither name nor description; "
            "add them if this is meant to be an agent",
            level="warning",
        )
    for raw_key, value in fields.items():
        key = str(raw_key)
        field = field_for_key(key)
        if field is None:
            extra[key] = value
            continue
        if field in values and values[field] != value:
            diagnostics.append(
                Diagnostic(
                    "warning",
                    path,
                    f"both {spelled[field]!r} and {key!r} are given; using {key!r} "
                    "(the later one): remove one",
                )
            )
        values[field] = value
        spelled[field] = key
    if values.get("name") in (None, ""):
        values["name"] = Path(path).stem
        spelled["name"] = "name (from the file name)"
    renamed = _slugged_name(values, spelled["name"])
    if values.get("sandbox") is False:
        values["sandbox"] = "off"  # `sandbox: off` unquoted: YAML 1.1 reads a boolean
    description = values.get("description")
    if isinstance(description, str):
        # Real files write "\n" for a line break inside a plain one-line description.
        values["description"] = description.replace("\\n", "\n")
    try:
        definition = AgentDefinition(**values, system_prompt=body, extra=extra, source=path)
    except ValidationError as exc:
        lines = validation_messages(exc, keys=spelled)
        raise _Skip(*lines) from None
    if renamed:
        diagnostics.append(Diagnostic("warning", path, renamed))
    # Claude Code values run as their nearest agentcell behaviour: said, once per file.
    diagnostics.extend(
        Diagnostic("warning", path, note, at_run=field == "permission_mode")
        for field, note in claude_notes(values, spelled)
    )
    diagnostics.extend(Diagnostic(level, path, note) for level, note in _notes(definition))
    refused = _network_problem(definition)
    if refused:  # an agent left out as surely as a file that fails: run and chat say it
        diagnostics.append(Diagnostic("warning", path, refused, at_run=True))
    return definition


def _network_problem(definition: AgentDefinition) -> str:
    """Why the agent's ``network:`` list refuses it at its start ('' when it does not)."""
    if not isinstance(definition.network, list):
        return ""
    try:
        parse_rules(definition.network)
    except ValueError as exc:
        return f"{exc}: the agent is refused at its start until it is fixed"
    return ""


def _slugged_name(values: dict[str, Any], spelled: str) -> str:
    """Give a name like "Python DevOps/CI-CD Expert" its slug, as Claude Code reads it;
    the warning to report ('' when the name is fine as it is)."""
    name = values["name"]
    if not isinstance(name, str) or is_agent_name(name.strip()) or not agent_slug(name):
        return ""  # fine, or beyond repair: the validator says which
    values["name"] = agent_slug(name)
    return (
        f"{spelled} {name.strip()!r} is not an agent name (letters, digits, '-', '_', '.'): "
        f"loaded as {values['name']!r}; the task tool accepts either spelling"
    )


def _mcp_notes(definition: AgentDefinition) -> list[tuple[Level, str]]:
    """MCP tool names for servers the agent does not name; an allowlist that grants none
    of a named server's tools (the agent gets none of them)."""
    found: list[tuple[Level, str]] = []
    named = set(definition.mcp_server_names)
    orphans = [
        name
        for name in mcp_patterns(definition.tools or [])
        if name.split("__")[1] not in named and name.split("__")[1] != "*"
    ]
    if orphans:
        found.append(
            (
                "info",
                f"tools {', '.join(orphans)}: mcpServers does not name "
                f"{'that server' if len(orphans) == 1 else 'those servers'}, so the "
                "configured server of that name is started for the agent (as in Claude "
                "Code); without one the agent has no such tool",
            )
        )
    if definition.tools is None:
        return found
    patterns = mcp_patterns(definition.tools)
    silent = [
        name
        for name in definition.mcp_server_names
        if not any(p.startswith(f"mcp__{name}__") or p == "mcp__*" for p in patterns)
    ]
    if silent:
        found.append(
            (
                "warning",
                f"mcpServers {', '.join(silent)}: tools lists none of their tools, so the "
                f"agent gets none of them; add mcp__{silent[0]}__* (or single tool names) "
                "to tools",
            )
        )
    return found


def _notes(definition: AgentDefinition) -> list[tuple[Level, str]]:
    """Things that load but may not do what the author meant."""
    found: list[tuple[Level, str]] = []
    if not definition.description.strip():
        found.append(
            ("warning", "no description: the main agent cannot tell when to use this agent")
        )
    for key in definition.extra:
        ignored = UNSUPPORTED_KEYS.get(_snake(key))
        if ignored is not None:
            found.append(("warning", f"{key}: {ignored}"))
    found += _mcp_notes(definition)
    problem = model_problem(definition.model)
    if problem is not None:
        found.append(("warning", problem))
    allowed = set(definition.tools or [])
    if TEAM_LIFECYCLE in allowed:
        found.append(
            (
                "info",
                "TeamCreate and TeamDelete are accepted and grant nothing: in agentcell a run "
                "is its team (every agent it starts is in it; send_message reaches them)",
            )
        )
    lacked = [name for name in definition.unknown_tools if name in CLAUDE_TOOLS_LACKED]
    found += [
        ("info", f"{name}: Claude Code's tool that {CLAUDE_TOOLS_LACKED[name]}; agentcell has "
                 "none, so the agent runs without it")
        for name in lacked
        if name in allowed
    ]  # fmt: skip
    unknown_allowed = [
        name for name in definition.unknown_tools if name in allowed and name not in lacked
    ]
    unknown_denied = [name for name in definition.unknown_tools if name not in allowed]
    if unknown_allowed:
        found.append(
            (
                "warning",
                f"unknown tools {', '.join(unknown_allowed)}: the agent gets them only if its "
                "parent has tools of those names",
            )
        )
    if unknown_denied:
        found.append(
            (
                "info",
                f"unknown disallowed tools {', '.join(unknown_denied)}: denied should a parent "
                "have them",
            )
        )
    return found
