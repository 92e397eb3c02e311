"""What a hook command sees of a tool call, in Claude Code's shape, and back.

A hook written for Claude Code reads ``tool_name == "Bash"`` and
``tool_input.command``, ``tool_input.file_path`` (absolute), Bash's ``timeout`` in
milliseconds. Our tools have their own names and fields (``bash``, ``read_file``,
``path``, ``timeout_s``), so a hook given those would match nothing and let everything
through: every payload is translated here, and a hook's ``updatedInput`` is translated
back. The tool names come from the one table the agent files' ``tools:`` use
(``CLAUDE_TOOL_NAMES``); tools with no Claude Code twin (``task_status``, a custom tool)
and MCP tools (``mcp__server__tool``, the same in both) keep their names and fields.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agentcell.orchestrator.definitions._tool_policy import CLAUDE_TOOL_NAMES

#: Our tool name → Claude Code's (the first Claude name of each in the shared table).
CLAUDE_NAME: dict[str, str] = {}
#: Our tool name → every Claude Code name a matcher may use for it (``Task`` and ``Agent``).
CLAUDE_ALIASES: dict[str, tuple[str, ...]] = {}
for _claude, _ours in CLAUDE_TOOL_NAMES.items():
    CLAUDE_NAME.setdefault(_ours, _claude)
    CLAUDE_ALIASES[_ours] = (*CLAUDE_ALIASES.get(_ours, ()), _claude)
# Claude Code renamed Task to Agent (2.1.63): a script testing ``tool_name == "Agent"``
# must see that name; a matcher may still say either.
CLAUDE_NAME["task"] = "Agent"

#: Per tool, our argument → Claude Code's field of the same meaning.
_FIELDS: dict[str, dict[str, str]] = {
    "bash": {"timeout_s": "timeout"},
    "read_file": {"path": "file_path"},
    "write_file": {"path": "file_path"},
    "edit_file": {"path": "file_path"},
    "grep": {"include": "glob", "ignore_case": "-i", "max_results": "head_limit"},
    "task": {"background": "run_in_background"},
}
#: Claude Code gives these as absolute paths.
_PATH_FIELDS = frozenset({"file_path", "path"})
#: Our permission modes by Claude Code's names (``permission_mode`` in every payload).
_CLAUDE_MODES = {
    "default": "default",
    "accept_edits": "acceptEdits",
    "bypass": "bypassPermissions",
    "plan": "plan",
}


def claude_tool_name(tool: str) -> str:
    return CLAUDE_NAME.get(tool, tool)


def matcher_names(tool: str) -> tuple[str, ...]:
    """The names a hook matcher is tried on: ours and each Claude Code name for it."""
    return (tool, *CLAUDE_ALIASES.get(tool, ()))


def claude_permission_mode(mode: str) -> str:
    return _CLAUDE_MODES.get(mode, mode)


def claude_tool_input(tool: str, arguments: dict[str, Any], workdir: str) -> dict[str, Any]:
    """Our arguments as Claude Code's ``tool_input`` for the same tool."""
    renames = _FIELDS.get(tool)
    if renames is None:
        return arguments
    shaped: dict[str, Any] = {}
    for field, given in arguments.items():
        name = renames.get(field, field)
        value = given
        if name in _PATH_FIELDS and isinstance(given, str):
            value = os.path.normpath(os.path.join(workdir, given))
        elif tool == "bash" and field == "timeout_s" and isinstance(given, int | float):
            value = round(given * 1000)  # Claude Code's Bash timeout is in milliseconds
        shaped[name] = value
    return shaped


def our_arguments(tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A hook's ``updatedInput`` (Claude Code's fields) as our tool's arguments."""
    renames = _FIELDS.get(tool)
    if renames is None:
        return tool_input
    back = {claude: ours for ours, claude in renames.items()}
    ours: dict[str, Any] = {}
    for field, value in tool_input.items():
        name = back.get(field, field)
        seconds = tool == "bash" and name == "timeout_s" and isinstance(value, int | float)
        ours[name] = value / 1000 if seconds else value
    return ours


def claude_tool_response(
    tool: str, tool_input: dict[str, Any], content: str, is_error: bool
) -> Any:
    """PostToolUse's ``tool_response``, in the shape Claude Code gives for that tool
    (its Bash output has stdout and stderr apart; ours comes combined, as ``stdout``)."""
    name = claude_tool_name(tool)
    path = tool_input.get("file_path", "")
    if name == "Bash":
        return {"stdout": content, "stderr": "", "interrupted": False, "isImage": False}
    if name in ("Write", "Edit"):
        return {"filePath": path, "success": not is_error, "content": content}
    if name == "Read":
        return {"type": "text", "file": {"filePath": path, "content": content}}
    return {"content": content, "is_error": is_error}


def tool_document(
    event: str,
    *,
    tool: str,
    call_id: str,
    arguments: str,
    workdir: str,
    response: str = "",
    is_error: bool = False,
) -> dict[str, Any]:
    """The event-specific fields of a PreToolUse/PostToolUse document."""
    tool_input = claude_tool_input(tool, _json_object(arguments), workdir)
    document: dict[str, Any] = {
        "tool_name": claude_tool_name(tool),
        "tool_input": tool_input,
        "tool_use_id": call_id,
    }
    if event == "PostToolUse":
        document["tool_response"] = claude_tool_response(tool, tool_input, response, is_error)
    return document


def updated_output(tool: str, updated: Any) -> str | None:
    """A PostToolUse hook's ``updatedToolOutput`` as our tool's text, read in the shape
    ``claude_tool_response`` gives for that tool (Bash: ``stdout`` and ``stderr``; Read:
    ``file.content``; an MCP tool: text or content blocks). None when it is absent or not
    that shape: Claude Code then keeps the tool's own output too."""
    if updated is None:
        return None
    name = claude_tool_name(tool)
    if isinstance(updated, str):
        return updated if name not in ("Bash", "Read", "Write", "Edit") else None
    if not isinstance(updated, dict | list):
        return None
    if name == "Bash":
        return _bash_text(updated)
    if name == "Read" and isinstance(updated, dict):
        file = updated.get("file")
        content = file.get("content") if isinstance(file, dict) else None
        return content if isinstance(content, str) else None
    return _content_text(updated)


def _bash_text(updated: Any) -> str | None:
    if not isinstance(updated, dict) or not isinstance(updated.get("stdout"), str):
        return None
    stderr = updated.get("stderr")
    return updated["stdout"] + (f"\n{stderr}" if isinstance(stderr, str) and stderr else "")


def _content_text(updated: dict[str, Any] | list[Any]) -> str | None:
    """``{"content": text}``, or content blocks (``[{"type": "text", "text": …}]``,
    alone or as ``{"content": [...]}``, MCP's shape), as text."""
    content = updated.get("content") if isinstance(updated, dict) else updated
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict)]
        if texts and all(isinstance(t, str) for t in texts):
            return "\n".join(t for t in texts if isinstance(t, str))
    return None


def updated_arguments(tool: str, updated: Any) -> str:
    """A hook's ``updatedInput`` as the JSON arguments our tool takes ("" for none)."""
    if not isinstance(updated, dict):
        return ""
    return json.dumps(our_arguments(tool, updated))


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": value}
