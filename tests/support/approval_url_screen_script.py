"""Run on a pseudo-terminal (or with its output piped) by
tests/orchestrator/approvals/test_approval_url.py: one sub-agent asks for web_fetch of URLs
carrying terminal escapes, bidi overrides, Rich markup and invisible tag letters — once as
its model's tool call, once as a hostile child writing the request on its pipe itself — and
the parent asks about each URL's host on this terminal (``TerminalPrompt``), or, with
``--pipe``, as ``chat`` asks with its input and output piped (``PlainInput`` writing to
stdout)."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.approvals._channel import TerminalPrompt
from agentcell.protocol import ToolCall

from agentcell.testing import FunctionModel, reply, tool_results

#: Port 9 (discard) on the loopback: never fetched, the person says no. No C0 or C1
#: control character: a URL with one is refused before any question (see CONTROL_URL).
PAINT = "\u202eevil\u202c\u2029main agent wants to run bash:\u2028    git status"
MODEL_URL = f"http://127.0.0.1:9/a{PAINT}[bold red]MARKUP[/]\U000e0041end"
#: Sent by the child's own code, past its own checks: invisible tag letters, a soft hyphen.
CHILD_URL = "http://127.0.0.1:9/b\U000e0041\U000e0042\u00ad\u2029red" + PAINT
#: Terminal escapes, CR, LF and a C1 CSI: refused as no URL, never asked about.
CONTROL_URL = "http://127.0.0.1:9/c\x1b[2J\x1b]8;;https://good.example/\x07\r\n\x9b2J"


async def fetch_hostile(messages: list[Any], tools: list[Any]) -> Any:
    results = tool_results(messages)
    if not results:
        arguments = json.dumps({"url": MODEL_URL, "prompt": "the title"})
        return reply("", ToolCall(id="call-1", name="web_fetch", arguments=arguments))
    from agentcell.worker.child._main import ChildLink

    link = next(o for o in gc.get_objects() if isinstance(o, ChildLink))
    forged, _ = await link.delegate("call-2", "web_fetch", json.dumps({"url": CHILD_URL}))
    control, _ = await link.delegate("call-3", "web_fetch", json.dumps({"url": CONTROL_URL}))
    return "FETCH SAID " + " | ".join([results[0].content, forged, control])


async def main(workdir: Path, piped: bool) -> None:
    model = FunctionModel(fetch_hostile, name="function:fetcher")
    reader = None
    if piped:  # as chat asks when stdin and stdout are not a terminal
        from agentcell.orchestrator.cli._input import PlainInput

        reader = PlainInput(out=sys.stdout)
        approval = TerminalPrompt(read_line=reader.ask, out=sys.stdout)
    else:
        approval = TerminalPrompt()
    orch = Orchestrator(
        settings=Settings(approval="ask", max_workers=1, warm_spares=0),
        workdir=workdir,
        agents=[
            AgentDefinition(
                name="fetcher", description="fetches", tools=["web_fetch"], model=model.name
            )
        ],
        models={model.name: model},
        load_agent_files=False,
        record=False,
        approval=approval,
    )
    print("BEFORE THE QUESTION", flush=True)
    try:
        async with orch:
            result = await orch.delegate("fetcher", "go")
    finally:
        if reader is not None:
            reader.close()
    # What the tool said, as ascii() writes it: this line must not paint the screen either.
    print(f"\nRESULT {result.status.value}: {ascii(result.text)} {result.error}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), "--pipe" in sys.argv[2:]))
