"""Model providers behind one streaming interface."""

from worker.models._anthropic import AnthropicModel
from worker.models._base import (
    Model,
    ModelError,
    ModelErrorKind,
    ModelRequest,
    ModelResponse,
    StopReason,
    StreamItem,
    TextPart,
    ToolSpec,
    complete,
)
from worker.models._openai import OpenAIChatModel
from worker.models._resolve import resolve_model

__all__ = [
    "AnthropicModel",
    "OpenAIChatModel",
    "Model",
    "ModelError",
    "ModelErrorKind",
    "ModelRequest",
    "ModelResponse",
    "StopReason",
    "StreamItem",
    "TextPart",
    "ToolSpec",
    "complete",
    "resolve_model",
]
