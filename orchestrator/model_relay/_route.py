"""Which way a sub-agent's model requests go, decided when its spec is made.

On the local backend a child with an HTTP provider's model sends its requests through
the parent (``_model_relay``): its spec says ``model_via_parent``, its environment loses
the provider's variables (key and base URL), its model options lose the key and get the
base URL the parent resolved (only for the words of its error messages and the request
shape a provider picks by URL: it has no TCP to reach it). A model object given in code
(tests' models, ``model_objects``) keeps the direct route, and so does a Ray child with
``ray.model_route = "node"``; by default a Ray child's calls cross its TCP channel to the
parent like a local child's cross its pipe.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from agentcell.orchestrator.backends._environment import PROVIDER_ENV
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.model_relay._relay import (
    PARENT_ONLY_KEYS,
    relayed,
    upstream_options,
)
from agentcell.protocol import AgentSpec
from agentcell.worker import known_secrets, secret_digests
from agentcell.worker.models import ModelError, resolve_model

#: (backend, ``ray.model_route``) pairs whose children send their own requests: only a Ray
#: child the user sends the node's way. Asked by membership: the pairs have no order.
_DIRECT = frozenset({("ray", "node")})


def route_model(spec: AgentSpec, settings: Settings, backend: str | None, *, custom: bool) -> None:
    """Send ``spec``'s model requests through the parent where they can go that way
    (``backend``: the definition's, else the settings')."""
    route = (backend or settings.backend, settings.ray.model_route)
    if custom or route in _DIRECT or not relayed(spec.model):
        return
    try:
        upstream = resolve_model(spec.model, upstream_options(settings, spec.model))
    except ModelError:
        return  # bad options: the child reports them like before, on the direct route
    spec.model_via_parent = True
    spec.model_permits = False  # the parent takes the permit where it sends
    options = {k: v for k, v in spec.model_options.items() if k not in PARENT_ONLY_KEYS}
    options["base_url"] = without_credentials(getattr(upstream, "base_url", ""))
    spec.model_options = options
    if spec.env is not None:
        for name in PROVIDER_ENV.get(spec.model.partition(":")[0], ()):
            spec.env.pop(name, None)
        held = spec.env.values()
        # The keys it no longer holds, so that it still redacts them from its records.
        spec.redactions = secret_digests(v for v in known_secrets().values() if v not in held)


def without_credentials(url: str) -> str:
    """``url`` as a child may hold it: no ``user:password@``, no query, no fragment (a
    base URL can carry a proxy's password; the child only words its errors with it and
    picks a request shape by host and path)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address goes back in brackets
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
