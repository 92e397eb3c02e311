"""What the pool says when its fork server's preload did not all load.

Two kinds of line come back in a child's ``Hello``: agentcell's own modules by name (an
installation problem: children then import them themselves, slower), and the caller's
own modules (the ``preload`` setting, ``WorkerPool(preload=)``) as ``name (Error: why)``,
imported by the boot module with every failure caught, so a module that raises or exits
costs the speed-up, never the pool.
"""

from __future__ import annotations


def preload_warning(missing: list[str]) -> str:
    """One line for the log, naming the setting for the caller's own modules."""
    own = [entry for entry in missing if " (" in entry]
    ours = [entry for entry in missing if " (" not in entry]
    parts = []
    if own:
        parts.append(
            f"preload: {'; '.join(own)} in the fork server: children import what they "
            "need themselves (fix the module, or remove it from the preload setting)"
        )
    if ours:
        parts.append(f"fork server preload incomplete (missing: {', '.join(ours)})")
    return "; ".join(parts) + ": children start slower"
