"""MCP servers as the parent sees them: which ones a sub-agent starts, which tools it may
use (and, as they come, servers the parent holds and shares).

_servers   a sub-agent's servers and tools, from its definition and the settings
"""
