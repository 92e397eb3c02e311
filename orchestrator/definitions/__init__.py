"""What a sub-agent is: definitions, agent files, the registry, tool names and narrowing.

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.orchestrator.definitions._inline import definitions_from_json
from agentcell.orchestrator.definitions._loader import (
    Diagnostic,
    LoadResult,
    field_for_key,
    load_agent_file,
    load_agents_dir,
)
from agentcell.orchestrator.definitions._model import (
    INHERIT,
    MODEL_ALIASES,
    AgentDefinition,
    agent_slug,
    model_problem,
    normalize_model,
    resolve_model_alias,
    validation_messages,
)
from agentcell.orchestrator.definitions._registry import (
    BUILTIN_AGENTS,
    AgentRegistry,
    agent_dirs,
)
from agentcell.orchestrator.definitions._skills import (
    SKILL_MAX_CHARS,
    Skill,
    SkillOffer,
    find_skill,
    load_skills,
    skill_dirs,
    skill_offer,
    with_skills,
)
from agentcell.orchestrator.definitions._tool_policy import (
    BUILTIN_TOOLS,
    CLAUDE_TOOL_NAMES,
    COORDINATION_TOOLS,
    KNOWN_TOOLS,
    READ_ONLY_TOOLS,
    ResolvedTools,
    is_known_tool,
    is_mcp_tool,
    map_tool_name,
    mcp_patterns,
    means_all_tools,
    normalize_tool_names,
    resolve_tools,
)

__all__ = [
    "SKILL_MAX_CHARS",
    "Skill",
    "SkillOffer",
    "skill_offer",
    "find_skill",
    "is_mcp_tool",
    "load_skills",
    "mcp_patterns",
    "skill_dirs",
    "with_skills",
    "definitions_from_json",
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
    "agent_dirs",
    "agent_slug",
    "field_for_key",
    "is_known_tool",
    "load_agent_file",
    "load_agents_dir",
    "map_tool_name",
    "means_all_tools",
    "model_problem",
    "normalize_model",
    "normalize_tool_names",
    "resolve_model_alias",
    "resolve_tools",
    "validation_messages",
]
