"""Settings and where they come from: user file, project file, environment, flags.

_settings          ``Settings``, ``Budgets``, ``Price``: what a run may do, with which models
_load              where settings come from, merged in increasing precedence
_claude_settings   Claude Code's settings files as settings layers
_claude_modes      Claude Code's permission modes, as agentcell runs them
_hooks             lifecycle hooks as configured (Claude Code's command hooks)
_mcp               MCP server configuration: config, ``.mcp.json``, definitions
_preload           the ``preload`` setting's check
_sandbox_policy    the parent's side of the sandbox: ``required`` refused where it cannot hold
_trust             folder trust: a project's configuration only tightens until trusted
_trust_table       what each setting and agent-file key may do from an untrusted folder
"""
