"""MCP servers of one agent, started in its own process tree.

_client   the servers' lifecycle and their tools as ``Tool``s (stdio and HTTP)
_warden   run as a script: starts a stdio server as its child, under the filter,
          and ends it with its owner
"""
