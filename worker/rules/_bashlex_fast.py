"""bashlex, imported with the parse tables of ``_bash_tables`` instead of building them.

bashlex (0.18) carries its own copy of PLY, whose ``yacc.yacc`` builds the LALR tables of
the bash grammar at every import: about 0.1 s of CPU (the ``parsetab.py`` it ships is
never read). Every fork server imports bashlex for its children (worker/child/_preload.py),
and so does every process whose rules read a bash line. ``import_bashlex`` hands PLY the
tables built once, ahead of time; PLY does the rest as usual (its grammar checks, its
parser, bashlex's own corrections to the tables after).

Where the tables come from: ``_bash_tables``, a generated module of this package, so they
are exactly as trusted as the code that reads them. They are JSON text read with
``json.loads`` (data: never code, never a pickle), and never taken from a cache a
sub-agent or another user could write ($HOME, /tmp).

``_bash_tables.KEY`` is a SHA-256 of the grammar PLY is handed (each production in order
with its precedence, the precedence table, the terminals) and of PLY's table builder
(bashlex/yacc.py, byte for byte): the tables are a function of these alone. Where the key
differs (another bashlex), or anything here fails, bashlex builds its tables as before:
slower, never an error.

After changing bashlex, regenerate the tables (tests/worker/rules/test_bashlex_tables.py fails while
they are stale) and commit worker/rules/_bash_tables.py::

    make bash-tables        # .venv/bin/python -m agentcell.worker.rules._bashlex_fast
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

_PACKAGE = "bashlex"
_TABLES_FILE = Path(__file__).with_name("_bash_tables.py")
#: Width of the generated module's lines (the project's line length is 100).
_WIDTH = 96

#: Takes PLY's ``LRTable`` class, gives the class ``yacc.yacc`` is to use in its place.
TableClass = Callable[[Any], Any]
Rows = list[dict[str, int]]

_lock = threading.Lock()
#: Whether ``import_bashlex`` imported bashlex with the tables read (else: built).
TABLES_READ = False


def grammar_key(grammar: Any, builder_source: bytes) -> str:
    """What PLY's tables for ``grammar`` depend on, hashed: the productions in order with
    their precedence, the precedence table, the terminals, and the builder's source."""
    described = (
        [(p.name, p.prod, p.prec) for p in grammar.Productions],
        sorted(grammar.Precedence.items()),
        sorted(grammar.Terminals),
    )
    digest = hashlib.sha256(builder_source)
    digest.update(repr(described).encode())
    return digest.hexdigest()


def _builder_source() -> bytes:
    """The source of bashlex's PLY (bashlex/yacc.py), the module being imported."""
    return Path(sys.modules[_PACKAGE + ".yacc"].__file__ or "").read_bytes()


def _bashlex_modules() -> list[str]:
    return [name for name in sys.modules if name == _PACKAGE or name.startswith(_PACKAGE + ".")]


def import_fresh(table_class: TableClass) -> ModuleType:
    """Import bashlex (not yet in ``sys.modules``), with ``yacc.LRTable`` replaced by
    ``table_class(LRTable)`` while its parser module builds the parser; on failure no
    bashlex module is left in ``sys.modules``."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.loader is None:
        raise ImportError(f"no {_PACKAGE} to import")
    # The package's module first, not yet run: yacc.py (``from bashlex import utils``)
    # then imports without bashlex/__init__.py, which builds the parser at once.
    package = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = package
    try:
        yacc: Any = importlib.import_module(_PACKAGE + ".yacc")
        original = yacc.LRTable
        yacc.LRTable = table_class(original)
        try:
            spec.loader.exec_module(package)
        finally:
            yacc.LRTable = original
    except BaseException:
        for name in _bashlex_modules():
            del sys.modules[name]
        raise
    return package


def reading(tables: Any, read: list[bool] | None = None) -> TableClass:
    """An ``LRTable`` that takes its tables from ``tables`` (a module like
    ``_bash_tables``) when ``tables.KEY`` is the grammar's key (noted in ``read``), else
    builds them."""

    def table_class(original: Any) -> Any:
        class TablesRead(original):
            def __init__(self, grammar: Any, log: Any = None) -> None:
                if grammar_key(grammar, _builder_source()) != tables.KEY:
                    super().__init__(grammar, log)
                    return
                # What LRTable.__init__ sets, the tables read instead of built (fresh
                # dictionaries each time: bashlex corrects some entries in place).
                self.grammar = grammar
                self.log = log
                self.lr_action = dict(enumerate(json.loads(tables.ACTION)))
                self.lr_goto = dict(enumerate(json.loads(tables.GOTO)))
                self.lr_productions = grammar.Productions
                self.lr_goto_cache: dict[Any, Any] = {}
                self.lr0_cidhash: dict[Any, Any] = {}
                self._add_count = 0
                self.sr_conflict = 0
                self.rr_conflict = 0
                self.conflicts: list[Any] = []
                self.sr_conflicts: list[Any] = []
                self.rr_conflicts: list[Any] = []
                if read is not None:
                    read.append(True)

        return TablesRead

    return table_class


def import_bashlex(tables: Any = None) -> ModuleType:
    """bashlex: the one already imported, else imported with the tables of ``tables``
    (default ``_bash_tables``), else (stale key, any failure) a plain ``import bashlex``."""
    global TABLES_READ
    with _lock:
        loaded = sys.modules.get(_PACKAGE)
        if loaded is not None:
            return loaded
        TABLES_READ = False
        try:
            if tables is None:
                from agentcell.worker.rules import _bash_tables as tables
            read: list[bool] = []
            module = import_fresh(reading(tables, read))
            TABLES_READ = bool(read)
            return module
        except Exception:
            import bashlex  # builds its own tables, as it always did

            return bashlex


def build_tables() -> tuple[str, Rows, Rows]:
    """(key, action rows, goto rows) as PLY builds them for the bashlex installed, each
    row a state's; from a fresh import, the bashlex modules in ``sys.modules`` put back."""
    built: dict[str, Any] = {}

    def capturing(original: Any) -> Any:
        class TablesBuilt(original):
            def __init__(self, grammar: Any, log: Any = None) -> None:
                super().__init__(grammar, log)
                states = range(len(self.lr_action))
                if list(self.lr_action) != list(states) or list(self.lr_goto) != list(states):
                    raise ValueError("PLY's states are not numbered 0..n-1")
                built["key"] = grammar_key(grammar, _builder_source())
                # Copied now: bashlex corrects some entries in place once yacc returns.
                built["action"] = [dict(self.lr_action[s]) for s in states]
                built["goto"] = [dict(self.lr_goto[s]) for s in states]

        return TablesBuilt

    saved = {name: sys.modules.pop(name) for name in _bashlex_modules()}
    try:
        import_fresh(capturing)
    finally:
        for name in _bashlex_modules():
            del sys.modules[name]
        sys.modules.update(saved)
    return built["key"], built["action"], built["goto"]


def _assignment(name: str, rows: Rows) -> list[str]:
    """``rows`` assigned to ``name`` as a JSON array in a raw string, each state's row on
    a line or more, no line longer than ``_WIDTH``."""
    lines = [f'{name} = r"""[']
    for number, row in enumerate(rows):
        items = [json.dumps(token) + ":" + str(value) for token, value in row.items()]
        line = "{"
        for index, item in enumerate(items):
            piece = item + ("," if index < len(items) - 1 else "")
            if len(line) + len(piece) > _WIDTH:
                lines.append(line)
                line = ""
            line += piece
        lines.append(line + "}" + ("," if number < len(rows) - 1 else ""))
    lines.append(']"""')
    return lines


def render(key: str, action: Rows, goto: Rows, version: str) -> str:
    """The text of ``_bash_tables.py``."""
    return "\n".join(
        [
            '"""bashlex\'s LALR tables, built once: read by ``_bashlex_fast`` (its docstring',
            "says why and how). Generated by ``make bash-tables``: do not edit.",
            "",
            f"bashlex {version}, {len(action)} states. ACTION and GOTO are JSON: a list of",
            "each state's row, {token: action} and {nonterminal: next state}.",
            '"""',
            "",
            f'KEY = "{key}"',
            "",
            *_assignment("ACTION", action),
            "",
            *_assignment("GOTO", goto),
            "",
        ]
    )


def write_tables(path: Path = _TABLES_FILE) -> None:
    """Build the tables of the bashlex installed and write them to ``path``."""
    from importlib.metadata import version

    key, action, goto = build_tables()
    path.write_text(render(key, action, goto, version(_PACKAGE)))


#: The bashlex module: import it from here (``from agentcell.worker.rules._bashlex_fast
#: import bashlex``), never directly, or it builds its tables again.
bashlex = import_bashlex()

if __name__ == "__main__":
    write_tables()
    print(f"wrote {_TABLES_FILE}")
