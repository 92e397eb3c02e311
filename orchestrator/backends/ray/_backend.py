"""The Ray backend: sub-agents on a Ray cluster, with the same frames as local children.

For each run the parent registers a one-time token with its TCP listener and asks the
Ray driver (a helper process: ``_ray_driver``) for an actor; the actor starts
``agentcell.worker.remote`` on its node, which dials back, proves it holds the token and
then speaks exactly the frames a fork-server child speaks. So streaming, approvals,
steering, cancellation, background runs, limits and records behave as they do locally.

How a remote run ends is decided from three witnesses: the frames (a ``Result`` or
``Failure``), the channel (EOF), and the driver's report of how the sub-agent process or
its actor ended (exit status, or Ray's error: actor died, node died, out of memory).
Silence past the heartbeat timeout (a vanished node) and the deadline end it from here.
``import ray`` happens only in the driver process, never in the orchestrator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any

from agentcell.orchestrator.backends._interface import FrameQueue, PoolError
from agentcell.orchestrator.backends._outcome import ChildOutcome, OutcomeKind, describe_exit
from agentcell.protocol import (
    PROTOCOL_VERSION,
    ChannelClosed,
    Control,
    ControlAction,
    Failure,
    Frame,
    Heartbeat,
    Hello,
    ProtocolError,
    Result,
    StreamChannel,
    TaskNursery,
    TcpListener,
    frame_is_authentic,
    new_frame_key,
)

log = logging.getLogger("agentcell.ray")

#: Environment that keeps a Ray cluster on this machine's loopback (design brief §9):
#: without these a head probes cloud metadata, posts usage reports and swaps 127.0.0.1
#: for the interface address. ``ray_bootstrap_config.yaml`` in $HOME completes them.
LOOPBACK_ENV: dict[str, str] = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}


class RayBackendError(PoolError):
    """The Ray cluster cannot be reached, or it cannot host a sub-agent."""


def loopback_ray_environment(home: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a Ray process that must talk to loopback only.

    ``home`` gets the ``ray_bootstrap_config.yaml`` whose presence stops the head's
    dashboard module from probing cloud metadata servers.
    """
    os.makedirs(home, exist_ok=True)
    bootstrap = os.path.join(home, "ray_bootstrap_config.yaml")
    if not os.path.exists(bootstrap):
        with open(bootstrap, "w") as f:
            f.write("{}\n")
    env = dict(os.environ if base is None else base)
    env.update(LOOPBACK_ENV, HOME=home)
    return env


class _RemoteWorker:
    """Parent-side record of one remote sub-agent (one actor, one process)."""

    def __init__(self, backend: RayBackend, run_id: str) -> None:
        loop = asyncio.get_running_loop()
        self.backend = backend
        self.run_id = run_id
        self.channel: StreamChannel | None = None
        self.hello: Hello | None = None
        self.result: Result | None = None
        self.failure: Failure | None = None
        self.peak_rss = 0
        self.node = ""
        self.actor_pid: int | None = None
        self.report: dict[str, Any] | None = None  # the driver's "ended" message
        self.kill_kind: OutcomeKind | None = None
        self.kill_detail = ""
        self.lease: RemoteLease | None = None
        self.last_seen = loop.time()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.placed: asyncio.Future[None] = loop.create_future()
        self.dead: asyncio.Future[ChildOutcome] = loop.create_future()
        self.channel_ended = asyncio.Event()
        self.timers: list[asyncio.TimerHandle] = []
        self.frame_key = new_frame_key()  # as for a local child: results must be signed
        self.start_sent = False

    @property
    def pid(self) -> int:
        return self.hello.pid if self.hello is not None else 0

    # -- frames --------------------------------------------------------------------------
    def attach(self, channel: StreamChannel) -> None:
        self.channel = channel
        channel.set_frame_callback(self.on_channel_activity)
        self.on_channel_activity()

    def on_channel_activity(self) -> None:
        assert self.channel is not None
        while True:
            try:
                frame = self.channel.poll()
            except ChannelClosed:
                self._channel_done()
                return
            except ProtocolError as exc:
                self.kill(OutcomeKind.PROTOCOL_ERROR, f"protocol error: {exc}")
                self._channel_done()
                return
            if frame is None:
                return
            self.on_frame(frame)

    def on_frame(self, frame: Frame) -> None:
        self.last_seen = asyncio.get_running_loop().time()
        if isinstance(frame, Heartbeat):
            self.peak_rss = max(self.peak_rss, frame.peak_rss_bytes)
            return
        if self.hello is None:
            if not isinstance(frame, Hello):
                self.kill(OutcomeKind.PROTOCOL_ERROR, "protocol error: expected Hello")
            elif frame.protocol_version != PROTOCOL_VERSION:
                self.kill(
                    OutcomeKind.PROTOCOL_ERROR,
                    f"protocol mismatch: the node runs agentcell protocol "
                    f"v{frame.protocol_version}, the parent v{PROTOCOL_VERSION}; install one "
                    "agentcell version on every node",
                )
            else:
                self.hello = frame
                if not self.ready.done():
                    self.ready.set_result(None)
            return
        if (
            isinstance(frame, Result | Failure)
            and self.start_sent
            and not frame_is_authentic(frame, self.frame_key)
        ):
            log.warning("remote sub-agent %s: an unsigned %s was dropped", self.run_id, frame)
            return
        if isinstance(frame, Result):
            if self.result is not None:
                return  # the first result counts
            self.result = frame
            self.peak_rss = max(self.peak_rss, frame.peak_rss_bytes)
        elif isinstance(frame, Failure):
            self.failure = frame
        if self.lease is not None:
            self.lease._deliver(frame)

    def _channel_done(self) -> None:
        if not self.channel_ended.is_set():
            self.channel_ended.set()
            self.backend._later(self._settle())

    # -- how it ends ---------------------------------------------------------------------
    def on_report(self, report: dict[str, Any]) -> None:
        """The driver says the sub-agent process (or its actor) has ended."""
        self.report = report
        if not self.ready.done():
            self.ready.set_exception(
                RayBackendError(report.get("error") or "the sub-agent exited before connecting")
            )
        if self.channel is None:
            self._finish()
        else:
            self.backend._later(self._settle())

    async def _settle(self) -> None:
        """Both witnesses, or one and a wait for the other, then the outcome.

        The channel may end first: the driver's report, which names the cause (the actor
        died, its node died, memory ran out, the exit status), then follows once Ray has
        noticed, which on a loaded machine takes seconds. It is waited for up to
        ``REPORT_GRACE_S``; the channel, after a report, only ``exit_grace``."""
        if self.dead.done():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.backend.exit_grace):
                await self.channel_ended.wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REPORT_GRACE_S):
                while self.report is None:
                    await self.backend._reported.wait()
        self._finish()

    def kill(self, kind: OutcomeKind, detail: str) -> None:
        if self.dead.done():
            return
        if self.kill_kind is None:
            self.kill_kind, self.kill_detail = kind, detail
        self.backend._command({"op": "stop", "id": self.run_id})
        if self.channel is not None:
            self.channel.abort()

    def escalate(self, kind: OutcomeKind, detail: str, grace: float) -> None:
        """Cancel politely over the channel, then stop the actor after ``grace``."""
        if self.dead.done() or self.kill_kind is not None:
            return
        self.kill_kind, self.kill_detail = kind, detail
        if self.channel is not None:
            with contextlib.suppress(ChannelClosed):
                self.channel.send_nowait(Control(action=ControlAction.CANCEL))
        loop = asyncio.get_running_loop()
        self.timers.append(loop.call_later(grace, self.kill, kind, detail))

    def _finish(self) -> None:
        if self.dead.done():
            return
        for timer in self.timers:
            timer.cancel()
        if self.channel is not None:
            self.channel.close()
        outcome = self._outcome()
        self.dead.set_result(outcome)
        if self.lease is not None:
            self.lease._deliver(None)
        self.backend._workers.pop(self.run_id, None)

    def _outcome(self) -> ChildOutcome:
        report = self.report or {}
        code, sig = report.get("exit_code"), report.get("signal")
        if sig is not None:
            exit_text = describe_exit(-int(signal.Signals[sig]))[2]
        elif code is not None:
            exit_text = describe_exit(int(code))[2]
        else:
            exit_text = report.get("error") or "the connection to the remote sub-agent was lost"
        common: dict[str, Any] = {
            "pid": self.pid,
            "exit_code": code,
            "signal": sig,
            "result": self.result.result if self.result is not None else None,
            "failure": self.failure,
            "peak_rss_bytes": self.peak_rss,
        }
        if self.kill_kind is not None:
            return ChildOutcome(kind=self.kill_kind, detail=self.kill_detail, **common)
        cause = report.get("cause") or ""
        if cause:  # Ray itself failed it: the actor or the node died, memory ran out
            return ChildOutcome(kind=OutcomeKind.SIGNALED, detail=report["error"], **common)
        clean = self.result is not None and code == 0
        if clean:
            assert self.result is not None
            return ChildOutcome(
                kind=OutcomeKind.RESULT, detail=self.result.result.status.value, **common
            )
        if self.failure is not None and sig is None:
            detail = f"{self.failure.error_type}: {self.failure.message}"
            return ChildOutcome(kind=OutcomeKind.FAILURE, detail=detail, **common)
        if self.result is not None and sig is not None:
            # A result followed by a death by signal counts as that death, never as done.
            common["result"] = None
        kind = OutcomeKind.SIGNALED if sig is not None else OutcomeKind.EXITED
        return ChildOutcome(kind=kind, detail=exit_text, **common)


class RemoteLease(FrameQueue[_RemoteWorker]):
    """A remote sub-agent for one run: the same surface as a local ``Lease``."""

    def __init__(self, worker: _RemoteWorker) -> None:
        super().__init__(worker)
        worker.lease = self

    @property
    def node(self) -> str:
        return self._worker.node

    @property
    def outcome(self) -> ChildOutcome | None:
        dead = self._worker.dead
        return dead.result() if dead.done() else None

    async def send(self, frame: Frame) -> None:
        channel = self._worker.channel
        if channel is None:
            raise ChannelClosed("the remote sub-agent is not connected")
        await channel.send(self._sealed(frame))

    def send_nowait(self, frame: Frame) -> None:
        channel = self._worker.channel
        if channel is None:
            raise ChannelClosed("the remote sub-agent is not connected")
        channel.send_nowait(self._sealed(frame))

    async def wait(self) -> ChildOutcome:
        return await asyncio.shield(self._worker.dead)

    def set_deadline(
        self, seconds: float, *, cancel_grace: float = 2.0, term_grace: float = 2.0
    ) -> None:
        worker = self._worker
        detail = f"deadline of {seconds:g} s passed"
        loop = asyncio.get_running_loop()
        worker.timers.append(
            loop.call_later(
                seconds, worker.escalate, OutcomeKind.DEADLINE, detail, cancel_grace + term_grace
            )
        )

    def set_memory_limit(self, limit_bytes: int) -> None:
        """Remote children apply RLIMIT_AS to themselves (from ``Start.limits``); the
        tree-wide watchdog of the local pool does not reach other machines."""

    def set_cpu_limit(self, seconds: float) -> None:
        """Remote children apply RLIMIT_CPU to themselves; the tree-wide CPU watchdog of
        the local pool does not reach other machines."""

    @contextlib.contextmanager
    def slot_lent(self) -> Iterator[None]:
        """While this sub-agent waits on a nested one, its place under ``max_workers`` is
        lent to the backend (as the local pool's ``Lease.slot_lent``)."""
        backend = self._worker.backend
        backend.lend_slot(+1)
        try:
            yield
        finally:
            backend.lend_slot(-1)

    def cancel(self, reason: str = "cancelled", *, grace: float = 2.0) -> None:
        self._worker.escalate(OutcomeKind.KILLED, reason, 2 * grace)

    async def release(self) -> ChildOutcome:
        worker = self._worker
        if not worker.dead.done():
            if worker.result is None and worker.failure is None:
                worker.kill(OutcomeKind.KILLED, "lease released before the sub-agent finished")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(worker.backend.exit_grace * 2):
                    await asyncio.shield(worker.dead)
            if not worker.dead.done():
                worker.kill(OutcomeKind.KILLED, "the remote sub-agent did not exit")
                worker._finish()
        return await asyncio.shield(worker.dead)


#: How long the outcome of a remote sub-agent whose connection ended waits for the
#: driver to say why (Ray's actor-death notice is slow on a loaded machine).
REPORT_GRACE_S = 30.0


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """Where the cluster is, where its nodes reach the parent, and what each sub-agent
    asks of a node: the ``[ray]`` settings (``RaySettings``), as the backend takes them."""

    address: str = "auto"  # "auto": a cluster already running on this machine
    # For Ray to place an actor and its sub-agent to connect back (and for the driver to
    # reach the cluster at all).
    connect_timeout: float = 60.0
    num_cpus: float = 0.25  # per sub-agent
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)  # custom ones
    # The parent's listener, and what the nodes dial if not listen_host (NAT, 0.0.0.0).
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    advertise_host: str | None = None
    # For a connection to the listener to authenticate, once made (connect_timeout is
    # for Ray to place the actor): short, so idle strangers cannot pile up.
    handshake_timeout: float = 5.0
    max_pending_connections: int = 64
    node_ip_address: str | None = None  # this machine's address in the cluster, if given


class RayBackend:
    """Sub-agents as Ray actors:
    ``async with RayBackend(options=RayOptions(address=...)) as ray: ...``.

    ``acquire`` places one actor per run and returns a lease once the sub-agent has
    connected back and said ``Hello``; it raises ``RayBackendError`` when no node takes
    it within ``connect_timeout`` (a request Ray cannot place would pend forever).
    """

    def __init__(
        self,
        *,
        options: RayOptions | None = None,
        heartbeat_timeout: float = 60.0,
        exit_grace: float = 5.0,
        max_workers: int = 64,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.options = options = options or RayOptions()
        self.advertise_host = options.advertise_host or options.listen_host
        self._resources = dict(options.resources)  # as they were when the backend was made
        self.heartbeat_timeout = heartbeat_timeout
        self.exit_grace = exit_grace
        self.max_workers = max_workers
        self.env = dict(env) if env is not None else None
        self.nodes = 0
        self._listener: TcpListener | None = None
        self._driver: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._workers: dict[str, _RemoteWorker] = {}
        self._slots = asyncio.Semaphore(max_workers)
        self._owed = 0  # lent slots given back while all were taken: the next ends repay
        self._reported = asyncio.Event()
        # The reader, the watchdog and each run's settling: owned by this group, entered
        # in start and closed (cancelled and awaited) by close.
        self._tasks = TaskNursery("the Ray backend")
        self._closed = False
        self._driver_error = ""
        # Ray's own output goes to an unnamed file: it gets a name (this path) only when
        # an error asks the user to read it, so no backend leaves a file in the temp
        # folder, not even one whose parent was killed.
        self.driver_log = ""
        self._driver_log_fd = -1
        self._driver_ready = False

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> RayBackend:
        options = self.options
        self._listener = await TcpListener(
            handshake_timeout=options.handshake_timeout,
            max_pending=options.max_pending_connections,
        ).start(options.listen_host, options.listen_port)
        env = dict(self.env if self.env is not None else os.environ)
        env.update(LOOPBACK_ENV)
        # Ray's own logging (its C++ core writes straight to fd 2) goes to a file, not
        # over the user's terminal; errors below point at it.
        fd, unnamed = tempfile.mkstemp(prefix="agentcell-ray-driver-", suffix=".log")
        os.unlink(unnamed)
        self._driver_log_fd = fd
        self._driver = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentcell.orchestrator.backends.ray._driver",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            stderr=fd,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        config = {"address": options.address, "node_ip_address": options.node_ip_address}
        assert self._driver.stdin is not None and self._driver.stdout is not None
        self._driver.stdin.write(json.dumps(config).encode() + b"\n")
        try:
            async with asyncio.timeout(options.connect_timeout):
                first = json.loads(await self._driver.stdout.readline() or b"{}")
        except TimeoutError:
            self._name_driver_log()
            await self.close()
            raise RayBackendError(
                f"the Ray cluster at {options.address} did not answer within "
                f"{options.connect_timeout:g} s (check --ray-address; Ray's log: "
                f"{self.driver_log})"
            ) from None
        if first.get("op") != "ready":
            self._name_driver_log()
            await self.close()
            error = first.get("error") or "the Ray driver exited"
            raise RayBackendError(
                f"{error} (address {options.address}; Ray's log: {self.driver_log})"
            )
        self.nodes = int(first.get("nodes", 0))
        self._driver_ready = True
        await self._tasks.open()
        self._reader = self._tasks.start(self._read_driver(), name="Ray driver reader")
        self._watchdog = self._tasks.start(self._watch(), name="Ray watchdog")
        return self

    async def __aenter__(self) -> RayBackend:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for worker in list(self._workers.values()):
            worker.kill(OutcomeKind.KILLED, "the backend was closed")
        if self._workers:
            await asyncio.wait([w.dead for w in self._workers.values()], timeout=15)
        for worker in list(self._workers.values()):
            worker._finish()
        driver = self._driver
        if driver is not None and driver.returncode is None:
            with contextlib.suppress(Exception):
                assert driver.stdin is not None
                driver.stdin.write(b'{"op": "shutdown"}\n')
                driver.stdin.close()
            try:
                # A driver that never said ready is stuck in Ray's connect and reads no
                # shutdown: waiting for it would add 15 s to every failed start.
                async with asyncio.timeout(15 if self._driver_ready else 0):
                    await driver.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(driver.pid, signal.SIGKILL)
                await driver.wait()
        await self._tasks.aclose()
        if self._listener is not None:
            await self._listener.aclose()
        if self._driver_log_fd >= 0:
            os.close(self._driver_log_fd)
            self._driver_log_fd = -1

    def _name_driver_log(self) -> None:
        """Give the driver's output a file the user can read (after a failed start)."""
        fd, self.driver_log = tempfile.mkstemp(prefix="agentcell-ray-driver-", suffix=".log")
        with open(fd, "wb") as named, open(self._driver_log_fd, "rb", closefd=False) as out:
            out.seek(0)
            shutil.copyfileobj(out, named)

    # -- leasing -------------------------------------------------------------------------
    def expect(self, n: int) -> None:
        """Ignored: a Ray actor is created per run on whichever node takes it, and one
        made ahead would hold that node's resources for a run that may never come."""

    def lend_slot(self, change: int) -> None:
        """A sub-agent waiting on its nested one lends (+1) or takes back (-1) its slot."""
        if change > 0:
            self._slots.release()
        else:
            self._owed += 1  # taken back from the next slot that frees (never a wait)

    def _slot_freed(self) -> None:
        if self._owed:
            self._owed -= 1
        else:
            self._slots.release()

    async def acquire(self) -> RemoteLease:
        if self._closed or self._listener is None or self._driver is None:
            raise RayBackendError("the Ray backend is not running")
        if self._driver_error:
            raise RayBackendError(self._driver_error)
        options = self.options
        await self._slots.acquire()
        run_id = f"r{secrets.token_hex(6)}"
        worker = _RemoteWorker(self, run_id)
        worker.dead.add_done_callback(lambda _f: self._slot_freed())
        self._workers[run_id] = worker
        token = self._listener.expect(run_id)
        host, port = self._listener.address
        request = {
            "host": self.advertise_host,
            "port": port,
            "agent_id": run_id,
            "token": token.hex(),
            "connect_timeout_s": options.connect_timeout,
        }
        self._command(
            {
                "op": "start",
                "id": run_id,
                "request": request,
                "num_cpus": options.num_cpus,
                "resources": self._resources,
            }
        )
        refused: list[Exception] = []  # the handshake's failure, raised here as before
        try:
            async with (
                asyncio.timeout(options.connect_timeout),
                TaskNursery("a Ray sub-agent's connection") as group,
            ):
                accepting = group.start(self._listener.accept(run_id), on_error=refused.append)
                ended: asyncio.Future[Any] = worker.dead
                done, _ = await asyncio.wait(
                    {accepting, ended}, return_when=asyncio.FIRST_COMPLETED
                )
                if refused:
                    raise refused[0]
                if accepting not in done:
                    raise RayBackendError(  # leaving the group cancels the accept
                        self.report_error(worker) or "the sub-agent ended before connecting"
                    )
                channel = accepting.result()
                assert channel is not None
                worker.attach(channel)
                await worker.ready
        except TimeoutError:
            worker.kill(OutcomeKind.KILLED, "never connected")
            worker._finish()
            self._listener.forget(run_id)
            raise RayBackendError(
                f"no Ray node started the sub-agent within {options.connect_timeout:g} s "
                "(the cluster may lack the CPUs or resources it asks for, or cannot reach "
                f"the parent at {self.advertise_host}:{port})"
            ) from None
        except BaseException:
            worker.kill(OutcomeKind.KILLED, "acquire failed")
            worker._finish()
            self._listener.forget(run_id)
            raise
        worker.last_seen = asyncio.get_running_loop().time()
        return RemoteLease(worker)

    @staticmethod
    def report_error(worker: _RemoteWorker) -> str:
        return str((worker.report or {}).get("error") or "")

    # -- the driver ----------------------------------------------------------------------
    def _command(self, message: dict[str, Any]) -> None:
        driver = self._driver
        if driver is None or driver.stdin is None or driver.stdin.is_closing():
            return
        driver.stdin.write(json.dumps(message).encode() + b"\n")

    async def _read_driver(self) -> None:
        assert self._driver is not None and self._driver.stdout is not None
        while line := await self._driver.stdout.readline():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            worker = self._workers.get(str(message.get("id")))
            if worker is None:
                continue
            if message.get("op") == "placed":
                worker.node = str(message.get("node", ""))[:12]
                worker.actor_pid = message.get("actor_pid")
            elif message.get("op") == "ended":
                worker.on_report(message)
                self._reported.set()
                self._reported.clear()
        # The driver is gone: nothing it hosted can report any more.
        self._driver_error = "the Ray driver process exited"
        for worker in list(self._workers.values()):
            if worker.report is None:
                worker.on_report(
                    {"cause": "driver", "error": "the Ray driver process exited unexpectedly"}
                )

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.heartbeat_timeout / 4))
            now = asyncio.get_running_loop().time()
            for worker in list(self._workers.values()):
                silent = now - worker.last_seen
                if worker.hello is not None and silent > self.heartbeat_timeout:
                    worker.kill(
                        OutcomeKind.HEARTBEAT,
                        f"no heartbeat for {silent:.1f} s (limit {self.heartbeat_timeout:g} s): "
                        "its node may be gone",
                    )

    def _later(self, coro: Coroutine[Any, Any, None]) -> None:
        if not self._tasks.is_open:  # closed: close has settled every worker itself
            coro.close()
            return
        self._tasks.start(coro)

    @property
    def live(self) -> int:
        return len(self._workers)


def _die_with_parent() -> None:
    # The driver owns the run's actors; Ray kills an owner's actors when the owner dies,
    # so the orchestrator's death takes the driver, then the actors, then their processes.
    from agentcell.worker.process import set_parent_death_signal

    set_parent_death_signal(signal.SIGKILL)
