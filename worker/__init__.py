"""The agent runtime: engine, session, tools, model providers, hooks, child entry point."""

from worker._child import ChildBoot, ChildLink, child_main
from worker._engine import Engine, EventSink, Limits, TurnHook
from worker._hooks import (
    Approver,
    Decision,
    DenyTools,
    Hook,
    PermissionMode,
    PermissionPolicy,
    Rule,
    Verdict,
)
from worker._session import Session

__all__ = [
    "Approver",
    "ChildBoot",
    "ChildLink",
    "Decision",
    "DenyTools",
    "Engine",
    "EventSink",
    "Hook",
    "Limits",
    "PermissionMode",
    "PermissionPolicy",
    "Rule",
    "Session",
    "TurnHook",
    "Verdict",
    "child_main",
]
