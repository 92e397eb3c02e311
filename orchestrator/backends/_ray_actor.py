"""The Ray actor that hosts one sub-agent on a cluster node.

It does no agent work itself: it starts ``python -m agentcell.worker.remote`` — a fresh
process that hardens itself (own session, death signal, subreaper, limits, sandbox) and
dials back to the parent — waits for it and reports how it ended. The sub-agent process
dies with the actor (``PR_SET_PDEATHSIG``); ``stop`` kills its whole session first, so a
run ended from the parent leaves nothing behind on the node.

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
        self._process: subprocess.Popen[bytes] | None = None
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
        """Run the sub-agent process to its end; its exit status says how it ended."""
        with self._lock:
            if self._stopped:
                return {"exit_code": None, "signal": "SIGKILL", "pid": None}
            process = subprocess.Popen(
                [sys.executable, "-m", "agentcell.worker.remote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            self._process = process
        assert process.stdin is not None
        process.stdin.write(json.dumps(request).encode() + b"\n")
        process.stdin.close()
        code = process.wait()
        self._kill_session(process.pid)
        return {
            "exit_code": code if code >= 0 else None,
            "signal": signal.Signals(-code).name if code < 0 else None,
            "pid": process.pid,
        }

    def stop(self) -> bool:
        """Kill the sub-agent's whole session now (called from a second actor thread)."""
        with self._lock:
            self._stopped = True
            process = self._process
        if process is None:
            return False
        self._kill_session(process.pid)
        return True

    @staticmethod
    def _kill_session(sid: int) -> None:
        # The sub-agent leads its own session: everything it started is in it, or was
        # re-parented to it (it is a subreaper), until it dies.
        from agentcell.worker.process import kill_tree

        kill_tree(sid, signal.SIGKILL)
