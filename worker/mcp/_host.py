"""The walled host of one shared MCP server: the walls a sub-agent's servers have, for a
server the parent starts once and shares (``orchestrator/mcp_host/_shared.py``).

A sub-agent's own servers start in its process tree after it locked its capabilities,
under its seccomp filter, in its cgroup and with its private temp folder. A shared
server has no sub-agent around it, so it gets the same walls from a launcher of its own:
the parent runs ``python -P -c "…main(…)" CGROUP TMPDIR -- WARDEN-ARGS`` (``main`` of
this module) as the server's command; the launcher joins the process cap the parent made
for it (``CGROUP``, ``-`` where none can be had), enters a user namespace of its own
where the kernel allows one, drops every capability for good (root's included:
``_capabilities.drop``), points ``TMPDIR`` at the private folder, and becomes the warden
(``_warden.py``), which installs the seccomp filter in the server and ends the server's
whole tree with it. ``-P``: the launcher runs in the project folder, whose entries must
never shadow a module it imports.

Parent side (``walled_host``): the cgroup and the temp folder made, the launcher's argv
prefix, and the walls that could not be had here, in words; ``release`` removes both.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

from agentcell.worker.sandbox import _capabilities, _cgroup, _mountns, _seccomp
from agentcell.worker.sandbox._apply import DEFAULT_MAX_PROCESSES

#: The launcher's program. Not ``-m`` this module: the package imports it first, and
#: Python's warning about a module run that way opened every shared server's log.
_LAUNCH = f"import sys; from {__name__} import main; sys.exit(main(sys.argv[1:]))"
#: Shared hosts' cgroups: ``mcp-<orchestrator pid>-<n>``, beside the sub-agents' (by pid).
CGROUP_PREFIX = "mcp-"
_numbers = itertools.count(1)


@dataclasses.dataclass(slots=True)
class WalledHost:
    """What one shared server's launcher needs, made by the parent."""

    launcher: list[str]  # the argv before the warden's (``McpServers(launcher=...)``)
    seccomp: str  # the filter the warden installs in the server (``-``: none here)
    tmpdir: Path
    cgroup: Path | None
    missing: list[str]  # walls this machine does not give, one phrase each


def walled_host(max_processes: int | None = None) -> WalledHost:
    """A process cap (an empty cgroup allowing ``max_processes``) and a private temp
    folder for one shared server, and the launcher that puts the server behind them."""
    missing: list[str] = []
    cgroup = _capped_group(max_processes or DEFAULT_MAX_PROCESSES)
    if cgroup is None:
        missing.append("process cap")
    seccomp = "-"
    if (why := _seccomp.unavailable()) is not None:
        missing.append(f"seccomp filter ({why})")
    elif (process_filter := _seccomp.process_filter()) is not None:
        seccomp = process_filter.launcher_arg()
    tmpdir = Path(tempfile.mkdtemp(prefix="agentcell-mcp-host-"))
    launcher = ["-P", "-c", _LAUNCH, str(cgroup or "-"), str(tmpdir), "--"]
    return WalledHost(launcher, seccomp, tmpdir, cgroup, missing)


def release(host: WalledHost) -> None:
    """After the server is gone: whatever is left in its cgroup killed, both removed."""
    if host.cgroup is not None:
        _cgroup.release_group(host.cgroup)
    shutil.rmtree(host.tmpdir, ignore_errors=True)


def _capped_group(limit: int) -> Path | None:
    found = _cgroup.controller()
    if found is None:
        return None
    path = found[1] / f"{CGROUP_PREFIX}{os.getpid()}-{next(_numbers)}"
    return path if _cgroup.made_group(path, limit=limit, new=True) else None


def _wall_self(cgroup: str, tmpdir: str) -> None:
    """In the launcher, before it becomes the warden: every wall it can have, in order
    (the cgroup and the namespace need the capabilities the drop ends)."""
    if cgroup != "-":
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    _mountns._enter_user_namespace()  # False where the kernel allows none: the drop holds
    _capabilities.drop()  # the warden sets no_new_privs before it runs the server
    os.environ["TMPDIR"] = tmpdir


def main(argv: list[str]) -> int:
    cgroup, tmpdir, separator, *warden = argv
    if separator != "--" or not warden:
        print("usage: _host CGROUP TMPDIR -- WARDEN ARGS...", file=sys.stderr)
        return 2
    try:
        _wall_self(cgroup, tmpdir)
    except OSError as exc:  # never run the server with a wall missing that was asked for
        print(f"cannot wall the MCP server's host: {exc}", file=sys.stderr)
        return 126
    os.execv(sys.executable, [sys.executable, *warden])  # noqa: S606 (our own warden)
    return 1  # not reached
