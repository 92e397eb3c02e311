"""The child side of a sub-agent process: bootstrap, handshake, serve one run, exit.

``child_main`` is the ``multiprocess.Process`` target. A child serves exactly one run: it
says ``Hello``, waits for ``Start``, runs the handler named there, streams what the
handler emits, sends exactly one ``Result`` (or ``Failure``) and exits. It is never
reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import faulthandler
import importlib
import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

from agentcell.protocol import (
    PROTOCOL_VERSION,
    AgentEvent,
    ApprovalReply,
    ApprovalRequest,
    ChannelClosed,
    Control,
    ControlAction,
    DelegateReply,
    DelegateRequest,
    Event,
    Failure,
    Frame,
    Heartbeat,
    Hello,
    HookReply,
    HookRequest,
    Limits,
    ModelData,
    ModelEnd,
    ModelHead,
    Notice,
    PermitDone,
    PermitGrant,
    PermitRequest,
    PipeChannel,
    ProtocolError,
    Result,
    RunResult,
    RunStatus,
    Start,
    StreamChannel,
    TaskNursery,
    ToolCall,
    ToolRecord,
    ToolRecorded,
    frame_is_authentic,
    sign_frame,
)
from agentcell.worker.child import _proc

if TYPE_CHECKING:
    from agentcell.worker.tools import ToolOutput
from agentcell.worker.engine._answer_cap import capped_answer, fitted_events
from agentcell.worker.sandbox import _apply as _sandbox
from agentcell.worker.sandbox import _cgroup, _landlock_held
from agentcell.worker.sandbox import _spare as _sandbox_spare

#: Exit codes a child uses on its own (anything else is a crash or a handler's choice).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_PROTOCOL = 2
EXIT_ORPHANED = 3


@dataclasses.dataclass(frozen=True)
class ChildBoot:
    """Process-wide settings, fixed when the spare process is started."""

    oom_score_adj: int = 500
    max_frame_bytes: int = 16 * 1024 * 1024
    stdio_path: str | None = None  # where the child's fd 1 and 2 go (None: inherited)
    # The default provider's endpoint: a spare connects to it before its Hello, so a
    # run's first model request does not pay the TCP (and TLS) handshake.
    prepare_url: str | None = None
    # Make the process's cgroup (the sub-agent's process cap) before the Hello: moving
    # into a cgroup waits on kernel locks, ~10 ms and more when many processes start.
    prepare_process_cap: bool = True
    # Make the private temp folder and a Landlock ruleset with the rules every sandbox
    # has before the Hello too (``_sandbox_spare.prepare``): ~1 ms off a run's path.
    prepare_sandbox: bool = True


#: The modules this process had when it started (inherited from the fork server).
INHERITED_MODULES: frozenset[str] = frozenset()

Handler = Callable[[Start, "ChildLink"], Awaitable[RunResult]]
#: The pipe from the fork server's children, or TCP from a remote backend's.
ChildChannel = PipeChannel | StreamChannel


class ChildLink:
    """What a handler running in a child uses to talk to the parent."""

    def __init__(self, channel: ChildChannel, start: Start) -> None:
        self.channel = channel
        self.start = start
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._steering: list[tuple[str, str]] = []  # (text, its team message id or "")
        self.steered = asyncio.Event()
        self.cancel_requested = asyncio.Event()
        self.on_cancel: Callable[[], object] | None = None
        self.on_interrupt: Callable[[], object] | None = None  # a message that interrupts
        # The model requests sent through the parent (``_model_link.LinkTransport``).
        self.model_link: Any = None

    # -- outgoing ---------------------------------------------------------------------
    def emit(self, event: AgentEvent) -> None:
        """Send a progress event (no waiting: events are small and the parent is quick);
        one too large for a frame goes as several, or cut (``_answer_cap``)."""
        spec = self.start.spec
        where = (spec.run_dir, spec.agent_id) if spec is not None else ("", "")
        for piece in fitted_events(event, *where):
            self.channel.send_nowait(Event(event=piece))

    async def writable(self) -> None:
        """Wait while the parent is behind on our frames (it stopped reading our pipe)."""
        await self.channel.writable()

    async def request_approval(
        self, call_id: str, tool: str, arguments: str, reason: str = ""
    ) -> tuple[bool, str]:
        request_id, answer = self._new_request()
        await self.channel.send(
            ApprovalRequest(
                request_id=request_id,
                call_id=call_id,
                tool=tool,
                arguments=arguments,
                reason=reason,
            )
        )
        reply: ApprovalReply = await answer
        return reply.approved, reply.reason

    async def delegate(self, call_id: str, tool: str, arguments: str) -> tuple[str, bool]:
        """Have the parent run one of its tools for us (see ``AgentSpec.remote_tools``)."""
        request_id, answer = self._new_request()
        trace: dict[str, str] = {}
        if self.start.trace_context:  # traced: what it starts nests under this call's span
            from agentcell.worker.tracing._spans import current_trace_context

            trace = current_trace_context()
        request = DelegateRequest(
            request_id=request_id,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            trace_context=trace,
        )
        await self.channel.send(sign_frame(request, self.start.frame_key))
        reply: DelegateReply = await answer
        return reply.content, reply.is_error

    async def run_hooks(
        self,
        event: str,
        *,
        call_id: str,
        tool: str,
        arguments: str,
        response: str = "",
        is_error: bool = False,
    ) -> HookReply:
        """Have the parent run its ``event`` hooks for this call (they run outside us)."""
        request_id, answer = self._new_request()
        await self.channel.send(
            HookRequest(
                request_id=request_id,
                event=event,
                call_id=call_id,
                tool=tool,
                arguments=arguments,
                response=response,
                is_error=is_error,
            )
        )
        reply: HookReply = await answer
        return reply

    async def request_permit(self, model: str, tokens: int) -> tuple[int, PermitGrant]:
        """Wait for the parent's leave to send one request to ``model`` (its limiter
        keeps the provider's limits across every child). Cancelled while waiting, the
        request is withdrawn: a grant that comes later goes straight back."""
        request_id, answer = self._new_request()
        await self.channel.send(PermitRequest(request_id=request_id, model=model, tokens=tokens))
        try:
            grant: PermitGrant = await answer
        except asyncio.CancelledError:
            self._pending.pop(request_id, None)
            self.return_permit(request_id)
            raise
        return request_id, grant

    async def tool_started(self, call: ToolCall, wait: bool) -> None:
        """Tell the parent a tool call starts and, if ``wait``, wait until its journal has
        it: a call the journal does not have was never run (a resume may run it)."""
        request_id, answer = self._new_request() if wait else (0, None)  # 0: no answer
        record = ToolRecord(
            request_id=request_id, call_id=call.id, name=call.name, arguments=call.arguments
        )
        if answer is None:
            with contextlib.suppress(ChannelClosed):
                self.channel.send_nowait(sign_frame(record, self.start.frame_key))
            return
        await self.channel.send(sign_frame(record, self.start.frame_key))
        await answer

    def tool_finished(self, call: ToolCall, output: ToolOutput) -> None:
        """Tell the parent a tool call's whole result (its journal's, not the model's:
        the model gets it in the next request, as always)."""
        record = ToolRecord(
            request_id=0,
            call_id=call.id,
            name=call.name,
            finished=True,
            content=output.content,
            is_error=output.is_error,
        )
        with contextlib.suppress(ChannelClosed):
            self.channel.send_nowait(sign_frame(record, self.start.frame_key))

    def return_permit(
        self, request_id: int, tokens: int = 0, retry_after: float | None = None
    ) -> None:
        with contextlib.suppress(ChannelClosed):
            self.channel.send_nowait(
                PermitDone(request_id=request_id, tokens=tokens, retry_after=retry_after)
            )

    def _new_request(self) -> tuple[int, asyncio.Future[Any]]:
        # The caller keeps the future itself: the reply may arrive (and be popped from
        # the table) while the request is still being sent.
        self._next_id += 1
        future = self._pending[self._next_id] = asyncio.get_running_loop().create_future()
        return self._next_id, future

    # -- turn-boundary controls ----------------------------------------------------------
    async def wait_if_paused(self) -> None:
        await self._resumed.wait()

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def take_steering(self, turn: int = 0) -> list[str]:
        """The steers and team messages that came since the last boundary; the messages
        among them are said to the parent as taken into the ``turn``-th request."""
        taken, self._steering = self._steering, []
        self.steered.clear()
        if ids := [message_id for _, message_id in taken if message_id]:
            self.emit(Notice(message=f"{len(ids)} team message(s) read", mail=ids, turn=turn))
        return [text for text, _ in taken]

    # -- incoming ---------------------------------------------------------------------
    def dispatch(self, frame: Frame) -> None:
        key = self.start.frame_key
        if isinstance(frame, ApprovalReply) and key and not frame_is_authentic(frame, key):
            # Not from our parent: someone else holds a copy of this socket. Asking goes
            # on; only the parent's own answer counts.
            print(
                "agentcell: an approval reply without this run's signature was ignored",
                file=sys.stderr,
                flush=True,
            )
            return
        if isinstance(
            frame, ApprovalReply | DelegateReply | HookReply | PermitGrant | ToolRecorded
        ):
            future = self._pending.pop(frame.request_id, None)
            if future is not None and not future.done():
                future.set_result(frame)
        elif isinstance(frame, Control):
            self._control(frame)
        elif isinstance(frame, ModelHead | ModelData | ModelEnd) and self.model_link is not None:
            self.model_link.dispatch(frame)
        else:
            raise ProtocolError(f"unexpected {type(frame).__name__} frame from the parent")

    def _control(self, frame: Control) -> None:
        # Each control is acknowledged with a notice, so the parent (and whoever watches
        # its events) knows it arrived; pause, resume and steer act at the next turn.
        if frame.action is ControlAction.CANCEL:
            self.cancel_requested.set()
            self._resumed.set()
            if self.on_cancel is not None:
                self.on_cancel()
        elif frame.action is ControlAction.PAUSE:
            self._resumed.clear()
            self.emit(Notice(message="pause received: pausing at the next turn boundary"))
        elif frame.action is ControlAction.RESUME:
            self._resumed.set()
            self.emit(Notice(message="resumed"))
        elif frame.action is ControlAction.STEER:
            self._steering.append((frame.text, frame.message_id))
            self.steered.set()
            if frame.interrupt and self.on_interrupt is not None:
                self.on_interrupt()  # its model call in flight ends: the message joins now
            what = "a message from its team" if frame.message_id else "steering message"
            self.emit(Notice(message=f"{what} received: it joins the next turn"))

    def fail_pending(self, exc: BaseException) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()
        if self.model_link is not None:
            self.model_link.fail(exc)


def child_main(conn: Any, boot: ChildBoot) -> None:
    """Process target: harden the process, then serve one run over ``conn``."""
    global INHERITED_MODULES
    INHERITED_MODULES = frozenset(sys.modules)
    _harden(boot)
    if boot.prepare_process_cap:
        _cgroup.ProcessCap.prepare()
    if boot.prepare_sandbox:
        _sandbox_spare.prepare()

    async def pipe() -> ChildChannel:
        if boot.prepare_url:  # before the Hello: a ready spare is a connected one
            from agentcell.worker.models.transports._client import prepare_connection

            await prepare_connection(boot.prepare_url)
        return await PipeChannel.open(conn, max_frame_bytes=boot.max_frame_bytes)

    asyncio.run(_serve_then_exit(pipe, _preload_status))


def remote_child_main(
    connect: Callable[[], Awaitable[ChildChannel]],
    boot: ChildBoot,
    *,
    launcher_alive: int,
    report: int,
) -> None:
    """Serve one run over a channel ``connect`` opens (TCP back to the parent), in a
    process started by a remote backend (a Ray actor) rather than by the fork server.

    The process the launcher (the actor) started leaves at once; what stays is the run's
    guardian, a subreaper outside the launcher's tree — so a launcher killed with its
    children (Ray kills a dead worker's child processes) cannot take the guardian with it.
    The guardian forks the process that does the work and waits for either end: the
    worker's (it then kills what the worker left behind and reports its exit status on
    ``report``) or the launcher's, seen as EOF on ``launcher_alive`` (it then kills the
    worker's whole tree). Every way a run ends leaves nothing behind on the node.
    """
    if os.fork() != 0:
        os._exit(EXIT_OK)  # the launcher's child: done; the guardian is re-parented
    os.setsid()
    _proc.set_child_subreaper()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker_pid = os.fork()
    if worker_pid == 0:
        os.close(launcher_alive)
        os.close(report)
        os.setsid()
        _proc.set_parent_death_signal(signal.SIGKILL)
        _proc.set_child_subreaper()
        _proc.raise_oom_score(boot.oom_score_adj)
        _proc.detach_terminal()
        faulthandler.enable(all_threads=True)
        asyncio.run(_serve_then_exit(connect, lambda: (True, [])))
        os._exit(EXIT_FAILURE)  # not reached: _serve_then_exit leaves with os._exit
    _write_report(report, {"guardian_pid": os.getpid(), "pid": worker_pid})
    worker_fd = os.pidfd_open(worker_pid)
    while True:
        readable, _, _ = select.select([launcher_alive, worker_fd], [], [])
        if worker_fd in readable:
            break
        if launcher_alive in readable and not os.read(launcher_alive, 64):
            _guardian_exit(worker_pid, report, None)  # the launcher is gone
    _, status = os.waitpid(worker_pid, 0)
    _guardian_exit(worker_pid, report, os.waitstatus_to_exitcode(status))


def _write_report(fd: int, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(message).encode() + b"\n")


def _guardian_exit(worker_pid: int, report: int, code: int | None) -> NoReturn:
    table = _proc.process_table()
    _proc.kill_tree(worker_pid, signal.SIGKILL, table)
    _proc.kill_descendants(os.getpid())
    _sandbox.release(worker_pid)  # its cgroup and private temp folder, on this node
    if code is not None:
        _write_report(
            report,
            {
                "exit_code": code if code >= 0 else None,
                "signal": _proc.signal_name(-code) if code < 0 else None,
            },
        )
    os._exit(EXIT_OK)


async def _serve_then_exit(
    connect: Callable[[], Awaitable[ChildChannel]],
    preload_status: Callable[[], tuple[bool, list[str]]],
) -> None:
    code = EXIT_FAILURE
    _pidfd_child_watcher()
    try:
        code = await _serve(await connect(), preload_status)
    finally:
        # Leave at once, from inside the loop: the result is delivered, and a tool thread
        # stuck in a blocking call must not hold the process (asyncio.run would join it).
        _reap_descendants()
        if _sandbox.CURRENT is not None:
            _sandbox.CURRENT.cleanup()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _pidfd_child_watcher() -> None:
    """On Python 3.11, wait for subprocesses (an MCP server's, bash's) through a pidfd
    on the event loop, as 3.12 does, instead of 3.11's default: a thread per process,
    which one started before the walls would keep outside them."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


def _harden(boot: ChildBoot) -> None:
    from agentcell.worker.child import (
        _forkserver_boot,  # inherited from the fork server, not re-imported
    )

    os.setsid()
    _proc.set_parent_death_signal(signal.SIGKILL)
    # The parent may have died between fork and prctl: then nobody would kill us.
    if os.getppid() != _forkserver_boot.BOOT_PID and os.getpid() != _forkserver_boot.BOOT_PID:
        os._exit(EXIT_ORPHANED)
    _proc.set_child_subreaper()
    _proc.raise_oom_score(boot.oom_score_adj)
    _release_multiprocess_fds()
    # The user's terminal is never a sub-agent's (docs/security.md).
    _proc.detach_terminal(_landlock_held.path_only_fds())
    if boot.stdio_path is not None:
        fd = os.open(boot.stdio_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    faulthandler.enable(all_threads=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _release_multiprocess_fds() -> None:
    """Drop the fork server's "alive" pipe and the resource tracker's pipe.

    Every forkserver child inherits the write end of the pipe whose EOF tells the fork
    server that its owner is gone. Holding it would keep the fork server alive after
    the orchestrator is killed, and with it this child.
    """
    from multiprocess import forkserver, resource_tracker

    fs = forkserver._forkserver
    if fs._forkserver_alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(fs._forkserver_alive_fd)
        fs._forkserver_alive_fd = None
    tracker = resource_tracker._resource_tracker
    if getattr(tracker, "_fd", None) is not None:
        with contextlib.suppress(OSError):
            os.close(tracker._fd)
        tracker._fd = None


def _preload_status() -> tuple[bool, list[str]]:
    from agentcell.worker.child import _forkserver_boot

    if os.getpid() == _forkserver_boot.BOOT_PID:
        return False, ["agentcell.worker.child._forkserver_boot"]
    missing = [*_forkserver_boot.MISSING_PRELOAD, *_forkserver_boot.PRELOAD_PROBLEMS]
    return not missing, missing


def _resolve_handler(name: str) -> Handler:
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ValueError(f"handler must be 'module:function', got {name!r}")
    handler: Handler = getattr(importlib.import_module(module_name), attr)
    return handler


def _apply_limits(limits: Limits | None) -> None:
    if limits is None:
        return
    if limits.address_space_bytes is not None:
        # The limit is for what the run allocates: on top of the interpreter already here
        # (whose address space is mostly reservations, not memory in use).
        import psutil

        n = psutil.Process().memory_info().vms + limits.address_space_bytes
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    if limits.cpu_seconds is not None:
        n = limits.cpu_seconds
        resource.setrlimit(resource.RLIMIT_CPU, (n, n + 1))


async def _serve(
    channel: ChildChannel, preload_status: Callable[[], tuple[bool, list[str]]]
) -> int:
    ok, missing = preload_status()
    channel.send_nowait(
        Hello(
            protocol_version=PROTOCOL_VERSION,
            pid=os.getpid(),
            preload_ok=ok,
            missing_preload=missing,
        )
    )
    try:
        first = await channel.recv()
    except ChannelClosed:
        return EXIT_OK  # an idle spare dismissed by the pool
    except ProtocolError as exc:
        return await _fail(channel, "ProtocolError", str(exc), EXIT_PROTOCOL)
    if not isinstance(first, Start):
        return await _fail(
            channel, "ProtocolError", f"expected Start, got {type(first).__name__}", EXIT_PROTOCOL
        )
    if first.protocol_version != PROTOCOL_VERSION:
        return await _fail(
            channel,
            "ProtocolMismatch",
            f"the parent speaks protocol v{first.protocol_version}, this child "
            f"v{PROTOCOL_VERSION}: install the same agentcell version for both",
            EXIT_PROTOCOL,
            key=first.frame_key,
        )
    try:
        _apply_limits(first.limits)
        handler = _resolve_handler(first.handler)
    except Exception as exc:
        return await _fail(
            channel, type(exc).__name__, str(exc), EXIT_FAILURE, exc, key=first.frame_key
        )
    return await _run(channel, first, handler)


class _Exit(Exception):
    """A handler called ``sys.exit``: leave with that code and no result."""

    def __init__(self, code: int) -> None:
        self.code = code


async def _call(handler: Handler, start: Start, link: ChildLink) -> RunResult | BaseException:
    """The handler's result, or what it raised (returned, so that its task group sees no
    failure and the caller reports it as before)."""
    try:
        return await handler(start, link)
    except SystemExit as exc:
        # Caught here, inside the task: a SystemExit escaping a task would unwind the
        # whole event loop, and asyncio.run's clean-up would then look like a cancel.
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return _Exit(code)
    except Exception as exc:  # MemoryError included
        return exc


async def _run(channel: ChildChannel, start: Start, handler: Handler) -> int:
    link = ChildLink(channel, start)
    # The run is a task of its own, so that the parent's cancel (and a lost parent) cancel
    # it and nothing else; the reader and the heartbeat end with it.
    async with TaskNursery("a child's link to its parent") as helpers:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(_call(handler, start, link))
            link.on_cancel = task.cancel
            helpers.start(_read_parent(channel, link, task))
            helpers.start(_heartbeat(channel, start.heartbeat_s))
        await helpers.aclose()
    try:
        outcome = task.result()
        if isinstance(outcome, BaseException):
            raise outcome
        result = outcome
    except asyncio.CancelledError:
        result = RunResult(status=RunStatus.CANCELLED, error="cancelled by the parent")
    except _Exit as exc:
        with contextlib.suppress(Exception):
            await channel.aclose()  # what it emitted before exiting still arrives
        channel.close()
        return exc.code
    except BaseException as exc:  # MemoryError included: report it if we still can
        return await _fail(
            channel, type(exc).__name__, str(exc), EXIT_FAILURE, exc, key=start.frame_key
        )
    try:
        spec = start.spec
        result = capped_answer(result, spec.run_dir if spec else "", spec.agent_id if spec else "")
        report = Result(result=result, peak_rss_bytes=peak_rss_bytes())
        await channel.send(sign_frame(report, start.frame_key))
        await channel.aclose()  # an exiting process drops what is still buffered
    except ChannelClosed:
        return EXIT_FAILURE
    finally:
        channel.close()
    return EXIT_OK


async def _read_parent(channel: ChildChannel, link: ChildLink, task: asyncio.Task[Any]) -> None:
    try:
        while True:
            link.dispatch(await channel.recv())
    except (ChannelClosed, ProtocolError) as exc:
        # The parent is gone or talks nonsense: nothing we produce can be delivered.
        link.fail_pending(ChannelClosed(str(exc)))
        task.cancel()


async def _heartbeat(channel: ChildChannel, interval: float) -> None:
    seq = 0
    with contextlib.suppress(ChannelClosed):
        while True:
            await asyncio.sleep(interval)
            seq += 1
            channel.send_nowait(Heartbeat(seq=seq, peak_rss_bytes=peak_rss_bytes()))


async def _fail(
    channel: ChildChannel,
    error_type: str,
    message: str,
    code: int,
    exc: BaseException | None = None,
    *,
    key: bytes = b"",
) -> int:
    text = "".join(traceback.format_exception(exc)) if exc is not None else ""
    failure = Failure(error_type=error_type, message=message, traceback=text)
    with contextlib.suppress(Exception):
        await channel.send(sign_frame(failure, key))
        await channel.aclose()
    channel.close()
    return code


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


#: How long, at most, a sub-agent waits at its end for what it killed to be gone. Its
#: Result is delivered by then; this only bounds the exit.
REAP_BOUND_S = 5.0


def _reap_descendants() -> None:
    """Kill and reap whatever tools left behind, without waiting on what it cannot end.

    This child is a subreaper, so every live descendant is in its subtree and "no child
    at all" (one cheap ``waitpid``) means nothing was left behind. A child it may not
    signal — an MCP server's warden, started before the walls went up and so outside its
    Landlock domain — is not waited for: it ends its own tree once this process is gone
    (and the parent empties the cgroup). The wait is bounded either way.
    """
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return
    _proc.kill_session(os.getpid())
    _proc.kill_descendants(os.getpid())
    deadline = time.monotonic() + REAP_BOUND_S
    with contextlib.suppress(ChildProcessError):
        while True:
            if os.waitpid(-1, os.WNOHANG)[0]:
                continue
            if not _proc.signallable_children() or time.monotonic() > deadline:
                return
            time.sleep(0.005)
