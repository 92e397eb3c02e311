"""Permission rules, judged before every tool call of an agent.

_policy      the permission modes and ``PermissionPolicy``: rules, modes and the
             approver decide each call; the ``Hook`` interface the engine calls
_shell       what a bash line runs, when that can be proved (allow rules)
_deny_words  what a bash line might run, read generously (deny and ask rules)
_wrappers    wrappers that run their argument as the command (``timeout``, ``nohup``)
_exec_args   arguments that make a program run another program (``git -c``, ``sed e``)
"""
