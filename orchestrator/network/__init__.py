"""What a sub-agent may reach through the parent, and nothing else.

_host_rules    the entries of a ``network:`` list: host names, host:port, wildcards
_egress        the egress proxy bash's commands reach through their relay
_web_fetch     ``web_fetch``: the parent fetches a page for a sub-agent
_pinned_http   an httpx transport that connects only to the address checked for a host
"""
