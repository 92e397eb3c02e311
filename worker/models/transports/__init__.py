"""How one model request attempt reaches a server (httpx's ``_transports``, in spirit).

_base         the ``ModelTransport`` interface every route implements
_direct       one POST from a guarded httpx pool (the main agent, a Ray node's child)
_h11          the parent relay's plain-HTTP keep-alive route (no httpx per request)
_parent       a sub-agent's route: the body sent to its parent as a frame
_permits      a sub-agent's request gate: a permit from the parent before each request
_client       the httpx client: the block guard, proxies, TLS
_error_body   what a server's error response says, in its own words
"""
