"""The installed package: one namespace, a pinned public API, and layers that point one way."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Every public package and its whole __all__. A change to the public API changes this table.
PUBLIC_API: dict[str, list[str]] = {
    "agentcell": [
        "AgentActivity",
        "AgentDefinition",
        "AgentEvent",
        "AllowAll",
        "ApprovalAnswer",
        "ApprovalChannel",
        "ApprovalNeeded",
        "ApprovalQuery",
        "Budgets",
        "CallbackChannel",
        "ConfigError",
        "DenyAll",
        "ModelError",
        "Notice",
        "Orchestrator",
        "OrchestratorEvent",
        "PoolError",
        "Price",
        "RunFinished",
        "RunReport",
        "RunResult",
        "RunStatus",
        "Settings",
        "SubAgentEnded",
        "SubAgentProcess",
        "SubAgentResult",
        "SubAgentStarted",
        "TextDelta",
        "Tool",
        "ToolContext",
        "ToolError",
        "ToolFinished",
        "ToolOutput",
        "ToolStarted",
        "TurnStarted",
        "Usage",
        "UsageUpdate",
        "function_tool",
    ],
    "agentcell.testing": [
        "FunctionModel",
        "ScriptedModel",
        "UnexpectedModelCall",
        "echo_model",
        "last_user_text",
        "reply",
        "tool_call",
        "tool_results",
    ],
    "agentcell.protocol": [
        "AgentEvent",
        "AgentSpec",
        "ApprovalNeeded",
        "ApprovalReply",
        "ApprovalRequest",
        "AssistantMessage",
        "Channel",
        "ChannelClosed",
        "Control",
        "ControlAction",
        "DelegateReply",
        "DelegateRequest",
        "Event",
        "Failure",
        "Frame",
        "FrameParser",
        "FrameTooLarge",
        "HEADER_SIZE",
        "HandshakeError",
        "Heartbeat",
        "Hello",
        "HookReply",
        "HookRequest",
        "Limits",
        "MAX_FRAME_BYTES",
        "MAX_TOKENS",
        "McpServer",
        "MemoryChannel",
        "Message",
        "ModelCall",
        "ModelCancel",
        "ModelData",
        "ModelEnd",
        "ModelHead",
        "Notice",
        "PROTOCOL_VERSION",
        "PermitDone",
        "PermitGrant",
        "PermitRequest",
        "PipeChannel",
        "ProtocolError",
        "RemoteTool",
        "Result",
        "RunFinished",
        "RunResult",
        "RunStatus",
        "SecretDigest",
        "SpanBatch",
        "SpanRecord",
        "Start",
        "StreamChannel",
        "SystemMessage",
        "TcpListener",
        "TextDelta",
        "ThinkingBlock",
        "TokenCount",
        "ToolCall",
        "ToolFinished",
        "ToolMessage",
        "ToolStarted",
        "TurnStarted",
        "Usage",
        "UsageUpdate",
        "UserMessage",
        "decode_body",
        "encode_body",
        "encode_frame",
        "frame_is_authentic",
        "memory_channel_pair",
        "new_frame_key",
        "seal_for_child",
        "sign_frame",
        "tcp_connect",
    ],
    "agentcell.worker": [
        "ACCEPT_ENCODING",
        "Approver",
        "ChildBoot",
        "ChildLink",
        "CodingError",
        "ContentDecoder",
        "Decision",
        "DenyTools",
        "Engine",
        "EventSink",
        "Hook",
        "Limits",
        "MAX_ANSWER_BYTES",
        "MAX_STOP_HOOK_CONTINUATIONS",
        "MCP_PREFIX",
        "McpServers",
        "McpTool",
        "OutsideRoot",
        "PermissionMode",
        "PermissionPolicy",
        "RecordTampered",
        "Redactor",
        "RelayedHooks",
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
        "cut_answer",
        "describe_arguments",
        "first_request_body",
        "hold_secrets",
        "known_secrets",
        "matcher_matches",
        "matcher_problem",
        "mcp_tool_name",
        "parse_sandbox_mode",
        "predictable",
        "probe_sandbox",
        "read_beneath",
        "real_folder",
        "record_key",
        "release_sandbox",
        "release_secrets",
        "remove_protection_placeholders",
        "sandbox_missing",
        "secret",
        "secret_digests",
        "simple_commands",
        "stricter_sandbox",
        "tool_granted",
        "verified_lines",
        "workdir_owner_note",
    ],
    "agentcell.worker.models": [
        "ADAPTIVE_EFFORT",
        "AnthropicModel",
        "DEFAULT_ANTHROPIC_MAX_TOKENS",
        "Endpoint",
        "H11Pool",
        "HttpxTransport",
        "Inflater",
        "Model",
        "ModelError",
        "ModelErrorKind",
        "ModelRequest",
        "ModelResponse",
        "ModelTransport",
        "OFFICIAL_OPENAI_URL",
        "OpenAIChatModel",
        "PROVIDERS",
        "Permit",
        "RELAYED_HEADERS",
        "RequestGate",
        "Retry",
        "SSEDecoder",
        "StopReason",
        "StreamItem",
        "THINKING_BUDGETS",
        "TextPart",
        "ToolCallStart",
        "ToolSpec",
        "TransportResponse",
        "WEB_SEARCH_TOOL",
        "complete",
        "estimate_tokens",
        "h11_route",
        "make_client",
        "parse_retry_after",
        "request_gate",
        "resolve_model",
        "thinking_control",
        "thinking_max_tokens",
    ],
    "agentcell.worker.tools": [
        "BUILTIN_TOOL_NAMES",
        "Bash",
        "EditFile",
        "FunctionTool",
        "Glob",
        "Grep",
        "ReadFile",
        "Tool",
        "ToolContext",
        "ToolError",
        "ToolOutput",
        "ToolRegistry",
        "WriteFile",
        "args_schema",
        "builtin_tools",
        "function_tool",
        "parse_args",
        "resolve_inside",
        "truncate_output",
    ],
    "agentcell.worker.testing": [
        "FunctionModel",
        "Reply",
        "ReplyFunction",
        "SCRIPTED_MODELS",
        "ScriptedModel",
        "Step",
        "UnexpectedModelCall",
        "echo_model",
        "last_user_text",
        "reply",
        "tool_call",
        "tool_results",
    ],
    "agentcell.worker.process": [
        "BOOT_MODULE",
        "ChildBoot",
        "PRELOAD_MODULES",
        "ProcInfo",
        "child_main",
        "descendants",
        "encode_request",
        "is_alive",
        "kill_group",
        "kill_session",
        "kill_tree",
        "preload_environment",
        "process_table",
        "remove_stale_caps",
        "remove_stale_tmps",
        "session_members",
        "set_parent_death_signal",
        "signal_name",
        "tree_cpu_seconds",
        "tree_rss",
    ],
    "agentcell.worker.tracing": [
        "AgentTracer",
        "MAX_CHILD_SPANS",
        "Tracing",
        "child_tracer",
        "tracing_requested",
    ],
    "agentcell.orchestrator": [
        "AgentActivity",
        "AgentDefinition",
        "AgentRegistry",
        "AgentUsage",
        "AllowAll",
        "ApprovalAnswer",
        "ApprovalBroker",
        "ApprovalChannel",
        "ApprovalQuery",
        "BudgetExceeded",
        "Budgets",
        "COORDINATION_TOOLS",
        "CallbackChannel",
        "ChildOutcome",
        "ConfigError",
        "DelegationRequest",
        "DenyAll",
        "Diagnostic",
        "EventBus",
        "Lease",
        "Orchestrator",
        "OrchestratorEvent",
        "OutcomeKind",
        "PoolError",
        "Price",
        "ResolvedTools",
        "RunHandle",
        "RunReport",
        "Runner",
        "Scope",
        "Settings",
        "SubAgentEnded",
        "SubAgentProcess",
        "SubAgentResult",
        "SubAgentStarted",
        "TaskRecord",
        "TaskState",
        "TaskTracker",
        "TerminalPrompt",
        "UsageLedger",
        "WorkerPool",
        "WorkerStartError",
        "WorkerState",
        "load_agent_file",
        "load_agents_dir",
        "load_settings",
        "normalize_model",
        "report_json",
        "resolve_model_alias",
        "resolve_tools",
        "validation_messages",
    ],
    "agentcell.orchestrator.backends": [
        "ALLOWED",
        "Backend",
        "ChildOutcome",
        "LOOPBACK_ENV",
        "Lease",
        "MAX_STARTERS",
        "OutcomeKind",
        "PROVIDER_ENV",
        "PoolError",
        "RayBackend",
        "RayBackendError",
        "RayHead",
        "RemoteLease",
        "WorkerLease",
        "WorkerPool",
        "WorkerStartError",
        "WorkerState",
        "child_environment",
        "default_starters",
        "describe_exit",
        "forkserver_pid",
        "forkserver_pids",
        "local_ray_head",
        "loopback_ray_environment",
        "wait_gone",
    ],
    "agentcell.orchestrator.cli": [
        "cli",
        "main",
    ],
    "agentcell.orchestrator.config": [
        "AGENT_FILE_TRUST",
        "ApprovalMode",
        "BackendName",
        "Budgets",
        "ConfigError",
        "DEFAULT_ALIASES",
        "DEFAULT_HOOK_TIMEOUT_S",
        "ENV_SETTINGS",
        "HOOK_EVENTS",
        "HookCommand",
        "McpServerConfig",
        "Price",
        "ProviderLimits",
        "RaySettings",
        "SETTINGS_TRUST",
        "Settings",
        "TrustEntry",
        "base_url_problem",
        "claude_mode_stand_in",
        "covering",
        "is_trusted",
        "load_settings",
        "name_once",
        "narrow_network",
        "parse_hooks",
        "project_config",
        "read_mcp_json",
        "revoke",
        "setting_paths",
        "settings_messages",
        "translate_rule",
        "trust",
        "trusted_folders",
        "user_config_path",
    ],
    "agentcell.orchestrator.definitions": [
        "AgentDefinition",
        "AgentRegistry",
        "BUILTIN_AGENTS",
        "BUILTIN_TOOLS",
        "CLAUDE_TOOL_NAMES",
        "COORDINATION_TOOLS",
        "Diagnostic",
        "INHERIT",
        "KNOWN_TOOLS",
        "LoadResult",
        "MODEL_ALIASES",
        "READ_ONLY_TOOLS",
        "ResolvedTools",
        "SKILL_MAX_CHARS",
        "Skill",
        "SkillOffer",
        "agent_dirs",
        "agent_slug",
        "definitions_from_json",
        "field_for_key",
        "find_skill",
        "is_known_tool",
        "is_mcp_tool",
        "load_agent_file",
        "load_agents_dir",
        "load_skills",
        "map_tool_name",
        "mcp_patterns",
        "means_all_tools",
        "model_problem",
        "normalize_model",
        "normalize_tool_names",
        "resolve_model_alias",
        "resolve_tools",
        "skill_dirs",
        "skill_offer",
        "validation_messages",
        "with_skills",
    ],
    "agentcell.orchestrator.delegation": [
        "AgentActivity",
        "AgentUsage",
        "AllowAll",
        "ApprovalAnswer",
        "ApprovalBroker",
        "ApprovalChannel",
        "ApprovalQuery",
        "BudgetExceeded",
        "CallbackChannel",
        "DelegationRequest",
        "DenyAll",
        "EventBus",
        "EventStream",
        "HookOutcome",
        "HookRunner",
        "MAX_OPEN_REQUESTS",
        "MEMORY_MAX_CHARS",
        "MEMORY_MAX_LINES",
        "OrchestratorEvent",
        "ResultDelivery",
        "RunAccount",
        "RunHandle",
        "Runner",
        "Scope",
        "SessionHooks",
        "StartAhead",
        "SubAgentEnded",
        "SubAgentProcess",
        "SubAgentResult",
        "SubAgentStarted",
        "SubagentStopHooks",
        "TaskArgs",
        "TaskControlTool",
        "TaskRecord",
        "TaskState",
        "TaskStatusTool",
        "TaskTool",
        "TaskTracker",
        "TaskWaitTool",
        "TerminalPrompt",
        "UsageLedger",
        "agent_mcp_servers",
        "background_finisher",
        "background_injector",
        "instructions_prompt",
        "local_tool_hooks",
        "memory_dir",
        "notification_hook",
        "parse_task_arguments",
        "read_session",
        "stop_hook",
        "stricter_mode",
        "task_tool_spec",
        "unstarted",
        "wire_server",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC_API))
def test_public_api_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == PUBLIC_API[package]
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name} does not resolve"


def test_agentcell_loads_the_orchestrator_only_when_asked() -> None:
    """A sub-agent process imports agentcell.worker; that must not import the parent's code."""
    code = (
        "import sys, agentcell.worker, agentcell.protocol; "
        "print(any(m.startswith('agentcell.orchestrator') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_package_folder_is_listed_for_installation() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    assert found == listed


def _run_in(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_only_agentcell_is_importable_at_the_top_level(tmp_path: Path) -> None:
    for name in ("protocol", "worker", "orchestrator"):
        out = _run_in(tmp_path, f"import {name}")
        assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr, (name, out.stderr)


def test_a_users_own_protocol_worker_and_orchestrator_modules_do_not_collide(
    tmp_path: Path,
) -> None:
    for name in ("protocol", "worker", "orchestrator"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user module {name}')\n")
    out = _run_in(
        tmp_path,
        """
        import asyncio
        from agentcell import Orchestrator, Settings

        async def main():
            settings = Settings(model="scripted:echo", approval="deny", warm_spares=1)
            async with Orchestrator(settings=settings, workdir=".", record=False) as orch:
                one = await orch.delegate("Explore", "hello from a sub-agent")
                report = await orch.run("hello")
            print(one.status.value, one.pid is not None, report.final_text)

        asyncio.run(main())
        """,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed True echo: hello"


# protocol ← worker ← orchestrator; agentcell (the umbrella) may use them all.
LAYERS = {
    "protocol": {"agentcell.protocol"},
    "worker": {"agentcell.protocol", "agentcell.worker"},
    "orchestrator": {"agentcell.protocol", "agentcell.worker", "agentcell.orchestrator"},
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_layers_do_not_import_upward_nor_into_private_modules_of_another_package() -> None:
    for layer, may_use in LAYERS.items():
        for path in (ROOT / layer).rglob("*.py"):
            for name in _imports(path):
                parts = name.split(".")
                if parts[0] != "agentcell" or len(parts) < 2:
                    continue
                top = ".".join(parts[:2])
                assert top in may_use, f"{path.relative_to(ROOT)} imports {name}"
                if top != f"agentcell.{layer}":
                    assert not any(p.startswith("_") for p in parts[2:]), (
                        f"{path.relative_to(ROOT)} reaches into a private module: {name}"
                    )


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for folder in ("protocol", "worker", "orchestrator", "agentcell"):
        base = "agentcell" if folder == "agentcell" else f"agentcell.{folder}"
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            graph[".".join([base, *parts])] = set()
    for module, edges in graph.items():
        folder = module.split(".")[1] if module.count(".") else "agentcell"
        top = ROOT / (folder if folder in LAYERS else "agentcell")
        rel = module.split(".")[2:] if folder in LAYERS else module.split(".")[1:]
        path = top.joinpath(*rel).with_suffix(".py")
        if not path.exists():
            path = top.joinpath(*rel, "__init__.py")
        for name in _imports(path):
            while name and name not in graph:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                edges.add(name)
    return graph


def test_modules_import_no_circles() -> None:
    """Package __init__ files re-export their own modules, so a package's edge to its own
    children is not a circle; every other import must form a DAG."""
    graph = _module_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + "."):
                continue  # a package importing its own submodules
            if state.get(nxt) == 1:
                circle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import circle: " + " → ".join(circle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_readme_lists_every_public_name_and_only_those() -> None:
    """The README's "The public names" is the API a program may rely on: exactly
    ``agentcell.__all__`` and ``agentcell.testing.__all__``."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("### The public names")
    section = readme[start : readme.index("\n## ", start)]
    listed = set(re.findall(r"`(\w+)`", section))
    public = set(PUBLIC_API["agentcell"]) | set(PUBLIC_API["agentcell.testing"])
    assert public - listed == set(), "public but not in the README"
    # (the README names other things in lower case: check_setup, __all__)
    assert {n for n in listed if n[0].isupper()} - public == set(), "in the README, not public"
