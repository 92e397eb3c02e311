"""What a server's error response says, in its own words (no httpx: both routes use it)."""

from __future__ import annotations

import msgspec


def error_message(body: bytes) -> str:
    """The server's own error text from an error body (OpenAI, Anthropic, FastAPI, text)."""
    text = ""
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        doc = None
        stripped = body.strip()
        if stripped and not stripped.startswith(b"<"):  # skip HTML error pages
            text = stripped.decode("utf-8", "replace")
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict):
            found = err.get("message") or err.get("detail") or err.get("msg")
            text = found if isinstance(found, str) else msgspec.json.encode(found).decode()
        elif isinstance(err, str):
            text = err
        if not text and "detail" in doc:  # FastAPI-style 422 from vLLM and friends
            detail = doc["detail"]
            text = detail if isinstance(detail, str) else msgspec.json.encode(detail).decode()
    elif isinstance(doc, str):
        text = doc
    text = " ".join(text.split())
    return text[:500] + "..." if len(text) > 500 else text


def error_code(body: bytes) -> str:
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return ""
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        return f"{err.get('code') or ''} {err.get('type') or ''}"
    return ""
