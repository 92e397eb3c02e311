"""The environment a sub-agent process gets: a small allowlist, plus the credentials of
its own model provider and nothing else. Its ``bash`` tool gets the allowlist only.

The parent computes it for every run from its current environment, so a key set after the
pool started still reaches the child, and a key for another provider never does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from agentcell.worker import known_secrets

#: Passed to every child (exact names, or prefixes ending in "*").
ALLOWED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    # An interpreter built with a shared libpython outside the loader's paths (a copied
    # or relocated build, some distributions) cannot start a child without it.
    "LD_LIBRARY_PATH",
    # Version managers: where their Python lives (the sandbox lets bash run it) and which.
    "PYENV_ROOT",
    "PYENV_VERSION",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "UV_PYTHON_INSTALL_DIR",
    "NO_COLOR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "AGENTCELL_BLOCK_REAL_MODELS",
)

#: What each provider's client reads. Only the child's own provider gets these.
PROVIDER_ENV = {
    "openai": (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_ORGANIZATION",
        "OPENAI_PROJECT_ID",
    ),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"),
}


_EXACT = frozenset(p for p in ALLOWED if not p.endswith("*"))
_PREFIXES = tuple(p[:-1] for p in ALLOWED if p.endswith("*"))


def _allowed(name: str, extra: Iterable[str]) -> bool:
    if name in _EXACT or name.startswith(_PREFIXES):
        return True
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in extra)


def child_environment(
    model: str,
    *,
    source: Mapping[str, str] | None = None,
    extra: Iterable[str] = (),
    bash_gets_credentials: bool = False,
) -> tuple[dict[str, str], dict[str, str]]:
    """(the child's environment, its bash tool's environment) for a run on ``model``."""
    # The keys an orchestrator holds in memory (not in its environment) count as set.
    source = {**known_secrets(), **os.environ} if source is None else source
    extra = tuple(extra)
    base = {k: v for k, v in source.items() if _allowed(k, extra)}
    provider = model.partition(":")[0]
    credentials = {k: source[k] for k in PROVIDER_ENV.get(provider, ()) if k in source}
    env = {**base, **credentials}
    bash_env = dict(env) if bash_gets_credentials else dict(base)
    return env, bash_env
