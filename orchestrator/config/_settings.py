"""Settings: what an orchestrator run is allowed to do, and with which models."""

from __future__ import annotations

from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from agentcell.orchestrator.config._hooks import parse_hooks
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.config._preload import preload_problem
from agentcell.worker import PermissionMode
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


def _is_number_type(annotation: Any) -> bool:
    """``int``, ``float``, or either with None (``int | None``)."""
    union = get_origin(annotation) in (Union, UnionType)
    kinds = set(get_args(annotation)) if union else {annotation}
    kinds.discard(type(None))
    return bool(kinds) and kinds <= {int, float}


class SettingsTable(BaseModel):
    """A table of settings whose numbers are never given as true or false."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_switch_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        # Pydantic reads true as 1: `max_workers = true` would quietly be one worker.
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _is_number_type(field.annotation):
            raise ValueError("must be a number, not true or false")
        return value


def means_no_limit(value: object) -> bool:
    """Is this the 0 that a file writes for "no limit" where Python says None? (TOML has
    no null.)"""
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


#: The spellings of ``permission_mode`` the README documents (Claude Code's); the parser
#: also takes ``accept_edits`` and ``bypass``, agentcell's own names for two of them.
PERMISSION_MODES = ("default", "acceptEdits", "bypassPermissions", "plan")


class Price(SettingsTable):
    """US dollars per million tokens.

    ``input`` is for prompt tokens read from no cache. Unset cache rates follow from it as
    the provider bills them: Anthropic's (a model named ``anthropic:…`` or ``claude…``)
    read 0.1× and write 1.25× (the 5-minute TTL; set ``cache_write`` to 2× ``input`` for
    ``prompt_cache = "1h"``); other providers' cache reads at ``input`` (no discount
    assumed: set ``cache_read`` to what yours charges) and no writes.
    """

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, le=1e6)
    output: float = Field(ge=0, le=1e6)
    cache_read: float | None = Field(default=None, ge=0, le=1e6)
    cache_write: float | None = Field(default=None, ge=0, le=1e6)

    def cache_rates(self, model: str) -> tuple[float, float]:
        """(read, write) dollars per million tokens for ``model``."""
        anthropic = model.startswith("anthropic:") or "claude" in model
        read = self.cache_read
        write = self.cache_write
        if read is None:
            read = self.input * (0.1 if anthropic else 1.0)
        if write is None:
            write = self.input * (1.25 if anthropic else 1.0)
        return read, write


#: Sub-agents one run may start unless ``[budgets] max_subagents`` says otherwise.
DEFAULT_MAX_SUBAGENTS = 256


class Budgets(SettingsTable):
    """Limits over a whole run (main agent and every sub-agent together)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=1, le=10**12)
    max_turns: int | None = Field(default=None, ge=1, le=10**6)
    #: One prompt cannot start an unbounded tree: with 80 workers and nesting, a prompt
    #: started 584 sub-agents. Raise it in your config for a larger fan-out.
    max_subagents: int | None = Field(default=DEFAULT_MAX_SUBAGENTS, ge=0, le=10**6)


class ProviderLimits(SettingsTable):
    """A provider's limits, kept by the parent across the main agent and every child.

    ``[limits.openai]`` holds for each model of that provider on its own (providers
    limit per model); ``[limits."openai:gpt-4o"]`` for that model, in place of the
    provider's table. Unset fields (the default) are not limited."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent: int | None = Field(default=None, ge=1)  # requests in flight at once
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, ge=1)


class TeamSettings(SettingsTable):
    """The bounds on messages between a run's agents (``send_message``); each one hit is
    said to the sender, naming its setting."""

    model_config = ConfigDict(extra="forbid")

    message_max_bytes: int = Field(default=32 * 1024, ge=1, le=1 << 24)
    mailbox_max: int = Field(default=64, ge=1, le=1 << 16)  # unread messages per agent
    # At most this many messages per sender in any window of window_s seconds (a list
    # of recipients, or "*", is one message).
    messages_per_window: int = Field(default=10, ge=1, le=1 << 16)
    window_s: float = Field(default=10.0, gt=0, le=24 * 3600)
    # Ended sub-agents a run's messages may continue (each a new run of its session).
    max_continuations: int = Field(default=8, ge=0, le=1 << 16)


DEFAULT_ALIASES = {
    "sonnet": "anthropic:claude-sonnet-4-5",
    "opus": "anthropic:claude-opus-4-1",
    "haiku": "anthropic:claude-haiku-4-5",
    # Claude Code's newest alias (Claude Fable 5, June 2026): Fable 5.2 on the API.
    "fable": "anthropic:claude-fable-5-2",
}

ApprovalMode = Literal["ask", "allow", "deny", "bubble"]
BackendName = Literal["local", "ray"]


class RaySettings(SettingsTable):
    """Where the Ray backend finds its cluster and how it sizes each sub-agent."""

    model_config = ConfigDict(extra="forbid")

    # "auto": $RAY_ADDRESS if set, else a cluster already running on this machine.
    address: str = "auto"
    num_cpus: float = Field(default=0.25, gt=0, le=1024)  # per sub-agent (they wait on I/O)
    resources: dict[str, float] = Field(default_factory=dict)  # custom Ray resources
    # The parent's listener: an address every node can reach (loopback for a local cluster).
    listen_host: str = "127.0.0.1"
    listen_port: int = Field(default=0, ge=0, le=65535)
    advertise_host: str | None = None  # what nodes dial, if not listen_host (NAT, 0.0.0.0)
    connect_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    # A connection to the listener: time to authenticate, and how many may be pending.
    handshake_timeout_s: float = Field(default=5.0, gt=0, le=600)
    max_pending_connections: int = Field(default=64, ge=1, le=4096)
    # "orchestrator": a sub-agent's model requests cross its channel to the parent, which
    # sends them (no key on the node); "node": its node sends them, with the key shipped.
    model_route: Literal["orchestrator", "node"] = "orchestrator"


SandboxMode = Literal["workspace", "read-only", "off", "required"]


class Settings(SettingsTable):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: str | None = None  # the main agent's model; sub-agents inherit it by default
    aliases: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_ALIASES))
    model_options: dict[str, dict[str, object]] = Field(default_factory=dict)  # per provider
    max_workers: int = Field(default=16, ge=1, le=4096)
    warm_spares: int = Field(default=2, ge=0, le=256)
    # Start sub-agent processes as the main model names its task calls, before its
    # response is complete (off: a process is started when a call is dispatched).
    start_ahead: bool = True
    # Send a relayed sub-agent's first model request while its process starts, when the
    # parent can build that request itself (no MCP servers, no history); the child's own
    # first request then takes the answer under way if it is the same bytes, else the
    # one sent ahead is cancelled. Off by default: a run its child then refuses (a
    # protected path that is a link, say) has had its first request sent all the same.
    call_ahead: bool = False
    # Fork servers starting processes side by side; None: one per four cores (1 to 4).
    process_starters: int | None = Field(default=None, ge=1, le=8)
    approval: ApprovalMode = "ask"
    permission_mode: str = "default"
    allow_rules: list[str] = Field(default_factory=list)
    deny_rules: list[str] = Field(default_factory=list)
    ask_rules: list[str] = Field(default_factory=list)
    max_depth: int = Field(default=1, ge=1, le=16)
    max_turns: int = Field(default=50, ge=1, le=100_000)  # main agent
    # subagent_max_turns and subagent_timeout_s are the default for a definition that
    # sets none, and the cap for one that sets more (an agent file cannot outrun the
    # operator). None for the timeout (0 in a file): no wall-clock limit (explicit opt-out).
    subagent_max_turns: int = Field(default=50, ge=1, le=100_000)
    subagent_timeout_s: float | None = Field(default=1800.0, ge=0.01, le=7 * 24 * 3600)
    # Compaction of a long sub-agent's conversation: at this fraction of the context
    # window (<= 1) or this many tokens (> 1); 0 never. A definition's autoCompactWindow wins.
    subagent_compact_at: float = Field(default=0.8, ge=0)
    subagent_context_window: int = Field(default=200_000, ge=1_000)  # the models' window
    # After a sub-agent's own timeout the parent waits this long for its report, then kills.
    timeout_grace_s: float = Field(default=5.0, ge=0, le=600)
    heartbeat_timeout_s: float = Field(default=60.0, ge=0.5, le=24 * 3600)
    background_wait_s: float = Field(default=600.0, ge=0, le=7 * 24 * 3600)
    # A run does not start on a disk this full (the records and work folders'; 0: no check).
    min_free_mb: int = Field(default=64, ge=0, le=1 << 30)
    min_free_inodes: int = Field(default=256, ge=0, le=1 << 40)
    budgets: Budgets = Field(default_factory=Budgets)
    prices: dict[str, Price] = Field(default_factory=dict)
    # Provider limits ("openai", or "openai:gpt-4o" for one model); none by default.
    limits: dict[str, ProviderLimits] = Field(default_factory=dict)
    backend: BackendName = "local"  # where sub-agents run: this machine, or a Ray cluster
    ray: RaySettings = Field(default_factory=RaySettings)
    teams: TeamSettings = Field(default_factory=TeamSettings)
    # The OS sandbox each sub-agent puts itself in (see docs/security.md); "required"
    # is "workspace", refusing to start where this machine cannot enforce all of it.
    sandbox: SandboxMode = "workspace"
    # May sub-agents' bash commands use the network: all of it (true) or these hosts?
    network: bool | list[str] = False
    # Hosts web_fetch reaches without asking, besides each agent's network: list.
    webfetch_allow: list[str] = Field(default_factory=list)
    # A small model that applies web_fetch's prompt to the page ("" : the page itself).
    webfetch_model: str = ""
    max_processes: int = Field(default=512, ge=8)  # per sub-agent's process tree
    tmp_size_mb: int = Field(default=512, ge=1, le=1 << 20)  # its private temp folder's cap
    sandbox_read: list[str] = Field(default_factory=list)  # more folders sub-agents may read
    # Claude Code's blockWritesOutsideWorkingDirectories: the main agent writes (file
    # tools, bash redirections) only in the workdir and sandbox_read (sub-agents: walled).
    block_writes_outside: bool = False
    # Give bash the model credentials: honoured from the user's own config only.
    bash_credentials: bool = False
    # MCP servers by name ([mcp_servers.NAME], and a trusted project's .mcp.json): a
    # definition's `mcpServers` names them; the main agent gets `main_mcp_servers` of
    # them (None: all of them, as Claude Code's main thread does).
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    main_mcp_servers: list[str] | None = None
    # Lifecycle hooks (Claude Code's command hooks): never from an untrusted project.
    hooks: dict[str, Any] = Field(default_factory=dict)
    # AGENTS.md / CLAUDE.md into the main and general-purpose agents' prompts.
    instruction_files: bool = True
    # Modules the fork server imports once, so that every sub-agent starts with them
    # (your tools' modules); trusted configuration only: importing runs their code.
    preload: list[str] = Field(default_factory=list)

    @property
    def mode_chosen(self) -> bool:
        """Whether a file, the environment or a flag set ``permission_mode``: an agent
        file's ``acceptEdits`` then does not overrule it (``subagent_mode``)."""
        return "permission_mode" in self.model_fields_set

    @field_validator("permission_mode")
    @classmethod
    def _known_mode(cls, value: str) -> str:
        try:
            return PermissionMode.parse(value).value
        except ValueError:  # its list is the parser's own names, not the documented ones
            modes = ", ".join(PERMISSION_MODES[:-1]) + f" or {PERMISSION_MODES[-1]}"
            raise ValueError(f"unknown permission mode {value!r}: use {modes}") from None

    @field_validator("subagent_timeout_s", mode="before")
    @classmethod
    def _zero_is_no_limit(cls, value: object) -> object:
        # TOML has no null: a file (or a flag) says "no wall-clock limit" with 0.
        return None if means_no_limit(value) else value

    @field_validator("network", mode="before")
    @classmethod
    def _network_shape(cls, value: object) -> object:
        # Checked before pydantic tries each kind in turn and names both of its attempts.
        hosts = isinstance(value, list | tuple) and all(isinstance(h, str) for h in value)
        if isinstance(value, bool) or hosts:
            return value
        raise ValueError(
            "must be true (any host), false (none) or a list of hosts, e.g. "
            '["pypi.org", "github.com:443", "*.example.com"]'
        )

    @field_validator("hooks")
    @classmethod
    def _hooks_shape(cls, value: dict[str, Any]) -> dict[str, Any]:
        parse_hooks(value, "settings", notes=[])  # the shape only: named when run
        return value

    @field_validator("preload")
    @classmethod
    def _findable_modules(cls, value: list[str]) -> list[str]:
        problem = preload_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("model")
    @classmethod
    def _provider_model(cls, value: str | None) -> str | None:
        if value is not None and ":" not in value:
            raise ValueError(
                f"model {value!r} needs a provider: write PROVIDER:NAME, e.g. "
                "openai:gpt-4o-mini, anthropic:claude-sonnet-4-5 or scripted:demo"
            )
        return value
