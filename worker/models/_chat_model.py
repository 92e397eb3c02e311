"""What the HTTP providers share: configuration from arguments or the environment, the
SSE client, the missing-key check, and the streaming entry point. A provider says how
to authenticate, how to build a request body, and how to parse its stream."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar

from agentcell.worker.child._secrets import secret
from agentcell.worker.models._base import ModelError, ModelErrorKind, ModelRequest, StreamItem
from agentcell.worker.models._http import HttpOptions, SSEClient
from agentcell.worker.models.transports._base import Endpoint, ModelTransport


class HttpChatModel:
    provider: ClassVar[str]  # "openai"
    key_env: ClassVar[str]  # "OPENAI_API_KEY"
    base_env: ClassVar[str]  # "OPENAI_BASE_URL"
    official_url: ClassVar[str]
    endpoint: ClassVar[str]  # appended to the base URL

    def __init__(self, model_name: str, http: HttpOptions | None = None) -> None:
        """``http``: how its requests travel (``HttpOptions``' defaults without it)."""
        http = http or HttpOptions()
        if not model_name:
            raise ModelError(ModelErrorKind.CONFIG, f"{self.provider}: the model name is empty")
        self.model_name = model_name
        self.name = f"{self.provider}:{model_name}"
        base = (http.base_url or os.environ.get(self.base_env) or self.official_url).rstrip("/")
        self.base_url = base
        self._official = base == self.official_url
        self._api_key = http.api_key if http.api_key is not None else secret(self.key_env)
        self._url = endpoint_url(base, self.endpoint)
        self._http = SSEClient(
            provider=self.provider,
            model_name=model_name,
            base_url=base,
            key_env=self.key_env,
            base_env=self.base_env,
            options=http,
        )
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        headers.update(self._headers_for(self._api_key))
        self._headers = headers

    def transport_over(
        self, make: Callable[[str, Mapping[str, str], Endpoint], ModelTransport]
    ) -> ModelTransport:
        """This model's requests sent by the transport ``make(url, headers, endpoint)``
        builds — its URL, its headers (the key among them) and where it sends: how the
        parent relays a sub-agent's requests from its own pools."""
        return make(self._url, self._headers, self._http.endpoint)

    def _headers_for(self, api_key: str | None) -> dict[str, str]:
        """Authentication (and version) headers; none without a key."""
        raise NotImplementedError

    def _payload(self, request: ModelRequest) -> bytes:
        """The request body for one turn."""
        raise NotImplementedError

    def _parser(self, position: int) -> Any:
        """A fresh stream parser for one answer (``position``: the number of messages)."""
        raise NotImplementedError

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Stream one assistant turn: ``TextPart`` chunks and ``ToolCallStart``
        announcements, then one ``ModelResponse``."""
        position = len(request.messages)
        return self._http.stream(
            self._url,
            self._headers,
            lambda: self._body(request),
            lambda: self._parser(position),
        )

    def check_ready(self) -> None:
        """Raise the ``ModelError`` a first call would meet for lack of set-up (a missing
        API key), without sending anything: the command line checks before it starts."""
        if self._http.transport is not None:
            return  # whoever is at the other end holds the key (the parent) and checks it
        if not self._api_key and self._official:
            raise ModelError(
                ModelErrorKind.CONFIG,
                f"{self.key_env} is not set: export it (or point {self.base_env} at a server "
                "that needs no key)",
            )

    def _body(self, request: ModelRequest) -> bytes:
        # Checked when the stream starts rather than in the constructor, so that the
        # engine's model-error handling reports it like any other failed call.
        self.check_ready()
        return self._payload(request)

    async def aclose(self) -> None:
        """Close the connections. The model must not be used afterwards."""
        await self._http.aclose()

    async def __aenter__(self) -> HttpChatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def endpoint_url(base: str, endpoint: str) -> str:
    """``endpoint``'s URL under ``base``, whose query (a gateway's ``?api-version=…``)
    stays at the end: ``base + endpoint`` put the path inside the query."""
    head, mark, query = base.partition("?")
    return f"{head.rstrip('/')}{endpoint}{mark}{query}"
