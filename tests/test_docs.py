"""docs/dsl.md covers the whole language, and the examples in its tables give the values they show."""

from __future__ import annotations

import json
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


# --- the docs' example requests are not the embedded creator's worked examples ---------------------------------

ROOT = Path(__file__).resolve().parents[1]
# Words that say what kind of text is asked for, or that join a request's words: not its subject.
_NOT_SUBJECT = frozenset(["a", "an", "the", "for", "about", "of", "to", "and", "in", "on", "with", "one", "line",
                          "short", "two", "three", "four", "five", "slogan", "haiku", "list", "packing", "poem",
                          "limerick", "description", "sentence"])


def _words(text: str) -> set[str]:
    return {word.removesuffix("s") for word in re.findall(r"[a-z]+", text.lower())} - _NOT_SUBJECT


def _quoted_in_examples() -> list[tuple[str, str]]:
    """(where, text) of every quoted string of the README's and docs' code blocks, the notebooks' code cells, the
    example programs and the Makefile: the requests a reader copies."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.DOTALL):
            found += [(page.name, text) for text in re.findall(r'"([^"\n]+)"', block)]
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        source = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
        found += [(notebook.name, text) for text in re.findall(r'"([^"\n]+)"', source)]
    for program in [*sorted((ROOT / "examples").glob("*.sexp")), ROOT / "Makefile"]:
        found += [(program.name, text) for text in re.findall(r'"([^"\n]+)"|\?= (.+)', program.read_text())
                  for text in text if text]
    return found


def test_no_example_request_shares_a_subject_with_a_worked_draft():
    # The embedded creator is shown WORKED_DRAFTS: asked for one of their subjects, it echoes its own example, and
    # a session that follows the docs looks better than the model is.
    from loops.patterns.prose import WORKED_DRAFTS

    examples = _quoted_in_examples()
    assert len(examples) > 100
    subjects = {request.split(".")[0]: _words(request.split(".")[0]) for request, _ in WORKED_DRAFTS}
    overlaps = [(where, text, brief) for where, text in examples for brief, subject in subjects.items()
                if subject & _words(text)]
    assert not overlaps, ("example requests on a worked draft's subject (loops.patterns.prose.WORKED_DRAFTS): "
                          f"{overlaps}")
