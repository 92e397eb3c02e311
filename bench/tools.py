"""The sub-agents' tools, as plain functions every system wraps in its own tool type.

``probe`` is the trivial tool of the io workload (async, instant). ``crunch`` is the
CPU-heavy one of the cpu workload: a regex over a generated multi-MB corpus. Python's
``re`` holds the GIL while it matches, so in-process systems run the crunches one at a
time whatever their thread pools, and only separate processes use the other cores.
"""

from __future__ import annotations

import asyncio
import random
import re
import time

#: Size of the corpus one ``crunch`` call scans.
CRUNCH_BYTES = 3 * 2**20

_WORD = re.compile(rb"\b[a-z]*(?:qu|x|zz)[a-z]*(?:ing|ed|s)\b")


async def probe(arg: str) -> str:
    """Look at one item and report on it (instant)."""
    return f"probe {arg}: ok"


async def hold(arg: str) -> str:
    """Work on one item for a while (200 ms), then say when it ended."""
    await asyncio.sleep(0.2)
    return f"held until {time.monotonic():.6f} ({arg})"


def crunch(arg: str) -> str:
    """Scan a large generated corpus for matching words (CPU-heavy)."""
    corpus = _corpus(arg)
    matches = len(_WORD.findall(corpus))
    return f"crunch {arg}: {matches} matches in {len(corpus)} bytes"


def _corpus(seed: str) -> bytes:
    # Built fresh per call (the same work in every system), from a 64 KiB block of
    # pseudo-words repeated, so that building it is cheap next to the match.
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = []
    size = 0
    while size < 65536:
        word = "".join(rng.choices(letters, k=rng.randint(2, 9)))
        words.append(word)
        size += len(word) + 1
    block = " ".join(words).encode() + b" "
    return block * (CRUNCH_BYTES // len(block) + 1)
