"""Each package's public API is what its ``__all__`` says, and every name resolves."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "package", ["protocol", "worker", "worker.models", "worker.tools", "orchestrator"]
)
def test_all_names_resolve(package: str) -> None:
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.{name} is in __all__ but missing"


def test_pinned_entry_points() -> None:
    import orchestrator
    import protocol
    import worker

    assert {"Orchestrator", "AgentDefinition", "Settings", "WorkerPool", "SubAgentResult"} <= set(
        orchestrator.__all__
    )
    assert {"Engine", "Session", "PermissionPolicy", "ChildLink"} <= set(worker.__all__)
    assert {"Frame", "PipeChannel", "MemoryChannel", "encode_frame", "ProtocolError"} <= set(
        protocol.__all__
    )


def test_layers_do_not_import_upward() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    allowed = {"protocol": {"protocol"}, "worker": {"protocol", "worker"}}
    for layer, may_use in allowed.items():
        for path in (root / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top in {"protocol", "worker", "orchestrator"}:
                        assert top in may_use, f"{path.relative_to(root)} imports {name}"
