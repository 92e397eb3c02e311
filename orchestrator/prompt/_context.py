"""What a prompt carries besides the definition: instruction files and agent memory.

- ``AGENTS.md`` / ``CLAUDE.md`` (the user's own, then the project's) go into the main
  agent's prompt and every sub-agent's except the built-in Explore and Plan, as in Claude
  Code.
- ``memory: user|project|local`` gives an agent a folder of its own that outlives the run;
  its ``MEMORY.md`` starts the prompt's memory section (capped), and the sandbox lets the
  agent write there.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.worker import OutsideRoot, read_beneath, real_folder

log = logging.getLogger("agentcell.context")

#: How much of MEMORY.md goes into the prompt (Claude Code also loads only its start).
MEMORY_MAX_LINES = 200
MEMORY_MAX_CHARS = 25_000
#: Each instruction file is cut to this many characters.
INSTRUCTIONS_MAX_CHARS = 40_000
#: Built-in agents that skip the instruction files (they are read-only scouts).
SKIPS_INSTRUCTIONS = frozenset({"Explore", "Plan"})


def memory_dir(definition: AgentDefinition, workdir: Path, home: Path) -> Path | None:
    """The agent's memory folder for its ``memory`` scope (None: it has none)."""
    if definition.memory is None:
        return None
    name = definition.name
    if definition.memory == "user":
        return home / ".agentcell" / "agent-memory" / name
    if definition.memory == "project":
        return workdir / ".agentcell" / "agent-memory" / name
    local = workdir / ".agentcell" / "agent-memory-local"
    return local / name


def memory_root(folder: Path) -> Path:
    """The root a memory folder lives beneath (``ROOT/.agentcell/agent-memory/NAME``)."""
    return folder.parent.parent.parent


def prepare_memory(folder: Path) -> None:
    """Create the folder (0700, every component a real folder beneath its root: a
    repository's ``.agentcell/agent-memory/NAME`` link to $HOME raises ``OutsideRoot``);
    a local one is kept out of git (it is this machine's only)."""
    os.close(real_folder(memory_root(folder), folder, create=True))
    if folder.parent.name == "agent-memory-local":
        ignore = folder.parent / ".gitignore"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        parent = real_folder(memory_root(folder), folder.parent)
        try:
            fd = os.open(ignore.name, flags, 0o600, dir_fd=parent)
        except FileExistsError:
            return
        finally:
            os.close(parent)
        with os.fdopen(fd, "w") as file:
            file.write("# agentcell: local agent memory, never committed\n*\n")


def memory_prompt(folder: Path) -> str:
    """The prompt's memory section: where the folder is and what MEMORY.md says."""
    text = _read(memory_root(folder), folder / "MEMORY.md", MEMORY_MAX_CHARS)
    lines = text.splitlines()
    cut = len(lines) > MEMORY_MAX_LINES or len(text) > MEMORY_MAX_CHARS
    shown = "\n".join(lines[:MEMORY_MAX_LINES])[:MEMORY_MAX_CHARS]
    section = [
        "# Agent memory",
        f"You have a persistent memory folder: {folder}",
        "It outlives this run: keep what future runs should know in MEMORY.md there "
        "(short notes; other files for details). You may write inside it.",
    ]
    if shown.strip():
        section += ["", "Contents of MEMORY.md:", shown]
        if cut:
            section.append(
                f"[MEMORY.md is cut here: only its first {MEMORY_MAX_LINES} lines or "
                f"{MEMORY_MAX_CHARS} characters are loaded (MEMORY_MAX_LINES, "
                "MEMORY_MAX_CHARS); keep it short]"
            )
    else:
        section.append("MEMORY.md is empty or absent so far.")
    return "\n".join(section)


def instruction_files(workdir: Path, home: Path) -> list[Path]:
    """The instruction files that exist, the user's first, then the project's."""
    return [path for _root, path in instruction_sources(workdir, home)]


def instruction_candidates(workdir: Path, home: Path) -> list[tuple[Path, Path]]:
    """(root, file) of every place an instruction file is looked for, in order."""
    return [
        (home, home / ".agentcell" / "AGENTS.md"),
        (home, home / ".claude" / "CLAUDE.md"),
        (workdir, workdir / "AGENTS.md"),
        (workdir, workdir / "CLAUDE.md"),
        (workdir, workdir / ".claude" / "CLAUDE.md"),
    ]


def instruction_sources(workdir: Path, home: Path) -> list[tuple[Path, Path]]:
    """(root, file) of each instruction file that exists beneath its root."""
    seen: set[Path] = set()
    found = []
    for root, path in instruction_candidates(workdir, home):
        try:
            real = path.resolve()
        except OSError:
            continue
        if real not in seen and path.is_file():
            seen.add(real)
            found.append((root, path))
    return found


def instructions_prompt(workdir: Path, home: Path) -> str:
    return render_instructions(instruction_sources(workdir, home))


def render_instructions(found: list[tuple[Path, Path]]) -> str:
    """The prompt's instruction section for these (root, file) pairs, each file read
    beneath its root."""
    parts = []
    for root, path in found:
        text = _read(root, path, INSTRUCTIONS_MAX_CHARS)
        if len(text) > INSTRUCTIONS_MAX_CHARS:
            text = (
                text[:INSTRUCTIONS_MAX_CHARS]
                + f"\n[cut at {INSTRUCTIONS_MAX_CHARS} characters (INSTRUCTIONS_MAX_CHARS)]"
            )
        if text.strip():
            parts.append(f"# Instructions from {path}\n{text.strip()}")
    return "\n\n".join(parts)


def gets_instructions(definition: AgentDefinition) -> bool:
    return not (definition.source == "builtin" and definition.name in SKIPS_INSTRUCTIONS)


def _read(root: Path, path: Path, limit: int) -> str:
    """At most ``limit`` characters and one more (to tell a cut): a huge file costs nothing.
    Opened beneath ``root``: a link out of it is refused (one warning naming it)."""
    try:
        data = read_beneath(root, path, limit * 4)  # UTF-8: at most 4 bytes a character
    except OutsideRoot as exc:
        log.warning("%s", exc)
        return ""
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")[: limit + 1]
