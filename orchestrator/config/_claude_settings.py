"""Claude Code's settings files as settings layers: ``~/.claude/settings.json`` (the
user's own), and a project's ``.claude/settings.json`` and ``.claude/settings.local.json``
(all of them in a trusted folder; in an untrusted one, their deny and ask rules only).

Two keys are read. ``hooks`` (Claude Code's nested ``matcher`` / ``hooks: [{type,
command, timeout}]`` shape, which ``parse_hooks`` takes as it is) and ``permissions``:
``allow`` / ``deny`` / ``ask`` rules in Claude Code's syntax (``Bash(git diff:*)``,
``Read(./.env)``, ``Edit``, ``mcp__github``), ``defaultMode`` and
``additionalDirectories``. Rules are translated into ours (``bash(git diff)``,
``read_file(.env)``, ...); a rule for a tool agentcell does not have is named and left out.
Path rules are anchored as Claude Code anchors them: ``path`` and ``./path`` at the
working directory, ``/path`` at the settings file's root (``~/.claude`` for the user's
file, the project for the project's), ``//path`` absolute, ``~/path`` in the home folder.
A deny or ask rule is never narrower than Claude Code's; an allow rule never broader.
Every other key (``env``, ``model``, ``statusLine``, ...) is Claude Code's own business.

An untrusted folder's files run nothing and grant nothing: their hooks, allow rules,
``defaultMode``, ``additionalDirectories`` and every other key are ignored, with one line
a file. Their deny and ask rules only narrow what agents may do, as an untrusted
``agentcell.toml``'s do, so they apply with or without trust (the line counts them): a
checkout's ``Read(./.env)`` holds before anyone trusts it. The files sit inside the
project, so they are opened, trusted or not, without following a symlink anywhere on the
way (``read_beneath``): a link planted in the checkout cannot make the parent read, and
act on, a file outside it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from agentcell.orchestrator.config._claude_modes import claude_mode_stand_in
from agentcell.orchestrator.config._hooks import HOOK_EVENTS
from agentcell.worker import PermissionMode

#: The project's files, in increasing precedence (the local one is the user's own).
PROJECT_FILES = (".claude/settings.json", ".claude/settings.local.json")
USER_FILE = ".claude/settings.json"  # beneath the home folder
#: A settings file larger than this is refused (they are a few kilobytes).
MAX_SETTINGS_BYTES = 1024 * 1024
#: Claude Code's rule tools whose path rule covers more than one of our tools: its Read
#: rules hold for every built-in that reads files, its Edit rules for every one that writes.
_RULE_TOOLS: dict[str, tuple[str, ...]] = {
    "Read": ("read_file", "grep", "glob"),
    "Edit": ("edit_file", "write_file"),
    "MultiEdit": ("edit_file",),
    "Write": ("write_file",),
}
_PATH_TOOLS = frozenset({"read_file", "grep", "glob", "edit_file", "write_file"})
#: Path rules Claude Code accepts but never consults (it checks Read and Edit rules only):
#: as allow rules they allow nothing; as deny rules they are kept (broader is safe).
_UNCONSULTED_PATH_RULES = frozenset({"Write", "MultiEdit", "Glob", "NotebookEdit"})
#: ``name:value``: Claude Code's rule on one input parameter (deny and ask rules only).
_PARAMETER = re.compile(r"^(-?[A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$", re.DOTALL)
#: The input parameters of Claude Code's tools, so ``Agent(model:opus)`` is told from a
#: specifier with a colon in it (``Bash(git:* push)``, ``Agent(plugin:agent)``).
_CLAUDE_PARAMETERS: dict[str, frozenset[str]] = {
    "Bash": frozenset(
        {"command", "timeout", "description", "run_in_background", "dangerouslyDisableSandbox"}
    ),
    "Agent": frozenset(
        {
            "description",
            "prompt",
            "subagent_type",
            "model",
            "run_in_background",
            "isolation",
            "name",
            "team_name",
            "mode",
            "resume",
        }
    ),  # fmt: skip
    "Read": frozenset({"file_path", "offset", "limit", "pages"}),
    "Edit": frozenset({"file_path", "old_string", "new_string", "replace_all"}),
    "Write": frozenset({"file_path", "content"}),
    "Grep": frozenset(
        {
            "pattern",
            "path",
            "glob",
            "type",
            "output_mode",
            "-i",
            "-n",
            "-A",
            "-B",
            "-C",
            "multiline",
            "head_limit",
        }
    ),  # fmt: skip
    "Glob": frozenset({"pattern", "path"}),
    "WebFetch": frozenset({"url", "prompt"}),
    "WebSearch": frozenset({"query", "allowed_domains", "blocked_domains"}),
}
_CLAUDE_PARAMETERS["Task"] = _CLAUDE_PARAMETERS["Agent"]
#: Each tool's primary field: Claude Code ignores a parameter rule on it (it could be
#: dodged, ``Bash(command:rm *)`` by a compound command) and so do we.
_PRIMARY_PARAMETERS = frozenset({"command", "file_path", "path", "notebook_path", "url"})
#: Claude Code's parameter names where ours differ.
_OUR_PARAMETER_NAMES = {
    ("task", "run_in_background"): "background",
    ("grep", "glob"): "include",
    ("grep", "-i"): "ignore_case",
}


class SettingsFileError(Exception):
    """The file exists but may not or cannot be read (a symlink, not a file, too big)."""


def read_beneath(root: Path, relative: str) -> bytes | None:
    """The file at ``root/relative``, opened one component at a time with
    ``O_NOFOLLOW``, so no symlink on the way (the file itself included) is followed.
    None when it does not exist. (One small function, so that an ``openat2``
    ``RESOLVE_BENEATH`` helper can take its place.)"""
    parts = [part for part in relative.split("/") if part]
    if not parts or any(part in (".", "..") for part in parts):
        raise SettingsFileError(f"{relative!r} is not a plain relative path")
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        for position, part in enumerate(parts):
            last = position == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if last else os.O_DIRECTORY)
            try:
                next_fd = os.open(part, flags | os.O_NONBLOCK, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if os.path.islink(os.path.join(root, *parts[: position + 1])):
                    raise SettingsFileError("it is a symlink, not followed") from None
                raise SettingsFileError(f"cannot open it: {exc.strerror}") from None
            os.close(fd)
            fd = next_fd
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SettingsFileError("it is not a regular file")
        if info.st_size > MAX_SETTINGS_BYTES:
            raise SettingsFileError(f"it is larger than {MAX_SETTINGS_BYTES} bytes")
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(MAX_SETTINGS_BYTES + 1)
    finally:
        os.close(fd)


def _read_own(path: Path) -> bytes | None:
    """One of the user's own files (None when there is none)."""
    try:
        with path.open("rb") as file:
            return file.read(MAX_SETTINGS_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingsFileError(f"cannot read it: {exc.strerror}") from None


def claude_settings_layers(
    workdir: Path, home: Path, *, trusted: bool
) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]], list[str]]:
    """(the user's layers, the project's layers, notes): each layer is (origin, table)."""
    notes: list[str] = []
    # The user's own file may be a link (dotfile managers make them): it is followed.
    # ``./x`` rules hold in the folder the agents work in; ``/x`` ones under ~/.claude.
    user = _layers(
        home, [USER_FILE], home, notes, beneath=False, cwd=workdir, root_anchor=home / ".claude"
    )
    present = [name for name in PROJECT_FILES if os.path.lexists(workdir / name)]
    project = _layers(workdir, present, workdir, notes, beneath=True, narrowing_only=not trusted)
    return user, project, notes


#: The keys of an untrusted project's settings file that are read: rules that only narrow.
_NARROWING_RULES = ("deny", "ask")
BLOCK_WRITES = "blockWritesOutsideWorkingDirectories"
#: How it is honoured (a note of ``agents validate``: a run takes it without a word).
BLOCK_WRITES_HONOURED = (
    f"permissions.{BLOCK_WRITES}: the main agent's write_file, edit_file and bash"
    " redirections stay in the workdir and additionalDirectories; sub-agents are walled"
    " there by the sandbox already"
)


def _narrowing_part(doc: dict[str, Any]) -> dict[str, Any]:
    """An untrusted project's settings document cut to its deny and ask rules."""
    permissions = doc.get("permissions")
    if not isinstance(permissions, dict):
        return {}
    kept = {k: permissions[k] for k in _NARROWING_RULES if k in permissions}
    if permissions.get(BLOCK_WRITES) is True:  # it only forbids: honoured without trust
        kept[BLOCK_WRITES] = True
    return {"permissions": kept}


def _untrusted_note(path: Path, applied: int) -> str:
    rules = "rule" if applied == 1 else "rules"
    return (
        f"{path}: hooks and allow rules ignored; {applied} deny/ask {rules} applied: this "
        "folder is not trusted, and its hooks, allow rules, defaultMode and "
        "additionalDirectories would run commands and grant tools on this machine (run "
        "'agentcell trust' in it to use them)"
    )


def _layers(
    root: Path,
    names: list[str],
    base: Path,
    notes: list[str],
    *,
    beneath: bool,
    cwd: Path | None = None,
    root_anchor: Path | None = None,
    narrowing_only: bool = False,
) -> list[tuple[str, dict[str, Any]]]:
    """Each file's table. ``narrowing_only`` (an untrusted project's files): only their
    deny and ask rules are read, and one line a file says so."""
    layers = []
    for name in names:
        path = root / name
        try:
            data = read_beneath(root, name) if beneath else _read_own(path)
        except SettingsFileError as exc:
            notes.append(f"{path}: ignored: {exc}")
            continue
        if data is None:
            continue
        try:
            doc = json.loads(data)
        except ValueError as exc:
            notes.append(f"{path}: ignored: not valid JSON ({exc})")
            continue
        if not isinstance(doc, dict):
            notes.append(f"{path}: ignored: the top level is not a JSON object")
            continue
        applied: list[str] = []
        if narrowing_only:
            doc = _narrowing_part(doc)
        table = settings_table(
            doc, str(path), base, notes, cwd=cwd, root=root_anchor, applied=applied
        )
        if narrowing_only:
            notes.append(_untrusted_note(path, len(applied)))
        if table:
            layers.append((str(path), table))
    return layers


def settings_table(
    doc: dict[str, Any],
    origin: str,
    base: Path,
    notes: list[str],
    *,
    cwd: Path | None = None,
    root: Path | None = None,
    applied: list[str] | None = None,
) -> dict[str, Any]:
    """Our settings from one Claude Code settings document. ``base``: the folder its
    relative ``additionalDirectories`` are in; ``cwd``: where ``./path`` rules are
    anchored, ``root``: where ``/path`` ones are (both ``base`` unless given);
    ``applied``, when given, gets each of its rules that became one of ours."""
    table: dict[str, Any] = {}
    hooks = doc.get("hooks")
    if isinstance(hooks, dict):
        known = {event: entries for event, entries in hooks.items() if event in HOOK_EVENTS}
        for event in sorted(set(hooks) - set(known)):
            notes.append(f"{origin}: hooks.{event}: not a hook event agentcell knows; left out")
        if known:
            table["hooks"] = _with_origin(known, origin)
    permissions = doc.get("permissions")
    if isinstance(permissions, dict):
        anchors = (cwd or base, root or base)
        table.update(_permissions(permissions, origin, base, notes, anchors, applied=applied))
    return table


def _with_origin(hooks: dict[str, Any], origin: str) -> dict[str, Any]:
    """Each hook tagged with the file it came from (``HookCommand.origin``)."""
    tagged: dict[str, Any] = {}
    for event, entries in hooks.items():
        listed = entries if isinstance(entries, list) else [entries]
        tagged[event] = [
            {**entry, "origin": origin} if isinstance(entry, dict) else entry for entry in listed
        ]
    return tagged


def _permissions(
    permissions: dict[str, Any],
    origin: str,
    base: Path,
    notes: list[str],
    anchors: tuple[Path, Path],
    *,
    applied: list[str] | None = None,
) -> dict[str, Any]:
    table: dict[str, Any] = {}
    cwd, root = anchors
    for kind in ("allow", "deny", "ask"):
        rules = permissions.get(kind)
        if not isinstance(rules, list):
            continue
        ours: list[str] = []
        for rule in rules:
            why: list[str] = []
            translated = (
                translate_rule(rule, cwd, kind=kind, root=root, notes=why)
                if isinstance(rule, str)
                else None
            )
            for line in why:
                notes.append(f"{origin}: permissions.{kind}: {rule!r} {line}")
            if translated is None:
                notes.append(
                    f"{origin}: permissions.{kind}: {rule!r} left out: agentcell has no such tool"
                )
                continue
            # Read covers grep and glob too: "Grep" and "Read" in one list name grep twice.
            ours += [name for name in translated if name not in ours]
            if translated and applied is not None:
                applied.append(rule)
        if ours:
            table[f"{kind}_rules"] = ours
    mode = permissions.get("defaultMode")
    if isinstance(mode, str):
        runs_as, approximated = claude_mode_stand_in(mode)  # dontAsk: plan, never looser
        try:
            table["permission_mode"] = PermissionMode.parse(str(runs_as)).value
        except ValueError:
            notes.append(f"{origin}: permissions.defaultMode {mode!r} left out: no such mode here")
        if approximated:
            notes.append(f"{origin}: permissions.defaultMode {mode!r}: {approximated}")
    if permissions.get(BLOCK_WRITES) is True:  # honoured: only `agents validate -v` says how
        table["block_writes_outside"] = True
    folders = permissions.get("additionalDirectories")
    if isinstance(folders, list):
        # Read-only to sub-agents (Claude Code also lets it edit there: narrower, on purpose).
        table["sandbox_read"] = [
            str((base / Path(f).expanduser()).resolve()) for f in folders if isinstance(f, str)
        ]
    return table


def translate_rule(
    rule: str,
    base: Path,
    *,
    kind: str = "deny",
    root: Path | None = None,
    notes: list[str] | None = None,
) -> list[str] | None:
    """One Claude Code permission rule as our rules (None: no tool of ours it names; an
    empty list: a rule left out for the reason added to ``notes``).
    ``Bash(npm run test:*)`` (a prefix) is ``bash(npm run test)`` and
    ``bash(npm run test *)``; a path rule holds for the path as the model may spell it:
    relative to ``base`` (the working directory), and absolute. ``kind`` is ``allow``,
    ``deny`` or ``ask``: where Claude Code reads them differently, a deny or ask rule is
    kept at least as broad, an allow rule at most as broad. ``root``: where ``/path``
    rules are anchored (``base`` unless given)."""
    # Imported here: the definitions package reads this one's hook parser when it loads.
    from agentcell.orchestrator.definitions._tool_policy import (
        is_known_tool,
        is_mcp_tool,
        map_tool_name,
    )

    said = notes if notes is not None else []
    name, _, rest = rule.strip().partition("(")
    name = name.strip()
    spec = rest[:-1].strip() if rest.endswith(")") else None
    if rest and spec is None:
        return None
    if _is_name_glob(name):
        return _name_glob_rules(name, spec, kind, said)
    tools = _RULE_TOOLS.get(name) or (map_tool_name(name),)
    if not all(is_known_tool(tool) or is_mcp_tool(tool) for tool in tools):
        return None
    if spec is None or spec in ("", "*"):
        # ``mcp__github`` alone is every tool of that server, in Claude Code.
        return [f"{t}__*" if is_mcp_tool(t) and "__" not in t[5:] else t for t in tools]
    parameter = _claude_parameter(name, spec)
    if parameter is not None:
        return _parameter_rules(name, tools, parameter, kind, said)
    if tools == ("bash",):
        return [f"bash({pattern})" for pattern in _command_patterns(spec)]
    if tools == ("web_fetch",) and spec.startswith("domain:"):
        # Matched against the URL's host in the child (``host_matches``).
        return [f"web_fetch(domain:{spec.removeprefix('domain:').strip()})"]
    if all(tool in _PATH_TOOLS for tool in tools):
        if kind == "allow" and name in _UNCONSULTED_PATH_RULES:
            said.append(
                "left out: Claude Code never consults a path rule for this tool (write "
                "Edit(...) or Read(...) instead)"
            )
            return []
        patterns = _path_patterns(spec, base, root or base, kind=kind)
        return [f"{tool}({pattern})" for tool in tools for pattern in patterns]
    return [f"{tool}({spec})" for tool in tools]


def _is_name_glob(name: str) -> bool:
    """A wildcard in the tool-name position, except after a literal ``mcp__server__``
    (``mcp__github__get_*`` is that server's tools, a name like any other)."""
    if not any(char in name for char in "*?["):
        return False
    server = name.removeprefix("mcp__").split("__", 1)
    return not (name.startswith("mcp__") and len(server) == 2 and not _is_glob(server[0]))


def _is_glob(text: str) -> bool:
    return any(char in text for char in "*?[")


def _name_glob_rules(name: str, spec: str | None, kind: str, notes: list[str]) -> list[str]:
    """``*`` (every tool), ``mcp__*`` (every MCP tool), ``Web*``: deny and ask rules
    hold for every tool the glob names; Claude Code skips such an allow rule."""
    from agentcell.orchestrator.definitions._tool_policy import CLAUDE_TOOL_NAMES, KNOWN_TOOLS

    if kind == "allow":
        notes.append("left out: Claude Code allows nothing by a tool-name wildcard")
        return []
    if spec not in (None, "", "*"):
        # Broader than asked, never narrower: a deny rule may stay broad.
        notes.append("holds for every call of the tools it names: its specifier is not read")
    if name == "*":
        return ["*"]
    claude_names = {m for c, m in CLAUDE_TOOL_NAMES.items() if fnmatch.fnmatchcase(c, name)}
    ours = sorted(claude_names | {t for t in KNOWN_TOOLS if fnmatch.fnmatchcase(t, name)})
    if name.startswith("mcp__"):
        ours.append(name if name.count("__") >= 2 else f"{name}__*")  # like ``mcp__github``
    elif fnmatch.fnmatchcase("mcp__server__tool", name):
        ours.append(name)  # ``m*``: MCP tools' names are ours as they are
    return ours


def _claude_parameter(name: str, spec: str) -> tuple[str, str] | None:
    """``(parameter, value)`` when ``spec`` is one of Claude Code's parameter rules."""
    match = _PARAMETER.match(spec)
    if match is None or match.group(1) not in _CLAUDE_PARAMETERS.get(name, ()):
        return None
    return match.group(1), match.group(2).strip()


def _parameter_rules(
    name: str, tools: tuple[str, ...], parameter: tuple[str, str], kind: str, notes: list[str]
) -> list[str]:
    """``Agent(model:opus)`` → ``task(model:opus)``: the call's own argument is matched
    (``worker.rules._policy``). Left out, with the reason, where Claude Code ignores it or our
    tool has no such argument (no call could ever set it here)."""
    field, value = parameter
    if kind == "allow":
        notes.append("left out: Claude Code matches a parameter in deny and ask rules only")
        return []
    if field in _PRIMARY_PARAMETERS:
        notes.append(f"left out: Claude Code ignores a rule on {name}'s main field {field!r}")
        return []
    rules = []
    for tool in tools:
        ours = _OUR_PARAMETER_NAMES.get((tool, field), field)
        if ours in _our_parameters(tool):
            rules.append(f"{tool}({ours}:{value})")
        else:
            notes.append(f"matches nothing here: agentcell's {tool} has no {field!r} argument")
    return rules


def _our_parameters(tool: str) -> frozenset[str]:
    """The arguments our tool takes."""
    from agentcell.orchestrator.delegation._task_args import TaskArgs
    from agentcell.worker.tools import builtin_tools

    fields = {t.name: t.Args.__struct_fields__ for t in builtin_tools()}
    fields["task"] = TaskArgs.__struct_fields__
    fields["web_fetch"] = ("url", "prompt")
    return frozenset(fields.get(tool, ()))


def _command_patterns(spec: str) -> list[str]:
    """``git push:*`` and ``git push *``: the prefix, alone or followed by a space
    (Claude Code's word boundary: ``ls *`` is ``ls`` and ``ls -la``, not ``lsof``)."""
    if spec.endswith(":*"):
        prefix = spec[:-2].rstrip()
        return [prefix, f"{prefix} *"]
    if spec.endswith(" *") and spec[:-2].strip():
        return [spec[:-2].rstrip(), spec]
    return [spec]


def _path_patterns(spec: str, cwd: Path, root: Path, *, kind: str) -> list[str]:
    """Claude Code's path rule forms: ``//abs``, ``~/in-home``, ``/under-the-root`` (the
    settings file's) and ``./relative`` or ``relative`` (at the working directory; a name
    without a slash, and for deny and ask rules a ``dir/**``, match at any depth)."""
    if spec.startswith("//"):
        return [spec[1:]]
    if spec.startswith("~/"):
        return [str(Path(spec).expanduser())]
    if spec.startswith("/"):
        anchored = f"{root.resolve()}{spec}"
        # The model may spell the same files relative to the working directory.
        return [spec.lstrip("/"), anchored] if root.resolve() == cwd.resolve() else [anchored]
    relative = spec.removeprefix("./")
    patterns = [relative, f"{cwd.resolve()}/{relative}"]
    if "/" not in relative:
        # Any depth. Our deny globs' ``*`` crosses folders; an allow glob's does not.
        patterns += (
            [f"*/{relative}"]
            if kind != "allow"
            else [
                f"**/{relative}",
                f"{cwd.resolve()}/**/{relative}",
            ]
        )
    elif kind != "allow" and re.fullmatch(r"[^/*?\[]+/\*\*", relative):
        patterns.append(f"*/{relative}")  # ``secrets/**``: a ``secrets`` folder anywhere
    if kind != "allow" and not relative.endswith("*"):
        # A folder's name covers what is in it (gitignore's reading, Claude Code's): a
        # deny on ``./secrets`` hid the folder from walks but let ``secrets/key`` be read.
        patterns += [f"{pattern.rstrip('/')}/*" for pattern in patterns]
    return patterns
