"""Model providers behind one streaming interface."""

from agentcell.worker.models._anthropic import AnthropicModel
from agentcell.worker.models._base import (
    Model,
    ModelError,
    ModelErrorKind,
    ModelRequest,
    ModelResponse,
    StopReason,
    StreamItem,
    TextPart,
    ToolCallStart,
    ToolSpec,
    complete,
)
from agentcell.worker.models._gate import Permit, RequestGate, request_gate
from agentcell.worker.models._openai import OpenAIChatModel
from agentcell.worker.models._resolve import resolve_model

__all__ = [
    "AnthropicModel",
    "OpenAIChatModel",
    "Model",
    "ModelError",
    "ModelErrorKind",
    "ModelRequest",
    "ModelResponse",
    "Permit",
    "RequestGate",
    "StopReason",
    "StreamItem",
    "TextPart",
    "ToolCallStart",
    "ToolSpec",
    "complete",
    "request_gate",
    "resolve_model",
]
