"""The Ray backend: sub-agents on a Ray cluster, with the same frames as local children.

_backend   ``RayBackend`` and its leases, as the runner sees them
_driver    a helper process between the orchestrator and the cluster
_actor     the actor that hosts one sub-agent on a node
_local     a throwaway Ray head on this machine's loopback (tests, bench, trying it out)
"""
