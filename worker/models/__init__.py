"""Model providers behind one streaming interface.

This ``__all__`` is what the orchestrator may import (a door of the worker layer).

``HttpxTransport`` and ``make_client`` (the direct route) and ``H11Pool`` (the parent
relay's plain-HTTP route) are imported when first asked for: they import httpx, which a
sub-agent's process, whose requests go through the parent, never needs (the fork
server's template is ~12 MiB smaller without it).
"""

from typing import TYPE_CHECKING, Any

from agentcell.worker.models._anthropic import _ADAPTIVE_EFFORT as ADAPTIVE_EFFORT
from agentcell.worker.models._anthropic import DEFAULT_MAX_TOKENS as DEFAULT_ANTHROPIC_MAX_TOKENS
from agentcell.worker.models._anthropic import (
    THINKING_BUDGETS,
    WEB_SEARCH_TOOL,
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
    ToolCallStart,
    ToolSpec,
    complete,
)
from agentcell.worker.models._gate import estimate_tokens, request_gate
from agentcell.worker.models._http import Inflater, SSEDecoder, parse_retry_after
from agentcell.worker.models._openai import OFFICIAL_BASE_URL as OFFICIAL_OPENAI_URL
from agentcell.worker.models._openai import OpenAIChatModel
from agentcell.worker.models._resolve import PROVIDERS, resolve_model
from agentcell.worker.models.transports._base import (
    Endpoint,
    ModelTransport,
    Retry,
    TransportResponse,
)

if TYPE_CHECKING:
    from agentcell.worker.models.transports._client import make_client
    from agentcell.worker.models.transports._direct import HttpxTransport
    from agentcell.worker.models.transports._h11 import H11Pool, h11_route

_DIRECT_ROUTE = {
    "HttpxTransport": "agentcell.worker.models.transports._direct",
    "make_client": "agentcell.worker.models.transports._client",
    "H11Pool": "agentcell.worker.models.transports._h11",
    "h11_route": "agentcell.worker.models.transports._h11",
}


def __getattr__(name: str) -> Any:
    if name in _DIRECT_ROUTE:
        import importlib

        return getattr(importlib.import_module(_DIRECT_ROUTE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ADAPTIVE_EFFORT",
    "AnthropicModel",
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
    "Endpoint",
    "H11Pool",
    "HttpxTransport",
    "Inflater",
    "Model",
    "ModelError",
    "ModelErrorKind",
    "ModelRequest",
    "ModelResponse",
    "ModelTransport",
    "OFFICIAL_OPENAI_URL",
    "OpenAIChatModel",
    "PROVIDERS",
    "Retry",
    "SSEDecoder",
    "THINKING_BUDGETS",
    "ToolCallStart",
    "ToolSpec",
    "TransportResponse",
    "WEB_SEARCH_TOOL",
    "complete",
    "estimate_tokens",
    "h11_route",
    "make_client",
    "parse_retry_after",
    "request_gate",
    "resolve_model",
    "thinking_control",
    "thinking_max_tokens",
]
