"""Tool names: our vocabulary, the Claude Code spellings we map, and the sub-agent tool set.

A sub-agent's tools are always a subset of its parent's: an allowlist can only narrow what
the parent has, a denylist always wins, and the coordination tools (delegation) are never
passed down through here. Names we do not know are reported, never granted on faith.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

#: Our built-in tools, in the order a registry lists them.
BUILTIN_TOOLS: tuple[str, ...] = ("read_file", "write_file", "edit_file", "glob", "grep", "bash")
#: The built-ins that change nothing.
READ_ONLY_TOOLS: tuple[str, ...] = ("read_file", "glob", "grep")
#: The main agent's delegation tools; a sub-agent never gets them from `resolve_tools`.
COORDINATION_TOOLS: frozenset[str] = frozenset({"task", "task_status", "task_wait", "task_control"})
#: Loads a skill on demand (Claude Code's ``Skill``): offered by the skills there are,
#: not inherited from the parent (see ``skill_offer``).
SKILL_TOOL = "skill"
#: Tools offered only to an agent that names them: web_fetch runs in the parent, as do
#: the team's send_message and list_agents; todo_write is the agent's own list,
#: web_search is refused in one line (README).
NAMED_TOOLS: frozenset[str] = frozenset(
    {"web_fetch", "todo_write", "web_search", "send_message", "list_agents", "team_tasks"}
)
#: Of those, the ones the sub-agent process runs itself.
CHILD_NAMED_TOOLS: tuple[str, ...] = ("todo_write",)
#: Claude Code's TeamCreate and TeamDelete: accepted, and grant nothing — in agentcell a
#: run is its team (every agent it starts is in it).
TEAM_LIFECYCLE = "team_lifecycle"
#: Every tool name we implement (or, as TEAM_LIFECYCLE, take and say what it means).
KNOWN_TOOLS: frozenset[str] = (
    frozenset(BUILTIN_TOOLS) | COORDINATION_TOOLS | NAMED_TOOLS | {SKILL_TOOL, TEAM_LIFECYCLE}
)

#: Claude Code's tools agentcell knowingly has no counterpart for (what each does): an
#: agent file naming one runs without it, which validate says as an info, not a warning.
CLAUDE_TOOLS_LACKED: dict[str, str] = {
    "NotebookEdit": "edits Jupyter notebook cells; write_file and edit_file edit the file",
    "LSP": "asks a language server for definitions and references; grep finds them",
}

#: MCP tools are named ``mcp__<server>__<tool>`` (Claude Code's spelling). They come
#: from the servers a definition names, never from the parent's tools.
MCP_PREFIX = "mcp__"

#: "All of the parent's tools" when it is the whole value of an allowlist.
ALL_TOOLS_WORDS: frozenset[str] = frozenset({"*", "all"})

# Claude Code's names (case-sensitive, as Claude Code spells them). NotebookEdit is left
# unmapped on purpose: we have no notebook tool, and mapping it to the general file editor
# would grant more in an allowlist than the author asked for. LS lists a directory, which
# `glob` covers without writing anything.
CLAUDE_TOOL_NAMES: dict[str, str] = {
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Glob": "glob",
    "LS": "glob",
    "Grep": "grep",
    "Bash": "bash",
    "Task": "task",
    "Agent": "task",
    "Skill": "skill",
    "WebFetch": "web_fetch",
    "WebSearch": "web_search",
    "TodoWrite": "todo_write",
    "SendMessage": "send_message",
    # One shared task list, kept by the parent, for all four of Claude Code's task tools.
    "TaskCreate": "team_tasks",
    "TaskUpdate": "team_tasks",
    "TaskList": "team_tasks",
    "TaskGet": "team_tasks",
    "TeamCreate": TEAM_LIFECYCLE,
    "TeamDelete": TEAM_LIFECYCLE,
}


def split_tool_entries(text: str) -> list[str]:
    """A comma-separated tools string split at top-level commas only, so that
    ``Read, Task(reviewer, tester)`` is two entries, not three."""
    entries: list[str] = []
    depth, start = 0, 0
    for position, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            entries.append(text[start:position])
            start = position + 1
    entries.append(text[start:])
    return entries


_TASK_ENTRY = re.compile(r"^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.DOTALL)


def task_entry_agents(entry: str) -> list[str] | None:
    """For ``Task(a, b)`` or ``Agent(a, b)`` the agent types it names (``['a', 'b']``);
    None for any other entry (a bare ``Task`` included: that one names no limit)."""
    match = _TASK_ENTRY.match(entry)
    if match is None or map_tool_name(match.group(1)) != "task":
        return None
    names = (name.strip().strip("'\"").strip() for name in match.group(2).split(","))
    return [name for name in names if name]


def map_tool_name(name: str) -> str:
    """Our name for `name`: Claude names mapped, our names in any case, others as given."""
    name = name.strip()
    mapped = CLAUDE_TOOL_NAMES.get(name)
    if mapped is not None:
        return mapped
    lowered = name.lower()
    return lowered if lowered in KNOWN_TOOLS else name


def normalize_tool_names(names: Iterable[str]) -> list[str]:
    """Map every name and drop duplicates (and blanks), keeping the first occurrence's place."""
    seen: dict[str, None] = {}
    for raw in names:
        name = map_tool_name(raw)
        if name:
            seen.setdefault(name, None)
    return list(seen)


def is_mcp_tool(name: str) -> bool:
    """True for an MCP tool name or pattern (``mcp__github__create_issue``, ``mcp__github__*``)."""
    return name.startswith(MCP_PREFIX)


def mcp_patterns(names: Iterable[str]) -> list[str]:
    """The MCP entries of a tool list as name patterns; ``mcp__server`` alone (Claude
    Code's "every tool of that server") becomes ``mcp__server__*``."""
    patterns = []
    for name in names:
        if is_mcp_tool(name):
            patterns.append(name if "__" in name[len(MCP_PREFIX) :] else f"{name}__*")
    return patterns


def means_all_tools(name: str) -> bool:
    """True for ``*`` or ``all`` (any case): "every tool" rather than a tool's name."""
    return name.strip().lower() in ALL_TOOLS_WORDS


def is_known_tool(name: str) -> bool:
    """True for a name we implement (after mapping)."""
    return map_tool_name(name) in KNOWN_TOOLS


@dataclasses.dataclass(frozen=True, slots=True)
class ResolvedTools:
    #: The tools the sub-agent gets, in the parent's order.
    tools: list[str]
    #: Names in the allow/deny lists that are neither a parent tool nor a tool we know.
    unknown: list[str]


def resolve_tools(
    allowlist: Sequence[str] | None,
    denylist: Sequence[str],
    parent_tools: Sequence[str],
) -> ResolvedTools:
    """(allowlist ∩ parent_tools) − denylist − coordination tools; the denylist always wins.

    `None` (or a lone ``*``/``all``) as the allowlist means all of the parent's tools; an
    empty allowlist means none. ``*``/``all`` in the denylist denies everything: ignoring
    it would silently grant what its author meant to take away.
    """
    parent = list(dict.fromkeys(parent_tools))
    allow = None if allowlist is None else normalize_tool_names(allowlist)
    deny = normalize_tool_names(denylist)
    parent_set = set(parent)
    unknown = [
        name
        for name in dict.fromkeys([*(allow or []), *deny])
        if name not in parent_set
        and name not in KNOWN_TOOLS
        and not means_all_tools(name)
        and not is_mcp_tool(name)
    ]
    if allow is not None and any(means_all_tools(name) for name in allow):
        allow = None
    if any(means_all_tools(name) for name in deny):
        return ResolvedTools(tools=[], unknown=unknown)
    allowed = parent_set if allow is None else set(allow)
    denied = set(deny) | COORDINATION_TOOLS
    tools = [name for name in parent if name in allowed and name not in denied]
    # The agent's own todo list is no power of its parent's: given whenever it is named.
    tools += [n for n in CHILD_NAMED_TOOLS if n in (allow or ()) and n not in denied | set(tools)]
    return ResolvedTools(tools=tools, unknown=unknown)
