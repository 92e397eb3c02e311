"""The approval question, built by the parent from what it knows, one field a line.

A sub-agent's ``ApprovalRequest`` is the child's word: its tool name, arguments and
reason are text a hostile process can shape. So the question names the agent from the
pipe it came on (its id and agent type, which the parent assigned), accepts only a tool
the parent gave that agent, and shows every field on a line of its own with every control
character written out (newlines, CR, ESC, bidi overrides...): a reason of 30 newlines and
a fake "main agent wants to run bash: git status" is one visible line below the real
command, and a tool name with a newline never reaches the screen. Past ``visible``'s
list, every other character that shows nothing or cannot be written is written out too
(Unicode's format characters, such as the invisible tag letters and the soft hyphen; line
and paragraph separators; a lone surrogate from a JSON ``\\ud800``): a URL a child asks
``web_fetch`` for reads as it is, and no character of it can stop the question from being
written. The question is plain text, never Rich markup. "Always" is scoped to the agent
type that asked (or the main agent), never wider.
"""

from __future__ import annotations

import json
import re
import unicodedata

from agentcell.orchestrator._text import visible
from agentcell.protocol import AgentSpec
from agentcell.worker import MCP_PREFIX, describe_arguments

#: A tool name as model APIs accept them; anything else is not a tool the parent gave.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
#: The most of the agent's own reason that is shown (it is the agent's word, not a fact).
REASON_LIMIT = 300


#: Unicode categories written out on top of ``visible``'s list: controls, format
#: characters (invisible), surrogates (unwritable), line and paragraph separators.
_UNSHOWN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def flat(text: str, limit: int | None = None) -> str:
    """``text`` on one line: control and invisible characters, newlines and tabs written
    out; cut with "…" past ``limit`` characters."""
    shown = visible(text).replace("\n", "\\n").replace("\t", "\\t")
    if not shown.isascii():
        shown = "".join(map(_written_out, shown))
    if limit is not None and len(shown) > limit:
        return shown[: limit - 1] + "…"
    return shown


def _written_out(char: str) -> str:
    if unicodedata.category(char) not in _UNSHOWN:
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def always_scope(agent_id: str, agent_type: str) -> tuple[str, str]:
    """What an "always" answer covers: the main agent, or one agent type's sub-agents."""
    if agent_id == "main":
        return ("main", "")
    return ("agent", agent_type)


def scope_words(agent_id: str, agent_type: str) -> str:
    kind, name = always_scope(agent_id, agent_type)
    return "the main agent" if kind == "main" else f"{flat(name, 64)} sub-agents"


def refused_tool(tool: str, spec: AgentSpec) -> str:
    """Why a child's request about ``tool`` is refused unasked ("" when it is a tool the
    parent gave this agent: a built-in, a relayed one, or one of its MCP servers')."""
    if not _TOOL_NAME.fullmatch(tool):
        return "the approval request names no valid tool (refused without asking)"
    given = {*spec.tools, *(t.name for t in spec.remote_tools)}
    servers = {f"{MCP_PREFIX}{server.name}__" for server in spec.mcp_servers}
    if tool in given or any(tool.startswith(prefix) for prefix in servers):
        return ""
    return f"the approval request names {tool}, a tool this agent was not given (refused)"


def question_lines(*, who: str, tool: str, arguments: str, reason: str, scope: str) -> list[str]:
    """The question, one field a line: who and what, the exact call, why, what "always"
    means. The keys come last (``keys_line``)."""
    lines = [f"{who} wants to run {flat(tool, 128)}:"]
    lines += [f"    {flat(line)}" for line in _subject(arguments)]
    if reason:
        lines.append(f"  why it asks: {flat(reason, REASON_LIMIT)}")
    lines.append(f"  [a]lways allows {flat(tool, 128)} to {scope} only, for this session")
    return lines


def keys_line(tool: str) -> str:
    return f"  allow? [y]es / [n]o / [a]lways for {flat(tool, 128)}: "


def _subject(arguments: str) -> list[str]:
    """What exactly the call would do: the whole command for bash, the path for a file
    tool (then the other arguments), else the arguments (never cut: the person approves
    exactly this)."""
    try:
        parsed = json.loads(arguments, strict=False)
    except ValueError:
        return [arguments]
    if isinstance(parsed, dict):
        for key in ("command", "path", "file_path", "pattern", "url"):
            value = parsed.get(key)
            if isinstance(value, str):
                rest = {k: v for k, v in parsed.items() if k != key}
                if rest and key != "command":
                    return [value, f"({describe_arguments(json.dumps(rest))})"]
                return [value]
    return [describe_arguments(arguments, limit=2000)]
