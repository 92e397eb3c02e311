"""What a run used and what it traced.

_usage           usage across the main agent and every sub-agent, and run-wide budgets
_usage_text      token counts as they are billed, one line
_child_spans     the parent's side of a traced sub-agent: its context and its spans
_tracing_setup   the orchestrator's tracing, from the ``OTEL_*`` variables unless given
"""
