"""Glob patterns as the glob and grep tools take them: ``**``, ``{a,b}`` alternatives,
``[...]`` classes, matched against paths relative to the working directory."""

from __future__ import annotations

import re

from agentcell.worker.tools._base import ToolError

_MAGIC = re.compile(r"[*?[{]")
_MAX_BRACE_ALTERNATIVES = 256


def _expand_braces(pattern: str) -> list[str]:
    """``"*.{ts,tsx}"`` → ``["*.ts", "*.tsx"]`` (nested groups too; ``{x}`` stays literal)."""
    depth, start = 0, -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                options = _split_top_level_commas(pattern[start + 1 : i])
                head, tail = pattern[:start], pattern[i + 1 :]
                if len(options) < 2:
                    return [head + pattern[start : i + 1] + rest for rest in _expand_braces(tail)]
                expanded: list[str] = []
                for option in options:
                    expanded.extend(_expand_braces(head + option + tail))
                    if len(expanded) > _MAX_BRACE_ALTERNATIVES:
                        raise ToolError(
                            f"a {{a,b}} group in {pattern!r} expands to more than "
                            f"{_MAX_BRACE_ALTERNATIVES} alternatives; use fewer groups"
                        )
                return expanded
    return [pattern]


def _split_top_level_commas(body: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in body:
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        current.append(ch)
    parts.append("".join(current))
    return parts


def _segment_regex(segment: str) -> str:
    """One path segment of a glob: ``*`` and ``?`` never match ``/``."""
    out: list[str] = []
    i, n = 0, len(segment)
    while i < n:
        ch = segment[i]
        if ch == "*":
            while i + 1 < n and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            j = i + 1
            if j < n and segment[j] in "!^":
                j += 1
            if j < n and segment[j] == "]":
                j += 1  # a leading ] is a member, not the end
            while j < n and segment[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(ch))  # unclosed: a literal [
            else:
                body = segment[i + 1 : j]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                # Escape all but '-' (ranges): keeps [, &, ~, | from meaning set operations.
                members = "".join(c if c == "-" else re.escape(c) for c in body)
                out.append(f"[^/{members}]" if negate else f"[{members}]")
                i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _glob_regex(pattern: str, label: str) -> tuple[str, int | None]:
    """The regex for one brace-free glob, and its depth (None when ``**`` makes it any)."""
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    if ".." in segments:
        raise ToolError(
            f"pattern {label!r} uses '..' after a wildcard; "
            "to search another directory pass it as path"
        )
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
        else:
            parts.append(_segment_regex(segment) + ("" if last else "/"))
    depth = None if "**" in segments else len(segments)
    return "".join(parts), depth


class GlobMatcher:
    """A glob (``*``, ``?``, ``[...]``, ``{a,b}``, ``**`` for any depth) over relative paths."""

    def __init__(self, pattern: str, *, label: str | None = None) -> None:
        """``label``: how errors name the pattern (the model's whole pattern, say)."""
        self.pattern = pattern
        label = pattern if label is None else label
        compiled = [_glob_regex(p, label) for p in _expand_braces(pattern)]
        if not any(regex for regex, _ in compiled):
            raise ToolError(
                f"pattern {label!r} does not name any files: give a glob such as "
                "'**/*.py' or 'src/*'"
            )
        self.regex = re.compile("|".join(f"(?:{regex})" for regex, _ in compiled), re.DOTALL)
        depths = [depth for _, depth in compiled]
        # How deep a walk must go: files at most this many segments below the start.
        self.max_depth = None if None in depths else max(d for d in depths if d is not None)

    def matches(self, relpath: str) -> bool:
        return self.regex.fullmatch(relpath) is not None


def _split_literal_prefix(pattern: str) -> tuple[str, str]:
    """``"src/app/**/*.ts"`` → ``("src/app", "**/*.ts")``: the walk can start at the prefix."""
    segments = pattern.split("/")
    literal: list[str] = []
    for segment in segments[:-1]:
        if _MAGIC.search(segment):
            break
        literal.append(segment)
    prefix = "/".join(literal)
    if pattern.startswith("/") and not prefix:
        prefix = "/"
    return prefix, "/".join(segments[len(literal) :])
