"""Every frame that crosses a parent/child pipe, as one tagged union.

Direction is noted on each frame. A child speaks first (``Hello``); the parent answers
with ``Start``; the child then streams ``Event``/``Heartbeat`` frames, may ask questions
(``ApprovalRequest``, ``DelegateRequest``) that the parent answers, obeys ``Control``
frames, and ends with exactly one ``Result`` or ``Failure``.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec
from agentcell.protocol._events import AgentEvent
from agentcell.protocol._messages import Message, RunResult

PROTOCOL_VERSION = 1


class Limits(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Per-run resource limits a child applies to itself before it starts working."""

    address_space_bytes: int | None = None  # memory: RLIMIT_AS above the start size + RSS watch
    cpu_seconds: int | None = None  # RLIMIT_CPU
    max_tool_calls: int | None = None
    max_tool_output_bytes: int | None = None


class RemoteTool(msgspec.Struct, kw_only=True, frozen=True):
    """A tool a child may call but the parent runs (over ``DelegateRequest``)."""

    name: str
    description: str
    parameters: dict[str, Any]
    concurrency_safe: bool = True
    read_only: bool = False  # allowed without the child asking (the parent decides itself)


class SecretDigest(msgspec.Struct, kw_only=True, frozen=True):
    """A secret a child must redact but may not use: its length, first characters and a
    salted hash; the child finds it in text without ever holding it."""

    length: int
    head: str
    salt: bytes
    digest: bytes


class McpServer(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One MCP server a child starts for itself (stdio) or connects to (http).

    ``allow`` holds the tool-name patterns (``mcp__NAME__tool``, ``mcp__NAME__*``) the
    definition's allowlist grants (None: every tool of the server); ``deny`` always wins.
    The parent decides both: the child never learns of a server its definition did not name.
    """

    name: str
    type: str = "stdio"  # stdio | http
    command: str = ""
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    allow: list[str] | None = None
    deny: list[str] = msgspec.field(default_factory=list)
    start_timeout_s: float = 30.0


class ReplayedTool(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """A tool call of a resumed agent as the run's journal has it: ``finished`` with its
    result (never run again), or only started (its result unknown: see the engine)."""

    finished: bool = False
    content: str = ""
    is_error: bool = False
    # The call as journaled at its start: a call of another tool, or with other arguments,
    # is not this one (a model's ids may repeat across a run and its resume).
    name: str = ""
    arguments: str = ""


class AgentSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Everything a child needs to run one sub-agent. Sent by the parent inside ``Start``."""

    agent_id: str
    agent_type: str
    prompt: str
    system_prompt: str = ""
    history: list[Message] = msgspec.field(default_factory=list)  # context: fork
    tools: list[str] = msgspec.field(default_factory=list)
    remote_tools: list[RemoteTool] = msgspec.field(default_factory=list)
    model: str = ""
    model_options: dict[str, Any] = msgspec.field(default_factory=dict)
    max_turns: int | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None
    permission_mode: str = "default"
    allow_rules: list[str] = msgspec.field(default_factory=list)
    deny_rules: list[str] = msgspec.field(default_factory=list)
    ask_rules: list[str] = msgspec.field(default_factory=list)
    workdir: str = "."
    run_dir: str = ""
    record_key: bytes = b""  # the MAC key of its own record, and of no other
    depth: int = 1
    max_depth: int = 1
    background: bool = False
    env: dict[str, str] | None = None  # the process environment for this run (None: keep)
    bash_env: dict[str, str] = msgspec.field(default_factory=dict)
    sandbox: str = "off"  # off | workspace | read-only: the walls the child puts up itself
    network: bool = False  # under a sandbox: may bash's commands use the network?
    # Under a ``network:`` list: the parent's egress proxy on 127.0.0.1, bash's only way out.
    egress_port: int | None = None
    max_processes: int | None = None  # cap on the child's process tree (None: the default)
    tmp_size_mb: int = 0  # a tmpfs of this size on its private temp folder (0: none)
    read_paths: list[str] = msgspec.field(default_factory=list)  # more read-only folders
    redactions: list[SecretDigest] = msgspec.field(default_factory=list)  # other keys
    mcp_servers: list[McpServer] = msgspec.field(default_factory=list)  # started by the child
    # Tools a parent-side PreToolUse/PostToolUse hook matches: only their calls are relayed
    # (``HookRequest``), so a run with no hooks pays nothing for them. "SubagentStop" ->
    # [agent_type] when a stop hook matches this agent: each final answer is relayed first.
    hooked_tools: dict[str, list[str]] = msgspec.field(default_factory=dict)  # event -> tools
    # event -> hook matchers, checked in the child against MCP tools the parent cannot list
    hook_patterns: dict[str, list[str]] = msgspec.field(default_factory=dict)
    # Entries of the workdir holding code that runs outside the walls (a hook's command, a
    # stdio MCP server, a custom tool's module): read-only under ``workspace``, like .git.
    code_entries: list[str] = msgspec.field(default_factory=list)
    memory_dir: str = ""  # the agent's memory folder (memory: user|project|local): writable
    skills: dict[str, str] = msgspec.field(default_factory=dict)  # skill tool: name -> SKILL.md
    compact_at_tokens: int = 0  # compact the conversation past this many tokens (0: never)
    model_permits: bool = False  # ask the parent for a permit before each model request
    # Send each model request to the parent (``ModelCall``): it adds the URL and the key.
    model_via_parent: bool = False
    # The run is journaled: report each tool call's start (and wait for the parent to
    # have written it) and its whole result (``ToolRecord``).
    report_tools: bool = False
    # A resumed agent: its journaled tool calls by call id, never run a second time.
    replayed_tools: dict[str, ReplayedTool] = msgspec.field(default_factory=dict)
    # And its team's messages it took, by the turn that took them: read again at that
    # turn while its first ``replay_turns`` turns replay (new ones wait until after).
    replayed_mail: dict[int, list[str]] = msgspec.field(default_factory=dict)
    replay_turns: int = 0


class Hello(msgspec.Struct, tag="hello", tag_field="t", kw_only=True):
    """child → parent, first frame: who I am and which protocol I speak."""

    protocol_version: int
    pid: int
    preload_ok: bool = True
    missing_preload: list[str] = msgspec.field(default_factory=list)


class Start(msgspec.Struct, tag="start", tag_field="t", kw_only=True, omit_defaults=True):
    """parent → child: the run request. ``handler`` is ``module:function`` in the child."""

    protocol_version: int
    run_id: str
    handler: str
    spec: AgentSpec | None = None
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    limits: Limits | None = None
    heartbeat_s: float = 1.0
    objects: bytes | None = None  # dill blob: custom tools/models (closures) for this run
    frame_key: bytes = b""  # this child's key for signed frames (see _frame_mac)
    # W3C trace context (``traceparent``, ``tracestate``) of the parent's span that started
    # this run: when present, the child traces its run under it and sends ``SpanBatch``es.
    trace_context: dict[str, str] = msgspec.field(default_factory=dict)


class Event(msgspec.Struct, tag="event", tag_field="t", kw_only=True):
    """child → parent: one progress event of the run."""

    event: AgentEvent


class ApprovalRequest(msgspec.Struct, tag="approval_request", tag_field="t", kw_only=True):
    """child → parent: may this tool call run? The parent answers with ``ApprovalReply``."""

    request_id: int
    call_id: str
    tool: str
    arguments: str
    reason: str = ""


class ApprovalReply(msgspec.Struct, tag="approval_reply", tag_field="t", kw_only=True):
    """parent → child: the answer to one ``ApprovalRequest``."""

    request_id: int
    approved: bool
    reason: str = ""
    mac: bytes = b""


class DelegateRequest(msgspec.Struct, tag="delegate_request", tag_field="t", kw_only=True):
    """child → parent: run one of my parent-side tools (``task`` when nesting is allowed)."""

    request_id: int
    call_id: str
    tool: str
    arguments: str  # the tool's JSON arguments, validated by the parent
    # The W3C context of the child's span for this call (traced runs only): a nested
    # sub-agent is traced under it.
    trace_context: dict[str, str] = msgspec.field(default_factory=dict)
    mac: bytes = b""  # signed with the child's frame key: a sub-agent or a message of its


class DelegateReply(msgspec.Struct, tag="delegate_reply", tag_field="t", kw_only=True):
    """parent → child: the tool result of a ``DelegateRequest``."""

    request_id: int
    content: str
    is_error: bool = False


class HookRequest(msgspec.Struct, tag="hook_request", tag_field="t", kw_only=True):
    """child → parent: run the parent's ``PreToolUse``/``PostToolUse`` hooks for this call,
    or its ``SubagentStop`` hooks before the child accepts its final answer.

    Hooks are the user's own commands: they run in the parent, outside the sandbox. The
    parent answers with ``HookReply``."""

    request_id: int
    event: str  # PreToolUse | PostToolUse | SubagentStop
    call_id: str  # SubagentStop: ""
    tool: str  # SubagentStop: the agent type
    arguments: str
    response: str = ""  # PostToolUse: the tool's output; SubagentStop: the final answer
    is_error: bool = False


class HookReply(msgspec.Struct, tag="hook_reply", tag_field="t", kw_only=True):
    """parent → child: what the hooks decided about one ``HookRequest``."""

    request_id: int
    # PreToolUse: do not run the call; SubagentStop: do not stop. ``reason`` goes to the model
    blocked: bool = False
    reason: str = ""
    context: str = ""  # additionalContext: added to what the model is told
    decision: str = ""  # PreToolUse: "ask" (approval first) or "allow"; "" no opinion
    updated_input: str = ""  # PreToolUse: the call's rewritten arguments (JSON, our names)
    stop: bool = False  # "continue": false — the agent stops, ``stop_reason`` says why
    stop_reason: str = ""
    # PostToolUse's updatedToolOutput, as our tool's text: what the model sees instead of
    # the tool's output (None: the output stands).
    updated_output: str | None = None


class ToolRecord(msgspec.Struct, tag="tool_record", tag_field="t", kw_only=True):
    """child → parent: a tool call starts (``finished`` false: the child waits for a
    ``ToolRecorded`` before it runs it) or has its whole result. Signed: the run's
    journal takes only the child's own."""

    request_id: int
    call_id: str
    name: str
    finished: bool = False
    arguments: str = ""  # at its start
    content: str = ""  # at its end: the whole result, as the model gets it
    is_error: bool = False
    mac: bytes = b""


class ToolRecorded(msgspec.Struct, tag="tool_recorded", tag_field="t", kw_only=True):
    """parent → child: the start of ``request_id``'s tool call is in the journal."""

    request_id: int


class PermitRequest(msgspec.Struct, tag="permit_request", tag_field="t", kw_only=True):
    """child → parent: may I send one request to ``model`` now? ``tokens`` is the
    child's estimate of what it will cost (for a tokens-per-minute limit)."""

    request_id: int
    model: str  # provider:name, e.g. "openai:gpt-4o"
    tokens: int = 0


class PermitGrant(msgspec.Struct, tag="permit_grant", tag_field="t", kw_only=True):
    """parent → child: the answer to one ``PermitRequest`` (sent when the limits allow)."""

    request_id: int
    granted: bool = True
    reason: str = ""  # why not, when refused


class PermitDone(msgspec.Struct, tag="permit_done", tag_field="t", kw_only=True):
    """child → parent: the request is over (or was never sent): the permit goes back.

    ``tokens`` is what the request really cost; ``retry_after`` the pause the server
    asked for (a 429's ``Retry-After``), which then holds every sibling on that model."""

    request_id: int
    tokens: int = 0
    retry_after: float | None = None


class ModelCall(msgspec.Struct, tag="model_call", tag_field="t", kw_only=True):
    """child → parent: send this model request for me. ``body`` is the JSON request
    body the child's provider built — never a URL, a header or a key: the parent checks
    it against the child's definition and adds those itself."""

    id: int
    body: bytes
    mac: bytes = b""  # signed with the run's frame key: the parent sends it with its key


class ModelCancel(msgspec.Struct, tag="model_cancel", tag_field="t", kw_only=True):
    """child → parent: I no longer want call ``id``'s answer (cancel it upstream)."""

    id: int


class ModelEnd(msgspec.Struct, tag="model_end", tag_field="t", kw_only=True, omit_defaults=True):
    """parent → child: call ``id`` is over. No ``error_kind``: the body is complete.
    Otherwise the ``ModelErrorKind`` (or "refused": the parent's check said no) and
    the message the child raises; ``retry`` when another attempt may work (a transport
    failure), with ``midstream`` the words for one that broke off mid-answer."""

    id: int
    error_kind: str = ""
    message: str = ""
    retry: bool = False
    midstream: str = ""


class ModelHead(msgspec.Struct, tag="model_head", tag_field="t", kw_only=True, omit_defaults=True):
    """parent → child: call ``id``'s response status and its allow-listed headers; with
    the body's first bytes when they came with the head, and its ``end`` when the whole
    answer did (a short answer is one frame)."""

    id: int
    status: int
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    data: bytes = b""
    end: ModelEnd | None = None


class ModelData(msgspec.Struct, tag="model_data", tag_field="t", kw_only=True, omit_defaults=True):
    """parent → child: the next raw bytes of call ``id``'s response body — what the
    upstream had ready, joined — and the call's ``end`` when they are its last."""

    id: int
    data: bytes
    end: ModelEnd | None = None


class ControlAction(enum.StrEnum):
    CANCEL = "cancel"  # stop now; the child ends with status cancelled
    PAUSE = "pause"  # stop at the next turn boundary until resume
    RESUME = "resume"
    STEER = "steer"  # add ``text`` as a user message at the next turn boundary


class Control(msgspec.Struct, tag="control", tag_field="t", kw_only=True):
    """parent → child: change the course of the running task."""

    action: ControlAction
    text: str = ""
    message_id: str = ""  # a steer that is a team message: said back when it is taken
    interrupt: bool = False  # and it cancels the model call in flight, if one is


class Heartbeat(msgspec.Struct, tag="heartbeat", tag_field="t", kw_only=True):
    """child → parent: I am alive and my event loop is turning."""

    seq: int
    peak_rss_bytes: int = 0


class Result(msgspec.Struct, tag="result", tag_field="t", kw_only=True):
    """child → parent, terminal: the run ended (in any ``RunStatus``)."""

    result: RunResult
    peak_rss_bytes: int = 0
    mac: bytes = b""


class Failure(msgspec.Struct, tag="failure", tag_field="t", kw_only=True):
    """child → parent, terminal: the child failed but could still say why."""

    error_type: str
    message: str
    traceback: str = ""
    mac: bytes = b""


#: A span attribute's value, as OpenTelemetry allows it (no nested maps).
SpanValue = str | bool | int | float | list[str | bool | int | float]


class SpanRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One span a child made, in OpenTelemetry's terms. ``end_ns`` 0: still open (the
    agent span is sent when it starts, so the parent can end it if the child dies)."""

    trace_id: bytes  # 16 bytes
    span_id: bytes  # 8 bytes
    parent_id: bytes = b""
    name: str
    kind: int = 0  # opentelemetry.trace.SpanKind
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, SpanValue] = msgspec.field(default_factory=dict)
    status: int = 0  # opentelemetry.trace.StatusCode: 0 unset, 1 ok, 2 error
    status_message: str = ""


class SpanBatch(msgspec.Struct, tag="spans", tag_field="t", kw_only=True):
    """child → parent: spans the child made (only when ``Start.trace_context`` asked for
    them), signed like a ``Result``; the parent exports them with its own."""

    spans: list[SpanRecord]
    mac: bytes = b""


Frame = (
    Hello
    | Start
    | Event
    | ApprovalRequest
    | ApprovalReply
    | DelegateRequest
    | DelegateReply
    | HookRequest
    | HookReply
    | ToolRecord
    | ToolRecorded
    | PermitRequest
    | PermitGrant
    | PermitDone
    | ModelCall
    | ModelCancel
    | ModelHead
    | ModelData
    | ModelEnd
    | Control
    | Heartbeat
    | SpanBatch
    | Result
    | Failure
)
