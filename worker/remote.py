"""A sub-agent process started by a remote backend: ``python -m agentcell.worker.remote``.

A Ray actor (or any launcher on another machine) runs this module and writes one JSON
object on its standard input — ``{"host", "port", "agent_id", "token", "alive_fd",
"report_fd"}`` (the token in hex: kept out of the command line, which every local user
can read). The process dials the parent's listener, proves it holds the token, then serves
exactly one run with the same frames as a child of the local fork server. ``alive_fd``
reaches EOF when the launcher dies; ``report_fd`` receives, one JSON line each, the
guardian's and the worker's pids, then how the worker ended.
"""

from __future__ import annotations

import json
import sys

from agentcell.protocol import tcp_connect
from agentcell.worker.child._main import ChildBoot, ChildChannel, remote_child_main


def main() -> None:
    request = json.loads(sys.stdin.readline())
    boot = ChildBoot(max_frame_bytes=int(request.get("max_frame_bytes", ChildBoot.max_frame_bytes)))

    async def connect() -> ChildChannel:
        return await tcp_connect(
            request["host"],
            int(request["port"]),
            agent_id=request["agent_id"],
            token=bytes.fromhex(request["token"]),
            handshake_timeout_s=float(request.get("connect_timeout_s", 30.0)),
            max_frame_bytes=boot.max_frame_bytes,
        )

    remote_child_main(
        connect,
        boot,
        launcher_alive=int(request["alive_fd"]),
        report=int(request["report_fd"]),
    )


if __name__ == "__main__":
    main()
