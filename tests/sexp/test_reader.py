import math
import traceback

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loops.errors import LoopsError
from loops.sexp import NIL, DslError, DslSyntaxError, IncompleteInput, Keyword, Symbol, read, to_source

Q = Symbol("quote")


def values(text):
    return [node.to_value() for node in read(text)]


def typed(value):
    """A value with the type of every part spelled out, so that `Symbol("a")` differs from `"a"`, 1 from
    True and 1 from 1.0 when compared."""
    if isinstance(value, tuple):
        return ("list", tuple(typed(item) for item in value))
    if isinstance(value, float) and math.isnan(value):
        return (float, "nan")
    return (type(value), value)


@pytest.mark.parametrize(("text", "expected"), [
    ("42 -7 +5 0", [42, -7, 5, 0]),
    ("4.5 -0.25 1e3 2.5E-1 .5 -.5 1.", [4.5, -0.25, 1000.0, 0.25, 0.5, -0.5, 1.0]),
    ("+inf.0 -inf.0", [math.inf, -math.inf]),
    (r'"plain" "a\nb" "tab\there" "q\"q" "back\\slash" "cr\r"', ["plain", "a\nb", "tab\there", 'q"q', "back\\slash",
                                                              "cr\r"]),
    ('"two\nlines"', ["two\nlines"]),
    ('""', [""]),
    ("#t #f true false", [True, False, True, False]),
    ("nil () '()", [NIL, NIL, (Q, NIL)]),
    ("user:analyze-task *loop-config* string=? math:add + - ... a.b <=", [
        Symbol("user:analyze-task"), Symbol("*loop-config*"), Symbol("string=?"), Symbol("math:add"), Symbol("+"),
        Symbol("-"), Symbol("..."), Symbol("a.b"), Symbol("<="),
    ]),
    (":max-iterations :x", [Keyword("max-iterations"), Keyword("x")]),
    ("'x '(1 x) ''y", [(Q, Symbol("x")), (Q, (1, Symbol("x"))), (Q, (Q, Symbol("y")))]),
    ("(a (b \"c\" 1.5) ()) d", [(Symbol("a"), (Symbol("b"), "c", 1.5), NIL), Symbol("d")]),
    ("; a comment\n(a ; another\n b) ; last", [(Symbol("a"), Symbol("b"))]),
    ("(lambda (a . rest) rest)", [(Symbol("lambda"), (Symbol("a"), Symbol("."), Symbol("rest")), Symbol("rest"))]),
    ("", []),
    ("  ; only a comment", []),
])
def test_the_reader_reads_every_kind_of_atom_and_list(text, expected):
    assert [typed(value) for value in values(text)] == [typed(value) for value in expected]


def test_nil_and_the_empty_list_are_one_python_value():
    nil, empty, quoted = values("nil () '()")
    assert nil is empty is quoted[1] is NIL == ()


def test_nodes_know_their_file_line_and_column():
    (define,) = read("(define x\n  (+ y\t1))", "prog.sexp")
    name, plus = define.value[1], define.value[2]
    assert (define.location, name.location, plus.location) == ("prog.sexp:1:1", "prog.sexp:1:9", "prog.sexp:2:3")
    assert [item.location for item in plus.value] == ["prog.sexp:2:4", "prog.sexp:2:6", "prog.sexp:2:8"]
    quoted = read("\n 'x")[0]
    assert quoted.location == "<string>:2:2" and quoted.value[1].location == "<string>:2:3"


@pytest.mark.parametrize(("text", "error", "rendered"), [
    ("(a))", DslSyntaxError,
     "program.sexp:1:4: unexpected ')' with no list open\n    (a))\n       ^"),
    ('(log-message "hi)', IncompleteInput,
     'program.sexp:1:14: unterminated string: the input ends before its closing quote\n'
     '    (log-message "hi)\n                 ^'),
    ("(define (f x)\n  (+ x 1)", IncompleteInput,
     "program.sexp:1:1: unclosed list: the input ends before this '(' is closed\n    (define (f x)\n    ^"),
    ("(a (b c)\n   (d", IncompleteInput,
     "program.sexp:2:4: unclosed list: the input ends before this '(' is closed\n       (d\n       ^"),
    ("(a) '", IncompleteInput, "program.sexp:1:5: nothing follows this quote\n    (a) '\n        ^"),
    ("(a ')", DslSyntaxError, "program.sexp:1:4: nothing to quote before ')'\n    (a ')\n       ^"),
    ("(a `b)", DslSyntaxError,
     "program.sexp:1:4: unexpected character '`'; it is reserved in this language\n    (a `b)\n       ^"),
    ("(x [1])", DslSyntaxError,
     "program.sexp:1:4: unexpected character '['; it is reserved in this language\n    (x [1])\n       ^"),
    ("(+ 1abc 2)", DslSyntaxError, "program.sexp:1:4: malformed number '1abc'\n    (+ 1abc 2)\n       ^"),
    ("(#true)", DslSyntaxError,
     "program.sexp:1:2: unknown syntax '#true'; booleans are #t and #f\n    (#true)\n     ^"),
    ("(f : 1)", DslSyntaxError, "program.sexp:1:4: a keyword needs a name after ':'\n    (f : 1)\n       ^"),
    ('(s "a\\qb")', DslSyntaxError,
     "program.sexp:1:6: unknown escape '\\q' in string; use \\n \\t \\r \\\" or \\\\\n"
     '    (s "a\\qb")\n         ^'),
    ("(a\n\t(b))\n\t )", DslSyntaxError,
     "program.sexp:3:3: unexpected ')' with no list open\n    \t )\n    \t ^"),
])
def test_reader_errors_name_the_position_and_show_the_line_with_a_caret(text, error, rendered):
    with pytest.raises(error) as caught:
        read(text, "program.sexp")
    assert type(caught.value) is error
    assert str(caught.value) == rendered


def test_syntax_errors_are_also_python_syntax_errors_pointing_at_the_place():
    with pytest.raises(DslSyntaxError) as caught:
        read("(a\n b))", "prog.sexp")
    error = caught.value
    assert isinstance(error, SyntaxError) and isinstance(error, LoopsError)
    assert (error.filename, error.lineno, error.offset, error.text) == ("prog.sexp", 2, 4, " b))")
    shown = "".join(traceback.format_exception_only(type(error), error))
    assert 'File "prog.sexp", line 2' in shown and "unexpected ')'" in shown


def test_incomplete_input_is_its_own_kind_of_syntax_error():
    assert issubclass(IncompleteInput, DslSyntaxError)
    with pytest.raises(DslSyntaxError) as caught:
        read("(a))")
    assert not isinstance(caught.value, IncompleteInput)


def test_deep_nesting_is_read_without_python_recursion():
    depth = 50_000
    (node,) = read("(" * depth + ")" * depth)
    for _ in range(depth - 1):
        (node,) = node.value
    assert node.value == ()


def test_node_repr_shows_the_form_and_its_place():
    assert repr(read("(a 'b)", "f.sexp")[0]) == "<Node (a (quote b)) at f.sexp:1:1>"


# -- property-based -------------------------------------------------------------------------------

SYNTAX_HEAVY = st.text(alphabet=st.sampled_from(list("()'\";:#\\.` \n\tabz019+-e\"")), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), SYNTAX_HEAVY))
def test_reading_any_text_gives_nodes_or_a_dsl_syntax_error(text):
    try:
        nodes = read(text)
    except DslError as error:
        assert isinstance(error, DslSyntaxError)
        assert error.node is not None
        str(error)
    else:
        for node in nodes:
            to_source(node.to_value())


symbols = st.from_regex(r"[a-z*!?<>=/][a-z0-9*!?<>=/:.+-]{0,8}", fullmatch=True).filter(
    lambda name: name not in {"true", "false", "nil"}
).map(Symbol)
keywords = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True).map(Keyword)
atoms = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.text(max_size=20), st.booleans(), symbols, keywords, st.just(NIL)
)
data = st.recursive(atoms, lambda children: st.lists(children, max_size=4).map(tuple), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(data)
def test_printing_then_reading_a_value_gives_the_same_value(value):
    (node,) = read(to_source(value))
    assert typed(node.to_value()) == typed(value)


def test_printing_non_finite_floats_reads_back():
    assert to_source((math.inf, -math.inf, math.nan)) == "(+inf.0 -inf.0 +nan.0)"
    assert math.isnan(values("+nan.0")[0])
