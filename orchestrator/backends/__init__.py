"""Process backends: where a sub-agent's process comes from (the local fork server today).

Internal: the public API is the ``agentcell`` package (and ``agentcell.testing``);
this ``__all__`` is what other layers of agentcell may import, and may change.
"""

from agentcell.orchestrator.backends._environment import (
    ALLOWED,
    PROVIDER_ENV,
    child_environment,
)
from agentcell.orchestrator.backends._forkserver import (
    PoolError,
    WorkerPool,
    WorkerStartError,
)
from agentcell.orchestrator.backends._interface import (
    Backend,
    WorkerLease,
)
from agentcell.orchestrator.backends._outcome import (
    ChildOutcome,
    OutcomeKind,
    describe_exit,
)
from agentcell.orchestrator.backends._starters import (
    MAX_STARTERS,
    default_starters,
    forkserver_pid,
    forkserver_pids,
)
from agentcell.orchestrator.backends._workers import (
    Lease,
    WorkerState,
    wait_gone,
)
from agentcell.orchestrator.backends.ray._backend import (
    LOOPBACK_ENV,
    RayBackend,
    RayBackendError,
    RemoteLease,
    loopback_ray_environment,
)
from agentcell.orchestrator.backends.ray._local import (
    RayHead,
    local_ray_head,
)

__all__ = [
    "Backend",
    "LOOPBACK_ENV",
    "MAX_STARTERS",
    "RayBackend",
    "RayBackendError",
    "RayHead",
    "RemoteLease",
    "WorkerLease",
    "local_ray_head",
    "loopback_ray_environment",
    "ALLOWED",
    "ChildOutcome",
    "Lease",
    "OutcomeKind",
    "PROVIDER_ENV",
    "PoolError",
    "WorkerPool",
    "WorkerStartError",
    "WorkerState",
    "child_environment",
    "describe_exit",
    "default_starters",
    "forkserver_pid",
    "forkserver_pids",
    "wait_gone",
]
