"""The tool interface, argument validation, and the registry an agent sees.

A tool declares its arguments as a ``msgspec.Struct``: the JSON schema the model sees is
generated from it, and the model's JSON arguments are parsed and validated against it in
one step before ``execute`` runs. Tools made from typed functions (``function_tool``)
get a struct built from their signature.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import errno
import hashlib
import inspect
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, get_type_hints

import msgspec
from agentcell.worker.models._base import ToolSpec
from agentcell.worker.tools import _outputs


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutput:
    content: str
    is_error: bool = False


class ToolError(Exception):
    """Raised by a tool for a failure the model should see (and may recover from)."""


@dataclasses.dataclass(slots=True)
class ToolContext:
    """What a tool may know about where it runs."""

    workdir: Path  # file tools are confined to this directory
    run_dir: Path | None = None  # where long outputs are saved (None: not saved)
    agent_id: str = "main"
    call_id: str = ""
    env: dict[str, str] | None = None  # environment for subprocesses (None: inherit)
    max_output_chars: int = 30_000  # longer outputs are truncated (see truncate_output)
    # Run by a command's process between fork and exec (the sandbox's no-network wall).
    preexec: Callable[[], None] | None = None
    # Folders outside the workdir the file tools may reach too (the agent's memory folder).
    extra_roots: tuple[Path, ...] = ()
    # Files a folder walk (glob, grep) passes over, given the absolute path: those the
    # read rules cover (None: none).
    hidden: Callable[[str], bool] | None = None


class Tool(abc.ABC):
    """One capability an agent can call.

    Subclasses set ``name``, ``description`` and ``Args`` (a ``msgspec.Struct``), and
    implement ``execute``. ``concurrency_safe`` tools may run side by side with other
    safe calls of the same assistant message; ``read_only`` tools never change anything
    (the default permission policy allows them without asking).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[msgspec.Struct]]
    concurrency_safe: ClassVar[bool] = False
    read_only: ClassVar[bool] = False
    #: Exempt from the engine's per-tool timeout (a foreground sub-agent outlives it).
    long_running: ClassVar[bool] = False

    @abc.abstractmethod
    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        """Run with validated ``args`` (an instance of ``Args``)."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name, description=self.description, parameters=args_schema(self.Args)
        )

    def parse_args(self, arguments: str) -> Any:
        """Parse and validate the model's JSON arguments; raises ``ToolError`` with the cause."""
        return parse_args(self.name, self.Args, arguments)


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def parse_args(tool_name: str, args_type: type[msgspec.Struct], arguments: str) -> Any:
    decoder = _decoders.get(args_type)
    if decoder is None:
        decoder = _decoders[args_type] = msgspec.json.Decoder(args_type)
    try:
        return decoder.decode(arguments or "{}")
    except msgspec.ValidationError as exc:
        raise ToolError(f"invalid arguments for {tool_name}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ToolError(f"arguments for {tool_name} are not valid JSON: {exc}") from None


_schemas: dict[type, dict[str, Any]] = {}


def args_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of an ``Args`` struct, inlined at the top level (no ``$ref``)."""
    cached = _schemas.get(args_type)
    if cached is not None:
        return cached
    schema = msgspec.json.schema(args_type)
    defs: dict[str, Any] = schema.pop("$defs", {})
    ref = schema.get("$ref", "")
    top = dict(defs.pop(ref.rsplit("/", 1)[-1], schema)) if ref else schema
    top.pop("title", None)
    top.setdefault("properties", {})
    if defs:
        top["$defs"] = defs
    _schemas[args_type] = top
    return top


class FunctionTool(Tool):
    """A tool made from a typed (async or sync) function; see ``function_tool``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        concurrency_safe: bool = False,
        read_only: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__  # type: ignore[misc]
        self.description = description or inspect.getdoc(fn) or self.name  # type: ignore[misc]
        self.concurrency_safe = concurrency_safe  # type: ignore[misc]
        self.read_only = read_only  # type: ignore[misc]
        self._fields = _fields_from_signature(fn, self.name)
        self.Args = _struct_from_fields(self.name, self._fields)  # type: ignore[misc]
        self._wants_ctx = "ctx" in inspect.signature(fn).parameters

    def __reduce__(self) -> tuple[Any, ...]:
        # The Args struct is built at run time and cannot be pickled. What it is made of
        # travels instead — the fields as resolved here and the schema the model sees —
        # so that a child process does not resolve the annotations (get_type_hints
        # compiles string annotations), inspect the signature and generate the schema
        # again for every run: ~1 ms per tool in a fresh process.
        options = dict(
            name=self.name,
            description=self.description,
            concurrency_safe=self.concurrency_safe,
            read_only=self.read_only,
        )
        shipped = (self._fields, self._wants_ctx, args_schema(self.Args))
        return (_rebuild_function_tool, (self.fn, options, shipped))

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        kwargs = msgspec.structs.asdict(args)
        if self._wants_ctx:
            kwargs["ctx"] = ctx
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**kwargs)
        else:
            # A plain function may block (files, sockets, CPU): keep the event loop, and
            # with it heartbeats and control frames, turning.
            result = await asyncio.to_thread(self.fn, **kwargs)
        if isinstance(result, ToolOutput):
            return result
        return result if isinstance(result, str) else msgspec.json.encode(result).decode()


def _rebuild_function_tool(
    fn: Callable[..., Any],
    options: dict[str, Any],
    shipped: tuple[list[tuple[Any, ...]], bool, dict[str, Any]] | None = None,
) -> FunctionTool:
    if shipped is None:  # pickled by an older version: rebuild from the function
        return FunctionTool(fn, **options)
    fields, wants_ctx, schema = shipped
    tool = FunctionTool.__new__(FunctionTool)
    tool.fn = fn
    tool.name = options["name"]  # type: ignore[misc]
    tool.description = options["description"]  # type: ignore[misc]
    tool.concurrency_safe = options["concurrency_safe"]  # type: ignore[misc]
    tool.read_only = options["read_only"]  # type: ignore[misc]
    tool._fields = fields
    tool.Args = _struct_from_fields(tool.name, fields)  # type: ignore[misc]
    tool._wants_ctx = wants_ctx
    _schemas[tool.Args] = schema
    return tool


def _fields_from_signature(fn: Callable[..., Any], name: str) -> list[tuple[Any, ...]]:
    hints = get_type_hints(fn)
    fields: list[tuple[Any, ...]] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name == "ctx":
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *args/**kwargs cannot be described to a model")
        annotation = hints.get(param.name, Any)
        if param.default is inspect.Parameter.empty:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, param.default))
    return fields


def _struct_from_fields(name: str, fields: list[tuple[Any, ...]]) -> type[msgspec.Struct]:
    struct: type[msgspec.Struct] = msgspec.defstruct(
        f"{name}_args", fields, kw_only=True, forbid_unknown_fields=True
    )
    return struct


def function_tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: bool = False,
    read_only: bool = False,
) -> Any:
    """Make a ``Tool`` from a typed function (usable bare or with options)::

    @function_tool(read_only=True)
    async def word_count(path: str) -> str:
        "Count the words in a file."
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            concurrency_safe=concurrency_safe,
            read_only=read_only,
        )

    return wrap(fn) if fn is not None else wrap


class ToolRegistry:
    """The tools one agent may call, by name, in a stable order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def narrowed(self, names: Iterable[str]) -> ToolRegistry:
        """A copy holding only ``names`` (in this registry's order); unknown names ignored."""
        wanted = set(names)
        return ToolRegistry(t for t in self._tools.values() if t.name in wanted)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._tools.values()]


_NOTE_SLACK = 400


def truncate_output(text: str, ctx: ToolContext) -> str:
    """Keep long tool output within ``ctx.max_output_chars``.

    The head and tail are kept; the full text is saved under the run directory and the
    result says where, so the agent can read the rest with ``read_file``.
    """
    limit = ctx.max_output_chars
    # The slack lets an output truncated once (head + note + tail) pass a second check
    # unchanged, rather than be cut again and overwrite the saved whole with the cut.
    if len(text) <= limit + _NOTE_SLACK:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit // 3) :]
    omitted = len(text) - len(head) - len(tail)
    where = ""
    if ctx.run_dir is not None:
        out_dir = ctx.run_dir / "tool-outputs"
        path = out_dir / f"{safe_name_part(ctx.agent_id)}-{safe_name_part(ctx.call_id)}.txt"
        shown = _relative_or_absolute(path, ctx.workdir)
        where = f"; the full output ({len(text)} chars) is saved at {shown}"
        try:
            if not _outputs.write(path.name, text):  # through the sandbox's descriptor, if any
                out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                _write_private(path, text)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            with contextlib.suppress(OSError):
                path.unlink()  # a cut copy would pass for the whole
            where = f"; the full output ({len(text)} chars) is NOT saved: the disk is full"
    return (
        f"{head}\n\n[... {omitted} characters omitted (tool outputs are limited to {limit} "
        f"characters){where} ...]\n\n{tail}"
    )


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` 0600 whatever the umask, never through a link planted there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
    with os.fdopen(os.open(path, flags, 0o600), "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(text)


_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def safe_name_part(text: str) -> str:
    """``text`` as one file-name part: itself when it is short and plain, else a digest.

    Tool-call ids are chosen by the model (a hostile server picks ``x/../../tmp/f``);
    none may become a path part as it is. Ids that are not plain get their safe
    characters plus a digest of the whole, so two ids never share a file.
    """
    if _SAFE_NAME.fullmatch(text):
        return text
    plain = re.sub(r"[^A-Za-z0-9_-]", "", text)[:32] or "output"
    return f"{plain}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def _relative_or_absolute(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)
