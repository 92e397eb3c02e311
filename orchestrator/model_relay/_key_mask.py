"""The parent's key, masked in what it relays back to a child.

The parent sends a sub-agent's model requests with its own key; the child must never
see it. A server or proxy may still echo it in the answer — an echo or debug endpoint,
an error page quoting the request, a response header — and the relay would hand it to
the (possibly compromised) child. ``KeyMask`` replaces every literal occurrence of the
request's secrets in the relayed bytes, headers and error words with ``[REDACTED]``.

A stream is masked across chunk boundaries: the bytes at a chunk's end that could begin
a secret are held back until the next chunk says whether they do (a stream's chunks end
in an SSE event's blank line, so in practice nothing waits). What it cannot do: a server
that wants a child to have the key can always hand it over encoded; the mask stops the
accidental echo, not a server that colludes with the child (docs/security.md).
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterable, Mapping

#: What a secret is replaced with (the child's redactor uses the same words).
MASK = b"[REDACTED]"
#: Header values the parent adds that carry a key; a scheme word before it is dropped.
SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "proxy-authorization")
#: Shorter values are left alone: masking "abc" everywhere would garble answers.
MIN_SECRET_LENGTH = 8


def header_secrets(headers: Mapping[str, str]) -> list[bytes]:
    """The secrets in the headers the parent sends upstream: each credential header's
    whole value and, for ``Bearer KEY``, the key alone."""
    found: set[bytes] = set()
    for name, value in headers.items():
        if name.lower() not in SECRET_HEADERS:
            continue
        for part in (value, value.partition(" ")[2]):
            secret = part.strip()
            if len(secret) >= MIN_SECRET_LENGTH:
                found.add(secret.encode("utf-8", "surrogateescape"))
    return sorted(found, key=lambda s: (-len(s), s))  # longest first: "Bearer K" whole


#: Query keys whose values are credentials (``?api-key=…``, ``?sig=…``); others, such as
#: ``api-version``, are not: masking them would rewrite answers that mention them.
SECRET_QUERY_WORDS = ("key", "token", "secret", "sig", "password", "auth", "code", "cred")


def url_secrets(url: str) -> list[bytes]:
    """The secrets a base URL carries, as written and as sent: its password (and the
    ``Basic`` credential an HTTP client builds from ``user:password@``), a user name
    alone (``https://TOKEN@host``), and the values of its credential query keys."""
    parts = urllib.parse.urlsplit(url)
    found: list[str] = []
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if any(word in urllib.parse.unquote(name).lower() for word in SECRET_QUERY_WORDS):
            found += [value, urllib.parse.unquote_plus(value)]
    user, password = parts.username or "", parts.password or ""
    if password:
        plain = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
        found += [
            password,
            urllib.parse.unquote(password),
            base64.b64encode(plain.encode()).decode(),
        ]
    elif user:
        found += [user, urllib.parse.unquote(user)]
    return [v.encode("utf-8", "surrogateescape") for v in found if len(v) >= MIN_SECRET_LENGTH]


class KeyMask:
    """Masks ``secrets`` in one relayed answer: ``stream`` for its body's chunks, in
    order, then ``flush``; ``text`` for a header value or an error message."""

    __slots__ = ("_held", "_secrets")

    def __init__(self, secrets: Iterable[bytes]) -> None:
        self._secrets = sorted(
            {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=lambda s: (-len(s), s)
        )
        self._held = b""

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def stream(self, data: bytes) -> bytes:
        """The bytes of ``data`` (after those held from before) that can go now, masked;
        a tail that may begin a secret is held for the next chunk."""
        if not self._secrets:
            return data
        data = self._masked(self._held + data if self._held else data)
        keep = self._open_prefix(data)
        self._held = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep] if keep else data

    def flush(self) -> bytes:
        """What was held back, now the stream ended: it begins no secret after all —
        but a held tail of ``MIN_SECRET_LENGTH`` bytes or more is a long piece of one (a
        stream cut, or ended, one byte short of the key), and goes masked."""
        held, self._held = self._held, b""
        return MASK if len(held) >= MIN_SECRET_LENGTH else held

    def text(self, value: str) -> str:
        """``value`` with every secret masked (a header value, an error's words)."""
        if not self._secrets:
            return value
        raw = value.encode("utf-8", "surrogateescape")
        masked = self._masked(raw)
        return value if masked is raw else masked.decode("utf-8", "surrogateescape")

    def _masked(self, data: bytes) -> bytes:
        for secret in self._secrets:
            if secret in data:
                data = data.replace(secret, MASK)
        return data

    def _open_prefix(self, data: bytes) -> int:
        """The length of the longest tail of ``data`` that is a proper prefix of a
        secret (0 when none): those bytes may be completed by the next chunk."""
        best = 0
        for secret in self._secrets:
            first = secret[:1]
            # A tail as long as the secret would be the secret, masked already.
            start = max(0, len(data) - len(secret) + 1)
            at = data.find(first, start)
            while at != -1:
                if secret.startswith(data[at:]):
                    best = max(best, len(data) - at)
                    break  # the earliest start is the longest tail
                at = data.find(first, at + 1)
        return best
