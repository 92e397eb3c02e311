"""The code stays in pieces a reader can hold: no function over 80 lines, no module over
700, in the three layers (protocol/, worker/, orchestrator/). Split what grows past them
by the jobs inside it; the failure names each offender and its size."""

from __future__ import annotations

import ast
from pathlib import Path

from places import ROOT

LAYERS = ("protocol", "worker", "orchestrator")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 700
#: Data written by a program, not read by people (each says how it is made): no line cap.
GENERATED = {"worker/rules/_bash_tables.py"}


def _modules() -> list[Path]:
    return sorted(path for layer in LAYERS for path in (ROOT / layer).rglob("*.py"))


def test_no_module_is_over_700_lines() -> None:
    over = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in _modules()
        if path.relative_to(ROOT).as_posix() not in GENERATED
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
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


#: The most ``.py`` files (besides ``__init__.py``) a package folder of product code holds,
#: and the folders held to less: a room holds one concern, a handful of modules.
MAX_PACKAGE_MODULES = 16
PACKAGE_CAPS = {"worker": 10, "orchestrator/delegation": 12}
MAX_CLASS_DEFS = 20
MAX_PARAMETERS = 10
#: Public constructors keep every keyword their docs give (README.md: ``Orchestrator``).
PUBLIC_CONSTRUCTORS = {("orchestrator/_orchestrator.py", "Orchestrator")}


def _packages() -> list[Path]:
    return sorted(init.parent for layer in LAYERS for init in (ROOT / layer).rglob("__init__.py"))


def test_no_package_folder_holds_more_than_a_handful_of_modules() -> None:
    over = []
    for folder in _packages():
        rel = folder.relative_to(ROOT).as_posix()
        count = sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")
        cap = PACKAGE_CAPS.get(rel, MAX_PACKAGE_MODULES)
        if count > cap:
            over.append(f"{rel}: {count} modules, at most {cap}")
    assert over == [], f"split these folders into rooms by concern: {over}"


def _is_validator(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("validator" in ast.unparse(d) for d in node.decorator_list)


def _defs(node: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [
        n
        for n in node.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_validator(n)
    ]


def test_no_class_has_more_than_20_defs() -> None:
    """A project mixin's defs count as its user's (pydantic validators are not counted)."""
    classes = {
        node.name: node
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    over = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                mixins = [
                    classes[b.id]
                    for b in node.bases
                    if isinstance(b, ast.Name) and b.id.endswith("Mixin") and b.id in classes
                ]
                count = len(_defs(node)) + sum(len(_defs(m)) for m in mixins)
                if count > MAX_CLASS_DEFS:
                    over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {count}")
    assert over == [], f"classes over {MAX_CLASS_DEFS} defs (split them by job): {over}"


def test_no_function_takes_more_than_10_parameters() -> None:
    over = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        for cls in [
            None,
            *(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)),
        ]:
            body = cls.body if cls is not None else ast.parse(path.read_text()).body
            for node in body:
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if (
                    cls is not None
                    and node.name == "__init__"
                    and (rel, cls.name) in PUBLIC_CONSTRUCTORS
                ):
                    continue
                args = node.args
                names = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                count = len(names) + (args.vararg is not None) + (args.kwarg is not None)
                if cls is not None and names and names[0].arg in ("self", "cls"):
                    count -= 1
                if count > MAX_PARAMETERS:
                    where = f"{cls.name}.{node.name}" if cls is not None else node.name
                    over.append(f"{rel}:{node.lineno} {where}: {count}")
    assert over == [], f"functions over {MAX_PARAMETERS} parameters (group them by meaning): {over}"
