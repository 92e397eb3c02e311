"""Sub-agent models and a tool for ``test_runs_view`` (a small module: the children import
it, as dill sends module-level functions by reference)."""

from __future__ import annotations

from typing import Any

from agentcell.worker.tools import function_tool

from agentcell.testing import reply, tool_call, tool_results

# What a hostile sub-agent writes everywhere it can: each would run (and mark the DOM)
# if the page let it through as markup.
ATTACKS = (
    "<script>document.documentElement.setAttribute('data-pwned','script')</script>",
    "</script><script>document.title='PWNED'</script>",
    "\"><img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">",
    "'><a href=\"javascript:document.title='PWNED'\">click</a>",
)
HOSTILE = " ".join(ATTACKS)


def hostile_model(messages: list[Any], tools: list[Any]) -> Any:
    """Puts the attack into its tool call's arguments and its answer."""
    if not tool_results(messages):
        return reply(HOSTILE, tool_call("echo_back", text=HOSTILE))
    return f"answer {HOSTILE}"


def nester_model(messages: list[Any], tools: list[Any]) -> Any:
    """Starts one sub-agent of its own, then answers."""
    if not tool_results(messages):
        return reply(
            "", tool_call("task", subagent_type="leaf", prompt="leaf job", description="leaf")
        )
    return "nested done"


def _echo_back(text: str) -> str:
    """Return the text."""
    return text


echo_back = function_tool(_echo_back, name="echo_back", read_only=True)
