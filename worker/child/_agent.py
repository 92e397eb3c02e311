"""The agent handler a child runs for a ``Start`` with an ``AgentSpec``.

It builds the sub-agent from the spec — fresh session (seeded only for ``context: fork``),
narrowed tool registry, permission hooks, the model — runs the engine, and streams its
events to the parent. Approvals and parent-side tools travel over the pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import fcntl
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dill
import msgspec
from agentcell.protocol import (
    AgentEvent,
    AgentSpec,
    Message,
    Notice,
    RemoteTool,
    RunResult,
    RunStatus,
    Start,
    TaskNursery,
    TextDelta,
    ToolCall,
    UserMessage,
)
from agentcell.worker.child import _proc
from agentcell.worker.child._main import ChildLink
from agentcell.worker.engine._compaction import Compactor
from agentcell.worker.engine._hook_relay import RelayedHooks, relayed_stop_hook
from agentcell.worker.engine._loop import Attachments, Engine, Limits, ToolSetting
from agentcell.worker.engine._session import Session
from agentcell.worker.engine._tool_journal import ToolJournal
from agentcell.worker.mcp._client import mcp_arguments
from agentcell.worker.models import Model, ModelError, request_gate, resolve_model
from agentcell.worker.models.transports._permits import LinkGate
from agentcell.worker.records._redact import Redactor
from agentcell.worker.records._transcript import Transcript, private_file
from agentcell.worker.rules._policy import DenyTools, Hook, PermissionPolicy
from agentcell.worker.sandbox import _apply as _sandbox
from agentcell.worker.sandbox import _bash_userns, _mountns
from agentcell.worker.sandbox import _one_thread as one_thread
from agentcell.worker.tools import Tool, ToolContext, ToolOutput
from agentcell.worker.tools._base import ToolRegistry
from agentcell.worker.tools._builtin import builtin_tools
from agentcell.worker.tools._skill import SkillTool
from agentcell.worker.tools._todo import named_tools

#: Tools that coordinate sub-agents. Never in a child's own registry; a child reaches
#: ``task`` only as a parent-side tool, and only when its depth allows.
COORDINATION_TOOLS = frozenset({"task", "task_status", "task_wait", "task_control"})

_FLUSH_SECONDS = 0.02
_FLUSH_CHARS = 4096


async def run_agent(start: Start, link: ChildLink) -> RunResult:
    spec = start.spec
    if spec is None:
        return RunResult(status=RunStatus.ERROR, error="the Start frame carries no agent spec")
    prepare_walls(spec, start)
    # The blob comes from our own parent over a private pipe: trusted like the code itself.
    objects: dict[str, Any] = dill.loads(start.objects) if start.objects else {}  # noqa: S301
    _take_environment(spec)
    try:
        model: Model = objects.get("model") or _own_model(spec, link)
    except ModelError as exc:
        return RunResult(status=RunStatus.ERROR, error=str(exc))
    if spec.model_permits:  # the parent keeps the provider's limits: ask it first
        request_gate.set(LinkGate(link))
    engine = build_engine(spec, start, link, model, objects.get("tools", []))
    if start.trace_context:  # the parent traces: this run's spans go to it as frames
        engine.tracer = _child_tracer(start, link)
    link.on_cancel, link.on_interrupt = engine.cancel, engine.in_flight.interrupt
    drain = _capture_output(spec)  # started once the walls are up (see there)
    transcript = _open_transcript(spec)
    compactor = attach_compactor(spec, engine, link, transcript)
    # Before the walls go up: a server process that already runs keeps its own view of
    # the machine (its command and runtime stay reachable), and it is in our tree.
    try:
        servers = await start_mcp_servers(spec, engine, link)
    except OSError as exc:
        return RunResult(status=RunStatus.ERROR, error=f"cannot enter the sandbox: {exc}")
    # Last step before the agent's first action: what is open now (the pipe, the record
    # files) stays usable; everything opened from here on goes through the walls.
    try:
        box = enter_sandbox(spec, engine, model, objects)
    except OSError as exc:
        if servers is not None:
            await servers.stop()
        return RunResult(status=RunStatus.ERROR, error=f"cannot enter the sandbox: {exc}")
    finally:
        if drain is not None:  # behind the walls (or, with none, for the run's last words)
            drain.start()
    engine.command_preexec = box.bash_preexec()
    if box.egress is not None:  # bash's relay to the parent's proxy (a network: list)
        await box.egress.start_relay()
    if spec.memory_dir:  # the file tools reach the memory folder too, wherever it is
        engine.extra_roots = (Path(spec.memory_dir),)
    sink = CoalescingSink(link, transcript)
    session = Session(spec.history)
    try:
        async with TaskNursery("the process cap's watch") as watch:
            if box.cap is not None:
                watch.start(watch_process_cap(box, engine))
            result = await engine.run(spec.prompt, session, on_event=sink)
            await watch.aclose()  # the watch never ends by itself
        if box.process_cap_hit() and result.status is RunStatus.CANCELLED:
            result.status = RunStatus.LIMIT
            result.error = (
                f"process limit: this sub-agent's processes reached max_processes="
                f"{box.cap.limit if box.cap else '?'} (a fork was refused), so it was stopped"
            )
        result.data["sandbox"] = box.report()
        if compactor is not None and compactor.compactions:
            result.data["compactions"] = compactor.compactions
        if servers is not None:
            result.data["mcp_problems"] = list(servers.problems)
    finally:
        if servers is not None:
            await servers.stop()
        sink.flush()
        await model.aclose()
        if transcript is not None:
            if compactor is not None and compactor.compactions:
                # Both histories: the full one, and (last, as resume reads it) the compacted.
                transcript.write("full_messages", messages=compactor.full_history(session))
            transcript.messages(session.messages)
        if drain is not None:
            _end_capture(drain)
    if transcript is not None:
        transcript.finish(result)  # a cut by a full disk is said in the result's data
    export = getattr(model, "export_record", None)
    if export is not None:
        result.data["test_model"] = export()
    return result


def attach_compactor(
    spec: AgentSpec, engine: Engine, link: ChildLink, transcript: Transcript | None
) -> Compactor | None:
    """Compaction past ``spec.compact_at_tokens``; each one is recorded (the history it
    replaced, the summary). PreCompact hooks are the parent's: relayed when it has any."""
    if spec.compact_at_tokens <= 0:
        return None

    def recorded(full: list[Message], summary: str, compacted: list[Message]) -> None:
        if transcript is not None:
            transcript.write("compaction", summary=summary, replaced=len(full) - len(compacted) + 1)

    pre_compact = None
    # The parent sets hooked_tools["PreCompact"] to the triggers its PreCompact hooks match
    # (Claude Code's matchers: "auto", "manual"); it runs them and answers (the hooks'
    # side). The trigger travels as the frame's ``tool``, the payload as its arguments.
    if "auto" in spec.hooked_tools.get("PreCompact", ()):

        async def pre_compact(payload: dict[str, Any]) -> bool:
            reply = await link.run_hooks(
                "PreCompact", call_id="", tool="auto", arguments=json.dumps(payload)
            )
            return reply.blocked

    compactor = Compactor(spec.compact_at_tokens, pre_compact=pre_compact, on_compacted=recorded)
    engine.compactor = compactor
    return compactor


def _child_tracer(start: Start, link: ChildLink) -> Any:
    try:
        from agentcell.worker.tracing._child import child_tracer
    except ImportError:
        link.emit(Notice(message="tracing: the OpenTelemetry SDK is not installed here"))
        return None
    return child_tracer(start, link.channel.send_nowait)


def prepare_walls(spec: AgentSpec, start: Start) -> None:
    """What must happen while this process has one thread and is still dumpable: the
    user namespace it joins (the fork server's) or makes, the ones its bash commands
    will enter, and the numeric libraries kept from starting thread pools."""
    pair = _bash_userns.shared()
    _mountns.prepare(spec.sandbox, None if pair is None else pair[0])
    _sandbox.prepare_bash_namespaces(
        spec.sandbox,
        network=spec.network,
        egress=spec.egress_port is not None,
        processes="bash" in spec.tools or bool(start.objects),
    )
    if _sandbox.parse_mode(spec.sandbox) != "off":  # only walls need it: no pools, slower
        one_thread.numeric_libraries()


async def start_mcp_servers(spec: AgentSpec, engine: Engine, link: ChildLink) -> Any:
    """Start the run's MCP servers and give the engine their tools (None: it has none).
    A server that fails is a notice now and a line in the result; the run goes on. They
    gain no capability: what this process executes from here on gains none (raises
    ``OSError`` where that cannot be made so)."""
    if not spec.mcp_servers:
        return None
    _sandbox.before_servers(spec.sandbox)
    from agentcell.worker.mcp._client import McpServers

    seccomp = _sandbox.launcher_seccomp(spec.sandbox)  # the servers get the filter too
    log_prefix = os.path.join(spec.run_dir, f"{spec.agent_id}.mcp-") if spec.run_dir else ""
    servers = McpServers(
        spec.mcp_servers, workdir=spec.workdir, seccomp=seccomp, log_prefix=log_prefix
    )
    await servers.start()
    for tool in servers.tools:
        if tool.name not in engine.tools:
            engine.tools.add(tool)
    for problem in servers.problems:
        link.emit(Notice(message=problem))
    return servers


def _take_environment(spec: AgentSpec) -> None:
    """Exactly what the parent decided this run may see (no inherited secrets); and
    since the model key may now be in this process, its tools may not read it."""
    if spec.env is not None:
        os.environ.clear()
        os.environ.update(spec.env)
        _proc.set_dumpable(False)


def enter_sandbox(spec: AgentSpec, engine: Engine, model: Model, objects: dict[str, Any]) -> Any:
    """Apply the run's sandbox to this process; bash's environment gets the private TMPDIR."""
    if engine.env is None:
        engine.env = dict(os.environ)
    if _sandbox.parse_mode(spec.sandbox) != "off":
        one_thread.before_the_walls()
    # Custom objects (tools, a model object) are the caller's own Python code running in
    # this process: its network is theirs. Otherwise only the model endpoint is reachable.
    # A model whose requests go through the parent needs no TCP of this process at all.
    ports = None if objects else [] if spec.model_via_parent else model_ports(model, os.environ)
    if ports is not None:
        # An http MCP server is reached from this process: its port too, and no other.
        ports = sorted({*ports, *mcp_ports(spec)})
    return _sandbox.apply(
        spec.sandbox,
        workdir=os.path.realpath(spec.workdir),
        access=_sandbox.Access(
            run_dir=spec.run_dir,
            memory_dir=spec.memory_dir,
            read_paths=spec.read_paths,
            code_entries=spec.code_entries,
            network=spec.network,
            model_ports=ports,
            egress_port=spec.egress_port,
        ),
        env=engine.env,
        max_processes=spec.max_processes,
        tmp_size_mb=spec.tmp_size_mb,
        # Only a run that can start processes needs the cap (making a cgroup costs ms).
        cap_processes="bash" in spec.tools or bool(objects.get("tools")),
    )


def _own_model(spec: AgentSpec, link: ChildLink) -> Model:
    """The run's model from its spec: over the link to the parent when the spec says so
    (the parent holds the URL and the key), else straight to the provider."""
    if not spec.model_via_parent:
        return resolve_model(spec.model, spec.model_options)
    from agentcell.worker.models.transports._parent import LinkTransport

    transport = LinkTransport(link, link.start.frame_key)
    return resolve_model(spec.model, {**spec.model_options, "transport": transport})


def model_ports(model: Model, env: dict[str, str] | Any) -> list[int]:
    """The TCP ports the model client connects to: its base URL's, or its proxy's."""
    urls = [getattr(model, "base_url", None)]
    urls += [env.get(name) for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")]
    ports: set[int] = set()
    for url in urls:
        if not url:
            continue
        import httpx  # only here: a model with no URL (scripted, say) needs none

        try:
            parsed = httpx.URL(str(url))
        except (httpx.InvalidURL, TypeError):
            continue
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        ports.add(port)
    return sorted(ports)


def mcp_ports(spec: AgentSpec) -> list[int]:
    """The TCP ports of the run's http MCP servers."""
    ports = []
    for server in spec.mcp_servers:
        if server.type != "http":
            continue
        import httpx  # only here: every child asks, few have an http server

        try:
            url = httpx.URL(server.url)
        except httpx.InvalidURL:
            continue
        ports.append(url.port or (443 if url.scheme == "https" else 80))
    return ports


#: How often the process cap's counter is read. cgroup v1 sends no change notification
#: for ``pids.events``, so it is read; a fork bomb is stopped within this much time.
CAP_CHECK_S = 0.25


async def watch_process_cap(box: Any, engine: Engine) -> None:
    """End the run (status ``limit``) as soon as the cap has refused a fork: kill every
    process this one started, then cancel the engine (``run_agent`` relabels it)."""
    while not box.process_cap_hit():  # noqa: ASYNC110 - nothing to wait on: it is a file
        await asyncio.sleep(CAP_CHECK_S)
    _proc.kill_session(os.getpid())
    _proc.kill_descendants(os.getpid())
    engine.cancel()


#: How much of a child's stdout/stderr is kept; the rest is read and dropped.
OUTPUT_CAP_BYTES = 1 << 20


def _capture_output(spec: AgentSpec) -> threading.Thread | None:
    """Send this process's stdout and stderr to ``<run_dir>/<agent>.stderr.log``, capped.

    The descriptors become a pipe drained by a thread that writes up to the cap and then
    discards, so a tool that floods its output neither blocks nor fills the disk, and the
    parent's terminal stays clean. A fatal error's traceback (faulthandler) goes straight
    to the file: a dying process cannot count on the thread.

    The thread is returned unstarted: the caller starts it once the sandbox is entered.
    Landlock restricts the thread that asks and the threads it starts later, not those
    already running, so a drain thread started before would stay outside the walls, and
    code in the process that replaced a function it calls (``os.read``) would run there.
    Until then the pipe holds what is written (its buffer raised to the cap where the
    kernel allows), so an MCP server's start-up output does not block.
    """
    if not spec.run_dir:
        return None
    path = Path(spec.run_dir) / f"{spec.agent_id}.stderr.log"
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.fdopen(private_file(path), "ab", buffering=0)  # lives as long as the process
    faulthandler.enable(file=log, all_threads=True)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    with contextlib.suppress(OSError):  # above /proc/sys/fs/pipe-max-size: the default
        fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, OUTPUT_CAP_BYTES)
    os.close(write_end)
    return threading.Thread(
        target=_drain, args=(read_end, log, OUTPUT_CAP_BYTES), name="output-drain", daemon=True
    )


def _end_capture(drain: threading.Thread) -> None:
    """Flush what this process printed into the log before it exits (a child ends with
    ``os._exit``: nothing is flushed for it). A tool's leftover process may still hold
    the pipe, so the wait for the drain is bounded."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    drain.join(timeout=1.0)


def _drain(fd: int, log: Any, cap: int) -> None:
    kept = 0
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        if kept < cap:
            part = chunk[: cap - kept]
            log.write(part)
            kept += len(part)
            if kept >= cap:
                log.write(b"\n[agentcell: output capped at %d bytes; the rest is dropped]\n" % cap)


def _open_transcript(spec: AgentSpec) -> Transcript | None:
    if not spec.run_dir:
        return None
    transcript = Transcript(
        Path(spec.run_dir) / f"{spec.agent_id}.jsonl",
        spec.agent_id,
        redact=Redactor.from_env(digests=spec.redactions),
        key=spec.record_key,
    )
    transcript.write(
        "start",
        agent_type=spec.agent_type,
        model=spec.model,
        prompt=spec.prompt,
        tools=spec.tools + [t.name for t in spec.remote_tools],
        depth=spec.depth,
        pid=os.getpid(),
    )
    return transcript


def build_engine(
    spec: AgentSpec, start: Start, link: ChildLink, model: Model, custom_tools: Sequence[Tool]
) -> Engine:
    registry = child_registry(spec, custom_tools, link)
    remote = {tool.name for tool in spec.remote_tools}
    hooks: list[Hook] = [
        PermissionPolicy(
            spec.permission_mode,
            allow=spec.allow_rules,
            deny=spec.deny_rules,
            ask=spec.ask_rules,
            workdir=spec.workdir,
        ),
        # Second, independent layer: whatever the registry holds, coordination tools the
        # parent did not hand over as remote tools are refused by name.
        DenyTools(
            COORDINATION_TOOLS - remote,
            f"sub-agents at depth {spec.depth} cannot delegate (max depth {spec.max_depth})",
        ),
    ]
    hooked = spec.hooked_tools
    if hooked.get("PreToolUse") or hooked.get("PostToolUse") or spec.hook_patterns:
        # The parent's PreToolUse/PostToolUse hooks, asked over the pipe.
        hooks.append(RelayedHooks(hooked, link.run_hooks, spec.hook_patterns))
    # A message that came during its last model call is read before it stops; then a
    # SubagentStop hook for this agent decides, in the parent, whether it may stop.
    controls = TurnControls(link)
    stop = (
        relayed_stop_hook(spec.agent_type, link.run_hooks) if hooked.get("SubagentStop") else None
    )

    async def finish(session: Session) -> Sequence[Message]:
        late = await controls.late(session)
        return late if late or stop is None else await stop(session)

    limits = start.limits
    engine_limits = Limits(
        max_turns=spec.max_turns,
        max_tokens=spec.max_tokens,
        timeout_s=spec.timeout_s,
        max_tool_calls=limits.max_tool_calls if limits else None,
    )
    if limits is not None and limits.max_tool_output_bytes is not None:
        engine_limits.max_tool_output_chars = limits.max_tool_output_bytes

    async def approve(call: ToolCall, reason: str) -> tuple[bool, str]:
        return await link.request_approval(call.id, call.name, call.arguments, reason)

    return Engine(
        model,
        registry,
        system_prompt=spec.system_prompt,
        hooks=hooks,
        approver=approve,
        limits=engine_limits,
        workdir=spec.workdir,
        setting=ToolSetting(
            run_dir=spec.run_dir or None,
            agent_id=spec.agent_id,
            # With an explicit environment, bash gets its own (no model credentials).
            env=dict(spec.bash_env) if spec.env is not None else None,
        ),
        attached=Attachments(
            turn_hooks=[controls],
            finish_hooks=[finish],
            tool_journal=_tool_journal(spec, link),
        ),
    )


def _tool_journal(spec: AgentSpec, link: ChildLink) -> ToolJournal | None:
    """The parent's journal of this agent's tool calls, when the run is journaled; a
    resumed agent's journaled calls are not run again. The coordination tools always
    run: the parent itself resumes what they started."""
    if not spec.report_tools and not spec.replayed_tools:
        return None
    return ToolJournal(
        link.tool_started,
        link.tool_finished,
        replayed=spec.replayed_tools,
        live=COORDINATION_TOOLS,
    )


def child_registry(spec: AgentSpec, custom_tools: Sequence[Tool], link: ChildLink) -> ToolRegistry:
    """Exactly the tools the parent resolved for this child.

    The parent's ``resolve_tools`` never hands over a coordination tool; should it ever
    (a bug, a custom tool under a coordination name), the ``DenyTools`` hook in
    ``build_engine`` refuses the call here, in the child: the second, independent layer.
    """
    available = {tool.name: tool for tool in [*builtin_tools(), *named_tools()]}
    available.update((tool.name, tool) for tool in custom_tools)
    registry = ToolRegistry(available[name] for name in spec.tools if name in available)
    for remote in spec.remote_tools:
        registry.add(ParentTool(remote, link))
    if spec.skills:  # the skills the parent offered, loaded on demand
        registry.add(SkillTool(spec.skills))
    return registry


class ParentTool(Tool):
    """A tool that runs in the parent: the call crosses the pipe and the result comes back."""

    Args = msgspec.Struct  # unused: arguments are checked by the parent

    def __init__(self, remote: RemoteTool, link: ChildLink) -> None:
        self.name = remote.name  # type: ignore[misc]
        self.description = remote.description  # type: ignore[misc]
        self.concurrency_safe = remote.concurrency_safe  # type: ignore[misc]
        self.read_only = remote.read_only  # type: ignore[misc]
        self._parameters = remote.parameters
        self._link = link

    def spec(self) -> Any:
        from agentcell.worker.models import ToolSpec

        return ToolSpec(name=self.name, description=self.description, parameters=self._parameters)

    def parse_args(self, arguments: str) -> Any:
        return _RawArgs(arguments or "{}", mcp_arguments(self.name, arguments).fields)

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput:
        content, is_error = await self._link.delegate(ctx.call_id, self.name, args.json_text)
        return ToolOutput(content, is_error)


class _RawArgs:
    """Arguments passed through as JSON text, with the decoded fields for permission rules."""

    def __init__(self, text: str, fields: dict[str, Any]) -> None:
        # A field may be named anything ("text" is common): none replaces the JSON sent.
        self.json_text = text
        for key, value in fields.items():
            if isinstance(value, str) and key.isidentifier() and key != "json_text":
                setattr(self, key, value)


class TurnControls:
    """Pause, resume and steer, applied at turn boundaries."""

    def __init__(self, link: ChildLink) -> None:
        self.link = link
        self.turn = 0  # model requests so far: this boundary comes before the next

    async def __call__(self, session: Session) -> Sequence[Message]:
        self.turn += 1
        spec = self.link.start.spec
        # A resumed agent reads again what it took at this turn in the killed run; while
        # its turns replay, nothing else (it would change the request they answered).
        again = spec.replayed_mail.get(self.turn, []) if spec is not None else []
        if spec is not None and self.turn <= spec.replay_turns:
            return [UserMessage(content=text) for text in again]
        if self.link.paused:
            # Said before waiting, so the parent knows the pause has taken hold.
            self.link.emit(Notice(message="paused at the turn boundary: waiting for resume"))
        await self.link.wait_if_paused()
        # A parent that fell behind our events has stopped reading: wait for it here
        # rather than queue another turn's events in this process.
        await self.link.writable()
        texts = again + self.link.take_steering(self.turn)
        return [UserMessage(content=text) for text in texts]

    async def late(self, session: Session) -> Sequence[Message]:
        """Finish hook: steers and messages that came while its final answer was being
        written are read in one more turn, not lost with its end."""
        if not self.link.steered.is_set():
            return []
        return [UserMessage(content=text) for text in self.link.take_steering(self.turn + 1)]


class CoalescingSink:
    """Forwards events to the parent, merging bursts of text deltas into one frame.

    Streaming models send a delta every few tokens; one frame per delta would make the
    parent — shared by every child — do most of the work. Text is held for at most
    ``_FLUSH_SECONDS`` (or ``_FLUSH_CHARS``) and any other event flushes it first, so order
    is kept.
    """

    def __init__(self, link: ChildLink, transcript: Transcript | None = None) -> None:
        self.link = link
        self.transcript = transcript
        self._text: list[str] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self._text.append(event.text)
            self._size += len(event.text)
            if self._size >= _FLUSH_CHARS:
                self.flush()
            elif self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(_FLUSH_SECONDS, self.flush)
            return
        self.flush()
        self._send(event)

    def _send(self, event: AgentEvent) -> None:
        self.link.emit(event)
        if self.transcript is not None:
            self.transcript.event(event)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._text:
            text = "".join(self._text)
            self._text.clear()
            self._size = 0
            self._send(TextDelta(text=text))
