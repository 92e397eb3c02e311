"""How an HTTP model's requests travel (``HttpOptions``), the same for every provider, and
the bounds every request has unless told otherwise."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcell.worker.models.transports._base import ModelTransport

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # one answer's body, after decompression
DEFAULT_DEADLINE_S = 600.0  # one model request, start to end, whatever trickles in


@dataclasses.dataclass(frozen=True, slots=True)
class HttpOptions:
    """How an HTTP model's requests travel, the same for every provider.

    ``base_url`` defaults to the provider's environment variable (``$OPENAI_BASE_URL``),
    then its official API; ``api_key`` to its key variable (``$OPENAI_API_KEY``).
    ``timeout`` bounds connecting and each wait for data, ``deadline`` one whole request
    (every attempt), ``max_response_bytes`` one answer's body after decompression.
    ``transport``: where each attempt goes (the link to the parent in a sub-agent
    process); None sends it from the model's own httpx pool (``max_connections``
    sockets), to its URL with its key.
    """

    base_url: str | None = None
    api_key: str | None = None
    max_retries: int = 4
    timeout: float = 600
    retry_base_delay: float = 0.5
    max_connections: int = 4
    deadline: float = DEFAULT_DEADLINE_S
    max_response_bytes: int = MAX_RESPONSE_BYTES
    transport: ModelTransport | None = None

    @classmethod
    def take(cls, options: dict[str, Any]) -> HttpOptions:
        """These options out of a provider's flat ``options`` (``[model_options.openai]``,
        an ``AgentSpec``'s): what is left there is the provider's own."""
        names = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: options.pop(name) for name in names if name in options})
