"""The ``agentcell`` command line: run, chat, demo, agents, runs.

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.orchestrator.cli._main import cli, main

__all__ = ["cli", "main"]
