"""Settings and where they come from: user file, project file, environment, flags.

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.orchestrator.config._claude_modes import claude_mode_stand_in
from agentcell.orchestrator.config._claude_settings import translate_rule
from agentcell.orchestrator.config._hooks import (
    DEFAULT_HOOK_TIMEOUT_S,
    HOOK_EVENTS,
    HookCommand,
    name_once,
    parse_hooks,
)
from agentcell.orchestrator.config._load import (
    ENV_SETTINGS,
    ConfigError,
    base_url_problem,
    load_settings,
    project_config,
    settings_messages,
    user_config_path,
)
from agentcell.orchestrator.config._mcp import McpServerConfig, read_mcp_json
from agentcell.orchestrator.config._settings import (
    DEFAULT_ALIASES,
    ApprovalMode,
    BackendName,
    Budgets,
    Price,
    ProviderLimits,
    RaySettings,
    Settings,
)
from agentcell.orchestrator.config._trust import (
    is_trusted,
    narrow_network,
    revoke,
    trust,
    trusted_folders,
)
from agentcell.orchestrator.config._trust_table import (
    AGENT_FILE_TRUST,
    SETTINGS_TRUST,
    TrustEntry,
    covering,
    setting_paths,
)

__all__ = [
    "AGENT_FILE_TRUST",
    "ApprovalMode",
    "BackendName",
    "Budgets",
    "ConfigError",
    "DEFAULT_ALIASES",
    "DEFAULT_HOOK_TIMEOUT_S",
    "HOOK_EVENTS",
    "HookCommand",
    "ENV_SETTINGS",
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
]
