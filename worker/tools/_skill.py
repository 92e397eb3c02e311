"""The ``skill`` tool (Claude Code's ``Skill``): loads one of the skills the parent
offered, by name, so a large skill costs nothing until the agent needs it.

The parent decides which skills there are (their ``SKILL.md`` paths, in the spec); this
tool reads only those. What comes back is the skill's folder ("Base directory for this
skill", as Claude Code says it: its scripts and references lie there, readable and
runnable from bash) and its instructions.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping
from typing import Any

import msgspec
from agentcell.worker.tools._base import Tool, ToolContext, ToolError

#: The longest SKILL.md body returned; the rest stays in the file (its path is said).
SKILL_TOOL_MAX_CHARS = 50_000
_FRONTMATTER = re.compile(r"\A\ufeff?\s*---[ \t]*\r?\n.*?\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


class SkillArgs(msgspec.Struct, kw_only=True):
    # Claude Code's field; ``command`` is its older spelling, taken as well.
    skill: str = ""
    command: str = ""
    args: str = ""  # the skill's arguments, passed on as Claude Code does ($ARGUMENTS)


class SkillTool(Tool):
    name = "skill"
    description = (
        "Load a skill by name (one of the available skills in your instructions): returns "
        "its instructions and its base directory, where its bundled scripts and references "
        "are (read them, run them with bash). Use it when the task matches a skill's "
        "description."
    )
    Args = SkillArgs
    concurrency_safe = True
    read_only = True

    def __init__(self, index: Mapping[str, str]) -> None:
        self.index = dict(index)  # skill name -> its SKILL.md

    def __reduce__(self) -> tuple[Any, ...]:
        return (SkillTool, (self.index,))

    async def execute(self, args: Any, ctx: ToolContext) -> str:
        wanted = (args.skill or args.command).strip().lstrip("/")
        path = self.index.get(wanted)
        if path is None:
            known = ", ".join(sorted(self.index)) or "none"
            raise ToolError(f"no skill named {wanted!r} (available: {known})")
        try:
            text = await asyncio.to_thread(_read, path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"skill {wanted!r}: cannot read {path} ({exc})") from None
        body = _FRONTMATTER.sub("", text, count=1).strip()
        if len(body) > SKILL_TOOL_MAX_CHARS:
            body = body[:SKILL_TOOL_MAX_CHARS] + f"\n\n[... cut; the rest is in {path}]"
        folder = os.path.dirname(path)
        head = f"Launching skill: {wanted}\n\nBase directory for this skill: {folder}\n\n"
        tail = f"\n\nARGUMENTS: {args.args}" if args.args.strip() else ""
        return head + body + tail


def _read(path: str) -> str:
    with open(path, encoding="utf-8-sig") as f:
        return f.read(SKILL_TOOL_MAX_CHARS * 4 + 1)
