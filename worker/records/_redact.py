"""Keeping secrets out of records and progress output."""

from __future__ import annotations

import hashlib
import secrets as _random
from collections.abc import Iterable, Mapping

from agentcell.protocol import SecretDigest
from agentcell.worker.child._secrets import SECRET_NAMES, known_secrets

MASK = "[REDACTED]"
_MIN_LENGTH = 8  # shorter values are left alone (masking "abc" would garble records)
_HEAD = 3  # characters of a digested secret a child is told (key prefixes are public)


def _hash(salt: bytes, text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), key=salt, digest_size=32).digest()


def secret_digests(values: Iterable[str]) -> list[SecretDigest]:
    """What a child needs to redact ``values`` without being able to use them."""
    digests = []
    for value in sorted(set(values)):
        if len(value) >= _MIN_LENGTH:
            salt = _random.token_bytes(16)
            digests.append(
                SecretDigest(
                    length=len(value), head=value[:_HEAD], salt=salt, digest=_hash(salt, value)
                )
            )
    return digests


class Redactor:
    """Replaces known secret values in text with ``[REDACTED]``.

    ``digests`` are secrets known only by a salted hash (the other providers' keys, in a
    child): found by their first characters, confirmed by the hash.
    """

    #: what a secret is replaced with
    mask = MASK

    def __init__(self, secrets: Iterable[str], digests: Iterable[SecretDigest] = ()) -> None:
        # Longest first, so a secret that contains another is masked whole.
        self.secrets = sorted({s for s in secrets if len(s) >= _MIN_LENGTH}, key=len, reverse=True)
        self.digests = [d for d in digests if d.length >= _MIN_LENGTH and d.head]

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, digests: Iterable[SecretDigest] = ()
    ) -> Redactor:
        """Every secret this process knows (those held in memory included), or those of
        ``env`` when given."""
        if env is None:
            values: Iterable[str] = known_secrets().values()
        else:
            values = (env.get(name, "") for name in SECRET_NAMES)
        return cls(values, digests)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        for digest in self.digests:
            text = _mask_digest(text, digest)
        return text

    def __bool__(self) -> bool:
        return bool(self.secrets or self.digests)


def _mask_digest(text: str, digest: SecretDigest) -> str:
    parts: list[str] = []
    start = 0
    at = text.find(digest.head)
    while at != -1:
        window = text[at : at + digest.length]
        if len(window) == digest.length and _hash(digest.salt, window) == digest.digest:
            parts.append(text[start:at])
            parts.append(MASK)
            start = at + digest.length
            at = text.find(digest.head, start)
        else:
            at = text.find(digest.head, at + 1)
    if not parts:
        return text
    parts.append(text[start:])
    return "".join(parts)
