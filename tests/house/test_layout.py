"""How the code is laid out: what installs, what imports what, and how much each layer's
doors pin.

- Only ``agentcell`` installs at the top level; every package folder is listed in
  pyproject.
- protocol ← worker ← orchestrator (``agentcell`` itself may use them all). Inside a
  layer, any module may import any other, private ones included. Across layers, a module
  imports only what a door of the lower layer exports: a public (non-``_``) module of it
  whose ``__all__`` names the thing (``agentcell.worker``, ``agentcell.worker.models``,
  ``agentcell.worker.process``, …).
- Those doors pin at most ``DOOR_BUDGET`` names in all: a name no higher layer uses is
  not exported (tests import it from its own module).
- No import circle between modules.
- The README lists exactly the public names.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from places import ROOT
from public_api import PUBLIC_API

#: The most names the layers' ``__all__`` lists may hold together.
DOOR_BUDGET = 200


def test_every_package_folder_is_listed_for_installation() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    assert found == listed


def _run_in(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_only_agentcell_is_importable_at_the_top_level(tmp_path: Path) -> None:
    for name in ("protocol", "worker", "orchestrator"):
        out = _run_in(tmp_path, f"import {name}")
        assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr, (name, out.stderr)


def test_a_users_own_protocol_worker_and_orchestrator_modules_do_not_collide(
    tmp_path: Path,
) -> None:
    for name in ("protocol", "worker", "orchestrator"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user module {name}')\n")
    out = _run_in(
        tmp_path,
        """
        import asyncio
        from agentcell import Orchestrator, Settings

        async def main():
            settings = Settings(model="scripted:echo", approval="deny", warm_spares=1)
            async with Orchestrator(settings=settings, workdir=".", record=False) as orch:
                one = await orch.delegate("Explore", "hello from a sub-agent")
                report = await orch.run("hello")
            print(one.status.value, one.pid is not None, report.final_text)

        asyncio.run(main())
        """,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed True echo: hello"


# protocol ← worker ← orchestrator; agentcell (the umbrella) may use them all.
LAYERS = {
    "protocol": {"agentcell.protocol"},
    "worker": {"agentcell.protocol", "agentcell.worker"},
    "orchestrator": {"agentcell.protocol", "agentcell.worker", "agentcell.orchestrator"},
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_layers_do_not_import_upward_nor_into_private_modules_of_another_package() -> None:
    for layer, may_use in LAYERS.items():
        for path in (ROOT / layer).rglob("*.py"):
            for name in _imports(path):
                parts = name.split(".")
                if parts[0] != "agentcell" or len(parts) < 2:
                    continue
                top = ".".join(parts[:2])
                assert top in may_use, f"{path.relative_to(ROOT)} imports {name}"
                if top != f"agentcell.{layer}":
                    assert not any(p.startswith("_") for p in parts[2:]), (
                        f"{path.relative_to(ROOT)} reaches into a private module: {name}"
                    )


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for folder in ("protocol", "worker", "orchestrator", "agentcell"):
        base = "agentcell" if folder == "agentcell" else f"agentcell.{folder}"
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            graph[".".join([base, *parts])] = set()
    for module, edges in graph.items():
        folder = module.split(".")[1] if module.count(".") else "agentcell"
        top = ROOT / (folder if folder in LAYERS else "agentcell")
        rel = module.split(".")[2:] if folder in LAYERS else module.split(".")[1:]
        path = top.joinpath(*rel).with_suffix(".py")
        if not path.exists():
            path = top.joinpath(*rel, "__init__.py")
        for name in _imports(path):
            while name and name not in graph:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                edges.add(name)
    return graph


def test_modules_import_no_circles() -> None:
    """Package __init__ files re-export their own modules, so a package's edge to its own
    children is not a circle; every other import must form a DAG."""
    graph = _module_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + "."):
                continue  # a package importing its own submodules
            if state.get(nxt) == 1:
                circle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import circle: " + " → ".join(circle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _doors() -> dict[str, list[str]]:
    """Every module of a layer with an ``__all__``, and that list."""
    found: dict[str, list[str]] = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
                ):
                    rel = path.relative_to(ROOT).with_suffix("").parts
                    name = ".".join(["agentcell", *(p for p in rel if p != "__init__")])
                    found[name] = [ast.literal_eval(e) for e in node.value.elts]
    return found


def test_across_layers_a_module_imports_only_what_a_door_exports() -> None:
    doors = _doors()
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                parts = node.module.split(".")
                if parts[0] != "agentcell" or len(parts) < 2 or parts[1] == layer:
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                exported = doors.get(node.module)
                assert exported is not None, f"{where}: {node.module} is no door of its layer"
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in doors:
                        continue  # a door itself (``from agentcell.worker import process``)
                    assert alias.name in exported, (
                        f"{where}: {node.module} does not export {alias.name}: add it to that "
                        "door's __all__ or keep the code in one layer"
                    )


def _uses_of_doors(doors: dict[str, list[str]]) -> set[tuple[str, str]]:
    """(door, name) for each name a module above the door's layer takes from it: imported,
    read as an attribute of the door module, or named in agentcell's table of lazy names
    (``_SOURCES``); and the console script's function."""
    used: set[tuple[str, str]] = set()
    for folder in ("protocol", "worker", "orchestrator", "agentcell"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            aliases: dict[str, str] = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    above = folder == "agentcell" or node.module.split(".")[1:2] != [folder]
                    if node.module in doors and above:
                        used |= {(node.module, a.name) for a in node.names}
                    for a in node.names:
                        if f"{node.module}.{a.name}" in doors:
                            aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif isinstance(node, ast.Import):
                    aliases |= {a.asname or a.name: a.name for a in node.names if a.name in doors}
                elif isinstance(node, ast.Dict) and folder == "agentcell":
                    for key, value in zip(node.keys, node.values, strict=True):
                        if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                            used.add((value.value, key.value))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
                    used.add((aliases[ast.unparse(node.value)], node.attr))
    scripts = (ROOT / "pyproject.toml").read_text()
    return used | set(re.findall(r'"(agentcell\.[\w.]+):(\w+)"', scripts))


def test_the_doors_pin_few_names_and_each_is_used_above_its_layer() -> None:
    doors = _doors()
    total = sum(len(names) for names in doors.values())
    assert total <= DOOR_BUDGET, (
        f"the layers' __all__ lists hold {total} names, at most {DOOR_BUDGET}"
    )
    used = _uses_of_doors(doors)
    unused = sorted(f"{d}.{n}" for d, names in doors.items() for n in names if (d, n) not in used)
    assert not unused, f"exported, yet no higher layer uses it: drop it from __all__: {unused}"


def test_the_readme_lists_every_public_name_and_only_those() -> None:
    """The README's "The public names" is the API a program may rely on: exactly
    ``agentcell.__all__`` and ``agentcell.testing.__all__``."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("### The public names")
    section = readme[start : readme.index("\n## ", start)]
    listed = set(re.findall(r"`(\w+)`", section))
    public = set(PUBLIC_API["agentcell"]) | set(PUBLIC_API["agentcell.testing"])
    assert public - listed == set(), "public but not in the README"
    # (the README names other things in lower case: check_setup, __all__)
    assert {n for n in listed if n[0].isupper()} - public == set(), "in the README, not public"


#: Folders of tests/ that mirror no product package: the helpers, the checks of the whole
#: house, the mutation-testing kills (mutants/run.py's selections) and the bench's smoke.
TESTS_OWN = {"support", "house", "mutants", "bench"}


def _test_folders() -> list[Path]:
    tests = ROOT / "tests"
    return sorted(p for p in tests.rglob("*") if p.is_dir() and "__pycache__" not in p.parts)


def test_tests_are_laid_out_like_the_code() -> None:
    """Every folder of tests/ is a product package's (tests/worker/sandbox/ tests
    worker/sandbox/) or one of tests/'s own; a test file lives in a folder, and test
    files' names are unique (pytest imports each by its name alone)."""
    tests = ROOT / "tests"
    strays = []
    for folder in _test_folders():
        rel = folder.relative_to(tests)
        if rel.parts[0] in TESTS_OWN:
            continue
        if not (ROOT / rel / "__init__.py").is_file():
            strays.append(str(rel))
    assert strays == [], f"tests/ folders that mirror no product package: {strays}"
    assert not list(tests.glob("test_*.py")), "a test file belongs in its room's folder"
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), "two test files share a name"


def test_a_test_module_imports_no_other_test_module() -> None:
    """Shared helpers live in tests/support/ (on sys.path from conftest.py), so a test
    file can move between folders without breaking another."""
    importers = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[0].startswith("test_")
    ]
    assert importers == [], importers
