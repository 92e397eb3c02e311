"""``agentcell sandbox``: what this machine enforces, and what each mode does here."""

from __future__ import annotations

import json
import os
from typing import Any

import click
from agentcell.orchestrator._text import visible
from agentcell.worker import SANDBOX_MODES, probe_sandbox, sandbox_missing, workdir_owner_note


def describe(caps: dict[str, Any]) -> dict[str, Any]:
    """The machine's mechanisms and, per mode, what holds and what is missing."""
    abi = caps["landlock_abi"]
    walls = []
    if caps["landlock_files"]:
        walls.append(
            f"files (Landlock ABI {abi}): writes only in the workdir, a private temp folder "
            "and the run's tool-output folder; reads only the workdir, the Python runtime, "
            "system folders and /etc without its secrets; the rest of your home is unreachable"
        )
    if caps["landlock_tcp"]:
        walls.append(
            "sub-agent process: no model connection at all — the parent sends its model "
            "requests and holds the key — and no TCP but its http MCP servers' ports (custom "
            "Python tools or a model object given in code keep their own network; "
            'ray.model_route = "node" reaches the model endpoint\'s port alone)'
        )
    bash_net = [
        w
        for w, ok in (
            ("Landlock TCP", caps["landlock_tcp"]),
            (f"a {caps['network_namespace']} namespace", caps["network_namespace"]),
        )
        if ok
    ]
    if bash_net:
        walls.append("bash commands: no network (" + " + ".join(bash_net) + ")")
    egress = egress_mechanism(caps)
    if egress is not None:
        walls.append(
            "bash commands under a network: list: only the hosts it names, through a proxy "
            f"in the parent that refuses the rest with a 403 ({egress})"
        )
    if caps.get("mount_namespace"):
        walls.append(
            "workspace: .git, agentcell.toml, .agentcell/, .claude/ and .mcp.json in the "
            "workdir are read-only and cannot be renamed or created (a private "
            f"{caps['mount_namespace']} namespace); the agent's own memory folder stays "
            "writable"
        )
        walls.append(
            "workspace: the private temp folder is a tmpfs of tmp_size_mb (default 512 MiB) "
            "in that namespace: a command filling it gets ENOSPC, the host's disk stays free"
        )
    if caps["landlock_scopes"]:
        walls.append("no signals or ptrace outside the sub-agent's own tree (Landlock scopes)")
    if caps["process_cap"]:
        walls.append(f"process cap per sub-agent tree ({caps['process_cap']})")
    walls.append("no_new_privs: no setuid or file-capability gains")
    walls.append(
        f"capabilities: {caps['capabilities']}, whatever user runs agentcell: every set "
        "dropped and the securebits locked once its namespaces are made; its MCP servers, "
        "their warden and bash hold none either"
    )
    walls.append("no terminal: no controlling tty, no tty device, no inherited tty descriptor")
    walls += seccomp_walls(caps)
    missing = sandbox_missing("workspace", caps)
    modes: dict[str, Any] = {
        "off": {"enforced": [], "missing": [], "note": "no OS walls: only process isolation"},
        "workspace": {"enforced": walls, "missing": missing},
        "read-only": {
            "enforced": [*walls, "the workdir is read-only too"],
            "missing": missing,
        },
        "required": {
            "enforced": walls if not missing else [],
            "missing": missing,
            "note": "refuses to start here" if missing else "runs as workspace",
        },
    }
    assert set(SANDBOX_MODES) <= set(modes)
    return {"machine": caps, "modes": modes}


def egress_mechanism(caps: dict[str, Any]) -> str | None:
    """How bash reaches the parent's proxy under a ``network:`` list here (None: it cannot
    be walled to the proxy alone, and a list is not kept)."""
    if caps["network_namespace"] == "net" and caps["landlock_tcp"]:
        return "a relay on the loopback of bash's own network namespace, no route out"
    if caps["landlock_tcp"]:
        return "Landlock TCP to the proxy's port alone; no namespace of its own, so UDP is open"
    return None


def seccomp_walls(caps: dict[str, Any]) -> list[str]:
    """What the seccomp filter refused when tried on this machine (none: not available)."""
    refused = caps["seccomp_refuses"]
    if not refused:
        return []
    lines = ["seccomp on every thread and all descendants, EPERM for: " + ", ".join(refused)]
    if "socket(SOCK_RAW)" in refused:
        lines.append(
            "sockets: no AF_PACKET and no SOCK_RAW (netlink's aside), also under network: "
            "true; ICMP datagram sockets stay, so ping works where net.ipv4.ping_group_range "
            "lets its group"
        )
    bash_only = [name for name in caps["seccomp_bash_refuses"] if name not in refused]
    if bash_only:
        lines.append(
            "bash commands also (unless network: true): "
            + ", ".join(bash_only)
            + " (socketpair still works)"
        )
    return lines


def show_sandbox(*, as_json: bool) -> None:
    report = describe(probe_sandbox())
    report["workdir_owner"] = workdir_owner_note(os.getcwd())
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    caps = report["machine"]
    click.echo("This machine:")
    click.echo(f"  Landlock ABI:       {caps['landlock_abi'] or 'none'}")
    click.echo(f"  network namespace:  {caps['network_namespace'] or 'not available'}")
    click.echo(f"  mount namespace:    {caps.get('mount_namespace') or 'not available'}")
    click.echo(f"  network: lists:     {egress_mechanism(caps) or 'not available'}")
    click.echo(f"  process cap:        {caps['process_cap'] or 'not available'}")
    click.echo(f"  seccomp:            {caps['seccomp']}")
    click.echo(f"  capabilities:       {caps['capabilities']}")
    if owner := workdir_owner_note(os.getcwd()):  # a folder's name is never read as escapes
        click.echo(f"  workdir:            {visible(owner)}")
    for mode, what in report["modes"].items():
        click.echo(f"\nsandbox = {mode!r}" + (f" ({what['note']})" if what.get("note") else ""))
        for line in what["enforced"]:
            click.echo(f"  holds:   {line}")
        for line in what["missing"]:
            click.echo(f"  MISSING: {line}")
