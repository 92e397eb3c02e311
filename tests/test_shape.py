"""The code stays in pieces a reader can hold: no function over 80 lines, no module over
700, in the three layers (protocol/, worker/, orchestrator/). Split what grows past them
by the jobs inside it; the failure names each offender and its size."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("protocol", "worker", "orchestrator")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 700


def _modules() -> list[Path]:
    return sorted(path for layer in LAYERS for path in (ROOT / layer).rglob("*.py"))


def test_no_module_is_over_700_lines() -> None:
    over = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in _modules()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert over == [], f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_function_is_over_80_lines() -> None:
    over = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert over == [], f"functions over {MAX_FUNCTION_LINES} lines: {over}"
