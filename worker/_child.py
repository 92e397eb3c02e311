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
import os
import resource
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

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
    Limits,
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
)
from agentcell.worker import _proc, _sandbox

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
        self._steering: list[str] = []
        self.steered = asyncio.Event()
        self.cancel_requested = asyncio.Event()
        self.on_cancel: Callable[[], object] | None = None

    # -- outgoing ---------------------------------------------------------------------
    def emit(self, event: AgentEvent) -> None:
        """Send a progress event (no waiting: events are small and the parent is quick)."""
        self.channel.send_nowait(Event(event=event))

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
        await self.channel.send(
            DelegateRequest(request_id=request_id, call_id=call_id, tool=tool, arguments=arguments)
        )
        reply: DelegateReply = await answer
        return reply.content, reply.is_error

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

    def take_steering(self) -> list[str]:
        texts, self._steering = self._steering, []
        self.steered.clear()
        return texts

    # -- incoming ---------------------------------------------------------------------
    def dispatch(self, frame: Frame) -> None:
        if isinstance(frame, ApprovalReply | DelegateReply | PermitGrant):
            future = self._pending.pop(frame.request_id, None)
            if future is not None and not future.done():
                future.set_result(frame)
        elif isinstance(frame, Control):
            self._control(frame)
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
            self._steering.append(frame.text)
            self.steered.set()
            self.emit(Notice(message="steering message received: it joins the next turn"))

    def fail_pending(self, exc: BaseException) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()


def child_main(conn: Any, boot: ChildBoot) -> None:
    """Process target: harden the process, then serve one run over ``conn``."""
    global INHERITED_MODULES
    INHERITED_MODULES = frozenset(sys.modules)
    _harden(boot)

    async def pipe() -> ChildChannel:
        if boot.prepare_url:  # before the Hello: a ready spare is a connected one
            from agentcell.worker.models._http import prepare_connection

            await prepare_connection(boot.prepare_url)
        return await PipeChannel.open(conn, max_frame_bytes=boot.max_frame_bytes)

    asyncio.run(_serve_then_exit(pipe, _preload_status))


def remote_child_main(connect: Callable[[], Awaitable[ChildChannel]], boot: ChildBoot) -> None:
    """Serve one run over a channel ``connect`` opens (TCP back to the parent), in a
    process started by a remote backend (a Ray actor) rather than by the fork server.

    This process stays behind as the run's guardian: a subreaper that forks the process
    that does the work, waits for it, then kills whatever it left behind (its session,
    and descendants that left it, re-parented here) and exits the way it did — so the
    actor reads the real exit status. If the actor itself dies, the guardian's death
    signal (SIGTERM, caught) still lets it clean up before it goes.
    """
    os.setsid()
    _proc.set_child_subreaper()
    worker: list[int] = []
    signal.signal(
        signal.SIGTERM,
        lambda *_: _guardian_exit(worker[0] if worker else 0, 128 + signal.SIGTERM),
    )
    _proc.set_parent_death_signal(signal.SIGTERM)
    worker_pid = os.fork()
    worker.append(worker_pid)
    if worker_pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setsid()
        _proc.set_parent_death_signal(signal.SIGKILL)
        _proc.set_child_subreaper()
        _proc.raise_oom_score(boot.oom_score_adj)
        faulthandler.enable(all_threads=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        asyncio.run(_serve_then_exit(connect, lambda: (True, [])))
        os._exit(EXIT_FAILURE)  # not reached: _serve_then_exit leaves with os._exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            _guardian_exit(worker_pid, EXIT_FAILURE)
        except InterruptedError:
            continue
        if pid == worker_pid:
            break  # orphans it left reparent here and are reaped by the loop's next turns
    code = os.waitstatus_to_exitcode(status)
    _guardian_exit(worker_pid, code)


def _guardian_exit(worker_pid: int, code: int) -> NoReturn:
    table = _proc.process_table()
    if worker_pid:
        _proc.kill_tree(worker_pid, signal.SIGKILL, table)
        _sandbox.release(worker_pid)  # its cgroup and private temp folder, on this node
    _proc.kill_descendants(os.getpid())
    if code < 0:  # leave by the same signal, so whoever waits on us sees it
        sig = -code
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(code)


async def _serve_then_exit(
    connect: Callable[[], Awaitable[ChildChannel]],
    preload_status: Callable[[], tuple[bool, list[str]]],
) -> None:
    code = EXIT_FAILURE
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


def _harden(boot: ChildBoot) -> None:
    from agentcell.worker import _forkserver_boot  # inherited from the fork server, not re-imported

    os.setsid()
    _proc.set_parent_death_signal(signal.SIGKILL)
    # The parent may have died between fork and prctl: then nobody would kill us.
    if os.getppid() != _forkserver_boot.BOOT_PID and os.getpid() != _forkserver_boot.BOOT_PID:
        os._exit(EXIT_ORPHANED)
    _proc.set_child_subreaper()
    _proc.raise_oom_score(boot.oom_score_adj)
    _release_multiprocess_fds()
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
    from agentcell.worker import _forkserver_boot

    if os.getpid() == _forkserver_boot.BOOT_PID:
        return False, ["agentcell.worker._forkserver_boot"]
    missing = list(_forkserver_boot.MISSING_PRELOAD)
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
        )
    try:
        _apply_limits(first.limits)
        handler = _resolve_handler(first.handler)
    except Exception as exc:
        return await _fail(channel, type(exc).__name__, str(exc), EXIT_FAILURE, exc)
    return await _run(channel, first, handler)


class _Exit(Exception):
    """A handler called ``sys.exit``: leave with that code and no result."""

    def __init__(self, code: int) -> None:
        self.code = code


async def _call(handler: Handler, start: Start, link: ChildLink) -> RunResult:
    try:
        return await handler(start, link)
    except SystemExit as exc:
        # Caught here, inside the task: a SystemExit escaping a task would unwind the
        # whole event loop, and asyncio.run's clean-up would then look like a cancel.
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise _Exit(code) from None


async def _run(channel: ChildChannel, start: Start, handler: Handler) -> int:
    link = ChildLink(channel, start)
    task = asyncio.create_task(_call(handler, start, link))
    link.on_cancel = task.cancel
    reader = asyncio.create_task(_read_parent(channel, link, task))
    beat = asyncio.create_task(_heartbeat(channel, start.heartbeat_s))
    try:
        result = await task
    except asyncio.CancelledError:
        result = RunResult(status=RunStatus.CANCELLED, error="cancelled by the parent")
    except _Exit as exc:
        with contextlib.suppress(Exception):
            await channel.aclose()  # what it emitted before exiting still arrives
        channel.close()
        return exc.code
    except BaseException as exc:  # MemoryError included: report it if we still can
        return await _fail(channel, type(exc).__name__, str(exc), EXIT_FAILURE, exc)
    finally:
        beat.cancel()
        reader.cancel()
    try:
        await channel.send(Result(result=result, peak_rss_bytes=peak_rss_bytes()))
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
) -> int:
    text = "".join(traceback.format_exception(exc)) if exc is not None else ""
    with contextlib.suppress(Exception):
        await channel.send(Failure(error_type=error_type, message=message, traceback=text))
        await channel.aclose()
    channel.close()
    return code


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reap_descendants() -> None:
    """Kill and reap whatever tools left behind.

    This child is a subreaper, so every live descendant is in its subtree and "no child
    at all" (one cheap ``waitpid``) means nothing was left behind.
    """
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return
    _proc.kill_session(os.getpid())
    _proc.kill_descendants(os.getpid())
    with contextlib.suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)
