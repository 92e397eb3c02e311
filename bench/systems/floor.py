"""The raw floor: what process-per-sub-agent costs with no framework at all.

The main agent is a bare loop over agentcell's HTTP model client; each sub-agent is a
bare ``multiprocess`` forkserver child (the modules it needs preloaded) that runs the
same bare loop and sends its answer back as one msgspec frame. No engine, no pool, no
events, no crash handling: the floor under agentcell's process-per-sub-agent path.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import msgspec
import multiprocess
import multiprocess.forkserver
import multiprocess.process
import multiprocess.spawn
from agentcell.protocol import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from agentcell.worker.models import ModelRequest, OpenAIChatModel, ToolSpec, complete
from agentcell.worker.tools import ToolContext, args_schema

from bench.script import Spec
from bench.systems._base import MAIN_PROMPT, WORKER_PROMPT, Options, Outcome, System, outcome
from bench.systems._engine_tools import TOOLS
from bench.systems.inprocess import TaskArgs

#: What a child needs, loaded once in the fork server (lazy imports included), so that a
#: child starts warm, as agentcell's do.
_PRELOAD = [
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "anyio._backends._asyncio",
    "certifi",
    "bench.systems.floor",
    "bench.systems._floor_boot",
]

_TASK = ToolSpec(name="task", description="Delegate a task.", parameters=args_schema(TaskArgs))
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(str).decode


async def bare_agent(system: str, prompt: str, tools: dict[str, Any], specs: list[ToolSpec]) -> str:
    """A minimal agent loop: ask, run the tools asked for (side by side), repeat."""
    model = OpenAIChatModel("bench")
    messages: list[Message] = [SystemMessage(content=system), UserMessage(content=prompt)]
    try:
        while True:
            response = await complete(model, ModelRequest(messages=messages, tools=specs))
            messages.append(AssistantMessage(content=response.text, tool_calls=response.tool_calls))
            if not response.tool_calls:
                return response.text
            outputs = await asyncio.gather(
                *(tools[call.name](call.arguments) for call in response.tool_calls)
            )
            messages += [
                ToolMessage(tool_call_id=call.id, name=call.name, content=str(output))
                for call, output in zip(response.tool_calls, outputs, strict=True)
            ]
    finally:
        await model.aclose()


async def _run_tool(name: str, arguments: str) -> str:
    tool = next(t for t in TOOLS if t.name == name)
    output = await tool.execute(tool.parse_args(arguments), ToolContext(workdir="."))  # type: ignore[arg-type]
    return output if isinstance(output, str) else output.content


def child_main(conn: Any, prompt: str) -> None:
    """The forkserver child: one sub-agent, then its answer as one frame."""
    tools = {t.name: (lambda args, name=t.name: _run_tool(name, args)) for t in TOOLS}
    answer = asyncio.run(bare_agent(WORKER_PROMPT, prompt, tools, [t.spec() for t in TOOLS]))
    conn.send_bytes(_encode(answer))
    conn.close()


_CHILD_NAME = "floor-child"


def _skip_main_in_children() -> None:
    """What agentcell's pool does too: a child does not re-run the parent's ``__main__``
    (multiprocess would, for every child; the target lives in this module anyway)."""
    original = multiprocess.spawn.get_preparation_data
    if getattr(original, "_bench_floor", False):
        return

    def get_preparation_data(name: str) -> dict[str, Any]:
        data: dict[str, Any] = original(name)
        if name.startswith(_CHILD_NAME):
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
        return data

    get_preparation_data._bench_floor = True  # type: ignore[attr-defined]
    multiprocess.spawn.get_preparation_data = get_preparation_data


def _start(process: Any) -> None:
    process.start()
    # Also as agentcell does: Process.start polls every registered child (quadratic in
    # a burst); this process is joined by its owner instead.
    multiprocess.process._children.discard(process)


class RawFloor(System):
    name = "raw floor"
    packages = ("multiprocess", "msgspec", "httpx")
    processes = True
    no_events = "the floor sends one frame per sub-agent, no events"

    def __init__(self) -> None:
        self.ctx = multiprocess.get_context("forkserver")
        self.spawner: concurrent.futures.ThreadPoolExecutor | None = None
        self.live: dict[int, Any] = {}

    async def open(self, n: int, options: Options) -> None:
        if multiprocess.forkserver._forkserver._forkserver_pid is None:
            self.ctx.set_forkserver_preload(_PRELOAD)
        _skip_main_in_children()
        # Process starts block: run them off the event loop, one at a time, as agentcell does.
        self.spawner = concurrent.futures.ThreadPoolExecutor(1, "floor-spawn")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.spawner, multiprocess.forkserver.ensure_running)

    async def _delegate(self, arguments: str) -> str:
        prompt = msgspec.json.decode(arguments)["prompt"]
        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(target=child_main, args=(child, prompt), name=_CHILD_NAME)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.spawner, _start, process)
        child.close()
        self.live[process.pid] = process
        ready = loop.create_future()
        loop.add_reader(parent.fileno(), ready.set_result, None)
        try:
            await ready
        finally:
            loop.remove_reader(parent.fileno())
        try:
            return str(_decode(parent.recv_bytes()))
        except EOFError:
            return f"the sub-agent exited with code {process.exitcode}"
        finally:
            parent.close()
            loop.run_in_executor(self.spawner, self._reap, process)

    def _reap(self, process: Any) -> None:
        process.join()
        self.live.pop(process.pid, None)

    async def run(self, spec: Spec) -> Outcome:
        answers: list[str] = []

        async def task(arguments: str) -> str:
            answers.append(await self._delegate(arguments))
            return answers[-1]

        final = await bare_agent(MAIN_PROMPT, spec.prompt(), {"task": task}, [_TASK])
        return outcome(spec.n, answers, main_ok=final.startswith("All"))

    async def close(self) -> None:
        if self.spawner is not None:
            self.spawner.shutdown(wait=True)
        for process in list(self.live.values()):
            process.kill()
            process.join()
        self.live.clear()

    def child_pids(self) -> list[int]:
        return list(self.live)
