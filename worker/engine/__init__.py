"""The ReAct loop the main agent and every sub-agent run, and what it keeps.

_loop         ``Engine``: model turn, tool calls through the hooks, events, limits
_in_flight    the model call in flight, which a message may interrupt
_session      the conversation memory of one run (in memory only)
_compaction   older turns summarised by the agent's own model
_first_call   a sub-agent's first request body, known before its process runs
_answer_cap   the one cap on a sub-agent's answer, and frames that always fit
_hook_relay   a sub-agent's side of the parent's lifecycle hooks
"""
