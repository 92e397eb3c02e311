"""The request gate of a child: each model request waits for a permit from the parent.

The parent owns the limiter (one per model, from ``[limits.*]`` in the settings); a
child with ``AgentSpec.model_permits`` set routes every HTTP model request through it
over its pipe, so K children together never exceed what the provider allows.
"""

from __future__ import annotations

from agentcell.worker.child._main import ChildLink
from agentcell.worker.models import ModelError, ModelErrorKind
from agentcell.worker.models._gate import Permit


class LinkGate:
    """``RequestGate`` over a ``ChildLink``: acquire = ``PermitRequest`` → ``PermitGrant``."""

    def __init__(self, link: ChildLink) -> None:
        self.link = link

    async def acquire(self, model: str, tokens: int) -> Permit:
        request_id, grant = await self.link.request_permit(model, tokens)
        if not grant.granted:
            raise ModelError(
                ModelErrorKind.RATE_LIMIT,
                f"{model}: the orchestrator refused a request permit: {grant.reason}",
            )
        return LinkPermit(self.link, request_id)


class LinkPermit:
    """One granted permit; released once (a second release is a no-op)."""

    __slots__ = ("_link", "_request_id")

    def __init__(self, link: ChildLink, request_id: int) -> None:
        self._link: ChildLink | None = link
        self._request_id = request_id

    def release(self, *, tokens: int = 0, retry_after: float | None = None) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.return_permit(self._request_id, tokens, retry_after)
