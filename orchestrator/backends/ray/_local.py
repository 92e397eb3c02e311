"""A throwaway Ray head on this machine's loopback: for tests, the bench and trying it out.

``with local_ray_head() as head:`` runs ``ray start --head --block`` in a session of its
own, with every setting that keeps Ray off any address but 127.0.0.1 (the one helper all
of them use), and kills it, session and all, on leaving, and removes its temp folder.
``processes()`` lists what it runs, so a test can check sockets and leftovers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from agentcell.orchestrator.backends.ray._backend import loopback_ray_environment

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


def start_ray_head(
    num_cpus: int = 8, port: int | None = None
) -> tuple[RayHead, subprocess.Popen[bytes]]:
    """Start a Ray head on 127.0.0.1 in a session of its own and wait until it serves.

    The head keeps running if this process ends (``agentcell ray start`` leaves it so);
    ``stop_ray_head`` ends it and everything it started, and nothing else."""
    # Short: Ray's Unix socket paths live under its temp dir and must stay < 108 bytes.
    home = tempfile.mkdtemp(prefix="acray-", dir="/tmp")
    env = loopback_ray_environment(home)
    port = port or _free_port()
    with open(os.path.join(home, "head.log"), "wb") as log:
        process = subprocess.Popen(
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
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    head = RayHead(address=f"127.0.0.1:{port}", env=env, home=home, leader=process.pid)
    try:
        _wait_until_serving(process, port, home)
    except BaseException:
        stop_ray_head(head)
        process.wait()
        raise
    return head, process


def _wait_until_serving(head: subprocess.Popen[bytes], port: int, home: str) -> None:
    deadline = time.monotonic() + 120
    # The head is up when its GCS port accepts and it wrote the cluster address.
    while not (_connectable(port) and (Path(home) / "t" / "ray_current_cluster").exists()):
        if head.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                "the Ray head did not start: " + Path(home, "head.log").read_text()[-2000:]
            )
        time.sleep(0.2)  # another program's start-up: polled, with a deadline


def stop_ray_head(head: RayHead, grace_s: float = 2) -> None:
    """End the head's session and every Ray process it started; wait until they are gone.

    The grace is short on purpose: Ray's own shutdown on SIGTERM drains for ~10 s per
    process (raylet, then the GCS), and nothing of a throwaway head needs it — its state
    is its private temp folder, which the caller removes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.leader, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while head.processes() and time.monotonic() < deadline:
        time.sleep(0.1)  # Ray's own shutdown: polled, with a deadline
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.leader, signal.SIGKILL)
    left = head.processes()  # Ray workers: the head's session, process groups of their own
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=10)


@contextlib.contextmanager
def local_ray_head(num_cpus: int = 8) -> Iterator[RayHead]:
    head, process = start_ray_head(num_cpus)
    try:
        yield head
    finally:
        stop_ray_head(head)
        process.wait()
        shutil.rmtree(head.home, ignore_errors=True)
