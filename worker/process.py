"""What a process backend needs from the runtime to run sub-agents in processes.

The child's entry point and its boot settings, the modules a fork server preloads, the
lean start request its children are forked for, and the Linux process plumbing the
parent uses to watch and end a child's whole tree.
"""

from agentcell.worker.child._fork_request import encode_request
from agentcell.worker.child._main import ChildBoot, child_main
from agentcell.worker.child._preload import BOOT_MODULE, PRELOAD_MODULES, preload_environment
from agentcell.worker.child._proc import (
    ProcInfo,
    is_alive,
    kill_group,
    kill_session,
    kill_tree,
    process_table,
    set_parent_death_signal,
    signal_name,
    tree_cpu_seconds,
    tree_rss,
)
from agentcell.worker.sandbox._apply import remove_stale_tmps
from agentcell.worker.sandbox._cgroup import remove_stale_caps

__all__ = [
    "BOOT_MODULE",
    "ChildBoot",
    "PRELOAD_MODULES",
    "ProcInfo",
    "child_main",
    "encode_request",
    "is_alive",
    "kill_group",
    "kill_session",
    "kill_tree",
    "preload_environment",
    "process_table",
    "remove_stale_caps",
    "remove_stale_tmps",
    "set_parent_death_signal",
    "signal_name",
    "tree_cpu_seconds",
    "tree_rss",
]
