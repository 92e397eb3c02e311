"""A sub-agent's model requests, sent from the parent (the child's side is
``worker/models/transports/_parent.py``).

_relay        ``ModelRelay``: one child's calls checked, sent, streamed back as frames
_checks       what a relayed request may cost: the body's cost-bearing keys
_batch        a relayed answer in as few frames as streaming allows
_usage        what an answer cost, read from the stream the parent relays
_route        which way a sub-agent's requests go, decided when its spec is made
_call_ahead   a sub-agent's first request, sent while its process starts
_key_mask     the parent's key, masked in what it relays back
_limiter      provider limits, kept for the main agent and every sub-agent together
"""
