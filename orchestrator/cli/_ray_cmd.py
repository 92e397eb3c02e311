"""``agentcell ray start|status|stop``: agentcell's own Ray head on this machine's loopback.

A head started by hand with ``ray start`` probes cloud metadata servers and reports usage
unless four settings are right (design brief §9), and ``ray stop`` ends every Ray process
of the user, other clusters included. These commands start one head with those settings,
on 127.0.0.1, remember it in a small state file, and stop that head and what it started,
nothing else.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import click
from agentcell.orchestrator.backends.ray import _local as _ray_local
from agentcell.orchestrator.backends.ray._local import RayHead, stop_ray_head
from agentcell.orchestrator.config._load import ConfigError

#: What ``--backend ray``'s driver imports (it runs on this interpreter).
RAY_MODULE = "ray"
INSTALL_RAY = "install agentcell's Ray extra: pip install -e '.[ray]' in agentcell's folder"


def require_ray_module() -> None:
    """Ray must be importable before the backend's driver starts: without it the driver
    exits at its first line, and the error would point at an empty log of it."""
    if importlib.util.find_spec(RAY_MODULE) is None:
        raise ConfigError(
            [f"the Ray backend needs Ray, which is not installed here; {INSTALL_RAY}"]
        )


def _require_ray_command() -> None:
    if not os.access(_ray_local.RAY, os.X_OK):
        raise ConfigError(
            [f"Ray is not installed here (no {_ray_local.RAY} command); {INSTALL_RAY}"]
        )


def state_file() -> Path:
    """Where the running head is remembered: ``$XDG_STATE_HOME/agentcell/ray-head.json``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "agentcell" / "ray-head.json"


def _recorded() -> RayHead | None:
    try:
        data: dict[str, Any] = json.loads(state_file().read_text())
        head = RayHead(data["address"], {}, data["home"], int(data["leader"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return head if head.processes() else None


def ray_start(num_cpus: int, port: int | None) -> None:
    running = _recorded()
    if running is not None:
        click.echo(f"agentcell's Ray head is already running at {running.address}")
        return
    _require_ray_command()
    try:
        head, _process = _ray_local.start_ray_head(num_cpus, port)
    except RuntimeError as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    state = {"address": head.address, "home": head.home, "leader": head.leader}
    path.write_text(json.dumps(state) + "\n")
    click.echo(f"Ray head on {head.address} (loopback only; log: {head.home}/head.log)")
    click.echo(f"use it:  agentcell run --backend ray --ray-address {head.address} …")
    click.echo("stop it: agentcell ray stop")


def ray_status() -> None:
    head = _recorded()
    if head is None:
        click.echo("no Ray head of agentcell's is running (start one: agentcell ray start)")
        return
    click.echo(f"Ray head on {head.address}: {len(head.processes())} processes")


def ray_stop() -> None:
    head = _recorded()
    if head is None:
        click.echo("no Ray head of agentcell's is running")
    else:
        stop_ray_head(head)
        shutil.rmtree(head.home, ignore_errors=True)
        click.echo(f"stopped the Ray head on {head.address} and every process it started")
    state_file().unlink(missing_ok=True)
