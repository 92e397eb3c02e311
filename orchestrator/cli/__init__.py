"""The ``agentcell`` command line (``main``, the console script), a module per command.

_main                                         the command and its sub-commands
_run_cmd, _chat (+ _chat_turns, _input)       ``run`` and ``chat``
_demo, _agents_cmd, _runs_cmd, _resumed       ``demo``, ``agents``, ``runs`` (+ ``resume``)
_timeline, _sandbox_cmd, _trust_cmd, _ray_cmd ``runs view``, ``sandbox``, ``trust``, ``ray``
_display, _report, _pipes                     live progress, the last lines, safe stdout
"""

from agentcell.orchestrator.cli._main import main

__all__ = ["main"]
