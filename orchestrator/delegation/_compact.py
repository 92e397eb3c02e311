"""When a sub-agent's conversation is compacted (the child does it: worker ``_compaction``)."""

from __future__ import annotations

from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition


def compact_threshold(settings: Settings, definition: AgentDefinition) -> int:
    """The token count to compact at: the agent's own ``autoCompactWindow`` if it has
    one, else ``subagent_compact_at`` — a fraction of ``subagent_context_window`` (<= 1)
    or a count (> 1); 0: never."""
    if definition.auto_compact_window:
        return definition.auto_compact_window
    setting = settings.subagent_compact_at
    if setting <= 0:
        return 0
    if setting <= 1:
        return int(setting * settings.subagent_context_window)
    return int(setting)
