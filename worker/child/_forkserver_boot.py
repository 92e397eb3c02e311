"""Imported once, by the fork server, as the last module of its preload list.

It records which preloaded modules really loaded (preload failures are silent in
multiprocess) and arms the last link of the death chain: when the orchestrator dies the
fork server sees EOF on its "alive" pipe and exits; on that exit this module kills every
session its children lead, so tool subprocesses go too. The children themselves die by
``PR_SET_PDEATHSIG`` when the fork server goes.

Never import this module anywhere else: a child notices (``BOOT_PID`` is its own pid)
that it was not inherited from the fork server, which means preloading failed.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import signal
import sys
import types
import warnings
from typing import Any

import multiprocess.forkserver
from agentcell.worker.child import _proc
from agentcell.worker.child._fork_request import guard_fork_requests, serve_one
from agentcell.worker.child._preload import PRELOAD_MODULES, import_preload, take_preload_request

BOOT_PID = os.getpid()

# Ctrl-C is the orchestrator's to handle. The fork server started with SIGINT blocked
# (``block_interrupts`` in orchestrator/backends/_starters.py) so that a press while it
# imported its preload list stayed pending; it is discarded here, later ones are ignored
# (as multiprocess's own loop does from now on), and the mask is as it was.
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _warm() -> None:
    """Pay once, here, the first-use costs every child would otherwise pay again.

    The paths every sandbox allows, the built-in tools' schemas and decoders, and one
    rehearsed agent run — engine, hooks, file tools, the OpenAI client over the link
    transport a child uses (its model calls answered as frames, SSE), frames: CPython
    specialises bytecode as it first runs, and a child forked from a cold fork server
    would write those specialisations into pages it must first copy (measured: about a
    tenth of a child's CPU under fan-out).
    """
    import tempfile

    from agentcell.worker.sandbox._paths import warm_path_cache
    from agentcell.worker.tools import builtin_tools

    warm_path_cache(PARENT_PATH)  # the path its children will have
    for tool in builtin_tools():
        tool.spec()
        try:
            tool.parse_args("{}")
        except Exception:  # noqa: S110 - missing arguments: the decoder is built all the same
            pass
    with tempfile.TemporaryDirectory() as workdir:
        with open(os.path.join(workdir, "a.txt"), "w") as f:
            f.write("rehearsal\n")
        try:
            asyncio.run(_rehearse(workdir))
        except Exception:  # noqa: S110 - a rehearsal is an optimisation, never a failure
            pass


_SSE = (
    'data: {"choices":[{"index":0,"delta":{"content":"","tool_calls":[{"index":0,"id":"c1",'
    '"type":"function","function":{"name":"read_file","arguments":"{\\"path\\":\\"a.txt\\"}"}},'
    '{"index":1,"id":"c2","type":"function","function":{"name":"grep","arguments":'
    '"{\\"pattern\\":\\"r\\"}"}}]},"finish_reason":"tool_calls"}]}\n\n'
    'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
)
_FINAL = (
    'data: {"choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}]}\n\n'
    "data: [DONE]\n\n"
)


class _RehearsalChannel:
    """Plays the parent's model relay for the rehearsal: each ``ModelCall`` is answered
    at once, through the frame codec, as the relay would over the pipe."""

    def __init__(self) -> None:
        self.link: Any = None
        self.turns = 0

    async def send(self, frame: Any) -> None:
        from agentcell.protocol import (
            ModelCall,
            ModelData,
            ModelEnd,
            ModelHead,
            decode_body,
            encode_frame,
        )

        if not isinstance(frame, ModelCall):
            return
        body = (_SSE if self.turns == 0 else _FINAL).encode()
        self.turns += 1
        sse = {"content-type": "text/event-stream"}
        for reply in (
            ModelHead(id=frame.id, status=200, headers=sse),
            ModelData(id=frame.id, data=body),
            ModelEnd(id=frame.id),
        ):
            self.link.model_link.dispatch(decode_body(bytes(encode_frame(reply))[4:]))

    def send_nowait(self, frame: Any) -> None:
        pass


async def _rehearse(workdir: str) -> None:
    from agentcell.protocol import (
        PROTOCOL_VERSION,
        AgentSpec,
        ModelCall,
        Result,
        RunResult,
        RunStatus,
        Start,
        decode_body,
        encode_frame,
    )
    from agentcell.worker.engine._loop import Engine
    from agentcell.worker.models import OpenAIChatModel
    from agentcell.worker.models._http_options import HttpOptions
    from agentcell.worker.models.transports._parent import LinkTransport
    from agentcell.worker.rules._policy import PermissionPolicy
    from agentcell.worker.tools import builtin_tools

    # The path a child really takes: its model over the link to the parent (frames),
    # never an httpx pool of its own.
    channel = _RehearsalChannel()
    link = types.SimpleNamespace(channel=channel, model_link=None)
    channel.link = link
    transport = LinkTransport(link)
    http = HttpOptions(base_url="http://127.0.0.1:9/v1", transport=transport)
    model = OpenAIChatModel("rehearsal", http=http)
    try:
        engine = Engine(model, builtin_tools(), hooks=[PermissionPolicy()], workdir=workdir)
        result = await engine.run("rehearse")
    finally:
        await model.aclose()
    decode_body(bytes(encode_frame(ModelCall(id=1, body=b"{}")))[4:])
    for frame in (
        Start(
            protocol_version=PROTOCOL_VERSION,
            run_id="r",
            handler="h:h",
            spec=AgentSpec(agent_id="a", agent_type="t", prompt="p"),
        ),
        Result(result=RunResult(status=RunStatus.COMPLETED, text=result.text)),
    ):
        decode_body(bytes(encode_frame(frame))[4:])


# Only the orchestrator may ask for a child: first, so that nothing below can leave the
# fork server unguarded. Children are started with agentcell's lean request
# (multiprocess's own still works).
guard_fork_requests()
multiprocess.forkserver._serve_one = serve_one

#: The caller's own preload list (the ``preload`` setting) and the parent's sys.path,
#: which its children will have.
_USER_PRELOAD, PARENT_PATH = take_preload_request(os.environ)

_warm()

#: Modules of the preload list that did not load in the fork server.
MISSING_PRELOAD: list[str] = [m for m in PRELOAD_MODULES if m not in sys.modules]
#: The caller's modules that failed here, one line each ("name (Error: why)").
PRELOAD_PROBLEMS: list[str] = import_preload(_USER_PRELOAD, PARENT_PATH)


def _kill_children_sessions() -> None:
    if os.getpid() != BOOT_PID:  # a forked child that somehow ran atexit
        return
    table = _proc.process_table()
    for info in list(table.values()):
        if info.ppid == BOOT_PID:  # a child of ours, or an orphan we adopted
            _proc.kill_tree(info.pid, table=table)


atexit.register(_kill_children_sessions)

# Orphans of a child that died abruptly (a tool's daemon that left its session, say) are
# reparented here rather than to init, so the exit hook above still finds them; the fork
# server reaps them, and its warning about pids it did not fork is expected, not news.
_proc.set_child_subreaper()
warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")

# Children inherit these objects; keeping them out of the collector's reach stops a
# child's first garbage collection from touching (and so copying) every shared page.
gc.freeze()
