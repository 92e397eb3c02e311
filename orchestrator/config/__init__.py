"""Settings and where they come from: user file, project file, environment, flags."""

from agentcell.orchestrator.config._load import (
    ENV_SETTINGS,
    ConfigError,
    load_settings,
    project_config,
    settings_messages,
    user_config_path,
)
from agentcell.orchestrator.config._settings import (
    DEFAULT_ALIASES,
    ApprovalMode,
    BackendName,
    Budgets,
    Price,
    RaySettings,
    Settings,
)

__all__ = [
    "ApprovalMode",
    "BackendName",
    "Budgets",
    "ConfigError",
    "DEFAULT_ALIASES",
    "ENV_SETTINGS",
    "Price",
    "RaySettings",
    "Settings",
    "load_settings",
    "project_config",
    "settings_messages",
    "user_config_path",
]
