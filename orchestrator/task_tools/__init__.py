"""The main agent's coordination tools and the background sub-agents they start.

_tools         ``task``, ``task_status``, ``task_wait``, ``task_control``
_tracker       background sub-agents: their states, and each result delivered once
_delivery      background results as the main agent receives them: capped, kept on disk
_start_ahead   processes started while the main model still writes its ``task`` calls
_background    who owns the main agent's background sub-agents
"""
