"""bashlex's parse tables read from worker/rules/_bash_tables.py (``_bashlex_fast``): the
tables bashlex builds, the same parse trees, no table built at import, and bashlex's own
build, without an error, where the tables do not fit."""

from __future__ import annotations

import ast
import contextlib
import json
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from agentcell.worker.rules import _bash_tables, _bashlex_fast
from places import TESTS

#: Test files whose string constants are (mostly) bash lines: the corpus, with LINES.
CORPUS_FILES = [
    "worker/rules/test_allow_rules.py",
    "worker/rules/test_allow_rules_exec.py",
    "worker/rules/test_claude_rules_compat.py",
    "mutants/test_mutation_kills_shell.py",
]
#: What those files may not have: every kind of node bashlex makes, and lines it refuses.
LINES = [
    "ls -la | grep x > out 2>&1",
    "a && b || c; echo $(x) `y` &",
    "for i in 1 2; do echo $i; done",
    "for ((i=0; i<3; i++)); do :; done",
    "while true; do break; done; until false; do :; done",
    "if a; then b; elif c; then d; else e; fi",
    "case $x in a|b) echo 1;; *) echo 2;; esac",
    "f() { echo hi; }; function g { :; }",
    "{ a; b; } > out; (cd x && make)",
    "cat <<EOF\nhi $USER\nEOF\n",
    "cat <<-'EOF'\n\tx\n\tEOF\n",
    "diff <(sort a) >(tee b) <<< word",
    "x=1 y=$((1 + 2)) z=${a:-b} cmd --opt='q u' \"d $q\" \\$e",
    "echo $(echo $(echo nested))",
    "exec 3<>file; cat <&3; echo 1>&2 &>/dev/null",
    "! true | time false",
    "a\nb\n\nc",
    "echo 'unterminated",
    "if then fi",
    "echo )",
    "",
]


def _corpus() -> list[str]:
    lines = set(LINES)
    for name in CORPUS_FILES:
        for node in ast.walk(ast.parse((TESTS / name).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                lines.add(node.value)
    return sorted(line for line in lines if len(line) <= 400)


def _parses(bashlex: Any, lines: list[str]) -> list[tuple[str, ...]]:
    """Each line's trees as ``dump()`` gives them, or the error bashlex raised."""
    results: list[tuple[str, ...]] = []
    for line in lines:
        try:
            results.append(("trees", *(tree.dump() for tree in bashlex.parse(line))))
        except Exception as error:
            results.append(("error", type(error).__name__, str(error)))
    return results


@contextlib.contextmanager
def _room_for_a_fresh_bashlex() -> Iterator[None]:
    """No bashlex in ``sys.modules`` inside; the bashlex modules of before put back after."""

    def loaded() -> list[str]:
        return [n for n in sys.modules if n == "bashlex" or n.startswith("bashlex.")]

    saved = {name: sys.modules.pop(name) for name in loaded()}
    tables_read = _bashlex_fast.TABLES_READ
    try:
        yield
    finally:
        for name in loaded():
            del sys.modules[name]
        sys.modules.update(saved)
        _bashlex_fast.TABLES_READ = tables_read


def _counting(builds: list[str]) -> _bashlex_fast.TableClass:
    """An LRTable that notes each time PLY builds its tables (``lr_parse_table``)."""

    def table_class(original: Any) -> Any:
        class Counted(original):
            def lr_parse_table(self) -> None:
                builds.append("built")
                super().lr_parse_table()

        return Counted

    return table_class


def _plain(original: Any) -> Any:
    return original


def test_the_committed_tables_are_those_the_installed_bashlex_builds() -> None:
    key, action, goto = _bashlex_fast.build_tables()
    assert key == _bash_tables.KEY, "stale: run `make bash-tables` and commit the file"
    assert action == json.loads(_bash_tables.ACTION)
    assert goto == json.loads(_bash_tables.GOTO)


def test_this_processs_bashlex_was_imported_with_the_tables_read() -> None:
    assert _bashlex_fast.TABLES_READ
    assert sys.modules["bashlex"] is _bashlex_fast.bashlex


def test_bashlex_imported_through_the_tables_builds_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds: list[str] = []
    fresh = _bashlex_fast.import_fresh

    def import_fresh_counted(table_class: _bashlex_fast.TableClass) -> types.ModuleType:
        return fresh(lambda original: table_class(_counting(builds)(original)))

    monkeypatch.setattr(_bashlex_fast, "import_fresh", import_fresh_counted)
    with _room_for_a_fresh_bashlex():
        bashlex = _bashlex_fast.import_bashlex()
        assert sys.modules["bashlex"] is bashlex
        assert _bashlex_fast.TABLES_READ
        assert sys.modules["bashlex.yacc"] is bashlex.yacc
        assert [tree.kind for tree in bashlex.parse("ls | wc; echo $(x)")] == ["list"]
    assert builds == []  # (it counts: see test_another_key_is_built_not_read)


def test_the_parse_trees_are_those_of_bashlexs_own_tables() -> None:
    lines = _corpus()
    assert len(lines) > 500
    builds: list[str] = []
    with _room_for_a_fresh_bashlex():
        read = _parses(_bashlex_fast.import_fresh(_plain), lines)
    with _room_for_a_fresh_bashlex():
        cached = _bashlex_fast.reading(_bash_tables)
        tables_read = _parses(
            _bashlex_fast.import_fresh(lambda o: cached(_counting(builds)(o))), lines
        )
    assert builds == []
    assert tables_read == read
    assert sum(result[0] == "trees" for result in read) > 400  # most of them parse


LINE = 'for f in *.py; do wc -l "$f" > /dev/null; done && echo $(date)'


def test_another_key_is_built_not_read() -> None:
    builds: list[str] = []
    wrong = types.SimpleNamespace(KEY="0" * 64, ACTION=_bash_tables.ACTION, GOTO=_bash_tables.GOTO)
    with _room_for_a_fresh_bashlex():
        read = _bashlex_fast.reading(wrong)
        bashlex = _bashlex_fast.import_fresh(lambda o: read(_counting(builds)(o)))
        parsed = _parses(bashlex, [LINE])
    assert builds == ["built"]
    assert parsed == _parses(_bashlex_fast.bashlex, [LINE])
    assert parsed[0][0] == "trees"


@pytest.mark.parametrize(
    "tables",
    [
        pytest.param({"KEY": "0" * 64}, id="another-key"),
        pytest.param({"ACTION": "[{"}, id="not-json"),
        pytest.param({"GOTO": None}, id="no-goto"),
    ],
)
def test_tables_that_do_not_fit_leave_bashlex_to_build_its_own(tables: dict[str, Any]) -> None:
    fields = {"KEY": _bash_tables.KEY, "ACTION": _bash_tables.ACTION, "GOTO": _bash_tables.GOTO}
    fields.update(tables)
    with _room_for_a_fresh_bashlex():
        bashlex = _bashlex_fast.import_bashlex(types.SimpleNamespace(**fields))
        assert sys.modules["bashlex"] is bashlex
        assert not _bashlex_fast.TABLES_READ
        parsed = _parses(bashlex, [LINE])
    assert parsed == _parses(_bashlex_fast.bashlex, [LINE])
    assert parsed[0][0] == "trees"


def test_an_import_that_fails_leaves_no_half_imported_bashlex() -> None:
    def failing(original: Any) -> Any:
        raise RuntimeError("no tables")

    with _room_for_a_fresh_bashlex():
        with pytest.raises(RuntimeError, match="no tables"):
            _bashlex_fast.import_fresh(failing)
        assert not [n for n in sys.modules if n == "bashlex" or n.startswith("bashlex.")]
        # and the fallback still gets a working bashlex
        bashlex = _bashlex_fast.import_bashlex(types.SimpleNamespace())
        assert bashlex.parse("true")[0].kind == "command"


def test_an_imported_bashlex_is_the_one_given() -> None:
    with _room_for_a_fresh_bashlex():
        sentinel = types.ModuleType("bashlex")
        sys.modules["bashlex"] = sentinel
        assert _bashlex_fast.import_bashlex() is sentinel
