"""docs/dsl.md covers the whole language, and the examples in its tables give the values they show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loops.sexp import Interpreter, evaluate, to_source
from loops.sexp.evaluator import SPECIAL_FORMS
from loops.sexp.primitives import PRIMITIVES

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "dsl.md").read_text()


def test_every_special_form_primitive_and_built_in_tool_is_documented():
    documented = set(re.findall(r"`([^`\s]+)`", PAGE))
    built_in_tools = [name for name in Interpreter().globals.vars if name not in PRIMITIVES]
    assert "system:write_file" in built_in_tools
    missing = sorted(name for name in [*SPECIAL_FORMS, *PRIMITIVES, *built_in_tools] if name not in documented)
    assert not missing, f"docs/dsl.md does not mention {missing}"


# Rows that need a workspace or an elided body are covered elsewhere (tests/sexp/test_host.py, test_compile.py).
ROWS = [(source, shown) for source, shown in re.findall(r"\| `(\([^`]*\))` → `([^`]*)` \|", PAGE)
        if not source.startswith(("(get_context", "(defatom"))]


def test_the_tables_examples_are_checked():
    assert len(ROWS) >= 15


@pytest.mark.parametrize("source, shown", ROWS)
def test_a_documented_example_gives_the_value_shown(source, shown):
    setup = "(define x 1) (define total 10) (define n 0) (define s 0) (define (f x y) (+ x y))"
    value = evaluate(f"{setup} {source}")
    assert to_source(value) == shown


RELIABILITY = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()


def test_every_test_docs_reliability_names_exists():
    root = Path(__file__).resolve().parents[1]
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", RELIABILITY)
    assert len(named) >= 25
    missing = [(path, name) for path, name in named
               if not (root / path).is_file() or (name and f"def {name}(" not in (root / path).read_text())]
    assert not missing, f"docs/reliability.md names tests that do not exist: {missing}"
