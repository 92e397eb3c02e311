"""The agent runtime: engine, session, tools, model providers, hooks, child entry point.

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.worker._beneath import (
    OutsideRoot,
    read_beneath,
    real_folder,
)
from agentcell.worker.child._main import ChildBoot, ChildLink, child_main
from agentcell.worker.child._secrets import (
    SECRET_NAMES,
    hold_secrets,
    known_secrets,
    release_secrets,
    secret,
)
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
    EventSink,
    Limits,
    StopRun,
    StreamWatcher,
    TurnHook,
)
from agentcell.worker.engine._session import Session
from agentcell.worker.mcp._client import (
    MCP_PREFIX,
    McpServers,
    McpTool,
    mcp_tool_name,
    tool_granted,
)
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
    Approver,
    Decision,
    DenyTools,
    Hook,
    PermissionMode,
    PermissionPolicy,
    Rule,
    Verdict,
    describe_arguments,
)
from agentcell.worker.sandbox._apply import MODES as SANDBOX_MODES
from agentcell.worker.sandbox._apply import missing_for as sandbox_missing
from agentcell.worker.sandbox._apply import parse_mode as parse_sandbox_mode
from agentcell.worker.sandbox._apply import probe as probe_sandbox
from agentcell.worker.sandbox._apply import release as release_sandbox
from agentcell.worker.sandbox._apply import stricter as stricter_sandbox
from agentcell.worker.sandbox._apply import workdir_owner_note
from agentcell.worker.sandbox._mountns import remove_placeholders as remove_protection_placeholders

__all__ = [
    "ACCEPT_ENCODING",
    "CodingError",
    "ContentDecoder",
    "simple_commands",
    "MAX_ANSWER_BYTES",
    "cut_answer",
    "first_request_body",
    "predictable",
    "Approver",
    "ChildBoot",
    "ChildLink",
    "Decision",
    "DenyTools",
    "Engine",
    "EventSink",
    "Hook",
    "Limits",
    "MAX_STOP_HOOK_CONTINUATIONS",
    "MCP_PREFIX",
    "OutsideRoot",
    "McpServers",
    "McpTool",
    "PermissionMode",
    "PermissionPolicy",
    "RecordTampered",
    "Redactor",
    "RelayedHooks",
    "matcher_matches",
    "matcher_problem",
    "Rule",
    "SANDBOX_MODES",
    "SECRET_NAMES",
    "Session",
    "StopRun",
    "StreamWatcher",
    "Transcript",
    "TurnHook",
    "Verdict",
    "chain_end",
    "child_main",
    "describe_arguments",
    "read_beneath",
    "real_folder",
    "mcp_tool_name",
    "parse_sandbox_mode",
    "probe_sandbox",
    "record_key",
    "release_sandbox",
    "remove_protection_placeholders",
    "sandbox_missing",
    "workdir_owner_note",
    "stricter_sandbox",
    "hold_secrets",
    "known_secrets",
    "release_secrets",
    "secret",
    "secret_digests",
    "tool_granted",
    "verified_lines",
]
