"""The Ray driver: a helper process between the orchestrator and a Ray cluster.

``python -m agentcell.orchestrator.backends.ray._driver`` connects to the cluster and
obeys one JSON object per line on stdin; it answers with one JSON object per line on
stdout. It runs in its own process so that nothing Ray does (an abort in its core worker,
a hung gRPC call, a crash) can take the orchestrator down: the parent sees its pipe close
and gives every remote sub-agent a clear result. When the parent goes away (stdin EOF)
it kills every actor it created and leaves.

    → {"op": "start", "id": ..., "request": {...}, "num_cpus": 0.25, "resources": {}}
    → {"op": "stop", "id": ...}
    ← {"op": "ready", "nodes": 1, "address": ...}
    ← {"op": "placed", "id": ..., "node": ..., "host": ..., "actor_pid": ...}
    ← {"op": "ended", "id": ..., "exit_code": 0, "signal": null, "cause": "", "error": ""}
    ← {"op": "fatal", "error": "..."}
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import json
import os
import sys
import threading
from typing import Any

from agentcell.protocol import TaskNursery

# Each actor hosts one process and one stop call beside it.
_ACTOR_THREADS = 2


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _reason(text: str) -> str:
    """Ray's own sentence about why an actor died, else its first line."""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("The actor is dead because", "The actor died because")):
            return line.split(". There are some potential root causes")[0][:300]
    return _first_line_of(text)


def _first_line_of(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _cause(exc: BaseException) -> tuple[str, str]:
    """(cause, message) for a Ray failure, in words the sub-agent's result can carry.

    Ray keeps the structured death cause to itself (only its text reaches us), so the
    cause is read from the sentences Ray writes for each case; the message quotes them.
    """
    import ray.exceptions as rex

    text = str(exc)
    reason = _reason(text) or type(exc).__name__
    if isinstance(exc, rex.OutOfMemoryError) or "running low on memory" in text:
        return "oom", f"Ray's memory monitor killed it (the node ran low on memory): {reason}"
    if isinstance(exc, rex.ActorUnschedulableError | rex.TaskUnschedulableError):
        return "unschedulable", f"no Ray node can host it: {reason}"
    if "its node has died" in text or "node died" in text.lower():
        return "node_died", f"its Ray node died: {reason}"
    if isinstance(exc, rex.ActorDiedError | rex.RayActorError):
        return "actor_died", f"its Ray actor died: {reason}"
    if isinstance(exc, rex.WorkerCrashedError | rex.LocalRayletDiedError):
        return "node_died", f"Ray lost its worker: {reason}"
    return "error", f"Ray failed: {type(exc).__name__}: {reason}"


class Driver:
    def __init__(self, config: dict[str, Any]) -> None:
        from agentcell.orchestrator.backends.ray._actor import SubAgentHost

        ray: Any = importlib.import_module("ray")  # Ray's own typing is loose: glue code
        self.ray = ray
        self.host_class = ray.remote(
            max_restarts=0, max_task_retries=0, max_concurrency=_ACTOR_THREADS
        )(SubAgentHost)
        self.actors: dict[str, Any] = {}
        self.runs: dict[str, asyncio.Task[None]] = {}
        self.config = config

    async def start(self, message: dict[str, Any]) -> None:
        run_id = message["id"]
        options: dict[str, Any] = {"num_cpus": float(message.get("num_cpus", 0.25))}
        if message.get("resources"):
            options["resources"] = dict(message["resources"])
        try:
            actor = self.host_class.options(**options).remote()
            self.actors[run_id] = actor
            where = await actor.where.remote()
            _send({"op": "placed", "id": run_id, **where})
            ended = await actor.run.remote(message["request"])
            _send({"op": "ended", "id": run_id, **ended, "cause": "", "error": ""})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            cause, error = _cause(exc)
            _send(
                {
                    "op": "ended",
                    "id": run_id,
                    "exit_code": None,
                    "signal": None,
                    "pid": None,
                    "cause": cause,
                    "error": error,
                }
            )
        finally:
            self._kill(run_id)

    async def stop(self, run_id: str) -> None:
        actor = self.actors.get(run_id)
        if actor is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await actor.stop.remote()
        self._kill(run_id)

    def _kill(self, run_id: str) -> None:
        actor = self.actors.pop(run_id, None)
        if actor is not None:
            # Never ray.cancel(force=True): in Ray 2.60 it has aborted the driver itself.
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)

    async def serve(self) -> None:
        """Answer the parent's lines until it says shutdown (or its pipe ends); every run
        and stop is a task of this call's group, so none outlives it."""
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()

        def read() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=read, name="driver-stdin", daemon=True).start()
        async with TaskNursery("the Ray driver") as group:
            while (line := await lines.get()) is not None:
                message = json.loads(line)
                op = message.get("op")
                if op == "start":
                    task = group.start(self.start(message), name=f"run {message['id']}")
                    self.runs[message["id"]] = task
                    task.add_done_callback(functools.partial(self._forget, message["id"]))
                elif op == "stop":
                    group.start(self.stop(message["id"]))
                elif op == "shutdown":
                    break
            await self.shutdown()
            await group.aclose()  # what is left of the runs: cancelled and awaited

    def _forget(self, run_id: str, _task: object) -> None:
        self.runs.pop(run_id, None)

    async def shutdown(self) -> None:
        for run_id in list(self.actors):
            await self.stop(run_id)
        for task in list(self.runs.values()):
            task.cancel()
        with contextlib.suppress(Exception):
            self.ray.shutdown()


def main() -> None:
    config = json.loads(sys.stdin.readline())
    try:
        ray: Any = importlib.import_module("ray")
        ray.init(
            address=config.get("address") or "auto",
            _node_ip_address=config.get("node_ip_address") or None,
            namespace=config.get("namespace") or None,
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
        )
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        driver = Driver(config)
    except Exception as exc:
        _send({"op": "fatal", "error": f"cannot connect to the Ray cluster: {_first_line(exc)}"})
        sys.exit(2)
    _send({"op": "ready", "nodes": len(nodes), "pid": os.getpid()})
    asyncio.run(driver.serve())


if __name__ == "__main__":
    main()
