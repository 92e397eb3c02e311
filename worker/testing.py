"""Model test doubles that ship with agentcell: for our tests, the demo, and yours.

``FunctionModel(fn)`` decides each reply with a function of the messages;
``ScriptedModel([...])`` plays its steps in order, records every call and fails loudly on
surprises. Both work inside sub-agent processes (see ``agentcell.testing``).
"""

from agentcell.worker.models._doubles import (
    FunctionModel,
    Reply,
    ReplyFunction,
    ScriptedModel,
    Step,
    UnexpectedModelCall,
    last_user_text,
    reply,
    tool_call,
    tool_results,
)
from agentcell.worker.models._scripted import SCRIPTED_MODELS, echo_model

__all__ = [
    "SCRIPTED_MODELS",
    "FunctionModel",
    "Reply",
    "ReplyFunction",
    "ScriptedModel",
    "Step",
    "UnexpectedModelCall",
    "echo_model",
    "last_user_text",
    "reply",
    "tool_call",
    "tool_results",
]
