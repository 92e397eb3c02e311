"""The agent engine: one ReAct loop for the main agent and for every sub-agent.

build request → stream the model → run the requested tools → append the observations →
repeat, until a final answer or a stop condition. The same class runs in the parent (the
main agent) and in each child process; only the session, the tool registry, the hooks
and where events and approvals go differ.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from agentcell.protocol import (
    AgentEvent,
    ApprovalNeeded,
    AssistantMessage,
    Message,
    Notice,
    RunFinished,
    RunResult,
    RunStatus,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolFinished,
    ToolMessage,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdate,
    UserMessage,
    gather_owned,
)
from agentcell.worker.engine._compaction import Compactor
from agentcell.worker.engine._in_flight import InFlight
from agentcell.worker.engine._session import Session
from agentcell.worker.engine._tool_journal import ToolJournal
from agentcell.worker.models import Model, ModelError, ModelRequest, ToolCallStart
from agentcell.worker.models._base import ModelResponse, StopReason, TextPart
from agentcell.worker.rules._policy import Approver, Decision, Hook, judge
from agentcell.worker.tools import Tool, ToolContext, ToolError, ToolOutput
from agentcell.worker.tools._base import ToolRegistry, truncate_output

if TYPE_CHECKING:
    from agentcell.worker.tracing._spans import AgentTracer

#: Called at each turn boundary, before the model is asked again, or (as a finish hook)
#: when the model has answered; returns messages to add (steering text, background
#: results) and may wait (pause). Messages from a finish hook mean one more turn.
TurnHook = Callable[[Session], Awaitable[Sequence[Message]]]
EventSink = Callable[[AgentEvent], None]

_PREVIEW_CHARS = 200


class StreamWatcher(Protocol):
    """Sees each model call's tool calls as their names stream in
    (``Attachments.stream_watcher``).

    The orchestrator's main agent uses it to start sub-agent processes for ``task``
    calls before the model has finished writing them. Both methods run on the event
    loop and must not block; ``model_call_ended`` follows every model call however it
    ended (answer, error, cancellation), so what a watcher set up for a call is undone.
    """

    def tool_call_started(self, start: ToolCallStart) -> None: ...

    def model_call_ended(self) -> None: ...


@dataclasses.dataclass(slots=True)
class Limits:
    """Stop conditions of one run. ``None`` means no limit."""

    max_turns: int | None = 50  # model calls
    max_tokens: int | None = None  # input + output tokens over the whole run
    timeout_s: float | None = None  # wall clock for the whole run
    max_tool_calls: int | None = None
    tool_timeout_s: float | None = None  # per tool call, approval waiting excluded
    max_output_tokens: int | None = None  # per model call
    max_tool_output_chars: int = 30_000


class StopRun(Exception):
    """Ends the loop with a terminal status (max turns, budget, model trouble). A turn or
    finish hook may raise it too: the run then ends with ``status`` and ``error``, its
    last answer kept as the text."""

    def __init__(self, status: RunStatus, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSetting:
    """What this agent's tool calls get besides the workdir (``ToolContext``): the agent's
    id (it names the outputs saved for it, and the loop's task), the run folder long
    outputs are saved under (None: not saved), the environment its commands run in
    (None: this process's)."""

    run_dir: str | Path | None = None
    agent_id: str = "main"
    env: dict[str, str] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Attachments:
    """What a caller attaches to the loop, each called at its own point: ``turn_hooks``
    at each turn boundary, ``compactor`` before each model call, ``stream_watcher``
    while a model call streams, ``finish_hooks`` when the model has answered,
    ``tracer`` around the run, its model calls and its tool calls, and ``tool_journal``
    around each tool call."""

    turn_hooks: Iterable[TurnHook] = ()
    finish_hooks: Iterable[TurnHook] = ()
    stream_watcher: StreamWatcher | None = None
    # Summarises older turns when the conversation grows past its threshold.
    compactor: Compactor | None = None
    tracer: AgentTracer | None = None  # OpenTelemetry spans of this run (None: tracing is off)
    # The run's journal of tool calls (a journaled or resumed run; None: not journaled).
    tool_journal: ToolJournal | None = None


class Engine:
    """Runs one agent. Create one per run; ``run`` may be called once."""

    # The constructor's groups, reachable from the class too (``Engine.Attachments(...)``).
    ToolSetting: TypeAlias = ToolSetting
    Attachments: TypeAlias = Attachments

    def __init__(
        self,
        model: Model,
        tools: ToolRegistry | Iterable[Tool] = (),
        *,
        system_prompt: str = "",
        hooks: Iterable[Hook] = (),
        approver: Approver | None = None,
        limits: Limits | None = None,
        workdir: str | Path = ".",
        setting: ToolSetting | None = None,
        attached: Attachments | None = None,
    ) -> None:
        setting = setting or ToolSetting()
        attached = attached or Attachments()
        self.model = model
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.system_prompt = system_prompt
        self.hooks = list(hooks)
        self.approver = approver
        self.limits = limits or Limits()
        self.workdir = Path(workdir).resolve()
        self.run_dir = Path(setting.run_dir) if setting.run_dir is not None else None
        self.agent_id = setting.agent_id
        self.env = setting.env
        self.command_preexec: Callable[[], None] | None = None  # see ToolContext.preexec
        self.extra_roots: tuple[Path, ...] = ()  # see ToolContext.extra_roots
        self.turn_hooks = list(attached.turn_hooks)
        self.finish_hooks = list(attached.finish_hooks)
        self.stream_watcher = attached.stream_watcher
        self.compactor = attached.compactor
        self.last_context_tokens = 0  # the last call's prompt + answer, as reported
        self.tracer = attached.tracer
        self.tool_journal = attached.tool_journal
        self.usage = Usage()
        self.turns = 0
        self.tool_calls = 0
        self._emit: EventSink = _ignore
        self._task: asyncio.Task[Any] | None = None
        # The model call in flight: ``in_flight.interrupt()`` drops it (a message that
        # cannot wait), and the loop goes on from its next turn boundary.
        self.in_flight = InFlight()
        self._cancel_requested = False
        self._cancel_status = RunStatus.CANCELLED
        self._cancel_reason = ""
        self._session: Session | None = None
        # The session's last message when this run began: a stopped run's answer so far
        # is the text it wrote after it, never a seeded (resumed) session's older answer.
        self._began_after: Message | None = None

    # -- public API ------------------------------------------------------------------------
    async def run(
        self,
        prompt: str | None,
        session: Session | None = None,
        *,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """Run to a terminal state. ``prompt`` (if given) is added as the user's message.

        Never raises for anything the run itself can go through (model errors, tool
        failures, limits, ``cancel()``). The loop runs in a task of the engine's own, so
        ``cancel()`` never touches the caller's task; cancelling the *calling* task stops
        the loop, leaves the session consistent, and propagates ``CancelledError``.
        """
        if self._task is not None:
            raise RuntimeError("an Engine runs once; create a new one for the next run")
        self._emit = on_event or _ignore
        self._session = session = session if session is not None else Session()
        if prompt is not None:
            session.add(UserMessage(content=prompt))
        self._began_after = session.messages[-1] if session.messages else None
        tracer = self.tracer
        token = tracer.start_agent() if tracer is not None else None
        try:
            async with asyncio.TaskGroup() as group:  # the caller's cancel reaches the loop
                inner = group.create_task(
                    self._drive(session), name=f"agentcell-engine-{self.agent_id}"
                )
                if tracer is not None:
                    tracer.detach(token)  # the loop's task has copied the context with the span
                self._task = inner
        except asyncio.CancelledError:
            if tracer is not None:
                tracer.end_agent(None, "cancelled by the caller")
            raise
        except BaseExceptionGroup as failed:  # the loop raised: as itself, as before
            raise failed.exceptions[0] from None
        if inner.cancelled():
            # cancel() landed as the loop returned: the run still ends the way cancel() said.
            self._settle(session, self._cancel_reason or "the run was cancelled")
            result = self._cancelled_result(session)
        else:
            result = inner.result()
        if (
            self._cancel_requested
            and result.status is RunStatus.COMPLETED
            and (self._cancel_status is not RunStatus.CANCELLED)
        ):
            # A budget crossed on the last turn: the answer came, but past the budget.
            result = self._cancelled_result(session)
        if tracer is not None:
            tracer.end_agent(result)
        self._emit(RunFinished(result=result))
        return result

    def cancel(self, reason: str = "", status: RunStatus = RunStatus.CANCELLED) -> None:
        """Stop the run promptly; ``run`` then returns a result with ``status`` (e.g.
        ``budget``) and ``reason`` as its error. The first call decides."""
        if self._cancel_requested:
            return
        self._cancel_requested = True
        self._cancel_status, self._cancel_reason = status, reason
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _drive(self, session: Session) -> RunResult:
        try:
            if self.limits.timeout_s is not None:
                async with asyncio.timeout(self.limits.timeout_s):
                    return await self._loop(session)
            return await self._loop(session)
        except TimeoutError:
            self._settle(session, "the run's time limit was reached")
            return self._result(
                RunStatus.TIMEOUT, f"the run timed out after {self.limits.timeout_s:g} s"
            )
        except asyncio.CancelledError:
            self._settle(session, self._cancel_reason or "the run was cancelled")
            if not self._cancel_requested:
                raise  # the caller's cancellation: run() propagates it
            return self._cancelled_result(session)
        except StopRun as stop:
            self._settle(session, stop.error)
            return self._result(stop.status, stop.error, text=self._answer_so_far(session))

    def _cancelled_result(self, session: Session) -> RunResult:
        if self._cancel_status is RunStatus.CANCELLED:
            return self._result(RunStatus.CANCELLED, self._cancel_reason or "the run was cancelled")
        text = self._answer_so_far(session)
        return self._result(self._cancel_status, self._cancel_reason, text=text)

    # -- the loop --------------------------------------------------------------------------
    async def _loop(self, session: Session) -> RunResult:
        limits = self.limits
        system = [SystemMessage(content=self.system_prompt)] if self.system_prompt else []
        while True:
            for hook in self.turn_hooks:
                session.extend(await hook(session))
            if limits.max_turns is not None and self.turns >= limits.max_turns:
                raise StopRun(
                    RunStatus.MAX_TURNS,
                    f"stopped after {self.turns} turns (max_turns is {limits.max_turns}) "
                    "without a final answer",
                )
            if self.compactor is not None:
                await self._compact(session)
            self.turns += 1
            self._emit(TurnStarted(turn=self.turns))
            request = ModelRequest(
                messages=system + session.messages,
                tools=self.tools.specs(),
                max_output_tokens=limits.max_output_tokens,
            )
            response = await self.in_flight.run(self._call_model(request))
            if response is None:  # interrupted: what it said so far is dropped, and it
                self._emit(Notice(message="its model call was interrupted by a message"))
                continue  # goes on from the next turn boundary
            session.add(
                AssistantMessage(
                    content=response.text,
                    tool_calls=response.tool_calls,
                    reasoning=response.reasoning,
                )
            )
            if response.tool_calls and response.stop_reason is StopReason.MAX_TOKENS:
                # The last call's arguments may be cut off: running it would be a guess.
                raise StopRun(
                    RunStatus.ERROR,
                    "the model hit its output token limit in the middle of a tool call",
                )
            if not response.tool_calls:
                if response.stop_reason is StopReason.MAX_TOKENS:
                    raise StopRun(
                        RunStatus.ERROR,
                        "the model hit its output token limit before finishing its answer",
                    )
                if response.stop_reason is StopReason.REFUSAL:
                    raise StopRun(RunStatus.ERROR, "the model declined the task")
                # Last word to the finish hooks: news the model has not seen yet (results
                # of background work) means one more turn rather than an answer without it.
                news: list[Message] = []
                for hook in self.finish_hooks:
                    news.extend(await hook(session))
                if not news:
                    return self._result(RunStatus.COMPLETED, "", text=response.text)
                session.extend(news)
                continue
            self._check_budget()  # a final answer is kept; going on for more is not
            await self._run_tools(session, response.tool_calls)

    async def _call_model(self, request: ModelRequest) -> ModelResponse:
        emit = self._emit
        watcher = self.stream_watcher
        response: ModelResponse | None = None
        tracer = self.tracer
        span = tracer.start_chat(request.messages) if tracer is not None else None
        error = ""
        try:
            async for item in self.model.stream(request):
                if isinstance(item, TextPart):
                    if item.text:
                        emit(TextDelta(text=item.text))
                elif isinstance(item, ToolCallStart):
                    # No event for it: a child would pay a frame per call for nothing.
                    if watcher is not None:
                        watcher.tool_call_started(item)
                else:
                    response = item
        except ModelError as exc:
            error = str(exc)
            raise StopRun(RunStatus.ERROR, str(exc)) from None
        except Exception as exc:  # a broken provider fails this run, not the process
            error = f"{self.model.name}: {type(exc).__name__}: {exc}"
            raise StopRun(RunStatus.ERROR, error) from None
        except BaseException:
            error = "cancelled"
            raise
        finally:
            if watcher is not None:
                watcher.model_call_ended()
            if tracer is not None and span is not None:
                tracer.end_chat(span, response, error or ("no response" if not response else ""))
        if response is None:
            raise StopRun(
                RunStatus.ERROR, f"{self.model.name}: the stream ended without a response"
            )
        self.count_usage(response)
        usage = response.usage
        self.last_context_tokens = usage.input_tokens + usage.output_tokens
        return response

    @property
    def max_output_tokens(self) -> int | None:
        return self.limits.max_output_tokens

    def count_usage(self, response: ModelResponse) -> None:
        """Add one model call's tokens to the run's (budgets see them) and say so."""
        self.usage = self.usage + response.usage
        self._emit(
            UsageUpdate(usage=response.usage, model=reported_model(response, self.model.name))
        )

    async def _compact(self, session: Session) -> None:
        """Compaction where due; one that fails leaves the history whole (the run goes on,
        and may still meet its context limit)."""
        assert self.compactor is not None
        done = self.compactor.compactions
        try:
            await self.compactor(self, session)
        except (asyncio.CancelledError, MemoryError):
            raise
        except Exception as exc:  # the summary is an optimisation, never the run's end
            reason = str(exc) or type(exc).__name__
            self._emit(Notice(message=f"compaction failed ({reason}): the history is kept whole"))
            return
        if self.compactor.compactions > done:
            self._emit(Notice(message=f"compacted the conversation ({len(session)} messages kept)"))

    def _check_budget(self) -> None:
        budget = self.limits.max_tokens
        if budget is not None and self.usage.total_tokens > budget:
            raise StopRun(
                RunStatus.BUDGET,
                f"token budget exceeded: {self.usage.total_tokens} tokens used, "
                f"max_tokens is {budget}",
            )

    # -- tools -----------------------------------------------------------------------------
    async def _run_tools(self, session: Session, calls: list[ToolCall]) -> None:
        """Run one assistant message's tool calls, adding results to ``session`` in call order.

        Consecutive calls to concurrency-safe tools run side by side; any other call runs
        alone, in order.
        """
        batch: list[ToolCall] = []
        for call in calls:
            tool = self.tools.get(call.name)
            if tool is not None and tool.concurrency_safe:
                batch.append(call)
                continue
            await self._run_batch(session, batch)
            batch = []
            await self._run_batch(session, [call])
        await self._run_batch(session, batch)

    async def _run_batch(self, session: Session, batch: list[ToolCall]) -> None:
        if not batch:
            return
        limit = self.limits.max_tool_calls
        allowed = len(batch) if limit is None else max(0, limit - self.tool_calls)
        admitted = batch[:allowed]
        self.tool_calls += len(admitted)
        if len(admitted) == 1:
            session.add(await self._run_one(admitted[0]))
        elif admitted:
            session.extend(await gather_owned(*(self._run_one(c) for c in admitted)))
        if len(admitted) < len(batch):
            raise StopRun(RunStatus.LIMIT, f"tool call limit reached: max_tool_calls is {limit}")

    async def _run_one(self, call: ToolCall) -> ToolMessage:
        if self.tracer is None:
            return await self._run_one_untraced(call)
        with self.tracer.tool(call) as span:
            message = await self._run_one_untraced(call)
            self.tracer.end_tool(span, message.content, message.is_error)
            return message

    async def _run_one_untraced(self, call: ToolCall) -> ToolMessage:
        self._emit(ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments))
        started = time.perf_counter()
        tool = self.tools.get(call.name)
        journal = self.tool_journal
        if journal is not None and (journaled := journal.journaled(call, tool)) is not None:
            output = journaled  # a resumed run's call: never run twice
            await journal.started(call, wait=False)  # this run's journal has it whole too
        elif tool is None:
            available = ", ".join(self.tools.names) or "none"
            output = ToolOutput(
                f"unknown tool {call.name!r}; the tools you can call are: {available}", True
            )
        else:
            output = await self._execute(call, tool)
        if journal is not None:
            journal.finished(call, output)
        duration_ms = (time.perf_counter() - started) * 1000
        self._emit(
            ToolFinished(
                call_id=call.id,
                name=call.name,
                is_error=output.is_error,
                preview=output.content[:_PREVIEW_CHARS],
                duration_ms=duration_ms,
            )
        )
        return ToolMessage(
            tool_call_id=call.id, name=call.name, content=output.content, is_error=output.is_error
        )

    def _hidden_from_walks(self, path: str) -> bool:
        """True for a file (absolute, under the workdir) a hook keeps out of folder walks;
        the hooks see it relative to the workdir too, as rules spell paths."""
        spellings = (os.path.relpath(path, self.workdir), path)
        for hook in self.hooks:
            hides = getattr(hook, "hides_from_walks", None)  # a duck-typed hook has none
            if hides is not None and hides(spellings):
                return True
        return False

    async def _execute(self, call: ToolCall, tool: Tool) -> ToolOutput:
        try:
            args = tool.parse_args(call.arguments)
        except ToolError as exc:
            return ToolOutput(str(exc), True)
        written = call  # as the model wrote it (a hook may rewrite it): what a resume sees
        verdict, call, args = await judge(self.hooks, call, tool, args)
        if verdict.decision is Decision.DENY:
            return ToolOutput(f"permission denied: {verdict.reason}", True)
        if verdict.decision is Decision.ASK:
            self._emit(
                ApprovalNeeded(
                    call_id=call.id, tool=call.name, arguments=call.arguments, reason=verdict.reason
                )
            )
            if self.approver is None:
                return ToolOutput(
                    f"permission denied: {verdict.reason}, and no one can approve it here", True
                )
            asked = time.perf_counter()
            approved, why = await self.approver(call, verdict.reason)
            # when the wait ended: the timeline (runs view) splits approval from the tool
            answer = "approved" if approved else "refused"
            self._emit(Notice(message=f"{call.name}: {answer}", level="approval"))
            if self.tracer is not None:
                self.tracer.approval_waited((time.perf_counter() - asked) * 1000)
            if not approved:
                return ToolOutput(f"permission denied: {why or 'the request was refused'}", True)
        if self.tool_journal is not None:
            # In the journal before it does anything (asked and approved first: a call
            # still waiting for its approval when the run died is asked again).
            # A read-only call may run twice: it does not wait for the journal.
            await self.tool_journal.started(written, wait=not tool.read_only)
        ctx = ToolContext(
            workdir=self.workdir,
            run_dir=self.run_dir,
            agent_id=self.agent_id,
            call_id=call.id,
            env=self.env,
            preexec=self.command_preexec,
            max_output_chars=self.limits.max_tool_output_chars,
            extra_roots=self.extra_roots,
            hidden=self._hidden_from_walks,
        )
        try:
            if self.limits.tool_timeout_s is not None and not getattr(tool, "long_running", False):
                async with asyncio.timeout(self.limits.tool_timeout_s):
                    raw = await tool.execute(args, ctx)
            else:
                raw = await tool.execute(args, ctx)
        except ToolError as exc:
            output = ToolOutput(str(exc), True)
        except TimeoutError:
            output = ToolOutput(
                f"{tool.name} timed out after {self.limits.tool_timeout_s:g} s", True
            )
        except (asyncio.CancelledError, MemoryError):
            raise  # a process out of memory is in no state to go on: end the run
        except Exception as exc:  # a broken tool is the model's problem to route around
            output = ToolOutput(f"{tool.name} failed: {type(exc).__name__}: {exc}", True)
        else:
            output = raw if isinstance(raw, ToolOutput) else ToolOutput(raw)
        truncated = truncate_output(output.content, ctx)
        if truncated is not output.content:
            output = ToolOutput(truncated, output.is_error)
        for hook in self.hooks:
            output = await hook.after_tool(call, tool, output)
        return output

    # -- endings ---------------------------------------------------------------------------
    def _settle(self, session: Session, why: str) -> None:
        """Answer every tool call left without a result, so the history stays valid."""
        messages = session.messages
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        for message in reversed(messages):
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    if call.id not in answered:
                        session.add(
                            ToolMessage(
                                tool_call_id=call.id,
                                name=call.name,
                                content=f"not run: {why}",
                                is_error=True,
                            )
                        )
                break

    def _answer_so_far(self, session: Session) -> str:
        return _last_text(session, self._began_after)

    def _result(self, status: RunStatus, error: str, *, text: str = "") -> RunResult:
        return RunResult(
            status=status,
            text=text,
            error=error,
            usage=self.usage,
            turns=self.turns,
            tool_calls=self.tool_calls,
        )


def _ignore(event: AgentEvent) -> None:
    return None


def _last_text(session: Session, began_after: Message | None) -> str:
    """The last text this run wrote (messages before ``began_after`` are earlier runs')."""
    for message in reversed(session.messages):
        if message is began_after:
            break
        if isinstance(message, AssistantMessage) and message.content:
            return message.content
    return ""


def reported_model(response: ModelResponse, configured: str) -> str:
    """The model an answer names, as ``provider:name``: an API names its model bare
    (``gpt-4o-2024-08-06``), and /usage, prices and records key by the full name."""
    if not response.model:
        return configured
    provider, colon, _ = configured.partition(":")
    if not colon or ":" in response.model:
        return response.model
    return f"{provider}:{response.model}"
