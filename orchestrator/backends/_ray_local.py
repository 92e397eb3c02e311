"""A throwaway Ray head on this machine's loopback: for tests, the bench and trying it out.

``with local_ray_head() as head:`` runs ``ray start --head --block`` in a session of its
own, with every setting that keeps Ray off any address but 127.0.0.1 (the one helper all
of them use), and kills it, session and all, on leaving. ``processes()`` lists what it
runs, so a test can check sockets and leftovers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from agentcell.orchestrator.backends._ray import loopback_ray_environment

#: The ``ray`` command of this environment (the ``ray`` extra installs it).
RAY = str(Path(sys.executable).with_name("ray"))


@dataclasses.dataclass
class RayHead:
    """A running local head: its address, the environment its processes run with."""

    address: str
    env: dict[str, str]
    home: str
    leader: int  # the session id of everything the head started

    def processes(self) -> list[psutil.Process]:
        """Every live process of the cluster (the head's session, and Ray workers)."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if os.getsid(proc.pid) == self.leader:
                    found.append(proc)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connectable(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


@contextlib.contextmanager
def local_ray_head(num_cpus: int = 8) -> Iterator[RayHead]:
    # Short: Ray's Unix socket paths live under its temp dir and must stay < 108 bytes.
    home = tempfile.mkdtemp(prefix="acray-", dir="/tmp")
    env = loopback_ray_environment(home)
    port = _free_port()
    log = open(os.path.join(home, "head.log"), "wb")  # noqa: SIM115 - closed below
    head = subprocess.Popen(
        [
            RAY,
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--num-cpus={num_cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={home}/t",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        # The head is up when its GCS port accepts and it wrote the cluster address.
        while not (_connectable(port) and (Path(home) / "t" / "ray_current_cluster").exists()):
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the Ray head did not start: " + Path(home, "head.log").read_text()[-2000:]
                )
            time.sleep(0.2)  # another program's start-up: polled, with a deadline
        yield RayHead(address=f"127.0.0.1:{port}", env=env, home=home, leader=head.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        for proc in RayHead("", env, home, head.pid).processes():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        log.close()
