"""The parent's say over a child's tool call: a person, or the user's own hooks.

_channel      the approval channel: one place where a person (or a policy) says yes or no
_question     the question, built by the parent from what it knows, one field a line
_hooks        lifecycle hooks: the user's commands, run in the parent, outside every sandbox
_stop_hooks   a sub-agent's SubagentStop (and TeammateIdle) moment, asked over its pipe
_hook_shape   what a hook command sees of a tool call, in Claude Code's shape, and back
"""
