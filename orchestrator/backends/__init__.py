"""Process backends: where a sub-agent's process comes from.

_interface            what the runner needs: a lease on one fresh worker per run; what
                      both backends' leases share (``FrameQueue``); ``PoolError``
_forkserver           ``WorkerPool``: one fresh process per run, warm spares ahead; made
                      of the three parts below
_spawner              the pool's starts: how many, launching them, failed starts, and
                      retiring spares started ahead that no run took
_lease_queue          the pool's leasing: ready spares, waiting callers, leases expected
_watchdog             the pool's watch: silent children, limits, orphans swept
_workers              one child of the pool as the parent sees it, and its lease;
                      ``PoolTimings``
_starters             the fork servers that start the pools' children
_descriptors          the soft open-file limit raised for ``max_workers`` children
_outcome              how a child process ended, one typed value per lease
_environment          the environment a child gets (an allowlist, plus credentials);
                      _environment_cache: computed once per model
_mp_tempdir, _preload multiprocess's temp folder; the preload's report
ray/                  the Ray backend: sub-agents on a cluster, with the same frames
"""
