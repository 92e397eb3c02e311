"""Where things are, for tests at any depth of tests/: the repository's root, the
support helpers, and the workplace's shared folder beside the checkout."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"
#: ``../shared`` beside the checkout: the agents corpus, the hooks collection.
SHARED = ROOT.parent / "shared"
