"""Tools: the interface, the registry, and the built-in file and shell tools.

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.worker.tools._base import (
    FunctionTool,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRegistry,
    args_schema,
    function_tool,
    parse_args,
    truncate_output,
)
from agentcell.worker.tools._bash import Bash
from agentcell.worker.tools._builtin import BUILTIN_TOOL_NAMES, builtin_tools
from agentcell.worker.tools._files import EditFile, Glob, Grep, ReadFile, WriteFile
from agentcell.worker.tools._paths import resolve_inside

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "Bash",
    "EditFile",
    "Glob",
    "Grep",
    "ReadFile",
    "WriteFile",
    "builtin_tools",
    "resolve_inside",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "args_schema",
    "function_tool",
    "parse_args",
    "truncate_output",
]
