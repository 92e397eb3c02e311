"""One sub-agent process, from the fork server's preload to its exit.

_preload           the modules the fork server imports once, so that each child starts warm
_forkserver_boot   the fork server's last preload: warming and a rehearsal run
_fork_request      the lean start request the fork server reads
_main              the child's side: bootstrap, handshake, serve one run, exit
_agent             the handler a child runs for an ``AgentSpec``: walls, engine, answer
_proc              Linux process plumbing (prctl, process trees, signals)
_secrets           API keys kept in memory, out of the environment
"""
