"""Model providers behind one streaming interface.

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.worker.models._anthropic import (
    THINKING_BUDGETS,
    AnthropicModel,
    thinking_control,
    thinking_max_tokens,
)
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
    "THINKING_BUDGETS",
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
    "thinking_control",
    "thinking_max_tokens",
]
