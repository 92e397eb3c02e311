"""What a sub-agent is: definitions, agent files, the registry, skills, tool names.

_model            ``AgentDefinition``, model-string rules, readable validation errors
_loader           agent files: Markdown with a YAML frontmatter (Claude Code's format)
_claude_compat    Claude Code frontmatter values mapped to their nearest equivalent
_inline           definitions given on the command line (``--agents '<json>'``)
_registry         the agents a main agent can delegate to: built-ins, then files
_skills           ``SKILL.md`` files a definition preloads or offers
_tool_policy      tool names: ours, Claude Code's spellings, the sub-agent tool set
"""
