"""An experiment, not a fix: pay once in the fork server what every child pays again.

Profiling agentcell's children (``python -m bench.profile``) shows two one-time costs
that each child pays after the fork, because the fork server never paid them:

* ``worker._proc`` loads libc lazily with ``ctypes.util.find_library("c")``, which runs
  ``ldconfig -p`` in a subprocess — in every child, for the first ``prctl``;
* the first httpx transport of a process initialises OpenSSL and httpx's TLS set-up
  (~15 ms), even for a plain-http base URL;

and a third that is spread thin: code the fork server imported but never ran is
specialised (CPython 3.11 rewrites bytecode as it runs) and its lazy state built in every
child, on pages the child must first copy.

Given to ``WorkerPool(preload=[...])``, this module does all three in the fork server
(the third by rehearsing one sub-agent against an in-process load server), so that
children inherit the results. It reaches into a private attribute of ``worker._proc``:
that is the point of the experiment (what the real fix in agentcell would buy), and why
it lives in bench/ and is used only by the rows and tools that say so.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util

import httpx

from worker import _proc

if _proc._libc is None:
    _proc._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

# Creates (and drops) an SSL context: OpenSSL and httpx's lazy TLS state are now loaded.
httpx.AsyncHTTPTransport(verify=False)


async def _rehearse() -> None:
    """One sub-agent's whole path (engine, HTTP client, SSE parsing, a tool) against an
    in-process copy of the load server, so that the fork server's code is warm: CPython
    specialises bytecode as it runs, and a child forked from a cold fork server writes
    those specialisations into pages it then has to copy."""
    from bench.load_server import Connection, Server
    from bench.script import JOB, Spec
    from bench.systems._engine_tools import TOOLS
    from worker import Engine
    from worker.models import OpenAIChatModel

    loop = asyncio.get_running_loop()
    server = Server(latency_ms=0, tps=0)
    listener = await loop.create_server(lambda: Connection(server), "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    model = OpenAIChatModel("bench", base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
    try:
        engine = Engine(model, TOOLS, system_prompt="rehearsal")
        await engine.run(Spec(run="rehearsal", i=0).prompt(JOB))
    finally:
        await model.aclose()
        listener.close()
        await listener.wait_closed()


asyncio.run(_rehearse())
