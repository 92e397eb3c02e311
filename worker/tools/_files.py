"""The built-in file tools: read_file, write_file, edit_file, glob and grep.

Every path goes through ``resolve_inside`` first, so these tools only ever touch files
under the working directory. Blocking file IO runs in a worker thread so the agent's
event loop (heartbeats, other tool calls, cancellation) keeps turning.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import stat
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, BinaryIO, TypeVar

import msgspec
from agentcell.worker.tools._base import Tool, ToolContext, ToolError, ToolOutput, truncate_output
from agentcell.worker.tools._glob import GlobMatcher, _split_literal_prefix
from agentcell.worker.tools._paths import (
    is_hidden,
    is_inside,
    open_beneath,
    real_root,
    refuse_hard_links,
    relative_to_root,
    resolve_inside,
    walk_files,
)
from msgspec import Meta

#: read_file cuts a line longer than this (minified code would otherwise flood the output).
MAX_LINE_CHARS = 2000
#: grep shows at most this much of a matching line.
GREP_LINE_CHARS = 500
#: glob lists at most this many files.
GLOB_MAX_RESULTS = 500
#: A file with a NUL byte in its first 8 KiB is treated as binary.
BINARY_SNIFF_BYTES = 8192

_T = TypeVar("_T")


async def _in_thread(fn: Callable[[threading.Event], _T]) -> _T:
    """Run a long scan in a worker thread; if the caller is cancelled, tell it to stop.

    A thread cannot be interrupted, so the scan checks the event between files: a
    cancelled glob or grep stops soon instead of scanning the whole tree for nobody.
    """
    stop = threading.Event()
    try:
        return await asyncio.to_thread(fn, stop)
    finally:
        stop.set()


async def finish_output(text: str, ctx: ToolContext) -> str:
    """``truncate_output``, off the event loop when it has to save the full text."""
    if len(text) <= ctx.max_output_chars:
        return text
    return await asyncio.to_thread(truncate_output, text, ctx)


def _stat(path: Path, shown: str, *, missing_hint: str = "") -> os.stat_result:
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"file not found: {shown}{missing_hint}") from None
    except OSError as exc:
        raise ToolError(f"cannot access {shown}: {exc.strerror}") from None


def _require_regular(st: os.stat_result, shown: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory, not a file; use glob to list the files in it")
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device would block or never end: refuse rather than hang.
        raise ToolError(f"{shown} is not a regular file (it is a device, FIFO or socket)")


def _open_beneath(
    workdir: Path, path: Path, shown: str, *, write: bool, also: Sequence[Path] = ()
) -> BinaryIO:
    """``path`` (from ``resolve_inside``) opened beneath the root it was found under (the
    working directory, or one of ``also``: an agent's memory folder): a symlink swapped in
    since the check is refused, never followed. Writes refuse hard links and truncate only
    once the file is known to be one to write."""
    flags = (os.O_WRONLY | os.O_CREAT) if write else os.O_RDONLY
    root = next(
        (r for r in map(real_root, (workdir, *also)) if is_inside(r, str(path))),
        real_root(workdir),
    )
    try:
        # O_NONBLOCK: a FIFO swapped in opens at once (and is refused below), not never.
        fd = open_beneath(root, str(path), flags | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV):
            raise ToolError(
                f"cannot open {shown}: a symlink or '..' appeared in its path after it was "
                "checked (something is changing it); file tools do not follow it"
            ) from None
        raise ToolError(f"cannot {'write' if write else 'read'} {shown}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        _require_regular(st, shown)
        if write:
            refuse_hard_links(st, shown)
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb" if write else "rb")


def _looks_binary(head: bytes) -> bool:
    return b"\0" in head


# --- read_file ----------------------------------------------------------------------


def _refuse_hidden(shown: str, ctx: ToolContext, done: str) -> None:
    """The rules judged the path as written; where a link leads is judged here: a file a
    read rule covers is not read, written or edited through another name."""
    if is_hidden(ctx.hidden, str(resolve_inside(ctx.workdir, shown, ctx.extra_roots))):
        raise ToolError(f"{shown} leads to a file a read rule covers: not {done}")


class ReadFileArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    path: Annotated[
        str,
        Meta(description="File to read: relative to the working directory, or absolute."),
    ]
    offset: Annotated[
        int, Meta(ge=1, description="1-based line number to start reading at (default 1).")
    ] = 1
    limit: Annotated[
        int, Meta(ge=1, description="Maximum number of lines to return (default 2000).")
    ] = 2000


class ReadFile(Tool):
    name = "read_file"
    description = (
        "Read a text file. Lines are numbered like `cat -n` (number, tab, text); the "
        "numbers are not part of the file. Reads up to `limit` lines from `offset`; "
        f"lines longer than {MAX_LINE_CHARS} characters are cut. Binary files are refused."
    )
    Args = ReadFileArgs
    concurrency_safe = True
    read_only = True

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        _refuse_hidden(args.path, ctx, "read")
        text = await asyncio.to_thread(
            _read_numbered, ctx.workdir, args.path, args.offset, args.limit, ctx.extra_roots
        )
        return await finish_output(text, ctx)


#: A line is read in pieces of at most this many bytes: a 300 MiB file of one line took
#: a sub-agent to 766 MiB when read whole (bytes, then its decoded text).
LINE_PIECE_BYTES = 1 << 20
#: A match that spans two pieces of a long line is found if it is at most this long.
PIECE_OVERLAP_BYTES = 4096


def bounded_lines(f: BinaryIO) -> Iterator[tuple[bytes, int]]:
    """Each line's first piece (at most ``LINE_PIECE_BYTES``) and how many bytes of it
    were left unread after that piece (skipped in bounded reads)."""
    while head := f.readline(LINE_PIECE_BYTES):
        rest = 0
        if not head.endswith(b"\n"):
            while more := f.readline(LINE_PIECE_BYTES):
                rest += len(more)
                if more.endswith(b"\n"):
                    break
        yield head, rest


def line_pieces(f: BinaryIO) -> Iterator[Iterator[bytes]]:
    """Each line as an iterator of its pieces (at most ``LINE_PIECE_BYTES`` each, each
    after the first starting with the last ``PIECE_OVERLAP_BYTES`` of the one before).
    Consume (or abandon) a line's pieces before asking for the next line."""
    done = False

    def pieces(first: bytes) -> Iterator[bytes]:
        nonlocal done
        piece = first
        yield piece
        while not piece.endswith(b"\n"):
            more = f.readline(LINE_PIECE_BYTES)
            if not more:
                done = True
                return
            piece = piece[-PIECE_OVERLAP_BYTES:] + more
            yield piece

    while not done and (first := f.readline(LINE_PIECE_BYTES)):
        line = pieces(first)
        yield line
        for _ in line:  # what the caller left of this line is skipped here
            pass


def _number_line(lineno: int, raw: bytes, rest: int = 0) -> str:
    """One numbered line for read_file; ``rest``: bytes of it past the piece read."""
    text = raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
    cut = len(text) > MAX_LINE_CHARS
    if cut or rest:
        more = [f"{len(text) - MAX_LINE_CHARS} more characters"] if cut else []
        more += [f"{rest} more bytes"] if rest else []
        text = f"{text[:MAX_LINE_CHARS]} [... line cut: {' and '.join(more)}]"
    return f"{lineno:>6}\t{text}"


def _read_numbered(
    workdir: Path, shown: str, offset: int, limit: int, also: Sequence[Path] = ()
) -> str:
    path = resolve_inside(workdir, shown, also)
    st = _stat(path, shown, missing_hint=" (use glob to find files)")
    _require_regular(st, shown)
    if st.st_size == 0:
        return f"{shown} is empty (0 bytes)."
    last_wanted = offset + limit - 1
    out: list[str] = []
    try:
        with _open_beneath(workdir, path, shown, write=False, also=also) as f:
            if _looks_binary(f.read(BINARY_SNIFF_BYTES)):
                raise ToolError(
                    f"{shown} looks like a binary file (it contains NUL bytes); "
                    "read_file only shows text"
                )
            f.seek(0)
            seen = 0
            for raw, rest in bounded_lines(f):
                seen += 1
                if seen >= offset:
                    out.append(_number_line(seen, raw, rest))
                if seen >= last_wanted:
                    break
            # Count the remaining lines in big chunks rather than line by line: the
            # footer should give the length of a huge log without decoding all of it.
            rest_newlines, last_byte = 0, b"\n"
            while chunk := f.read(1 << 20):
                rest_newlines += chunk.count(b"\n")
                last_byte = chunk[-1:]
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
    total = seen + rest_newlines + (0 if last_byte == b"\n" else 1)
    if offset > total:
        raise ToolError(
            f"offset {offset} is past the end of {shown}, which has {total} "
            f"line{'s' if total != 1 else ''}"
        )
    shown_last = offset + len(out) - 1
    if shown_last < total:
        out.append(
            f"\n[showing lines {offset}-{shown_last} of {total}; "
            f"call read_file with offset={shown_last + 1} to read more]"
        )
    return "\n".join(out)


# --- write_file ---------------------------------------------------------------------


class WriteFileArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    path: Annotated[
        str,
        Meta(description="File to write: relative to the working directory, or absolute."),
    ]
    content: Annotated[str, Meta(description="The complete new content of the file.")]


class WriteFile(Tool):
    name = "write_file"
    description = (
        "Create a file or replace its whole content. Missing parent directories are "
        "created. To change part of an existing file, prefer edit_file."
    )
    Args = WriteFileArgs

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        _refuse_hidden(args.path, ctx, "written")
        try:
            data = args.content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(f"content is not valid Unicode text: {exc.reason}") from None
        return await asyncio.to_thread(_write, ctx.workdir, args.path, data, ctx.extra_roots)


def _write(workdir: Path, shown: str, data: bytes, also: Sequence[Path] = ()) -> str:
    path = resolve_inside(workdir, shown, also)
    try:
        st: os.stat_result | None = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror}") from None
    if st is not None:
        _require_regular(st, shown)
        refuse_hard_links(st, shown)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(
            f"cannot create {shown}: part of its parent path is a file, not a directory"
        ) from None
    except OSError as exc:
        raise ToolError(f"cannot create the directory for {shown}: {exc.strerror}") from None
    try:
        with _open_beneath(workdir, path, shown, write=True, also=also) as f:
            f.write(data)
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror}") from None
    if st is None:
        return f"Created {shown} ({len(data)} bytes)."
    return f"Overwrote {shown} ({len(data)} bytes; it had {st.st_size} bytes)."


# --- edit_file ----------------------------------------------------------------------


class EditFileArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    path: Annotated[
        str,
        Meta(description="File to edit: relative to the working directory, or absolute."),
    ]
    old_string: Annotated[
        str,
        Meta(
            description="Exact text to replace, including whitespace and indentation. "
            "Must occur exactly once unless replace_all is true."
        ),
    ]
    new_string: Annotated[str, Meta(description="Text to put in its place.")]
    replace_all: Annotated[
        bool, Meta(description="Replace every occurrence instead of exactly one.")
    ] = False


class EditFile(Tool):
    name = "edit_file"
    description = (
        "Replace exact text in an existing file. old_string must match the file exactly "
        "(copy it from read_file output without the line numbers) and occur exactly once, "
        "unless replace_all is true."
    )
    Args = EditFileArgs

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        if not args.old_string:
            raise ToolError(
                "old_string is empty: give the exact text to replace "
                "(to create a file or replace all of it, use write_file)"
            )
        if args.old_string == args.new_string:
            raise ToolError("old_string and new_string are identical: there is nothing to change")
        # An edit that succeeds or fails tells whether old_string is in the file: a link to
        # a file no one may read would give it away a character at a time.
        _refuse_hidden(args.path, ctx, "edited")
        return await asyncio.to_thread(
            _edit,
            ctx.workdir,
            args.path,
            args.old_string,
            args.new_string,
            args.replace_all,
            also=ctx.extra_roots,
        )


def _edit(
    workdir: Path, shown: str, old: str, new: str, replace_all: bool, *, also: Sequence[Path] = ()
) -> str:
    path = resolve_inside(workdir, shown, also)
    st = _stat(path, shown, missing_hint=" (use write_file to create a file)")
    _require_regular(st, shown)
    refuse_hard_links(st, shown)
    try:
        with _open_beneath(workdir, path, shown, write=False, also=also) as f:
            data = f.read()
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Decoding leniently and writing back would corrupt the bytes that did not decode.
        raise ToolError(f"{shown} is not UTF-8 text; edit_file only edits text files") from None
    count = text.count(old)
    if count == 0 and "\n" in old and "\r\n" in text:
        # read_file shows CRLF lines without the \r, so the model's text has bare \n.
        crlf_old = old.replace("\r\n", "\n").replace("\n", "\r\n")
        if text.count(crlf_old):
            old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_string not found in {shown}; read the file again and copy the exact text, "
            "including whitespace and indentation"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {shown}; "
            "give more context to make it unique or set replace_all"
        )
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    try:
        with _open_beneath(workdir, path, shown, write=True, also=also) as f:
            f.write(updated.encode("utf-8"))
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror}") from None
    replaced = count if replace_all else 1
    return f"Replaced {replaced} occurrence{'s' if replaced != 1 else ''} in {shown}."


# --- glob ---------------------------------------------------------------------------


class GlobArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pattern: Annotated[
        str,
        Meta(
            description="Glob relative to the search directory, e.g. '**/*.py' (any depth), "
            "'src/*.ts' (one level), '*.{js,jsx}'."
        ),
    ]
    path: Annotated[
        str | None,
        Meta(description="Directory to search from (default: the working directory)."),
    ] = None


class Glob(Tool):
    name = "glob"
    description = (
        "Find files by name pattern. `*` and `?` stay within one directory, `**` spans any "
        "number of directories, `{a,b}` gives alternatives; `*` also matches names starting "
        "with a dot. Returns file paths relative to the working directory, sorted by path, "
        f"at most {GLOB_MAX_RESULTS}. Version-control directories such as .git are skipped, "
        "and so are agentcell's records (.agentcell/) unless the search starts inside them."
    )
    Args = GlobArgs
    concurrency_safe = True
    read_only = True

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        prefix, rest = _split_literal_prefix(args.pattern.strip())
        matcher = GlobMatcher(rest, label=args.pattern)
        found = await _in_thread(
            lambda stop: _glob_scan(
                ctx.workdir, args.path, prefix, matcher, stop, hidden=ctx.hidden
            )
        )
        where = f" under {args.path}" if args.path else ""
        if not found:
            return f"No files match {args.pattern!r}{where}."
        lines = found[:GLOB_MAX_RESULTS]
        if len(found) > GLOB_MAX_RESULTS:
            lines.append(
                f"\n[showing the first {GLOB_MAX_RESULTS} of {len(found)} matching files; "
                "narrow the pattern or path to see the rest]"
            )
        return await finish_output("\n".join(lines), ctx)


def _glob_scan(
    workdir: Path,
    path: str | None,
    prefix: str,
    matcher: GlobMatcher,
    stop: threading.Event,
    *,
    hidden: Callable[[str], bool] | None = None,
) -> list[str]:
    """Files under ``path``/``prefix`` whose path below that start matches, sorted."""
    base = resolve_inside(workdir, path or ".")
    if not base.is_dir():
        what = "is a file, not a directory" if base.exists() else "does not exist"
        raise ToolError(f"path {path!r} {what}; glob searches a directory")
    # The literal prefix is a path like any other: confined, and possibly absent.
    # Joined to the model's own path, not ``base``, so a refusal quotes what it wrote.
    start = resolve_inside(workdir, os.path.join(path or "", prefix)) if prefix else base
    if not start.is_dir():
        return []
    root = real_root(workdir)
    found = []
    for full in walk_files(root, str(start), stop, matcher.max_depth, hidden):
        if matcher.matches(relative_to_root(str(start), full)):
            found.append(relative_to_root(root, full))
    return sorted(found)


# --- grep ---------------------------------------------------------------------------


class GrepArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pattern: Annotated[
        str, Meta(description="Python regular expression to search for, line by line.")
    ]
    path: Annotated[
        str | None,
        Meta(description="File or directory to search (default: the working directory)."),
    ] = None
    include: Annotated[
        str | None,
        Meta(
            description="Only search files whose name matches this glob, e.g. '*.py' or "
            "'*.{ts,tsx}' (a glob with '/' is matched against the path below `path`)."
        ),
    ] = None
    ignore_case: Annotated[bool, Meta(description="Match case-insensitively.")] = False
    max_results: Annotated[
        int, Meta(ge=1, le=5000, description="Stop after this many matching lines (default 100).")
    ] = 100


class Grep(Tool):
    name = "grep"
    description = (
        "Search file contents with a Python regular expression. Prints one line per match "
        "as `path:line_number:line`, paths relative to the working directory. Binary files, "
        "version-control directories and agentcell's records (.agentcell/, unless the search "
        "starts inside them) are skipped."
    )
    Args = GrepArgs
    concurrency_safe = True
    read_only = True

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        regex = _compile_regex(args.pattern, args.ignore_case)
        include = GlobMatcher(args.include) if args.include else None
        shown = args.path or "the working directory"
        matches, capped = await _in_thread(
            lambda stop: _grep_scan(
                ctx.workdir,
                args.path,
                regex,
                include,
                limit=args.max_results,
                stop=stop,
                hidden=ctx.hidden,
            )
        )
        if not matches:
            return f"No matches for {args.pattern!r} in {shown}."
        if capped:
            matches.append(
                f"\n[stopped after {args.max_results} matches; narrow the pattern, path or "
                "include, or raise max_results]"
            )
        return await finish_output("\n".join(matches), ctx)


def _grep_scan(
    workdir: Path,
    path: str | None,
    regex: re.Pattern[str],
    include: GlobMatcher | None,
    *,
    limit: int,
    stop: threading.Event,
    hidden: Callable[[str], bool] | None = None,
) -> tuple[list[str], bool]:
    """Matching lines as ``relpath:lineno:line``, and whether ``limit`` cut the search."""
    target = resolve_inside(workdir, path or ".")
    root = real_root(workdir)
    matches: list[str] = []
    if not target.is_dir():
        # One file named explicitly: searched whatever its name (include does not apply).
        st = _stat(target, str(path), missing_hint=" (use glob to find files)")
        _require_regular(st, str(path))
        if _is_binary_file(target, str(path)):
            raise ToolError(f"{path} is a binary file; grep only searches text")
        if is_hidden(hidden, str(target)):  # a link to a file a read rule covers
            raise ToolError(f"{path} is covered by a read rule: grep does not search it")
        shown = relative_to_root(root, str(target))
        capped = _grep_file(str(target), shown, regex, matches=matches, limit=limit, stop=stop)
        return matches, capped
    by_path = include is not None and "/" in include.pattern
    for full in walk_files(root, str(target), stop, hidden=hidden):
        if include is not None:
            rel = relative_to_root(str(target), full) if by_path else os.path.basename(full)
            if not include.matches(rel):
                continue
        shown = relative_to_root(root, full)
        if _grep_file(full, shown, regex, matches=matches, limit=limit, stop=stop):
            return matches, True
    return matches, False


def _is_binary_file(path: Path, shown: str) -> bool:
    try:
        with open(path, "rb") as f:
            return _looks_binary(f.read(BINARY_SNIFF_BYTES))
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror}") from None


def _compile_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    try:
        with warnings.catch_warnings():
            # Some odd patterns only warn (e.g. a possible nested set); that is not the
            # model's concern and must not escape as an exception under strict filters.
            warnings.simplefilter("ignore")
            return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None


def _first_match(
    pieces: Iterator[bytes], regex: re.Pattern[str], stop: threading.Event
) -> str | None:
    """The line as shown if a piece of it matches: whole when short, else the
    ``GREP_LINE_CHARS`` around the match."""
    for number, piece in enumerate(pieces):
        text = piece.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
        found = regex.search(text)
        if found is None:
            if number % 64 == 63 and stop.is_set():
                return None
            continue
        if number == 0 and len(text) <= GREP_LINE_CHARS and len(piece) < LINE_PIECE_BYTES:
            return text
        start = max(0, found.start() - GREP_LINE_CHARS // 5)
        window = text[start : start + GREP_LINE_CHARS]
        where = f"(from character {start}) " if number == 0 else "(far into the line) "
        return f"{where if start else ''}{window} [... line cut]"
    return None


def _grep_file(
    path: str,
    shown: str,
    regex: re.Pattern[str],
    *,
    matches: list[str],
    limit: int,
    stop: threading.Event,
) -> bool:
    """Append ``shown:lineno:line`` for each match; True once ``limit`` is reached."""
    try:
        with open(path, "rb") as f:
            if _looks_binary(f.read(BINARY_SNIFF_BYTES)):
                return False  # skipped in a directory search, like grep -I
            f.seek(0)
            for lineno, pieces in enumerate(line_pieces(f), 1):
                if lineno % 10_000 == 0 and stop.is_set():
                    return False  # cancelled in the middle of a big file
                line = _first_match(pieces, regex, stop)
                if line is None:
                    continue
                matches.append(f"{shown}:{lineno}:{line}")
                if len(matches) >= limit:
                    return True
    except OSError:
        pass  # unreadable (permissions, vanished): skip it like grep -s
    return False
