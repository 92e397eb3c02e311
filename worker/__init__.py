"""The agent runtime: engine, session, tools, model providers, hooks, child entry point."""

from worker._child import ChildBoot, ChildLink, child_main

__all__ = ["ChildBoot", "ChildLink", "child_main"]
