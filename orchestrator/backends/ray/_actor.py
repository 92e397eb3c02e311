"""The Ray actor that hosts one sub-agent on a cluster node.

It does no agent work itself: it starts ``python -m agentcell.worker.remote``, which
leaves a guardian behind that forks the real sub-agent (own session, death signal,
subreaper, limits, sandbox) and dials back to the parent; the actor waits for the
guardian's report of how it ended. If the actor dies, the guardian sees its pipe close and
kills the sub-agent's whole tree; ``stop`` kills it from here, so a run ended from the
parent leaves nothing behind on the node.

This module is imported on the cluster's nodes: agentcell must be installed there.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any


class SubAgentHost:
    """One sub-agent's process on a Ray node (one actor per sub-agent, never reused)."""

    def __init__(self) -> None:
        self._guardian: int | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "node": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
            "actor_pid": os.getpid(),
        }

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run the sub-agent to its end and say how its process ended.

        The launched process hands over to a guardian outside this actor's tree (so
        Ray killing this worker with its children cannot skip the clean-up). The
        guardian reads EOF on ``alive`` when this actor dies, and writes its pid, the
        worker's, and finally the worker's exit status on ``report``.
        """
        alive_read, alive_write = os.pipe()  # we hold the write end until we die
        report_read, report_write = os.pipe()
        with self._lock:
            if self._stopped:
                return {"exit_code": None, "signal": "SIGKILL", "pid": None}
            launcher = subprocess.Popen(
                [sys.executable, "-m", "agentcell.worker.remote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(alive_read, report_write),
            )
        os.close(alive_read)
        os.close(report_write)
        assert launcher.stdin is not None
        request = {**request, "alive_fd": alive_read, "report_fd": report_write}
        launcher.stdin.write(json.dumps(request).encode() + b"\n")
        launcher.stdin.close()
        launcher.wait()  # it leaves at once, once the guardian is on its own
        ended: dict[str, Any] = {"exit_code": None, "signal": None, "pid": None}
        with os.fdopen(report_read, "rb") as reports:
            for line in reports:  # until the guardian exits and the pipe closes
                message = json.loads(line)
                if "guardian_pid" in message:
                    with self._lock:
                        self._guardian = int(message["guardian_pid"])
                        stop_now = self._stopped
                    ended["pid"] = message.get("pid")
                    if stop_now:
                        self.stop()
                else:
                    ended.update(message)
        os.close(alive_write)
        if ended["exit_code"] is None and ended["signal"] is None:
            ended["error"] = "the sub-agent's guardian ended without a report"
        return ended

    def stop(self) -> bool:
        """Kill the sub-agent's whole tree now (called from a second actor thread)."""
        with self._lock:
            self._stopped = True
            guardian = self._guardian
        if guardian is None:
            return False
        from agentcell.worker.process import kill_tree

        kill_tree(guardian, signal.SIGKILL)
        return True
