"""The child environment, computed once per model while the parent's environment holds.

``child_environment`` filters the parent's whole environment (and the keys it holds in
memory) for every sub-agent: ~0.1 ms of the event loop each, the same answer every time
for one model while nothing changes. A key set or removed mid-run must still reach (or
leave) the next child, so the cache is checked against what the answer depends on: the
environment's bytes (CPython's ``os.environ`` keeps them in one dict, ``_data``, which
every assignment goes through; comparing it with a copy is one C-level dict comparison)
and the secrets held in memory. Where ``os.environ`` has no ``_data`` (not CPython),
nothing is cached. Callers get copies: a spec may be changed after it is made.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from agentcell.orchestrator.backends._environment import child_environment
from agentcell.worker import known_secrets

Environments = tuple[dict[str, str], dict[str, str]]


class EnvironmentCache:
    """``environments(model, bash_gets_credentials=...)``: ``child_environment``'s answer,
    recomputed only when the parent's environment or held secrets changed."""

    def __init__(self, compute: Callable[..., Environments] = child_environment) -> None:
        self._compute = compute
        self._source: tuple[dict[bytes, bytes], dict[str, str]] | None = None
        self._answers: dict[tuple[str, bool], Environments] = {}
        #: How many answers were computed (not taken from the cache): for tests.
        self.computed = 0

    def environments(self, model: str, *, bash_gets_credentials: bool) -> Environments:
        source = self._current_source()
        if source is None or source != self._source:
            self._answers.clear()
            self._source = None if source is None else (dict(source[0]), source[1])
        key = (model, bash_gets_credentials)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._compute(model, bash_gets_credentials=bash_gets_credentials)
            self.computed += 1
            if source is not None:
                self._answers[key] = answer
        env, bash_env = answer
        return dict(env), dict(bash_env)

    @staticmethod
    def _current_source() -> tuple[Mapping[bytes, bytes], dict[str, str]] | None:
        data = getattr(os.environ, "_data", None)
        if not isinstance(data, dict):
            return None
        return data, known_secrets()
