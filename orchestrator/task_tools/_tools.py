"""The main agent's coordination tools: ``task``, ``task_status``, ``task_wait``, ``task_control``.

``task`` is an ordinary tool: the engine runs it like any other (several calls in one
message run side by side). Its schema is rebuilt from the registry on every request, so
the ``subagent_type`` enum always lists exactly what is registered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import msgspec
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._request import (
    DelegationRequest,
    RunHandle,
    Scope,
    join_team,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.delegation._runner import Runner
from agentcell.orchestrator.delegation._settle import BY_MAIN_AGENT
from agentcell.orchestrator.delegation._task_args import (
    TaskArgs,
    parse_task_arguments,
    task_tool_spec,
)
from agentcell.orchestrator.task_tools._delivery import ResultDelivery
from agentcell.orchestrator.task_tools._tracker import TaskRecord, TaskTracker
from agentcell.orchestrator.teams._roster import MAIN, Member
from agentcell.protocol import Message, NurseryClosed, RunStatus, TaskNursery, UserMessage
from agentcell.worker import Session
from agentcell.worker.models import ToolSpec
from agentcell.worker.tools import Tool, ToolContext, ToolOutput


class TaskTool(Tool):
    name = "task"
    description = "Delegate a task to a sub-agent"
    Args = TaskArgs
    concurrency_safe = True
    read_only = True  # the sub-agent asks for its own risky actions
    long_running = True  # a foreground sub-agent outlives the per-tool timeout

    def __init__(
        self,
        *,
        registry: AgentRegistry,
        runner: Runner,
        tracker: TaskTracker,
        scope: Callable[[], Scope],
        nursery: TaskNursery,
        left_out: dict[str, str] | None = None,
        asked_left_out: list[str] | None = None,
    ) -> None:
        self.registry = registry
        # Agents whose model cannot be reached (name → why, with the fix): not listed,
        # and a call naming one anyway is refused and noted in ``asked_left_out``.
        self.left_out = left_out if left_out is not None else {}
        self.asked_left_out = asked_left_out if asked_left_out is not None else []
        self.runner = runner
        self.tracker = tracker
        self.scope = scope
        # The owner of this tool's background runs (the orchestrator's, open while it is);
        # the list is only which of its members are this tool's, for shutdown to wait on.
        self.nursery = nursery
        self._background: list[asyncio.Task[None]] = []
        self._handles: set[RunHandle] = set()  # this tool's runs in flight, both kinds

    def spec(self) -> ToolSpec:
        left_out = self.left_out
        return task_tool_spec(
            self.registry, allowed=(lambda n: n not in left_out) if left_out else None
        )

    async def execute(self, args: TaskArgs, ctx: ToolContext) -> ToolOutput:
        try:
            request = parse_task_arguments(msgspec.json.encode(args).decode(), call_id=ctx.call_id)
        except ValueError as exc:
            return ToolOutput(str(exc), True)
        definition = self.registry.get(request.agent_type)
        if definition is None:
            names = ", ".join(self.registry.names())
            return ToolOutput(
                f"unknown subagent_type {request.agent_type!r}; use one of: {names}", True
            )
        if definition.name in self.left_out:
            self.asked_left_out.append(definition.name)
            return ToolOutput(
                f"{definition.name} cannot run: {self.left_out[definition.name]}", True
            )
        if request.background is None:  # the call did not say: the definition decides
            request.background = definition.background
        if request.background and not self.nursery.is_open:
            return ToolOutput(
                "a background sub-agent needs an open orchestrator (async with Orchestrator(...))",
                True,
            )
        handle = RunHandle()
        if not request.background:
            self._handles.add(handle)
            try:
                return await self._foreground(request, handle)
            finally:
                self._handles.discard(handle)
        self._handles.add(handle)
        # One id for the sub-agent everywhere: the task id is its agent id (on a resume,
        # the one the killed run gave the sub-agent this call started).
        agent_id = self.runner.agent_id_for(request, self.scope())
        join_team(self.scope(), request, agent_id, handle)  # its name, said now
        record = self.tracker.start(
            request.agent_type, request.description, handle, task_id=agent_id
        )
        try:
            task = self.nursery.start(
                self._run_in_background(record, request, handle), name=f"task {agent_id}"
            )
        except NurseryClosed as exc:  # closed after the check above
            self._handles.discard(handle)
            self.tracker.finish(agent_id, _background_result(request, agent_id, str(exc)))
            return ToolOutput(str(exc), True)
        self._background = [t for t in self._background if not t.done()] + [task]
        named = f", named {request.name}" if request.name else ""
        return ToolOutput(
            f"[running] task {record.task_id} started in the background "
            f"({request.agent_type}{named}). Its result will be delivered to you when it ends; "
            "use task_wait to wait for it, task_status to check on it."
        )

    async def _foreground(self, request: DelegationRequest, handle: RunHandle) -> ToolOutput:
        """A foreground run, to its result — unless its sub-agent messages the main agent
        before it ends: then the call returns early with the message (the main agent can
        answer; neither waits on the other) and the run goes on in the background."""
        scope = self.scope()
        team = scope.account.team if scope.account is not None else None
        if team is None or not self.nursery.is_open:
            result = await self.runner.run(request, scope, handle=handle)
            return ToolOutput(result.render(), not result.ok)
        agent_id = self.runner.agent_id_for(request, scope)
        record: list[TaskRecord] = []  # its tracking, once it goes on in the background

        async def run() -> SubAgentResult:
            result = await self.runner.run(request, scope, handle=handle, agent_id=agent_id)
            if record:
                self.tracker.finish(agent_id, result)
            return result

        running = self.nursery.start(run(), name=f"task {agent_id}")
        mail = team.watch(agent_id)
        try:
            either: set[asyncio.Future[Any]] = {running, mail}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The caller's cancel ends the sub-agent (a budget's keeps its own status), and
            # its one result is still published: the run settles before this call ends.
            handle.cancel()
            while not running.done():  # a second cancel does not leave it running
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait({running})
            raise
        finally:
            team.unwatch(agent_id)
        if running.done():
            ended = running.result() or handle.result
            if ended is None:
                return ToolOutput("the sub-agent's run failed in the orchestrator (its log)", True)
            return ToolOutput(ended.render(), not ended.ok)
        record.append(
            self.tracker.start(request.agent_type, request.description, handle, task_id=agent_id)
        )
        self._background = [t for t in self._background if not t.done()] + [running]  # type: ignore[list-item]
        named = f"{request.name} ({agent_id})" if request.name else agent_id
        return ToolOutput(
            f"[running] {named} sent you a message before it finished. It goes on in the "
            f"background as task {agent_id}: its result will be delivered to you when it "
            "ends (task_wait waits for it). Its message:\n\n"
            + "\n\n".join(team.for_main_from(agent_id))
        )

    def continue_by_message(self, sender: Member, recipient: Member, text: str) -> str:
        """A team message to an ended sub-agent: a new run of its session, in the
        background, with the message as its next turn; its answer reaches the sender (the
        main agent: as a background result). "" when started, else why not."""
        request = DelegationRequest(
            agent_type=recipient.agent_type,
            prompt=text,
            description=f"a message from {sender.address}",
            background=True,
            resume=recipient.agent_id,
            name=recipient.name,
        )
        scope = recipient.scope if recipient.scope is not None else self.scope()
        handle = RunHandle()
        if sender.agent_id == MAIN:
            agent_id = self.runner.new_agent_id()
            record = self.tracker.start(
                request.agent_type, request.description, handle, task_id=agent_id
            )
            work = self._run_in_background(record, request, handle, scope)
        else:
            work = self._answer_sender(request, handle, scope, sender.agent_id)
        try:
            task = self.nursery.start(work, name=f"continue {recipient.agent_id}")
        except NurseryClosed as exc:
            work.close()
            return str(exc)
        self._handles.add(handle)
        self._background = [t for t in self._background if not t.done()] + [task]
        return ""

    async def _answer_sender(
        self, request: DelegationRequest, handle: RunHandle, scope: Scope, sender_id: str
    ) -> None:
        """A continuation a sub-agent's message started: its answer goes back to it."""
        try:
            result = await self.runner.run(request, scope, handle=handle)
        finally:
            self._handles.discard(handle)
        team = scope.account.team if scope.account is not None else None
        if team is not None:
            team.reply(result.agent_id, sender_id, result.render())

    async def _run_in_background(
        self,
        record: TaskRecord,
        request: DelegationRequest,
        handle: RunHandle,
        scope: Scope | None = None,
    ) -> None:
        agent_id = record.task_id
        result: SubAgentResult | None = None
        try:
            result = await self.runner.run(
                request,
                scope or self.scope(),
                handle=handle,
                agent_id=agent_id,
                task_id=record.task_id,
            )
        except Exception as exc:  # the parent failed this run (not the runner's): its result
            error = f"the parent could not run this sub-agent: {type(exc).__name__}: {exc}"
            result = _background_result(request, agent_id, error, RunStatus.ERROR)
            raise  # and the nursery logs it with its traceback
        finally:
            self._handles.discard(handle)
            # Whatever happened, the task ends in exactly one recorded state: a record left
            # "running" would hold the end of the run hostage.
            self.tracker.finish(
                record.task_id,
                result
                or handle.result
                or _background_result(request, agent_id, "cancelled before it ended"),
            )

    def cancel_all(self, reason: str, status: RunStatus) -> None:
        """End every run this tool started (foreground and background) with ``status``."""
        for handle in list(self._handles):
            handle.cancel(reason, status)

    async def shutdown(self) -> None:
        """Cancel every background run still going and wait until each has ended."""
        for record in self.tracker.running():
            if record.controls is not None:
                record.controls.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []


def _background_result(
    request: DelegationRequest,
    agent_id: str,
    error: str,
    status: RunStatus = RunStatus.CANCELLED,
) -> SubAgentResult:
    return SubAgentResult(
        agent_id=agent_id,
        agent_type=request.agent_type,
        description=request.description,
        status=status,
        error=error,
        background=True,
    )


def render_records(records: list[TaskRecord], *, with_results: bool) -> str:
    parts = []
    for record in records:
        if with_results and record.result is not None:
            parts.append(f"{record.summary()}\n{record.result.render()}")
        else:
            parts.append(record.summary())
    return "\n\n".join(parts) if parts else "no background tasks"


def _unknown_ids(tracker: TaskTracker, task_ids: list[str] | None) -> ToolOutput | None:
    unknown = [t for t in task_ids or [] if tracker.get(t) is None]
    if unknown:
        return ToolOutput(f"unknown task id(s): {', '.join(unknown)}", True)
    return None


class TaskStatusArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    task_ids: Annotated[
        list[str] | None, msgspec.Meta(description="Task ids to report on (default: all)")
    ] = None


class TaskStatusTool(Tool):
    name = "task_status"
    description = "Show the state of background tasks (running, completed, failed, cancelled)."
    Args = TaskStatusArgs
    concurrency_safe = True
    read_only = True

    def __init__(self, tracker: TaskTracker) -> None:
        self.tracker = tracker

    async def execute(self, args: TaskStatusArgs, ctx: ToolContext) -> ToolOutput:
        refusal = _unknown_ids(self.tracker, args.task_ids)
        if refusal is not None:
            return refusal
        return ToolOutput(render_records(self.tracker.records(args.task_ids), with_results=False))


class TaskWaitArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    task_ids: Annotated[
        list[str] | None, msgspec.Meta(description="Task ids to wait for (default: all)")
    ] = None
    timeout_s: Annotated[
        float, msgspec.Meta(ge=0, le=3600, description="Give up waiting after this long")
    ] = 60.0


class TaskWaitTool(Tool):
    name = "task_wait"
    description = (
        "Wait for background tasks to end and get their results. A timeout is not an error: "
        "you get a snapshot of what is still running."
    )
    Args = TaskWaitArgs
    concurrency_safe = True
    read_only = True
    long_running = True

    def __init__(self, tracker: TaskTracker) -> None:
        self.tracker = tracker

    async def execute(self, args: TaskWaitArgs, ctx: ToolContext) -> ToolOutput:
        refusal = _unknown_ids(self.tracker, args.task_ids)
        if refusal is not None:
            return refusal
        done = await self.tracker.wait(args.task_ids, args.timeout_s)
        records = self.tracker.records(args.task_ids)
        ready = [r for r in records if r.state.terminal and not r.delivered]
        # Hand out only what fits in one tool result: a result cut off by the output limit
        # would be lost, yet counted as delivered. The rest comes with the next turn.
        finished: list[TaskRecord] = []
        size = 0
        budget = ctx.max_output_chars - 500
        for record in ready:
            text = render_records([record], with_results=True)
            if finished and size + len(text) > budget:
                break
            finished.append(record)
            size += len(text) + 2
        for record in finished:
            record.delivered = True  # delivered here, so never injected again
        still = [r for r in records if not r.state.terminal]
        parts = [render_records(finished, with_results=True)] if finished else []
        if len(finished) < len(ready):
            parts.append(
                f"{len(ready) - len(finished)} more results are ready; they come with your "
                "next turn (or call task_wait again)"
            )
        if not done:
            parts.append(
                f"still running after {args.timeout_s:g} s:\n"
                + render_records(still, with_results=False)
            )
        if not parts:
            parts.append("those tasks had already ended and their results were delivered")
        return ToolOutput("\n\n".join(parts))


class TaskControlArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    task_id: str
    action: Literal["cancel", "pause", "resume", "steer"]
    text: Annotated[str, msgspec.Meta(description="For steer: the message to the sub-agent")] = ""


class TaskControlTool(Tool):
    name = "task_control"
    description = (
        "Cancel, pause, resume or steer a background task. Pause, resume and steer take "
        "effect at the sub-agent's next turn boundary; steer adds your text as a message."
    )
    Args = TaskControlArgs
    concurrency_safe = True
    read_only = True

    def __init__(self, tracker: TaskTracker) -> None:
        self.tracker = tracker

    async def execute(self, args: TaskControlArgs, ctx: ToolContext) -> ToolOutput:
        record = self.tracker.get(args.task_id)
        if record is None:
            return ToolOutput(f"unknown task id {args.task_id!r}", True)
        if record.state.terminal or record.controls is None:
            return ToolOutput(f"task {args.task_id} has already ended ({record.state.value})", True)
        if args.action == "steer":
            if not args.text.strip():
                return ToolOutput("steer needs a text", True)
            record.controls.steer(args.text)
        elif args.action == "cancel":
            record.controls.cancel(BY_MAIN_AGENT)
        else:
            getattr(record.controls, args.action)()
        return ToolOutput(f"{args.action} sent to task {args.task_id}")


#: What hands out finished background results (default: the tracker's ``drain``; a
#: journaled run's says which went out when, and a resume's hands out the same).
Drain = Callable[[], Awaitable[list[TaskRecord]]]


def background_injector(
    tracker: TaskTracker, delivery: ResultDelivery | None = None, drain: Drain | None = None
) -> Callable[[Session], Any]:
    """Turn hook: hand finished background results to the next model call, once each,
    within ``delivery``'s cap."""
    delivery = delivery or ResultDelivery()
    take = drain or _drain_of(tracker)

    async def inject(session: Session) -> list[Message]:
        return _results_message(await take(), delivery)

    return inject


def background_finisher(
    tracker: TaskTracker,
    task_tool: TaskTool,
    wait_s: float,
    delivery: ResultDelivery | None = None,
    drain: Drain | None = None,
) -> Callable[[Session], Any]:
    """Finish hook: the run does not end while background results would be lost.

    It waits (up to ``wait_s``) for running background tasks, cancels what is left, and
    returns their results so the model gets one more turn to use them.
    """

    delivery = delivery or ResultDelivery()
    take = drain or _drain_of(tracker)

    async def finish(session: Session) -> list[Message]:
        if tracker.running():
            done = await tracker.wait(None, wait_s)
            if not done:
                await task_tool.shutdown()
        return _results_message(await take(), delivery)

    return finish


def _drain_of(tracker: TaskTracker) -> Drain:
    async def drain() -> list[TaskRecord]:
        return tracker.drain()

    return drain


def _results_message(records: list[TaskRecord], delivery: ResultDelivery) -> list[Message]:
    if not records:
        return []
    results = delivery.capped([r.result for r in records if r.result is not None])
    capped = iter(results)
    parts = [
        f"{r.summary()}\n{next(capped).render()}" if r.result is not None else r.summary()
        for r in records
    ]
    text = "Background task results (each delivered once):\n\n" + "\n\n".join(parts)
    return [UserMessage(content=text)]
