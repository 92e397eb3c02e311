"""Skills: ``SKILL.md`` files a definition's ``skills: [name]`` preloads into its prompt.

A skill is a folder ``<name>/`` holding ``SKILL.md``: YAML frontmatter (``name``,
``description``) and a Markdown body, Claude Code's format. It is looked for, first hit
wins, in the project's ``.agentcell/skills/`` and ``.claude/skills/``, then the user's
``~/.agentcell/skills/`` and ``~/.claude/skills/``. A skill that is not found (or not
readable) is a warning, never a failure: the agent runs without it.

As in Claude Code, each loaded skill says its folder ("Base directory for this skill"),
and the folders are readable and runnable (never writable) from the sub-agent's bash
under the sandbox, so a skill's bundled scripts and references work. Besides the
preloaded ones, an agent with the ``skill`` tool (Claude Code's ``Skill``) sees every
available skill's name and description and loads one when it needs it (``SkillOffer``).
A skill folder that is a symlink out of its skills folder is neither offered nor opened.
"""

from __future__ import annotations

import dataclasses
import os
import re
import reprlib
from collections.abc import Sequence
from pathlib import Path

import yaml
from agentcell.orchestrator.config._hooks import name_once
from agentcell.orchestrator.definitions._tool_policy import (
    SKILL_TOOL,
    means_all_tools,
    normalize_tool_names,
    split_tool_entries,
)
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
    # Claude Code's ``disallowed-tools``, as agentcell names tools: a preloaded skill's
    # are taken from the run's tools where it is prepared (one loaded mid-run takes none).
    disallowed_tools: tuple[str, ...] = ()
    # One line per frontmatter key agentcell does not apply, naming the file and the key.
    notes: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        return os.path.dirname(self.path)

    def prompt_section(self) -> str:
        head = f"## Skill: {self.name}"
        if self.description:
            head += f"\n{self.description}"
        return f"{head}\n\nBase directory for this skill: {self.folder}\n\n{self.body.strip()}"


def skill_dirs(project_dir: Path, *, home: Path | None = None) -> list[Path]:
    """Where skills are looked for, first match wins."""
    home = Path.home() if home is None else home
    return [
        project_dir / ".agentcell" / "skills",
        project_dir / ".claude" / "skills",
        home / ".agentcell" / "skills",
        home / ".claude" / "skills",
    ]


#: Skill frontmatter keys Claude Code acts on and agentcell does not, or not always (by
#: their folded spelling: lower case, no '-' or '_'), and what that means. A guard
#: written for Claude Code must not do nothing silently: each one found is named once.
SKILL_KEYS_NOT_APPLIED: dict[str, str] = {
    "hooks": "hooks in a skill are not run by agentcell; put them in the agent file or settings",
    "disallowedtools": "taken away for the whole run where an agent file's skills: preloads "
    "the skill, not where the skill tool loads it mid-run; put them in the agent file's "
    "disallowedTools or a deny rule in settings to be sure",
    "allowedtools": "ignored: agentcell does not pre-approve tools for a skill (a project's "
    "skill could grant itself anything); add allow rules to your settings instead",
}


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
        return _said(parse_skill(text, name=name, path=str(path)))
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
    """A SKILL.md's frontmatter and body; a frontmatter that is not YAML is kept as body.
    Keys agentcell does not apply are in ``notes``; a malformed value is a note too."""
    description = ""
    body = text
    disallowed: tuple[str, ...] = ()
    notes: list[str] = []
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
            disallowed, notes = _unapplied_keys(meta, path)
    if len(body) > SKILL_MAX_CHARS:
        body = body[:SKILL_MAX_CHARS] + (
            f"\n\n[... skill cut at {SKILL_MAX_CHARS} characters; the rest is in {path}]"
        )
    return Skill(
        name=name,
        description=description,
        body=body,
        path=path,
        disallowed_tools=disallowed,
        notes=tuple(notes),
    )


def _unapplied_keys(meta: dict[object, object], path: str) -> tuple[tuple[str, ...], list[str]]:
    """The skill's ``disallowed-tools`` (agentcell's names), and one line per key in
    ``SKILL_KEYS_NOT_APPLIED`` that the frontmatter sets."""
    disallowed: tuple[str, ...] = ()
    notes: list[str] = []
    for key, value in meta.items():
        folded = str(key).lower().replace("-", "").replace("_", "")
        meaning = SKILL_KEYS_NOT_APPLIED.get(folded)
        if meaning is None or value is None:
            continue
        if folded == "hooks":
            notes.append(f"{path}: {key}: {meaning}")
            continue
        names = _tool_names(value)
        if names is None:
            notes.append(
                f"{path}: {key}: {reprlib.repr(value)} is not a list of tool names (write "
                f"'Bash, Edit' or a YAML list); {meaning}"
            )
            continue
        if folded == "disallowedtools":
            disallowed = tuple(normalize_tool_names(names))
        notes.append(f"{path}: {key} ({', '.join(names)}): {meaning}")
    return disallowed, notes


def _tool_names(value: object) -> list[str] | None:
    """Claude Code's tool list for a skill: a space- or comma-separated string (spaces
    inside ``Bash(git add *)`` do not split) or a list of names; None for anything else."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return [item.strip() for item in value if item.strip()]
    if not isinstance(value, str):
        return None
    return [
        word
        for entry in split_tool_entries(value)
        for word in _split_outside_parentheses(entry)
        if word
    ]


def _split_outside_parentheses(text: str) -> list[str]:
    """``Bash(git add *) Read`` → ``['Bash(git add *)', 'Read']``."""
    words: list[str] = []
    depth, current = 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        if char.isspace() and depth == 0:
            words.append(current)
            current = ""
        else:
            current += char
    return [word for word in [*words, current] if word]


def _said(skill: Skill) -> Skill:
    """``skill``, its notes logged (each line once per process): they name keys a guard
    may rely on, so they must not go unsaid."""
    for note in skill.notes:
        name_once(note)
    return skill


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


#: The longest description the listing of available skills shows for one skill.
SKILL_LISTING_DESCRIPTION_CHARS = 1024


@dataclasses.dataclass(slots=True)
class SkillOffer:
    """What a sub-agent gets of the skills: the ``skill`` tool's index (name → SKILL.md),
    the listing for its prompt, the folders its sandbox lets it read and run, and a line
    for each skill folder refused."""

    index: dict[str, str] = dataclasses.field(default_factory=dict)
    listing: str = ""
    read_paths: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


def contained_skill_folder(folder: Path, root: Path) -> str | None:
    """The real path of a skill folder that stays inside its skills folder; None for
    one that is a symlink (or holds one) out of it, or that holds the home."""
    try:
        real = os.path.realpath(folder)
        real_root = os.path.realpath(root)
    except (OSError, ValueError):
        return None
    home = os.path.realpath(os.path.expanduser("~"))
    if not real.startswith(real_root.rstrip("/") + "/") or _holds(real, home):
        return None
    return real


def _holds(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def available_skills(
    project_dir: Path, *, home: Path | None = None
) -> tuple[list[tuple[Skill, str]], list[str]]:
    """Every skill to be found (first hit per name wins), each with its folder's real
    path, and one line per skill folder refused (a symlink out of its skills folder)."""
    found: dict[str, tuple[Skill, str]] = {}
    refused: list[str] = []
    for root in skill_dirs(project_dir, home=home):
        try:
            entries = sorted(root.iterdir()) if root.is_dir() else []
        except OSError:
            continue
        for folder in entries:
            name = folder.name
            if name in found or not _SAFE_NAME.match(name) or not (folder / "SKILL.md").is_file():
                continue
            real = contained_skill_folder(folder, root)
            if real is None:
                refused.append(
                    f"skill folder {folder} leads out of {root} (a symlink): not offered; "
                    "copy the skill into the skills folder instead"
                )
                continue
            skill = find_skill_in(folder, name)
            if isinstance(skill, Skill):
                found[name] = (skill, real)
    return list(found.values()), refused


def find_skill_in(folder: Path, name: str) -> Skill | str:
    path = folder / "SKILL.md"
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        return f"skill {name!r}: cannot read {path} ({exc})"
    return _said(parse_skill(text, name=name, path=str(path)))


def skill_offer(
    preloaded: Sequence[Skill],
    project_dir: Path,
    *,
    tools: Sequence[str] | None,
    disallowed: Sequence[str] = (),
    home: Path | None = None,
) -> SkillOffer:
    """The skills a sub-agent may use: the preloaded ones' folders, and, when its tools
    (``tools``, ``disallowed``: the definition's lists) give it the ``skill`` tool, every
    available skill (listed by name and description only)."""
    offer = SkillOffer()
    with_tool = wants_skill_tool(tools, disallowed)
    roots = skill_dirs(project_dir, home=home)
    for skill in preloaded:
        folder = Path(skill.folder)
        real = contained_skill_folder(folder, folder.parent)
        if real is not None and any(folder.parent == root for root in roots):
            offer.read_paths.append(real)
        else:
            offer.warnings.append(
                f"skill {skill.name!r}: its folder {folder} leads out of {folder.parent} "
                "(a symlink): its text is preloaded, but its files are not readable to "
                "the agent; copy the skill into the skills folder instead"
            )
    if not with_tool:
        return offer
    skills, refused = available_skills(project_dir, home=home)
    offer.warnings += [line for line in refused if not _said_for(line, preloaded)]
    lines = []
    for skill, real in skills:
        offer.index[skill.name] = os.path.join(real, "SKILL.md")
        if real not in offer.read_paths:
            offer.read_paths.append(real)
        if any(skill.name == loaded.name for loaded in preloaded):
            continue  # already in the prompt, whole
        description = " ".join(skill.description.split())[:SKILL_LISTING_DESCRIPTION_CHARS]
        lines.append(f"- {skill.name}: {description or '(no description)'}")
    if lines:
        offer.listing = (
            "# Available skills\n\nLoad a skill with the skill tool "
            '(`{"skill": "<name>"}`) when the task matches its description; its '
            "instructions and its folder (with any bundled scripts) come back.\n\n"
            + "\n".join(lines)
        )
    return offer


def wants_skill_tool(tools: Sequence[str] | None, disallowed: Sequence[str]) -> bool:
    """Whether a definition gets the ``skill`` tool: no allowlist, or one naming it
    (``Skill``); a denylist naming it (or everything) wins."""
    denied = normalize_tool_names(disallowed)
    if SKILL_TOOL in denied or any(means_all_tools(name) for name in denied):
        return False
    if tools is None:
        return True
    allowed = normalize_tool_names(tools)
    return SKILL_TOOL in allowed or any(means_all_tools(name) for name in allowed)


def _said_for(line: str, preloaded: Sequence[Skill]) -> bool:
    """Whether a refused folder's line was already said for a preloaded skill."""
    return any(f" {skill.folder} " in line for skill in preloaded)
