"""The walls a sub-agent's process puts itself behind before it runs anything of the agent.

_apply           the order of the walls, from a spare's preparation to the seccomp filter
_paths           the paths every sandbox reads: system folders, the Python runtime
_spare           what a spare prepares ahead for the run it will get
_landlock        Landlock's three system calls; _landlock_held, _landlock_rules: the
                 rule descriptors the fork server opens once, and the rules every run has
_seccomp         the second wall: the filter for what Landlock does not cover
_mountns         protected paths inside the workdir (a mount namespace)
_capabilities    no capability, whatever user runs agentcell; _bash_userns: the user
                 namespaces a sub-agent and its bash commands enter
_grants          the folders granted, opened once and granted from their descriptors
_cgroup, _tmpcap caps on processes and on the private temp folder
_one_thread      one thread when the walls go up
_egress_relay    bash's one way out under a ``network:`` list
"""
