"""The public API, name by name: tests/house/test_public_api.py checks agentcell and
agentcell.testing export exactly these; tests/house/test_layout.py that the README names
only these."""

from __future__ import annotations

# Every public package and its whole __all__. A change to the public API changes this table.
PUBLIC_API: dict[str, list[str]] = {
    "agentcell": [
        "AgentActivity",
        "AgentDefinition",
        "AgentEvent",
        "AllowAll",
        "ApprovalAnswer",
        "ApprovalChannel",
        "ApprovalNeeded",
        "ApprovalQuery",
        "Budgets",
        "CallbackChannel",
        "ConfigError",
        "DenyAll",
        "ModelError",
        "Notice",
        "Orchestrator",
        "OrchestratorEvent",
        "PoolError",
        "Price",
        "RunFinished",
        "RunReport",
        "RunResult",
        "RunStatus",
        "Settings",
        "SubAgentEnded",
        "SubAgentProcess",
        "SubAgentResult",
        "SubAgentStarted",
        "TextDelta",
        "Tool",
        "ToolContext",
        "ToolError",
        "ToolFinished",
        "ToolOutput",
        "ToolStarted",
        "TurnStarted",
        "Usage",
        "UsageUpdate",
        "function_tool",
    ],
    "agentcell.testing": [
        "FunctionModel",
        "ScriptedModel",
        "UnexpectedModelCall",
        "echo_model",
        "last_user_text",
        "reply",
        "tool_call",
        "tool_results",
    ],
}
