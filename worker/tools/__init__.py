"""Tools: the interface, the registry, and the built-in file and shell tools.

This ``__all__`` is what the orchestrator may import (a door of the worker layer).
"""

from agentcell.worker.tools._base import (
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    args_schema,
    function_tool,
    parse_args,
)
from agentcell.worker.tools._builtin import BUILTIN_TOOL_NAMES, builtin_tools

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "args_schema",
    "builtin_tools",
    "function_tool",
    "parse_args",
]
