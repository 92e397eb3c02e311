"""The agent runtime: everything a sub-agent's process runs, and the main agent's engine.

child/     one sub-agent process, from the fork server's preload to its exit
engine/    the ReAct loop both sides run, its session, compaction, the answer cap
rules/     permission rules, judged before every tool call
sandbox/   the walls a child puts itself behind (Landlock, seccomp, namespaces, caps)
models/    model providers behind one streaming interface; transports/: how a request
           reaches a server (directly, or through the parent)
tools/     the built-in tools and the ``Tool`` interface
mcp/       an agent's MCP servers, in its own process tree; a shared server's walled host
records/   the transcript an agent writes, chained and redacted
tracing/   OpenTelemetry spans of a run, across processes
_beneath   opening a project's files without following a link out of it
process, remote   the doors the parent's backends use to start children

This ``__all__`` (with those of models, tools, tracing and process) is what the
orchestrator may import; inside this layer, modules import each other directly. The
public API is the ``agentcell`` package.
"""

from agentcell.worker._beneath import (
    OutsideRoot,
    read_beneath,
    real_folder,
)
from agentcell.worker.child._main import ChildBoot
from agentcell.worker.child._secrets import hold_secrets, known_secrets, release_secrets
from agentcell.worker.engine._answer_cap import MAX_ANSWER_BYTES, cut_answer
from agentcell.worker.engine._first_call import first_request_body, predictable
from agentcell.worker.engine._hook_relay import (
    MAX_STOP_HOOK_CONTINUATIONS,
    RelayedHooks,
    matcher_matches,
    matcher_problem,
)
from agentcell.worker.engine._loop import (
    Engine,
    Limits,
    StopRun,
    TurnHook,
)
from agentcell.worker.engine._session import Session
from agentcell.worker.engine._tool_journal import ToolJournal
from agentcell.worker.mcp._client import MCP_PREFIX, McpServers
from agentcell.worker.models._content_coding import ACCEPT_ENCODING, CodingError, ContentDecoder
from agentcell.worker.records._chain import (
    RecordTampered,
    chain_end,
    record_key,
    verified_lines,
)
from agentcell.worker.records._redact import Redactor, secret_digests
from agentcell.worker.records._transcript import Transcript
from agentcell.worker.rules._deny_words import simple_commands
from agentcell.worker.rules._policy import (
    Hook,
    PermissionMode,
    PermissionPolicy,
    Rule,
    describe_arguments,
)
from agentcell.worker.sandbox._apply import MODES as SANDBOX_MODES
from agentcell.worker.sandbox._apply import missing_for as sandbox_missing
from agentcell.worker.sandbox._apply import probe as probe_sandbox
from agentcell.worker.sandbox._apply import release as release_sandbox
from agentcell.worker.sandbox._apply import stricter as stricter_sandbox
from agentcell.worker.sandbox._apply import workdir_owner_note
from agentcell.worker.sandbox._mountns import remove_placeholders as remove_protection_placeholders

__all__ = [
    "ToolJournal",
    "ACCEPT_ENCODING",
    "ChildBoot",
    "CodingError",
    "ContentDecoder",
    "Engine",
    "Hook",
    "Limits",
    "MAX_ANSWER_BYTES",
    "MAX_STOP_HOOK_CONTINUATIONS",
    "MCP_PREFIX",
    "McpServers",
    "OutsideRoot",
    "PermissionMode",
    "PermissionPolicy",
    "RecordTampered",
    "Redactor",
    "RelayedHooks",
    "Rule",
    "SANDBOX_MODES",
    "Session",
    "StopRun",
    "Transcript",
    "TurnHook",
    "chain_end",
    "cut_answer",
    "describe_arguments",
    "first_request_body",
    "hold_secrets",
    "known_secrets",
    "matcher_matches",
    "matcher_problem",
    "predictable",
    "probe_sandbox",
    "read_beneath",
    "real_folder",
    "record_key",
    "release_sandbox",
    "release_secrets",
    "remove_protection_placeholders",
    "sandbox_missing",
    "secret_digests",
    "simple_commands",
    "stricter_sandbox",
    "verified_lines",
    "workdir_owner_note",
]
