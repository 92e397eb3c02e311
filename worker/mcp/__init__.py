"""MCP servers of one agent, started in its own process tree; and the walled host of a
server the parent shares.

_client   the servers' lifecycle and their tools as ``Tool``s (stdio and HTTP)
_warden   run as a script: starts a stdio server as its child, under the filter,
          and ends it with its owner
_host     run by the launcher: the walls of a shared server (cap, namespace, no capability)
          before it becomes the warden; and the parent's side of them
"""
