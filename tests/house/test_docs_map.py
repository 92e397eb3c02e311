"""The docs stay a map of the code as it is: their sizes stay within bounds, and every
repository path and every test they name (in backticks) exists.

Checked: README.md, docs/*.md and bench/README.md (bench/HISTORY.md is a log of what
was measured when, and keeps the names of its day). Fenced code blocks are examples,
not references, and are skipped.

A path is a backticked word that starts at a folder of this repository (`worker/`,
`tests/`, `bench/`, …) or of a layer (`delegation/_relay.py` for
`orchestrator/delegation/_relay.py`, `models/_gate.py` for `worker/models/_gate.py`), or
a bare module or test file (`_landlock.py`, `test_sandbox.py`), which must exist
somewhere in the layers, tests/ or bench/. A test is `test_x.py::test_y` (the file under
tests/ unless a path is given; `[params]` stripped), and `::test_z` or `…::test_z` later
in the same section names another test of the last file named there.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from places import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
LAYERS = ("protocol", "worker", "orchestrator", "agentcell")
#: Folders whose every path the docs name is checked; under any other folder of the
#: repository or a layer (`scripts/`, `config/`), only Python files are: a word such as
#: `config/app.toml` is a user's file in an example.
CHECKED_ROOTS = (*LAYERS, "tests", "bench", "docs", "mutants", "fuzz")
#: Made by running something (`make bench`), absent from a fresh clone.
GENERATED = ("bench/out",)
#: Folders a path may be written relative to, besides the repository's root.
BASES = ("", "tests/", "worker/", "orchestrator/", "bench/")
#: The most lines each of these may have.
SIZE_CAPS = {"docs/architecture.md": 400, "bench/README.md": 450, "README.md": 600}

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", flags=re.S | re.M)
_SPAN = re.compile(r"(`+)(.+?)\1", flags=re.S)
_WORD = re.compile(r"[A-Za-z0-9_.*-]+(?:/[A-Za-z0-9_.*-]*)*")
_TEST_REF = re.compile(r"(?:([\w./-]*test_\w*\.py)|(?:^|(?<=\s))(?:…|\.\.\.)?)::(\w+)(…|\.\.\.)?")
_TEST_FILE = re.compile(r"^(?:[\w./-]*/)?test_\w*\.py$")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@functools.cache
def _first_components() -> frozenset[str]:
    """Top-level entries of the repository and every package folder inside the layers."""
    names = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}
    for layer in LAYERS:
        for init in (ROOT / layer).rglob("__init__.py"):
            names.add(init.parent.name)
    return frozenset(names)


@functools.cache
def _basenames() -> frozenset[str]:
    found: set[str] = set()
    for top in (*LAYERS, "tests", "bench", "mutants", "fuzz", "scripts"):
        for path in (ROOT / top).rglob("*"):
            if "__pycache__" not in path.parts:
                found.add(path.name)
    return frozenset(found)


def _is_repo_path(word: str) -> bool:
    if word.startswith((".", "-")) or word.endswith("."):
        return False
    first, name = word.split("/", 1)[0], word.rsplit("/", 1)[-1]
    if "/" in word and first in CHECKED_ROOTS:
        return True
    if "/" in word and first in _first_components():
        return name.endswith(".py") or "." not in name
    return name.endswith(".py") and name.startswith(("_", "test_"))


def _exists(word: str) -> bool:
    if word.startswith(GENERATED):
        return True
    if "/" not in word and not any(c in word for c in "*?["):
        return word in _basenames()
    word = word.rstrip("/")
    if re.search(r"/_?\w+\.\w+$", word) and not word.endswith(".py"):
        # `delegation/_hooks.condition_met`: a name in a module
        return _exists(word.rsplit(".", 1)[0] + ".py") or _exists_as_written(word)
    return _exists_as_written(word)


def _exists_as_written(word: str) -> bool:
    for base in BASES:
        if any(c in word for c in "*?["):
            if any(ROOT.glob(base + word)):
                return True
        elif (ROOT / (base + word)).exists():
            return True
    return False


@functools.cache
def _names_in(test_file: Path) -> frozenset[str]:
    """Functions and classes defined anywhere in the file, and module-level names
    assigned (a state machine's ``TestCase``)."""
    tree = ast.parse(test_file.read_text(encoding="utf-8"))
    names = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return frozenset(names)


def _test_file(word: str) -> Path | None:
    """The test file a doc names: by its path, or by its name alone (test files' names
    are unique across tests/'s folders)."""
    if (ROOT / word).is_file():
        return ROOT / word
    if "/" not in word:
        found = sorted((ROOT / "tests").rglob(word))
        return found[0] if found else None
    return None


def _spans(doc: Path) -> Iterator[tuple[int, int, str]]:
    """(line number, section number, inline code) in order; a section starts at each
    heading, and fenced blocks are left out."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), doc.read_text(encoding="utf-8"))
    starts = [0, *(m.start() for m in re.finditer(r"^#", text, flags=re.M))]
    for match in _SPAN.finditer(text):
        section = bisect.bisect_right(starts, match.start())
        yield text.count("\n", 0, match.start()) + 1, section, match.group(2)


def problems(doc: Path, shown: str | None = None) -> list[str]:
    """One line per wrong reference: ``file:line: `what` why``."""
    found: list[str] = []
    where = shown or _rel(doc)
    current: Path | None = None
    section = 0
    for number, this_section, code in _spans(doc):
        if this_section != section:
            section, current = this_section, None
        for word in _WORD.findall(code):
            word = word.rstrip(":")
            if _is_repo_path(word) and not _exists(word):
                found.append(f"{where}:{number}: `{word}` names no file or folder of the repo")
        words = code.split()
        if len(words) == 1 and _TEST_FILE.match(words[0]):
            current = _test_file(words[0]) or current
        for ref in _TEST_REF.finditer(code):
            file_word, name, cut = ref.groups()
            if file_word:
                current = _test_file(file_word)
                if current is None:
                    found.append(f"{where}:{number}: `{file_word}`: no such test file")
                    continue
            if current is None:
                found.append(f"{where}:{number}: `::{name}` follows no test file in its section")
                continue
            if cut:
                found.append(f"{where}:{number}: `{name}…` is cut short: write the test's name")
            elif name not in _names_in(current):
                found.append(f"{where}:{number}: `{name}` is not a test of {_rel(current)}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_path_and_test_a_doc_names_exists(doc: Path) -> None:
    wrong = problems(doc)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("name", "cap"), sorted(SIZE_CAPS.items()))
def test_the_map_pages_stay_within_their_size(name: str, cap: int) -> None:
    lines = len((ROOT / name).read_text(encoding="utf-8").splitlines())
    assert lines <= cap, f"{name} has {lines} lines, at most {cap}: move detail to a docs/ page"


def test_the_checker_catches_a_missing_path_and_test(tmp_path: Path) -> None:
    """The checker itself: a path, a test and a continuation that do not exist are each
    named with their line; real ones pass."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# A\n\n"
        "`worker/_no_such.py` and `protocol/_codec.py`\n"
        "`test_docs_map.py::test_every_path_and_test_a_doc_names_exists`, `::test_nope`\n"
        "`test_docs_map.py::test_cut…`\n\n"
        "# B\n\n`::test_orphan`\n\n```text\n`worker/_in_a_fence.py`\n```\n"
    )
    wrong = [line.split(": ", 1)[1] for line in problems(doc, shown="doc.md")]
    assert wrong == [
        "`worker/_no_such.py` names no file or folder of the repo",
        "`test_nope` is not a test of tests/house/test_docs_map.py",
        "`test_cut…` is cut short: write the test's name",
        "`::test_orphan` follows no test file in its section",
    ], wrong
