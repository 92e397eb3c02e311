"""The ``agentcell`` command line: run, chat, demo, agents, runs."""

from agentcell.orchestrator.cli._main import cli, main

__all__ = ["cli", "main"]
