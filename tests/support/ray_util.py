"""What the Ray tests check of a head's processes."""

from __future__ import annotations

import psutil
from agentcell.orchestrator.backends.ray._local import RayHead


def outside_loopback(head: RayHead) -> list[str]:
    """Every socket address of the head's processes that is not 127.0.0.1."""
    outside = []
    for proc in head.processes():
        try:
            connections = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        for conn in connections:
            for address in (conn.laddr, conn.raddr):
                if address and address.ip not in ("127.0.0.1", "::ffff:127.0.0.1"):
                    outside.append(f"{proc.pid} {proc.name()}: {address.ip}:{address.port}")
    return outside
