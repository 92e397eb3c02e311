"""Keeping secrets out of records and progress output."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

#: Environment variables whose values are secrets wherever they appear.
SECRET_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
MASK = "[REDACTED]"


class Redactor:
    """Replaces known secret values in text with ``[REDACTED]``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is masked whole; short values
        # are left alone (masking "abc" everywhere would garble records for nothing).
        self.secrets = sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Redactor:
        env = os.environ if env is None else env
        return cls(env.get(name, "") for name in SECRET_NAMES)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def __bool__(self) -> bool:
        return bool(self.secrets)
