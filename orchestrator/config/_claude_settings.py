"""Claude Code's settings files as settings layers: ``~/.claude/settings.json`` (the
user's own), and a trusted project's ``.claude/settings.json`` and
``.claude/settings.local.json``.

Two keys are read. ``hooks`` (Claude Code's nested ``matcher`` / ``hooks: [{type,
command, timeout}]`` shape, which ``parse_hooks`` takes as it is) and ``permissions``:
``allow`` / ``deny`` / ``ask`` rules in Claude Code's syntax (``Bash(git diff:*)``,
``Read(./.env)``, ``Edit``, ``mcp__github``), ``defaultMode`` and
``additionalDirectories``. Rules are translated into ours (``bash(git diff)``,
``read_file(.env)``, ...); a rule for a tool agentcell does not have is named and left out.
Every other key (``env``, ``model``, ``statusLine``, ...) is Claude Code's own business.

An untrusted folder's files run nothing and grant nothing: they are ignored with one
line, like its ``.mcp.json``. The files sit inside the project, so they are opened
without following a symlink anywhere on the way (``read_beneath``): a link planted in the
checkout cannot make the parent read, and act on, a file outside it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

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
    user = _layers(home, [USER_FILE], home, notes, beneath=False)
    present = [name for name in PROJECT_FILES if os.path.lexists(workdir / name)]
    if present and not trusted:
        for name in present:
            notes.append(
                f"{workdir / name}: hooks and permissions ignored: they run commands and grant "
                "tools on this machine; this folder is not trusted (run 'agentcell trust' in "
                "it to use them)"
            )
        return user, [], notes
    return user, _layers(workdir, present, workdir, notes, beneath=True), notes


def _layers(
    root: Path, names: list[str], base: Path, notes: list[str], *, beneath: bool
) -> list[tuple[str, dict[str, Any]]]:
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
        table = settings_table(doc, str(path), base, notes)
        if table:
            layers.append((str(path), table))
    return layers


def settings_table(
    doc: dict[str, Any], origin: str, base: Path, notes: list[str]
) -> dict[str, Any]:
    """Our settings from one Claude Code settings document."""
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
        table.update(_permissions(permissions, origin, base, notes))
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
    permissions: dict[str, Any], origin: str, base: Path, notes: list[str]
) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for kind in ("allow", "deny", "ask"):
        rules = permissions.get(kind)
        if not isinstance(rules, list):
            continue
        ours: list[str] = []
        for rule in rules:
            translated = translate_rule(rule, base) if isinstance(rule, str) else None
            if translated is None:
                notes.append(
                    f"{origin}: permissions.{kind}: {rule!r} left out: agentcell has no such tool"
                )
                continue
            ours += translated
        if ours:
            table[f"{kind}_rules"] = ours
    mode = permissions.get("defaultMode")
    if isinstance(mode, str):
        try:
            table["permission_mode"] = PermissionMode.parse(mode).value
        except ValueError:
            notes.append(f"{origin}: permissions.defaultMode {mode!r} left out: no such mode here")
    folders = permissions.get("additionalDirectories")
    if isinstance(folders, list):
        # Read-only to sub-agents (Claude Code also lets it edit there: narrower, on purpose).
        table["sandbox_read"] = [
            str((base / Path(f).expanduser()).resolve()) for f in folders if isinstance(f, str)
        ]
    return table


def translate_rule(rule: str, base: Path) -> list[str] | None:
    """One Claude Code permission rule as our rules (None: no tool of ours it names).
    ``Bash(npm run test:*)`` (a prefix) is ``bash(npm run test)`` and
    ``bash(npm run test *)``; a path rule holds for the path as the model may spell it:
    relative to the project, and absolute."""
    # Imported here: the definitions package reads this one's hook parser when it loads.
    from agentcell.orchestrator.definitions import is_known_tool, is_mcp_tool, map_tool_name

    name, _, rest = rule.strip().partition("(")
    name = name.strip()
    spec = rest[:-1].strip() if rest.endswith(")") else None
    if rest and spec is None:
        return None
    tools = _RULE_TOOLS.get(name) or (map_tool_name(name),)
    if not all(is_known_tool(tool) or is_mcp_tool(tool) for tool in tools):
        return None
    if spec is None or spec in ("", "*"):
        # ``mcp__github`` alone is every tool of that server, in Claude Code.
        return [f"{t}__*" if is_mcp_tool(t) and "__" not in t[5:] else t for t in tools]
    if tools == ("bash",):
        return [f"bash({pattern})" for pattern in _command_patterns(spec)]
    if tools == ("web_fetch",) and spec.startswith("domain:"):
        # A glob on the URL (the parent fetches only URLs written plainly: lower-case
        # host, no user part, so a deny rule cannot be dodged by spelling).
        domain = spec.removeprefix("domain:").strip().lower()
        forms = ("{s}://{d}", "{s}://{d}/*", "{s}://{d}:*", "{s}://{d}?*")
        return [f"web_fetch({f.format(s=s, d=domain)})" for s in ("http", "https") for f in forms]
    if all(tool in _PATH_TOOLS for tool in tools):
        return [f"{tool}({pattern})" for tool in tools for pattern in _path_patterns(spec, base)]
    return [f"{tool}({spec})" for tool in tools]


def _command_patterns(spec: str) -> list[str]:
    if spec.endswith(":*"):
        prefix = spec[:-2].rstrip()
        return [prefix, f"{prefix} *"]
    return [spec]


def _path_patterns(spec: str, base: Path) -> list[str]:
    """Claude Code's path rule forms: ``//abs``, ``~/in-home``, ``/from-the-project`` and
    ``./relative`` or ``relative`` (a name without a slash matches at any depth)."""
    if spec.startswith("//"):
        return [spec[1:]]
    if spec.startswith("~/"):
        return [str(Path(spec).expanduser())]
    relative = spec.lstrip("/") if spec.startswith("/") else spec.removeprefix("./")
    patterns = [relative, f"{base.resolve()}/{relative}"]
    if "/" not in relative:
        patterns.append(f"*/{relative}")
    return patterns
