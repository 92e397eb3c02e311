"""Model test doubles for programs that use agentcell (they work inside sub-agent processes).

``FunctionModel(fn)`` answers each request with ``fn(messages, tools)``; ``ScriptedModel``
plays a script, records every call and fails loudly on an unexpected one. ``reply``,
``tool_call`` and ``tool_results`` build and read the messages they deal in.
"""

from agentcell.worker.models._doubles import (
    FunctionModel,
    ScriptedModel,
    UnexpectedModelCall,
    last_user_text,
    reply,
    tool_call,
    tool_results,
)
from agentcell.worker.models._scripted import echo_model

__all__ = [
    "FunctionModel",
    "ScriptedModel",
    "UnexpectedModelCall",
    "echo_model",
    "last_user_text",
    "reply",
    "tool_call",
    "tool_results",
]
