"""Running lifecycle hooks: the user's own commands, in the parent, outside every sandbox.

Claude Code's contract: the command runs with ``CLAUDE_PROJECT_DIR`` set to the project
root and gets one JSON object on stdin: the common fields (``session_id``,
``transcript_path``, ``cwd``, ``permission_mode``, ``hook_event_name``; ``agent_id`` and
``agent_type`` in a sub-agent) and the event's own (``tool_name``/``tool_input``/
``tool_response`` in Claude Code's shape, see ``_hook_shape``; ``prompt``,
``last_assistant_message``, ...). Exit 0 goes on; its stdout may be JSON: ``decision``/
``reason``, ``hookSpecificOutput.permissionDecision`` (allow/deny/ask) with
``permissionDecisionReason``, ``updatedInput``, ``additionalContext``, ``continue: false``
with ``stopReason``. Exit 2 blocks and its stderr is what the model is told; any other
exit, a timeout or a command that cannot start is a non-blocking error, logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import signal
import types
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentcell.orchestrator.approvals._channel import ApprovalQuery
from agentcell.orchestrator.approvals._hook_shape import (
    claude_permission_mode,
    claude_tool_name,
    matcher_names,
    tool_document,
    updated_arguments,
    updated_output,
)
from agentcell.orchestrator.config._claude_settings import translate_rule
from agentcell.orchestrator.config._hooks import HookCommand, parse_hooks
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.protocol import (
    AgentSpec,
    AssistantMessage,
    HookReply,
    Message,
    RunStatus,
    ToolCall,
    UserMessage,
    gather_owned,
)
from agentcell.worker import (
    MAX_STOP_HOOK_CONTINUATIONS,
    MCP_PREFIX,
    Hook,
    RelayedHooks,
    Rule,
    Session,
    StopRun,
    TurnHook,
    simple_commands,
)

log = logging.getLogger("agentcell.hooks")

#: What is kept of a hook's stdout and stderr each; the rest is read and dropped.
HOOK_OUTPUT_CAP = 64 * 1024
#: Hook commands running at once, over every agent: a burst of tool calls from many
#: sub-agents queues here rather than starting hundreds of processes.
MAX_RUNNING_HOOKS = 16
#: The tool events: their matchers are checked against tool names.
TOOL_EVENTS = ("PreToolUse", "PostToolUse")


#: What a runner enters around each run of its hooks (``HookRunner.watch``).
HookWatch = Callable[[], contextlib.AbstractAsyncContextManager[None]]


@dataclasses.dataclass(frozen=True, slots=True)
class HookOutcome:
    """What the hooks of one event decided, all of them together."""

    blocked: bool = False
    reason: str = ""
    context: str = ""
    decision: str = ""  # permissionDecision "ask" or "allow" ("deny" is ``blocked``)
    updated_input: Any = None  # PreToolUse's updatedInput, in Claude Code's fields
    stop: bool = False  # "continue": false
    stop_reason: str = ""
    updated_output: Any = None  # PostToolUse's updatedToolOutput, in Claude Code's shape

    def reply(self, request_id: int, tool: str = "") -> HookReply:
        """This outcome as the answer to a child's ``HookRequest`` about ``tool``."""
        return HookReply(
            request_id=request_id,
            blocked=self.blocked,
            reason=self.reason,
            context=self.context,
            decision=self.decision,
            updated_input=updated_arguments(tool, self.updated_input),
            stop=self.stop,
            stop_reason=self.stop_reason,
            updated_output=updated_output(tool, self.updated_output),
        )


#: The longest arguments (characters of JSON) an ``if`` is judged on, in the parent: a
#: child's 16 MiB ``env a a a …`` would take minutes of the event loop and gigabytes
#: (every later word of a wrapper starts a piece). Longer, the hook runs, as Claude
#: Code's does when it cannot read the command.
MAX_IF_ARGUMENTS = 64 * 1024
#: The longest tool name a child's hook request is matched on: a model's tool names have
#: at most 64 characters (128 with an MCP server's prefix); the user's matchers run in the
#: parent's event loop, and ``.*write.*`` on a 40,000-character name took half a second.
MAX_ASKED_NAME = 256


class HookRunner:
    """The hooks in force for one agent: the configured ones plus its definition's, and
    the common fields every document of that agent carries."""

    def __init__(
        self,
        commands: Sequence[HookCommand] = (),
        *,
        cwd: str = ".",
        session_id: str = "",
        slots: asyncio.Semaphore | None = None,
        project_dir: str = "",
        permission_mode: str = "default",
        transcript_path: str = "",
        watch: HookWatch | None = None,
    ) -> None:
        self.commands = list(commands)
        self.cwd = cwd
        self.session_id = session_id or str(uuid.uuid4())  # Claude Code's: never empty
        self.project_dir = project_dir or cwd
        self.permission_mode = permission_mode
        self.transcript_path = transcript_path
        #: Around each run of these hooks: a worktree agent's tells what they write there
        #: (``workspace._hook_writes``) from what the agent does.
        self.watch = watch
        self._slots = slots or asyncio.Semaphore(MAX_RUNNING_HOOKS)

    def _with(self, commands: Sequence[HookCommand], **fields: Any) -> HookRunner:
        kept = {
            "cwd": self.cwd,
            "session_id": self.session_id,
            "project_dir": self.project_dir,
            "permission_mode": self.permission_mode,
            "transcript_path": self.transcript_path,
            "watch": self.watch,
        }
        return HookRunner(commands, slots=self._slots, **{**kept, **fields})

    def for_agent(
        self,
        cwd: str,
        permission_mode: str,
        transcript_path: str,
        watch: HookWatch | None = None,
    ) -> HookRunner:
        """These hooks, with the common fields of one agent's documents (and its watch)."""
        return self._with(
            self.commands,
            cwd=cwd,
            permission_mode=permission_mode,
            transcript_path=transcript_path,
            watch=watch,
        )

    @classmethod
    def from_table(cls, table: Mapping[str, Any], origin: str, **kwargs: Any) -> HookRunner:
        return cls(parse_hooks(table, origin), **kwargs)

    def __bool__(self) -> bool:
        return bool(self.commands)

    def for_definition(self, definition: AgentDefinition) -> HookRunner:
        """These hooks plus the ones the definition's ``hooks:`` frontmatter names."""
        if not definition.hooks:
            return self
        own = parse_hooks(definition.hooks, definition.source or definition.name)
        return self._with([*self.commands, *own])

    def matching(self, event: str, name: str) -> list[HookCommand]:
        names = matcher_names(name)
        return [c for c in self.commands if c.event == event and c.matches(*names)]

    def hooked_tools(self, tools: Iterable[str]) -> dict[str, list[str]]:
        """For ``AgentSpec.hooked_tools``: per tool event, the tools some hook matches."""
        names = list(tools)
        hooked = {}
        for event in TOOL_EVENTS:
            matched = [name for name in names if self.matching(event, name)]
            if matched:
                hooked[event] = matched
        # A sub-agent's compaction (its trigger is "auto") asks when a PreCompact hook
        # matches it (Claude Code's matchers: "auto", "manual").
        if self.matching("PreCompact", "auto"):
            hooked["PreCompact"] = ["auto"]
        return hooked

    def hook_patterns(self) -> dict[str, list[str]]:
        """For ``AgentSpec.hook_patterns``: per tool event, every matcher, for the child
        to check against the MCP tools it starts (the parent cannot list them)."""
        patterns: dict[str, list[str]] = {}
        for command in self.commands:
            if command.event in TOOL_EVENTS:
                found = patterns.setdefault(command.event, [])
                if command.matcher not in found:
                    found.append(command.matcher)
        return patterns

    def answers(self, event: str, tool: str, offered: Sequence[str], mcp: bool) -> bool:
        """May a child ask about this call? Only a tool the spec offered or, where the
        spec sent ``hook_patterns`` (``mcp``), an MCP tool of the child's own that one of
        this event's hooks matches."""
        if tool in offered:
            return True
        if len(tool) > MAX_ASKED_NAME:  # your expression, on a name of any length: bounded
            return False
        mcp = mcp and event in TOOL_EVENTS and tool.startswith(MCP_PREFIX)
        return mcp and bool(self.matching(event, tool))

    async def tool_event(
        self,
        event: str,
        *,
        tool: str,
        call_id: str,
        arguments: str,
        response: str = "",
        is_error: bool = False,
        agent: tuple[str, str] | None = None,
    ) -> HookOutcome:
        """Run the PreToolUse/PostToolUse hooks of one call, shown to them as Claude
        Code shows it; ``agent`` is a sub-agent's (agent_id, agent_type)."""
        payload = tool_document(
            event,
            tool=tool,
            call_id=call_id,
            arguments=arguments,
            workdir=self.cwd,
            response=response,
            is_error=is_error,
        )
        if agent is not None:
            payload = {"agent_id": agent[0], "agent_type": agent[1], **payload}
        return await self.run(event, payload, tool, call=(tool, arguments))

    async def run(
        self,
        event: str,
        payload: Mapping[str, Any],
        match: str = "",
        *,
        call: tuple[str, str] | None = None,
    ) -> HookOutcome:
        """Run every hook of ``event`` whose matcher takes ``match`` (a tool name, an
        agent type; events without a matcher run all theirs) and whose ``if`` the tool
        ``call`` (name, arguments) meets: a hook with an ``if`` runs on tool calls alone."""
        commands = [
            c for c in self.matching(event, match) if condition_met(c, call, Path(self.cwd))
        ]
        if not commands:
            return HookOutcome()
        document = {
            "session_id": self.session_id,
            "transcript_path": self.transcript_path,
            "cwd": self.cwd,
            "permission_mode": claude_permission_mode(self.permission_mode),
            "hook_event_name": event,
            **payload,
        }
        data = json.dumps(document).encode()
        async with self.watch() if self.watch is not None else contextlib.nullcontext():
            outcomes = await gather_owned(*(self._one(c, data) for c in commands))
        return _combined(outcomes)

    async def _one(self, hook: HookCommand, data: bytes) -> HookOutcome:
        async with self._slots:
            return await self._start(hook, data)

    async def _start(self, hook: HookCommand, data: bytes) -> HookOutcome:
        where = f"{hook.event} hook {str(hook)!r}" + (f" ({hook.origin})" if hook.origin else "")
        # The start is a task of this call's group, shielded from a cancel so that what
        # it started is always ended and reaped here; it never raises (a failure is its
        # result), so the group never cancels this call for it.
        async with asyncio.TaskGroup() as group:
            starting = group.create_task(self._spawn(hook))
            try:
                process = await asyncio.shield(starting)
            except asyncio.CancelledError:
                # Cancelled while it started: asyncio would wait for its pipes to close,
                # that is for the hook (and what it started) to end by itself. End its
                # group now.
                started = await starting
                if not isinstance(started, Exception):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(started.pid, signal.SIGKILL)
                    await started.wait()
                raise
        if isinstance(process, Exception):  # OSError, or a command the OS refuses (NUL)
            return _failed(hook, where, f"could not start: {process}")
        try:
            async with asyncio.timeout(hook.timeout_s):
                out, err, code = await _talk(process, data)
        except TimeoutError:
            return _failed(hook, where, f"timed out after {hook.timeout_s:g} s")
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        if code not in (0, 2) and hook.on_failure == "block":
            return _failed(hook, where, _ended_how(code, err))
        return _exit_outcome(code, out, err, where, hook.event)

    async def _spawn(self, hook: HookCommand) -> asyncio.subprocess.Process | Exception:
        options: dict[str, Any] = {
            "stdin": asyncio.subprocess.PIPE,
            "stdout": asyncio.subprocess.PIPE,
            "stderr": asyncio.subprocess.PIPE,
            # In the project folder, as a Claude Code session's hooks run: a worktree
            # agent's hooks (``cwd`` in their input: its worktree) write their logs there,
            # never into the agent's branch.
            "cwd": self.project_dir,
            "env": {**os.environ, "CLAUDE_PROJECT_DIR": self.project_dir},
            "start_new_session": True,  # so a timeout can stop all it started
        }
        try:
            if hook.args is None:
                return await asyncio.create_subprocess_shell(hook.command, **options)
            # Claude Code's exec form: no shell; the placeholder put in as plain text.
            words = [w.replace("${CLAUDE_PROJECT_DIR}", self.project_dir) for w in hook.spawned]
            return await asyncio.create_subprocess_exec(*words, **options)
        except Exception as exc:  # reported by _start, never lost in the group
            return exc


async def _talk(process: asyncio.subprocess.Process, data: bytes) -> tuple[str, str, int]:
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None

    async def feed() -> str:  # (a str, as the two reads beside it give)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(data)  # type: ignore[union-attr]
            await process.stdin.drain()  # type: ignore[union-attr]
        process.stdin.close()  # type: ignore[union-attr]
        return ""

    out, err, _ = await gather_owned(
        _read_capped(process.stdout), _read_capped(process.stderr), feed()
    )
    code = await process.wait()
    return out, err, code


async def _read_capped(stream: asyncio.StreamReader) -> str:
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < HOOK_OUTPUT_CAP:
            kept += chunk[: HOOK_OUTPUT_CAP - len(kept)]
    return kept.decode(errors="replace")


def _combined(outcomes: Sequence[HookOutcome]) -> HookOutcome:
    """Every hook of one event together: any deny blocks, any ask asks, any stop stops;
    the first rewrite of the input is the one used."""
    blocked = any(o.blocked for o in outcomes)
    asked = any(o.decision == "ask" for o in outcomes)
    allowed = all(o.decision == "allow" for o in outcomes)
    reasons = [o.reason for o in outcomes if o.reason and (o.blocked or not blocked)]
    return HookOutcome(
        blocked=blocked,
        reason="\n".join(reasons),
        context="\n".join(o.context for o in outcomes if o.context),
        decision="" if blocked else "ask" if asked else "allow" if allowed else "",
        updated_input=next((o.updated_input for o in outcomes if o.updated_input), None),
        stop=any(o.stop for o in outcomes),
        stop_reason="\n".join(o.stop_reason for o in outcomes if o.stop_reason),
        updated_output=next(
            (o.updated_output for o in outcomes if o.updated_output is not None), None
        ),
    )


def _failed(hook: HookCommand, where: str, how: str) -> HookOutcome:
    """A hook that failed: said in the log; with ``onFailure: "block"`` read as exit 2,
    the reason naming the failure; else it decides nothing and the run goes on."""
    if hook.on_failure == "block":
        log.warning("%s %s: blocked (onFailure: block)", where, how)
        return HookOutcome(blocked=True, reason=f"blocked: the {where} {how} (onFailure: block)")
    log.warning("%s %s; the run goes on", where, how)
    return HookOutcome()


def _ended_how(code: int, err: str) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    first = err.strip().splitlines()[0] if err.strip() else "no message"
    return f"failed (exit {code}): {first}"


def _exit_outcome(code: int, out: str, err: str, where: str, event: str) -> HookOutcome:
    """Claude Code's reading of a hook's end: exit 2 blocks (with the JSON's reason
    when it gives one, else stderr); on any other code a JSON object on stdout decides
    alone; without one, any code but 0 is an error that decides nothing."""
    doc = _json_document(out)
    if code == 2:
        decided = _decision(doc, where) if doc is not None else HookOutcome()
        reason = decided.reason if decided.blocked else err.strip()
        return dataclasses.replace(
            decided, blocked=True, decision="", reason=reason or f"blocked by the {where}"
        )
    if doc is not None:
        return _decision(doc, where)
    if code != 0:
        first = err.strip().splitlines()[0] if err.strip() else "no message"
        log.warning("%s failed (exit %d): %s; the run goes on", where, code, first)
        return HookOutcome()
    text = out.strip()
    if text.startswith("{"):
        log.warning("%s printed something that is not JSON; ignored", where)
        return HookOutcome()
    # Plain output is context for these events alone, as in Claude Code.
    return HookOutcome(context=text if event in _STDOUT_IS_CONTEXT else "")


def _json_document(stdout: str) -> dict[str, Any] | None:
    """A hook's stdout as the JSON object Claude Code reads (None: not one)."""
    if not stdout.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def condition_met(hook: HookCommand, call: tuple[str, str] | None, cwd: Path) -> bool:
    """Claude Code's ``if``: a hook with one runs only on a tool call the rule catches,
    never on another event; best effort, as there: a rule or arguments that cannot be
    read let it run."""
    if not hook.condition:
        return True
    if call is None:
        return False
    tool, arguments = call
    if len(arguments) > MAX_IF_ARGUMENTS:
        return True  # a rule's cost grows with the square of a command's words: not judged
    rules = _if_rules(hook.condition, cwd)
    if rules is None:
        return True
    try:
        fields = json.loads(arguments or "{}")
        args = types.SimpleNamespace(**fields) if isinstance(fields, dict) else None
    except (ValueError, TypeError):
        args = None
    if args is None or _unreadable_line(getattr(args, "command", None), hook.condition):
        return True
    asked = ToolCall(id="", name=tool, arguments=arguments)
    return any(rule.catches(asked, args) for rule in rules)


@functools.lru_cache(maxsize=256)  # asked on every tool call a hook with an ``if`` sees
def _if_rules(condition: str, cwd: Path) -> tuple[Rule, ...] | None:
    """An ``if``'s permission rule as ours (None: a rule no tool of ours has)."""
    translated = translate_rule(condition, cwd)
    return None if translated is None else tuple(map(Rule.parse, translated))


def _unreadable_line(command: object, condition: str) -> bool:
    """Claude Code's ``if`` on a Bash line it cannot read runs the hook: a line the shell
    parser cannot read, or, for a rule that names more than the program, a line with a
    substitution or a variable (``echo $(date)``: what it runs is not in its words)."""
    if not isinstance(command, str):
        return False
    if not simple_commands(command).parsed:
        return True
    pattern = condition.partition("(")[2].rstrip(") ")
    program_only = pattern.removesuffix(":*").removesuffix("*").strip()  # ``rm *``: only rm
    return " " in program_only and ("$" in command or "`" in command)


#: Events whose plain stdout (exit 0, not JSON) is context for the model, as in Claude Code.
_STDOUT_IS_CONTEXT = frozenset({"UserPromptSubmit", "SessionStart"})


def _decision(doc: Mapping[str, Any], where: str) -> HookOutcome:
    """A hook's JSON object, read as Claude Code reads it."""
    specific = doc.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    # permissionDecision is PreToolUse's; "decision" is the older spelling ("approve" /
    # "block") and every other event's.
    permission = str(specific.get("permissionDecision") or "").lower()
    legacy = str(doc.get("decision") or "").lower()
    decision = permission or {"approve": "allow", "block": "deny"}.get(legacy, legacy)
    reason = specific.get("permissionDecisionReason") or doc.get("reason") or ""
    context = specific.get("additionalContext") or doc.get("additionalContext") or ""
    blocked = decision == "deny"
    stop = doc.get("continue", True) is False
    return HookOutcome(
        blocked=blocked,
        reason=str(reason) or (f"blocked by the {where}" if blocked else ""),
        context=str(context),
        decision=decision if decision in ("ask", "allow") else "",
        updated_input=specific.get("updatedInput"),
        stop=stop,
        stop_reason=str(doc.get("stopReason") or "") if stop else "",
        updated_output=_first_present(specific, "updatedToolOutput", "updatedMCPToolOutput"),
    )


def _first_present(fields: Mapping[str, Any], *names: str) -> Any:
    return next((fields[n] for n in names if fields.get(n) is not None), None)


def notification_hook(hooks: HookRunner) -> Callable[[ApprovalQuery], Awaitable[None]] | None:
    """For ``ApprovalBroker.notify``: the Notification hooks (matcher: the notification
    type, ``permission_prompt``) run as each approval is asked; they cannot block it."""
    if not any(command.event == "Notification" for command in hooks.commands):
        return None

    async def notify(query: ApprovalQuery) -> None:
        payload: dict[str, Any] = {
            "message": f"agentcell needs your permission to use {claude_tool_name(query.tool)}",
            "notification_type": "permission_prompt",
        }
        if query.agent_id != "main":
            payload = {"agent_id": query.agent_id, "agent_type": query.agent_type, **payload}
        await hooks.run("Notification", payload, "permission_prompt")

    return notify


def agent_transcript(spec: AgentSpec) -> str:
    """Where a sub-agent's child writes its transcript ("" when the run is not recorded)."""
    return str(Path(spec.run_dir) / f"{spec.agent_id}.jsonl") if spec.run_dir else ""


def local_tool_hooks(hooks: HookRunner, tools: Iterable[str]) -> Hook | None:
    """The main agent's PreToolUse/PostToolUse hooks: the same relay a sub-agent uses,
    asking this process's runner instead of a pipe (None: no hook matches its tools)."""
    hooked = hooks.hooked_tools(tools)
    if not hooked:
        return None

    async def ask(
        event: str,
        *,
        call_id: str,
        tool: str,
        arguments: str,
        response: str = "",
        is_error: bool = False,
    ) -> HookReply:
        outcome = await hooks.tool_event(
            event,
            tool=tool,
            call_id=call_id,
            arguments=arguments,
            response=response,
            is_error=is_error,
        )
        return outcome.reply(0, tool)

    return RelayedHooks(hooked, ask)


def stop_hook(hooks: HookRunner) -> TurnHook:
    """A finish hook: the Stop hooks see the answer; one that blocks ("decision": "block"
    or exit 2) sends its reason back as a user message, so the agent goes on (Claude
    Code's contract; ``stop_hook_active`` tells a hook it already did). Past
    ``MAX_STOP_HOOK_CONTINUATIONS`` blocks in a row the run ends as an error, as a
    sub-agent's does, rather than spend every turn ``max_turns`` leaves."""
    continued = 0

    async def finish(session: Session) -> Sequence[Message]:
        nonlocal continued
        last = next(
            (m.content for m in reversed(session.messages) if isinstance(m, AssistantMessage)), ""
        )
        outcome = await hooks.run(
            "Stop", {"last_assistant_message": last, "stop_hook_active": continued > 0}
        )
        if not outcome.blocked:
            continued = 0
            return []
        reason = outcome.reason or "blocked by a Stop hook"
        if continued >= MAX_STOP_HOOK_CONTINUATIONS:
            raise StopRun(
                RunStatus.ERROR,
                f"a Stop hook kept blocking the finish: it sent the agent back {continued} "
                f"times in a row, the cap (MAX_STOP_HOOK_CONTINUATIONS); fix the hook's "
                f"condition. Its last reason: {reason}",
            )
        continued += 1
        return [UserMessage(content=f"Stop hook: {reason}")]

    return finish


class SessionHooks:
    """The orchestrator's session, as Claude Code's: ``SessionStart`` (source
    ``startup``) before its first run, whose ``additionalContext`` joins that run's
    prompt, and ``SessionEnd`` (reason ``other``) when it closes; once each."""

    def __init__(self, hooks: HookRunner) -> None:
        self.hooks = hooks
        self.started = False
        self.ended = False

    async def start(self) -> str:
        if self.started:
            return ""
        self.started = True
        return (await self.hooks.run("SessionStart", {"source": "startup"}, "startup")).context

    async def end(self) -> None:
        if self.started and not self.ended:
            self.ended = True
            await self.hooks.run("SessionEnd", {"reason": "other"}, "other")
