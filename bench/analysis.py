"""The analysis workload: sub-agents that read a real source tree with file tools.

Each sub-agent works like a code-reading agent: ten model turns, nine file-tool calls
(``glob`` for the tree's Python files, ``grep`` for its definitions, then seven
``read_file`` of files picked from the glob's own answer), then an answer. Every request
carries the worker's system prompt (a project guide, as real agents' prompts are large)
and the conversation so far, so each one is 20–40 KB; the load server records every
request's size so the run shows it did.

The tree is this repository's ``worker/`` package at a fixed commit (``git archive``), so
the reads are real and the same in every run; where that commit cannot be read (no git,
a shallow clone) the working tree's copy is used, and the run records which.

Three parts:

* the **plan** (``call``): which tool call the load server's script makes at each turn,
  decided by the request alone (the glob's answer is in the conversation);
* the **corpus** (``corpus_into``, ``guide``): the tree and the system prompt;
* the **peer tools** (``read_file``, ``glob``, ``grep``): plain Python functions doing
  the same reads as agentcell's built-in tools, for the frameworks that have none.
"""

from __future__ import annotations

import atexit
import fnmatch
import functools
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

#: The spec's ``tool`` for this workload (the script plans file-tool calls for it).
FILES = "files"
#: The file tools a sub-agent of this workload is given, by their agentcell names.
TOOL_NAMES = ("read_file", "grep", "glob")
#: The commit whose tree is read (``worker/`` and the guide's source, docs/architecture.md).
CORPUS_COMMIT = "0aa7fcaa99b11401adab19db5fd0081660ad0814"
CORPUS_DIR = "worker"
GUIDE_SOURCE = "docs/architecture.md"
#: The system prompt's size: with the tool schemas and the growing conversation, the
#: first request is just over 20 KB and the tenth under 40 KB.
GUIDE_CHARS = 18_600
#: Lines each read_file call asks for (≈ 1.2–2 KB of numbered Python source).
READ_LINES = 26
GREP_PATTERN = r"^(class|def|async def) \w+"
GREP_MAX = 20

ROOT = Path(__file__).resolve().parent.parent


# -- the plan (the load server's side) ---------------------------------------------------


def call(i: int, turn: int, messages: list[Any]) -> tuple[str, dict[str, Any]]:
    """The tool call of sub-agent ``i`` at ``turn`` (0-based): glob, grep, then reads of
    files from the glob's answer (the first tool result in ``messages``)."""
    if turn == 0:
        return "glob", {"pattern": "**/*.py", "path": CORPUS_DIR}
    if turn == 1:
        return "grep", {
            "pattern": GREP_PATTERN,
            "path": f"{CORPUS_DIR}/models",
            "include": "*.py",
            "max_results": GREP_MAX,
        }
    files = listed_files(messages) or [f"{CORPUS_DIR}/__init__.py"]
    # Sub-agents read different files (a stride prime to most tree sizes), all the same way.
    path = files[(i * 7 + (turn - 2) * 5) % len(files)]
    return "read_file", {"path": path, "offset": 1, "limit": READ_LINES}


def listed_files(messages: list[Any]) -> list[str]:
    """The ``.py`` paths of the first tool result (the glob's), in order."""
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "tool":
            text = _text(message.get("content"))
            return [line.strip() for line in text.splitlines() if line.strip().endswith(".py")]
    return []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def arguments(i: int, turn: int, messages: list[Any]) -> tuple[str, str]:
    name, args = call(i, turn, messages)
    return name, json.dumps(args)


# -- the corpus and the guide ------------------------------------------------------------


def _git_archive(commit: str, path: str) -> bytes | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit, path],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None


@functools.cache
def _source() -> tuple[str, Path]:
    """(where the tree came from, a folder holding ``worker/`` and the guide's source),
    made once per process."""
    folder = Path(tempfile.mkdtemp(prefix="agentcell-bench-corpus-"))
    atexit.register(shutil.rmtree, folder, True)
    archive = _git_archive(CORPUS_COMMIT, CORPUS_DIR)
    guide = _git_archive(CORPUS_COMMIT, GUIDE_SOURCE)
    if archive is not None and guide is not None:
        for blob in (archive, guide):
            with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
                tar.extractall(folder, filter="data")
        return f"git {CORPUS_COMMIT[:12]}", folder
    # No such commit here: this checkout's own files (the sizes then drift with the code).
    shutil.copytree(ROOT / CORPUS_DIR, folder / CORPUS_DIR, ignore=_not_source)
    (folder / GUIDE_SOURCE).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / GUIDE_SOURCE, folder / GUIDE_SOURCE)
    return "working tree", folder


def _not_source(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__" or n.endswith((".pyc", ".so"))]


def corpus_into(workdir: str | Path) -> dict[str, Any]:
    """Copy the tree into ``workdir/worker`` (files read-only); what was copied."""
    where, folder = _source()
    dest = Path(workdir) / CORPUS_DIR
    shutil.copytree(folder / CORPUS_DIR, dest)
    files = sizes = 0
    for path in dest.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
            files += 1
            sizes += path.stat().st_size
    return {"source": where, "files": files, "bytes": sizes}


def guide() -> str:
    """The worker's system prompt: what to do, then a project guide (the first
    ``GUIDE_CHARS`` characters of the architecture document at the same commit)."""
    _, folder = _source()
    text = (folder / GUIDE_SOURCE).read_text(encoding="utf-8")
    head = (
        "You are a code analyst. Answer questions about the source tree in your working "
        "directory: find files with glob, search them with grep, read them with read_file, "
        "then report what you found. The project guide follows.\n\n"
    )
    return head + text[: GUIDE_CHARS - len(head)]


# -- the peers' tools: plain Python functions over one root ------------------------------

_root: list[Path] = [Path(".")]


def set_root(path: str | Path) -> None:
    """The folder the peer tools read (a peer's stand-in for a working directory)."""
    _root[0] = Path(path)


def _inside(path: str | None) -> Path:
    root = _root[0].resolve()
    full = (root / (path or ".")).resolve()
    if full != root and root not in full.parents:
        raise ValueError(f"{path} is outside the working directory")
    return full


def _rel(full: Path) -> str:
    return full.relative_to(_root[0].resolve()).as_posix()


def read_file(path: str, offset: int = 1, limit: int = 2000) -> str:
    """Read a text file: up to `limit` lines from line `offset`, numbered like cat -n."""
    lines = _inside(path).read_text(encoding="utf-8", errors="replace").splitlines()
    shown = [
        f"{n:>6}\t{lines[n - 1]}" for n in range(offset, min(len(lines), offset + limit - 1) + 1)
    ]
    last = offset + len(shown) - 1
    if last < len(lines):
        shown.append(
            f"\n[showing lines {offset}-{last} of {len(lines)}; "
            f"call read_file with offset={last + 1} to read more]"
        )
    return "\n".join(shown)


def glob(pattern: str, path: str | None = None) -> str:
    """Find files by name pattern (`**` spans directories); paths sorted, one a line."""
    base = _inside(path)
    found = sorted(_rel(p) for p in base.glob(pattern) if p.is_file())
    return "\n".join(found) if found else f"No files match {pattern!r}."


def grep(
    pattern: str, path: str | None = None, include: str | None = None, max_results: int = 100
) -> str:
    """Search file contents with a Python regex; one `path:line_number:line` per match."""
    regex = re.compile(pattern)
    base = _inside(path)
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
    matches: list[str] = []
    for file in files:
        if include and not fnmatch.fnmatch(file.name, include):
            continue
        text = file.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                matches.append(f"{_rel(file)}:{number}:{line}")
                if len(matches) >= max_results:
                    return "\n".join(matches)
    return "\n".join(matches) if matches else f"No matches for {pattern!r}."


PEER_TOOLS = (read_file, grep, glob)


def request_sizes(rows: list[list[Any]]) -> dict[str, float]:
    """Median, smallest and largest body (bytes) of the sub-agents' requests in a run's
    server log (rows: [arrival, done, role, turn, stream, bytes])."""
    sizes = sorted(r[5] for r in rows if len(r) > 5 and r[2] != "main")
    if not sizes:
        return {}
    mid = len(sizes) // 2
    median = sizes[mid] if len(sizes) % 2 else (sizes[mid - 1] + sizes[mid]) / 2
    return {"median": float(median), "min": float(sizes[0]), "max": float(sizes[-1])}
