"""The built-in tools: confinement of file tools, their behaviour, and bash's process hygiene."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from agentcell.worker.child import _proc
from agentcell.worker.tools import Tool, ToolContext, ToolError, ToolOutput, _files
from agentcell.worker.tools._bash import HEAD_BYTES, TAIL_BYTES, Bash
from agentcell.worker.tools._builtin import BUILTIN_TOOL_NAMES, builtin_tools
from agentcell.worker.tools._files import EditFile, Glob, GlobMatcher, Grep, ReadFile, WriteFile
from agentcell.worker.tools._paths import resolve_inside
from tool_calls import call, ctx_for

# --- helpers ------------------------------------------------------------------------


async def text_of(tool: Tool, ctx: ToolContext, **arguments: Any) -> str:
    result = await call(tool, ctx, **arguments)
    assert not result.is_error, result.content
    return result.content


async def poll(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for an observable condition (a file appearing, a process dying)."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def wait_gone(pid: int) -> None:
    # A SIGKILLed process dies asynchronously; a zombie counts as gone.
    await poll(lambda: not _proc.is_alive(pid))


def kill_sleepers(pids: list[int]) -> None:
    """Test cleanup: kill the `sleep` processes a test started, if they are still there."""
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.name() == "sleep":  # never signal a reused pid
                proc.kill()


def real(path: Path) -> str:
    return os.path.realpath(path)


# --- confinement ----------------------------------------------------------------------


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A workdir with links in and out, a sibling "outside" dir and a secret next to it."""
    work = tmp_path / "work"
    outside = tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (tmp_path / "secret").write_text("TOP SECRET\n")
    (work / "inside.txt").write_text("hello SECRET\n")
    (work / "sub" / "a.txt").write_text("in sub\n")
    (work / "link_out_file").symlink_to(outside / "secret.txt")
    (work / "link_out_dir").symlink_to(outside)
    (work / "link_in_file").symlink_to("inside.txt")
    (work / "link_in_dir").symlink_to(work / "sub")
    return work, outside


ESCAPES = [
    "../secret",
    "sub/../../secret",
    "/etc/passwd",
    "OUTSIDE/secret.txt",  # the absolute path of a file in a sibling dir
    "link_out_file",
    "link_out_dir/secret.txt",
    "link_out_dir",
    "/proc/self/root/etc/passwd",
    "/proc/self/cwd/../..",
]

FILE_TOOLS: dict[str, Callable[[str], tuple[Tool, dict[str, Any]]]] = {
    "read_file": lambda p: (ReadFile(), {"path": p}),
    "write_file": lambda p: (WriteFile(), {"path": p, "content": "pwned"}),
    "edit_file": lambda p: (
        EditFile(),
        {"path": p, "old_string": "TOP SECRET", "new_string": "pwned"},
    ),
    "glob": lambda p: (Glob(), {"pattern": "*", "path": p}),
    "grep": lambda p: (Grep(), {"pattern": "SECRET", "path": p}),
}


@pytest.mark.parametrize("tool_name", list(FILE_TOOLS))
@pytest.mark.parametrize("escape", ESCAPES)
async def test_every_file_tool_refuses_paths_outside_the_workdir(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tool_name: str, escape: str
) -> None:
    work, outside = layout
    # A safety net, not the thing under test: if confinement ever broke, the test must
    # fail without writing to /etc/passwd (tests may run as root).
    monkeypatch.setattr(_files, "open", _must_not_open, raising=False)
    path = escape.replace("OUTSIDE", str(outside))
    tool, arguments = FILE_TOOLS[tool_name](path)
    with pytest.raises(ToolError, match="outside the working directory") as caught:
        await call(tool, ctx_for(work), **arguments)
    assert str(work) in str(caught.value)
    assert repr(path) in str(caught.value)
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert (work.parent / "secret").read_text() == "TOP SECRET\n"


def _must_not_open(*args: object) -> None:
    raise AssertionError(f"a file was opened for a path that should have been refused: {args}")


async def test_refusal_names_where_a_symlink_leads(layout: tuple[Path, Path]) -> None:
    work, outside = layout
    with pytest.raises(ToolError) as caught:
        await call(ReadFile(), ctx_for(work), path="link_out_file")
    assert f"resolves to {outside / 'secret.txt'}" in str(caught.value)


@pytest.mark.parametrize(
    "path", ["inside.txt", "ABS/inside.txt", "link_in_file", "./sub/../inside.txt"]
)
async def test_paths_inside_the_workdir_are_allowed(layout: tuple[Path, Path], path: str) -> None:
    work, _ = layout
    ctx = ctx_for(work)
    path = path.replace("ABS", str(work))
    assert "hello SECRET" in await text_of(ReadFile(), ctx, path=path)
    assert "SECRET" in await text_of(Grep(), ctx, pattern="SECRET", path=path)
    await text_of(EditFile(), ctx, path=path, old_string="hello", new_string="bye")
    assert (work / "inside.txt").read_text() == "bye SECRET\n"
    await text_of(WriteFile(), ctx, path=path, content="new\n")
    assert (work / "inside.txt").read_text() == "new\n"
    assert (work / "link_in_file").is_symlink()  # written through the link, not replaced


async def test_directory_symlink_pointing_inside_is_allowed(layout: tuple[Path, Path]) -> None:
    work, _ = layout
    ctx = ctx_for(work)
    assert "in sub" in await text_of(ReadFile(), ctx, path="link_in_dir/a.txt")
    assert await text_of(Glob(), ctx, pattern="*", path="link_in_dir") == "sub/a.txt"
    assert await text_of(Glob(), ctx, pattern="*.txt", path=str(work / "sub")) == "sub/a.txt"


def test_resolve_inside_edge_cases(tmp_path: Path) -> None:
    assert resolve_inside(tmp_path, ".") == tmp_path.resolve()
    assert resolve_inside(tmp_path, "a/b/../c") == tmp_path.resolve() / "a" / "c"
    with pytest.raises(ToolError, match="path is empty"):
        resolve_inside(tmp_path, "")
    with pytest.raises(ToolError, match="path is empty"):
        resolve_inside(tmp_path, "  ")
    with pytest.raises(ToolError, match="NUL byte"):
        resolve_inside(tmp_path, "a\0b")
    # A workdir that is itself reached through a symlink still contains its files.
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    alias = tmp_path / "alias"
    assert resolve_inside(alias, "x") == (tmp_path / "real" / "x").resolve()
    assert resolve_inside(alias, str(alias / "x")) == (tmp_path / "real" / "x").resolve()
    with pytest.raises(ToolError, match="outside"):
        resolve_inside(alias, str(tmp_path / "x"))


# --- argument parsing -----------------------------------------------------------------


def test_parse_args_reports_the_cause() -> None:
    with pytest.raises(ToolError, match="path"):
        ReadFile().parse_args("{}")
    with pytest.raises(ToolError, match="bogus"):
        ReadFile().parse_args('{"path": "x", "bogus": 1}')
    with pytest.raises(ToolError, match="offset"):
        ReadFile().parse_args('{"path": "x", "offset": 0}')
    with pytest.raises(ToolError, match="timeout_s"):
        Bash().parse_args('{"command": "true", "timeout_s": 601}')
    with pytest.raises(ToolError, match="not valid JSON"):
        Grep().parse_args('{"pattern": ')
    args = Bash().parse_args('{"command": "true"}')
    assert args.timeout_s == 120


def test_builtin_tools() -> None:
    tools = builtin_tools()
    assert [t.name for t in tools] == list(BUILTIN_TOOL_NAMES)
    assert BUILTIN_TOOL_NAMES == ("read_file", "write_file", "edit_file", "glob", "grep", "bash")
    assert all(a is not b for a, b in zip(tools, builtin_tools(), strict=True))
    flags = {t.name: (t.read_only, t.concurrency_safe) for t in tools}
    assert flags == {
        "read_file": (True, True),
        "write_file": (False, False),
        "edit_file": (False, False),
        "glob": (True, True),
        "grep": (True, True),
        "bash": (False, False),
    }
    for tool in tools:
        schema = tool.spec().parameters
        assert schema["additionalProperties"] is False
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"


# --- read_file ----------------------------------------------------------------------


async def test_read_file_numbers_lines_like_cat_n(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("alpha\nbeta\r\n\ngamma")
    out = await text_of(ReadFile(), ctx_for(tmp_path), path="f.txt")
    assert out == "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma"


async def test_read_file_offset_and_limit(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ctx = ctx_for(tmp_path)
    out = await text_of(ReadFile(), ctx, path="f.txt", offset=3, limit=2)
    assert out.splitlines()[:2] == ["     3\tline 3", "     4\tline 4"]
    assert "showing lines 3-4 of 10" in out
    assert "offset=5" in out
    tail = await text_of(ReadFile(), ctx, path="f.txt", offset=9)
    assert tail == "     9\tline 9\n    10\tline 10"  # the end reached: no footer
    with pytest.raises(ToolError, match="offset 11 is past the end of f.txt, which has 10 lines"):
        await call(ReadFile(), ctx, path="f.txt", offset=11)


async def test_read_file_counts_lines_beyond_the_window(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("x\n" * 2999 + "last")
    out = await text_of(ReadFile(), ctx_for(tmp_path, max_output_chars=10**6), path="big.txt")
    assert out.count("\tx") == 2000
    assert "showing lines 1-2000 of 3000" in out


async def test_read_file_special_cases(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    (tmp_path / "empty.txt").write_bytes(b"")
    assert "empty.txt is empty" in await text_of(ReadFile(), ctx, path="empty.txt")
    with pytest.raises(ToolError, match="file not found: nope.txt"):
        await call(ReadFile(), ctx, path="nope.txt")
    (tmp_path / "blob.bin").write_bytes(b"PK\x03\x04\x00\x00data")
    with pytest.raises(ToolError, match="binary"):
        await call(ReadFile(), ctx, path="blob.bin")
    (tmp_path / "dir").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await call(ReadFile(), ctx, path="dir")
    os.mkfifo(tmp_path / "fifo")  # opening it would block forever
    with pytest.raises(ToolError, match="not a regular file"):
        await call(ReadFile(), ctx, path="fifo")


async def test_read_file_cuts_very_long_lines(tmp_path: Path) -> None:
    (tmp_path / "min.js").write_text("a" * 5000 + "\nshort\n")
    out = await text_of(ReadFile(), ctx_for(tmp_path), path="min.js")
    first, second = out.splitlines()
    assert first == "     1\t" + "a" * 2000 + " [... line cut: 3000 more characters]"
    assert second == "     2\tshort"


async def test_read_file_truncates_long_output_and_saves_it(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"row {i}\n" for i in range(500)))
    run_dir = tmp_path / "run"
    ctx = ctx_for(tmp_path, run_dir=run_dir, call_id="c7", max_output_chars=600)
    out = await text_of(ReadFile(), ctx, path="f.txt")
    assert "characters omitted" in out
    saved = run_dir / "tool-outputs" / "main-c7.txt"
    assert "run/tool-outputs/main-c7.txt" in out
    assert saved.read_text().count("\trow ") == 500


# --- write_file and edit_file -------------------------------------------------------------


async def test_write_then_read(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    out = await text_of(WriteFile(), ctx, path="new/deep/f.txt", content="one\ntwo\n")
    assert out == "Created new/deep/f.txt (8 bytes)."
    assert await text_of(ReadFile(), ctx, path="new/deep/f.txt") == "     1\tone\n     2\ttwo"
    out = await text_of(WriteFile(), ctx, path="new/deep/f.txt", content="é")
    assert out == "Overwrote new/deep/f.txt (2 bytes; it had 8 bytes)."
    assert (tmp_path / "new/deep/f.txt").read_text() == "é"


async def test_write_file_refusals(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    (tmp_path / "dir").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await call(WriteFile(), ctx, path="dir", content="x")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ToolError, match="part of its parent path is a file"):
        await call(WriteFile(), ctx, path="plain/child.txt", content="x")


async def test_edit_file(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    f = tmp_path / "f.py"
    f.write_text("x = 1\ny = 2\nx = 1\n")
    out = await text_of(EditFile(), ctx, path="f.py", old_string="y = 2", new_string="y = 3")
    assert out == "Replaced 1 occurrence in f.py."
    assert f.read_text() == "x = 1\ny = 3\nx = 1\n"
    with pytest.raises(ToolError, match="old_string not found in f.py"):
        await call(EditFile(), ctx, path="f.py", old_string="z = 0", new_string="z")
    with pytest.raises(ToolError, match="old_string occurs 2 times in f.py; give more context"):
        await call(EditFile(), ctx, path="f.py", old_string="x = 1", new_string="x = 9")
    assert f.read_text() == "x = 1\ny = 3\nx = 1\n"  # a refused edit changes nothing
    out = await text_of(
        EditFile(), ctx, path="f.py", old_string="x = 1", new_string="x = 9", replace_all=True
    )
    assert out == "Replaced 2 occurrences in f.py."
    assert f.read_text() == "x = 9\ny = 3\nx = 9\n"


async def test_edit_file_refusals(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    (tmp_path / "f.txt").write_text("abc")
    with pytest.raises(ToolError, match="identical"):
        await call(EditFile(), ctx, path="f.txt", old_string="abc", new_string="abc")
    with pytest.raises(ToolError, match="old_string is empty"):
        await call(EditFile(), ctx, path="f.txt", old_string="", new_string="x")
    with pytest.raises(ToolError, match="file not found: gone.txt.*write_file"):
        await call(EditFile(), ctx, path="gone.txt", old_string="a", new_string="b")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ToolError, match="not UTF-8"):
        await call(EditFile(), ctx, path="latin1.txt", old_string="caf", new_string="x")


async def test_edit_file_matches_crlf_files(tmp_path: Path) -> None:
    f = tmp_path / "win.txt"
    f.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    # The model saw the lines through read_file, without the \r.
    await text_of(
        EditFile(), ctx_for(tmp_path), path="win.txt", old_string="one\ntwo", new_string="1\n2"
    )
    assert f.read_bytes() == b"1\r\n2\r\nthree\r\n"


# --- glob ---------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    for rel in [
        "a.py",
        "b.txt",
        ".hidden.py",
        "src/c.py",
        "src/c.js",
        "src/deep/d.py",
        "lib/e.py",
        ".git/config",
        ".git/hooks/x.py",
    ]:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(f"contents of {rel}\nfoo = 1\nFOO = 2\n")
    (tmp_path / "outside.py").write_text("foo = 'outside'\n")
    (work / "out_link.py").symlink_to(tmp_path / "outside.py")
    (work / "in_link.py").symlink_to("a.py")
    (work / "out_dir").symlink_to(tmp_path)
    return work


async def glob_lines(work: Path, **arguments: Any) -> list[str]:
    return (await text_of(Glob(), ctx_for(work), **arguments)).splitlines()


async def test_glob_results(tree: Path) -> None:
    every_py = [".hidden.py", "a.py", "in_link.py", "lib/e.py", "src/c.py", "src/deep/d.py"]
    assert await glob_lines(tree, pattern="**/*.py") == every_py  # no .git, no out links
    assert await glob_lines(tree, pattern="*.py") == [".hidden.py", "a.py", "in_link.py"]
    assert await glob_lines(tree, pattern="src/**/*.py") == ["src/c.py", "src/deep/d.py"]
    assert await glob_lines(tree, pattern="src/*.{py,js}") == ["src/c.js", "src/c.py"]
    assert await glob_lines(tree, pattern="*.py", path="src") == ["src/c.py"]
    assert await glob_lines(tree, pattern="[ab].*") == ["a.py", "b.txt"]
    assert await glob_lines(tree, pattern="[!a].*") == ["b.txt"]
    assert await glob_lines(tree, pattern=f"{tree}/src/*.py") == ["src/c.py"]
    assert await glob_lines(tree, pattern="src/c.py") == ["src/c.py"]
    assert await glob_lines(tree, pattern="src") == ["No files match 'src'."]  # files only
    none = await text_of(Glob(), ctx_for(tree), pattern="**/*.rs")
    assert none == "No files match '**/*.rs'."


async def test_glob_refusals(tree: Path) -> None:
    ctx = ctx_for(tree)
    with pytest.raises(ToolError, match="path '..' is outside the working directory"):
        await call(Glob(), ctx, pattern="../*.py")
    with pytest.raises(ToolError, match="pattern 'src/' does not name any files"):
        await call(Glob(), ctx, pattern="src/")
    with pytest.raises(ToolError, match="outside the working directory"):
        await call(Glob(), ctx, pattern="/etc/*")
    with pytest.raises(ToolError, match="'..' after a wildcard"):
        await call(Glob(), ctx, pattern="*/../../*")
    with pytest.raises(ToolError, match="is a file, not a directory"):
        await call(Glob(), ctx, pattern="*", path="a.py")
    with pytest.raises(ToolError, match="does not exist"):
        await call(Glob(), ctx, pattern="*", path="missing")


async def test_glob_caps_results(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_files, "GLOB_MAX_RESULTS", 2)
    out = await text_of(Glob(), ctx_for(tree), pattern="**/*.py")
    assert out.splitlines()[:2] == [".hidden.py", "a.py"]
    assert "showing the first 2 of 6 matching files" in out


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "x/y/a.py", True),
        ("**", "x/y/a.py", True),
        ("src/**", "src/x/a", True),
        ("src/**", "lib/a", False),
        ("a?.txt", "ab.txt", True),
        ("a?.txt", "a/.txt", False),
        ("*.{ts,tsx}", "a.tsx", True),
        ("{src,lib}/*.{a,b}", "lib/x.b", True),
        ("{x}.py", "{x}.py", True),
        ("[[]x].py", "[x].py", True),
        ("a+b(c).py", "a+b(c).py", True),
    ],
)
def test_glob_matcher(pattern: str, path: str, matches: bool) -> None:
    assert GlobMatcher(pattern).matches(path) is matches


# --- grep ---------------------------------------------------------------------------


async def test_grep_results(tree: Path) -> None:
    ctx = ctx_for(tree)
    out = await text_of(Grep(), ctx, pattern=r"^foo = \d", include="*.py")
    assert out.splitlines() == [
        ".hidden.py:2:foo = 1",
        "a.py:2:foo = 1",
        "in_link.py:2:foo = 1",
        "lib/e.py:2:foo = 1",
        "src/c.py:2:foo = 1",
        "src/deep/d.py:2:foo = 1",
    ]  # no .git, and the link to outside.py (which also matches) skipped
    out = await text_of(Grep(), ctx, pattern="^foo", path="src", ignore_case=True)
    assert out.splitlines() == [
        "src/c.js:2:foo = 1",
        "src/c.js:3:FOO = 2",
        "src/c.py:2:foo = 1",
        "src/c.py:3:FOO = 2",
        "src/deep/d.py:2:foo = 1",
        "src/deep/d.py:3:FOO = 2",
    ]
    assert (
        await text_of(Grep(), ctx, pattern="contents", path="b.txt") == "b.txt:1:contents of b.txt"
    )
    assert await text_of(Grep(), ctx, pattern="zzz") == (
        "No matches for 'zzz' in the working directory."
    )


async def test_grep_caps_and_refusals(tree: Path) -> None:
    ctx = ctx_for(tree)
    out = await text_of(Grep(), ctx, pattern="foo", max_results=2)
    assert out.splitlines()[:2] == [".hidden.py:2:foo = 1", "a.py:2:foo = 1"]
    assert "stopped after 2 matches" in out
    with pytest.raises(ToolError, match=r"invalid regular expression '\(unclosed': missing \)"):
        await call(Grep(), ctx, pattern="(unclosed")
    with pytest.raises(ToolError, match="file not found: missing"):
        await call(Grep(), ctx, pattern="x", path="missing")


async def test_records_are_skipped_unless_the_search_starts_inside_them(tmp_path: Path) -> None:
    for rel in [
        "src/app.py",
        ".agentcell/runs/r1/a1.jsonl",
        ".agentcell/worktrees/a1/src/app.py",
        "pkg/.agentcell/runs/r2/main.jsonl",  # a nested project's records too
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("needle = 1\n")
    ctx = ctx_for(tmp_path)
    assert await text_of(Grep(), ctx, pattern="needle") == "src/app.py:1:needle = 1"
    assert await glob_lines(tmp_path, pattern="**/*") == ["src/app.py"]
    # Named explicitly (as path, or as the literal start of the pattern), they are read.
    assert (await text_of(Grep(), ctx, pattern="needle", path=".agentcell")).splitlines() == [
        ".agentcell/runs/r1/a1.jsonl:1:needle = 1",
        ".agentcell/worktrees/a1/src/app.py:1:needle = 1",
    ]
    assert await glob_lines(tmp_path, pattern=".agentcell/runs/**") == [
        ".agentcell/runs/r1/a1.jsonl"
    ]
    assert await glob_lines(tmp_path, pattern="*.jsonl", path="pkg/.agentcell/runs/r2") == [
        "pkg/.agentcell/runs/r2/main.jsonl"
    ]


async def test_grep_skips_binary_files(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"needle\x00\x01")
    (tmp_path / "text.txt").write_text("needle\n")
    ctx = ctx_for(tmp_path)
    assert await text_of(Grep(), ctx, pattern="needle") == "text.txt:1:needle"
    with pytest.raises(ToolError, match="binary"):
        await call(Grep(), ctx, pattern="needle", path="blob.bin")


async def test_grep_scans_off_the_event_loop_and_stops_when_cancelled(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()
    searched: list[str] = []
    original_file, original_scan = _files._grep_file, _files._grep_scan

    def parked_grep_file(path: str, *args: Any, **kwargs: Any) -> bool:
        searched.append(path)
        entered.set()
        # If the scan ran on the event loop, the test could never release it.
        assert release.wait(10), "grep blocked the event loop"
        return original_file(path, *args, **kwargs)

    def scan(*args: Any, **kwargs: Any) -> Any:
        try:
            return original_scan(*args, **kwargs)
        finally:
            finished.set()

    monkeypatch.setattr(_files, "_grep_file", parked_grep_file)
    monkeypatch.setattr(_files, "_grep_scan", scan)
    task = asyncio.create_task(call(Grep(), ctx_for(tree), pattern="foo"))
    try:
        await poll(entered.is_set)  # the loop keeps turning while the scan is parked
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()
    await poll(finished.is_set)
    assert len(searched) == 1  # told to stop: the other files were never opened


# --- bash ---------------------------------------------------------------------------


async def test_bash_output_and_exit_code(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, env={"PATH": os.environ["PATH"], "GREETING": "hi"})
    result = await call(Bash(), ctx, command="echo $GREETING; echo oops >&2; pwd -P; cat")
    assert result == ToolOutput(f"hi\noops\n{real(tmp_path)}")  # stdin is empty
    result = await call(Bash(), ctx, command="echo failing; exit 3")
    assert result == ToolOutput("failing\n[exit code 3]", is_error=True)
    result = await call(Bash(), ctx, command="true")
    assert result == ToolOutput("(no output)")
    result = await call(Bash(), ctx, command="kill -9 $$")
    assert result == ToolOutput("(no output)\n[killed by SIGKILL]", is_error=True)


async def test_bash_refusals(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="command is empty"):
        await call(Bash(), ctx_for(tmp_path), command="  ")
    with pytest.raises(ToolError, match="cannot start bash in .*missing"):
        await call(Bash(), ctx_for(tmp_path / "missing"), command="true")


async def test_bash_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pids: list[int] = []
    try:
        result = await call(
            Bash(), ctx_for(tmp_path), command="sleep 100 & echo $!; wait", timeout_s=0.3
        )
        pids.append(int(result.content.splitlines()[0]))
        assert result.is_error
        assert "timed out after 0.3 s" in result.content
        await wait_gone(pids[0])
    finally:
        kill_sleepers(pids)


async def test_bash_cancellation_kills_the_whole_group(tmp_path: Path) -> None:
    command = "sleep 100 & echo $! $$ > started.tmp && mv started.tmp started; wait"
    task = asyncio.create_task(call(Bash(), ctx_for(tmp_path), command=command))
    started = tmp_path / "started"
    pids: list[int] = []
    try:
        await poll(lambda: started.exists() or task.done())
        assert not task.done(), task.result()
        pids = [int(p) for p in started.read_text().split()]
        assert all(_proc.is_alive(pid) for pid in pids)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for pid in pids:  # the background sleep and bash itself
            await wait_gone(pid)
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        kill_sleepers(pids)


async def test_bash_does_not_hang_on_a_background_process_holding_the_pipe(
    tmp_path: Path,
) -> None:
    pids: list[int] = []
    try:
        result = await call(Bash(), ctx_for(tmp_path), command="sleep 100 & echo $!")
        pids.append(int(result.content.splitlines()[0]))
        assert not result.is_error
        assert "still holding the command's output open were killed" in result.content
        await wait_gone(pids[0])
    finally:
        kill_sleepers(pids)


async def test_bash_background_process_with_redirected_output_keeps_running(
    tmp_path: Path,
) -> None:
    pids: list[int] = []
    try:
        result = await call(
            Bash(), ctx_for(tmp_path), command="sleep 100 > /dev/null 2>&1 & echo $!"
        )
        pids.append(int(result.content))
        assert _proc.is_alive(pids[0])
        # Same session as the caller (the agent cleans up its session), own group.
        assert os.getsid(pids[0]) == os.getsid(0)
        assert os.getpgid(pids[0]) != os.getpgid(0)
    finally:
        kill_sleepers(pids)


async def test_bash_output_flood_is_capped(tmp_path: Path) -> None:
    result = await call(
        Bash(), ctx_for(tmp_path, max_output_chars=10**6), command="yes | head -c 50000000"
    )
    assert not result.is_error
    dropped = 50_000_000 - HEAD_BYTES - TAIL_BYTES
    assert f"[... {dropped} bytes of output omitted (not kept) ...]" in result.content
    assert len(result.content) < HEAD_BYTES + TAIL_BYTES + 600  # and the note on what went


async def test_bash_long_output_is_truncated_and_saved(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ctx = ctx_for(tmp_path, run_dir=run_dir, call_id="c1", max_output_chars=1000)
    result = await call(Bash(), ctx, command="seq 1 5000; exit 2")
    assert result.is_error
    assert result.content.endswith("\n[exit code 2]")  # the status survives truncation
    assert "run/tool-outputs/main-c1.txt" in result.content
    saved = (run_dir / "tool-outputs" / "main-c1.txt").read_text()
    assert saved == "\n".join(str(i) for i in range(1, 5001))
    assert len(result.content) < 1200


@pytest.fixture(autouse=True)
def _no_stray_children() -> Iterator[None]:
    """Whatever a test started must be gone (or a zombie awaiting its reaper) at its end."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    stray = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and _proc.is_alive(p.pid)
    ]
    for p in stray:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)
    assert not stray, stray


# -- custom tools crossing into a child process --------------------------------------------


def _shipped_tool_fn(path: str, count: int = 3, ctx: ToolContext | None = None) -> str:
    """Look at a path."""
    return f"{path} {count}"


def test_a_function_tool_travels_with_its_fields_and_schema_not_rebuilt_from_its_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dill
    from agentcell.worker.tools import _base, function_tool

    tool = function_tool(_shipped_tool_fn, read_only=True)
    blob = dill.dumps(tool)

    def no_resolving(*args: Any) -> Any:
        raise AssertionError("the child resolved the signature again")

    # A child that would rebuild the tool resolves annotations and generates the schema:
    # both are refused here, so only what travelled in the blob can make the tool.
    monkeypatch.setattr(_base, "_fields_from_signature", no_resolving)
    monkeypatch.setattr(_base.msgspec.json, "schema", no_resolving)
    copy = dill.loads(blob)
    assert copy.spec() == tool.spec() and copy.read_only and copy.name == tool.name
    args = copy.parse_args('{"path": "a.txt"}')
    assert (args.path, args.count) == ("a.txt", 3)
    with pytest.raises(ToolError, match="invalid arguments"):
        copy.parse_args('{"path": "a.txt", "other": 1}')
    ctx = ToolContext(workdir=Path("."))
    assert asyncio.run(copy.execute(args, ctx)) == "a.txt 3"
