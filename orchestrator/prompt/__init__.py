"""What a sub-agent's prompt carries besides its definition.

_context             instruction files (CLAUDE.md, AGENTS.md, rules) and agent memory
_instruction_cache   the instruction files' section, kept across a run's delegations
_skill_offer         the skills of one run: preloaded ones and the ones it may load
"""
