"""Skills: ``SKILL.md`` files a definition's ``skills: [name]`` preloads into its prompt.

A skill is a folder ``<name>/`` holding ``SKILL.md``: YAML frontmatter (``name``,
``description``) and a Markdown body, Claude Code's format. It is looked for, first hit
wins, in the project's ``.agentcell/skills/`` and ``.claude/skills/``, then the user's
``~/.agentcell/skills/`` and ``~/.claude/skills/``. A skill that is not found (or not
readable) is a warning, never a failure: the agent runs without it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

import yaml
from agentcell.worker import OutsideRoot, read_beneath

#: The longest SKILL.md that is preloaded; a longer one is cut, and the cut is said.
SKILL_MAX_CHARS = 50_000
_FRONTMATTER = re.compile(r"\A\ufeff?\s*---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclasses.dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    body: str
    path: str

    def prompt_section(self) -> str:
        head = f"## Skill: {self.name}"
        if self.description:
            head += f"\n{self.description}"
        return f"{head}\n\n{self.body.strip()}"


def skill_dirs(project_dir: Path, *, home: Path | None = None) -> list[Path]:
    """Where skills are looked for, first match wins."""
    home = Path.home() if home is None else home
    return [
        project_dir / ".agentcell" / "skills",
        project_dir / ".claude" / "skills",
        home / ".agentcell" / "skills",
        home / ".claude" / "skills",
    ]


def find_skill(name: str, project_dir: Path, *, home: Path | None = None) -> Skill | str:
    """The skill named ``name``, or one line saying why there is none."""
    if not _SAFE_NAME.match(name) or ".." in name:
        return f"skill {name!r} is not a folder name (letters, digits, '.', '-', '_')"
    searched = skill_dirs(project_dir, home=home)
    for index, folder in enumerate(searched):
        path = folder / name / "SKILL.md"
        if not path.is_file():
            continue
        try:
            # A project's skills (the first two folders) are read beneath the project.
            text = _read_skill(path, project_dir if index < 2 else None)
        except OutsideRoot as exc:
            return f"skill {name!r}: {exc}: the agent runs without it"
        except (OSError, UnicodeDecodeError) as exc:
            return f"skill {name!r}: cannot read {path} ({exc}): the agent runs without it"
        return parse_skill(text, name=name, path=str(path))
    where = ", ".join(str(folder) for folder in searched)
    return (
        f"skill {name!r} not found (looked for {name}/SKILL.md in {where}): the agent runs "
        "without it"
    )


def _read_skill(path: Path, root: Path | None) -> str:
    if root is None:
        return path.read_text(encoding="utf-8-sig")
    return read_beneath(root, path).decode("utf-8-sig")


def parse_skill(text: str, *, name: str, path: str) -> Skill:
    """A SKILL.md's frontmatter and body; a frontmatter that is not YAML is kept as body."""
    description = ""
    body = text
    match = _FRONTMATTER.match(text)
    if match is not None:
        try:
            meta = yaml.safe_load(match.group(1))
        except yaml.YAMLError:
            meta = None
        if isinstance(meta, dict):
            body = text[match.end() :]
            name = str(meta.get("name") or name).strip()
            description = str(meta.get("description") or "").strip()
    if len(body) > SKILL_MAX_CHARS:
        body = body[:SKILL_MAX_CHARS] + (
            f"\n\n[... skill cut at {SKILL_MAX_CHARS} characters; the rest is in {path}]"
        )
    return Skill(name=name, description=description, body=body, path=path)


def load_skills(
    names: Sequence[str], project_dir: Path, *, home: Path | None = None
) -> tuple[list[Skill], list[str]]:
    """The skills found, in order, and one line for each one that was not."""
    found: list[Skill] = []
    missing: list[str] = []
    for name in dict.fromkeys(names):
        skill = find_skill(name, project_dir, home=home)
        if isinstance(skill, Skill):
            found.append(skill)
        else:
            missing.append(skill)
    return found, missing


def with_skills(system_prompt: str, skills: Sequence[Skill]) -> str:
    """The system prompt with each skill appended as a section of its own."""
    if not skills:
        return system_prompt
    sections = "\n\n".join(skill.prompt_section() for skill in skills)
    return f"{system_prompt}\n\n# Skills\n\n{sections}"
