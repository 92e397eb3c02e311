"""A sub-agent's folder: its own git worktree, and git as the parent runs it.

_worktree     a fresh git worktree (and branch) per sub-agent, merged or kept after
_hook_writes  what a worktree agent's hooks write in its worktree: kept out of its commit
_safe_git     git run by the parent: never a program an agent or a repository named
_code_files   which entries of a workdir hold code that runs outside the walls
"""
