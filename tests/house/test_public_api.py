"""The public API: ``agentcell`` and ``agentcell.testing``, pinned name by name (the
layers below are internal; their doors and the import rule are tests/house/test_layout.py's)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from public_api import PUBLIC_API


@pytest.mark.parametrize("package", sorted(PUBLIC_API))
def test_public_api_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == PUBLIC_API[package]
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name} does not resolve"


def test_agentcell_loads_the_orchestrator_only_when_asked() -> None:
    """A sub-agent process imports agentcell.worker; that must not import the parent's code."""
    code = (
        "import sys, agentcell.worker, agentcell.protocol; "
        "print(any(m.startswith('agentcell.orchestrator') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
