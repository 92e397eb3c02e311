"""Background results as the main agent receives them: capped, the whole kept once on disk.

A foreground ``task`` result passes through the engine's tool-output cap. Background
results reach the model another way, as one user message before its next turn (or after
its last), and fifteen 8 MB answers in one such message made six 120 MB requests that a
provider refuses, and a parent of 1.4 GiB. So the message gets the same cap as a tool
result: the budget is shared among the results delivered together, a result over its
share keeps its head and tail, and its whole text is written once to the run's
``results/`` folder, which the note names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
from pathlib import Path

import msgspec
from agentcell.orchestrator.delegation._results import SubAgentResult

#: Every result keeps at least this much of its text, however many arrive at once.
MIN_SHARE_CHARS = 2_000


@dataclasses.dataclass(frozen=True)
class ResultDelivery:
    """How much of the background results one message may carry, and where the wholes go."""

    limit_chars: int = 30_000
    run_dir: Path | None = None
    workdir: Path | None = None

    def capped(self, results: list[SubAgentResult]) -> list[SubAgentResult]:
        """``results`` with each text cut to its share of the budget (whole ones as they are)."""
        if not results:
            return []
        share = max(MIN_SHARE_CHARS, self.limit_chars // len(results))
        return [self._cap(result, share) for result in results]

    def _cap(self, result: SubAgentResult, share: int) -> SubAgentResult:
        text = result.text
        if len(text) <= share:
            return result
        head, tail = text[: share * 2 // 3], text[-(share // 3) :]
        omitted = len(text) - len(head) - len(tail)
        where = self._save(result)
        note = f"[... {omitted} characters of this answer omitted (results are limited to "
        note += f"{share} characters each here){where} ...]"
        return msgspec.structs.replace(result, text=f"{head}\n\n{note}\n\n{tail}")

    def _save(self, result: SubAgentResult) -> str:
        if self.run_dir is None:
            return ""
        folder = self.run_dir / "results"
        path = folder / f"{_file_name(result.agent_id)}.txt"
        made = False
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not path.exists():  # kept once, however often it is delivered
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                made = True
                with os.fdopen(descriptor, "w", encoding="utf-8", errors="surrogatepass") as f:
                    f.write(result.text)
        except OSError as exc:
            if made:  # a cut copy (a full disk) would pass for the whole next time
                with contextlib.suppress(OSError):
                    path.unlink()
            return f"; the whole answer could not be saved ({exc.strerror or exc})"
        shown = _relative(path, self.workdir)
        return f"; the whole answer ({len(result.text)} characters) is saved at {shown}"


_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _file_name(agent_id: str) -> str:
    """Agent ids are the parent's own (a1, a2, …); anything else becomes a digest."""
    if _PLAIN.fullmatch(agent_id):
        return agent_id
    return hashlib.sha256(agent_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _relative(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            pass
    return str(path)
