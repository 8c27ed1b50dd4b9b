"""A 100,000-iteration tail-recursive countdown: `loops.sexp` against a minimal tail-calling Lisp.

    .venv/bin/python -m benchmarks.sexp_tail_calls [--iterations 100000] [--rounds 7]

The reference is the smallest interpreter that runs this program with proper tail calls, in the style
of Norvig's lispy: `evaluate` walks the nested lists on every call and loops (`while True`) instead of
recursing for the forms in tail position. `loops.sexp` reads the same text with positions, checks and
analyses each form once into closures, and runs them with a trampoline, a step budget and a deadline.

Both run the whole pipeline (read, and for ours analyse, then run) in every round. Rounds alternate
between the two so that machine load affects both alike; the figure is the median of the rounds' CPU
time (`time.process_time`).
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
from collections.abc import Callable
from typing import Any

from loops.sexp import Interpreter

PROGRAM = """
(define countdown (lambda (n) (if (= n 0) 0 (countdown (- n 1)))))
(countdown {iterations})
"""


# -- the reference: a minimal tail-calling interpreter over nested Python lists ---------------------


def parse_all(text: str) -> list[Any]:
    tokens = text.replace("(", " ( ").replace(")", " ) ").split()
    forms = []
    while tokens:
        forms.append(_parse(tokens))
    return forms


def _parse(tokens: list[str]) -> Any:
    token = tokens.pop(0)
    if token == "(":
        items = []
        while tokens[0] != ")":
            items.append(_parse(tokens))
        tokens.pop(0)
        return items
    for number in (int, float):
        try:
            return number(token)
        except ValueError:
            pass
    return token


class Scope(dict):
    def __init__(self, names: list[str] = (), values: list[Any] = (), outer: Scope | None = None):
        super().__init__(zip(names, values, strict=True))
        self.outer = outer

    def find(self, name: str) -> Scope:
        scope = self
        while name not in scope:
            scope = scope.outer
        return scope


class Procedure:
    def __init__(self, params: list[str], body: Any, scope: Scope):
        self.params, self.body, self.scope = params, body, scope


GLOBAL_NAMES = {"+": operator.add, "-": operator.sub, "*": operator.mul, "=": operator.eq, "<": operator.lt}


def evaluate(x: Any, scope: Scope) -> Any:
    while True:
        if isinstance(x, str):
            return scope.find(x)[x]
        if not isinstance(x, list):
            return x
        head, *args = x
        if head == "quote":
            return args[0]
        if head == "if":
            test, then, otherwise = args
            x = then if evaluate(test, scope) else otherwise
        elif head == "define":
            name, expr = args
            scope[name] = evaluate(expr, scope)
            return None
        elif head == "lambda":
            params, body = args
            return Procedure(params, body, scope)
        elif head == "begin":
            for expr in args[:-1]:
                evaluate(expr, scope)
            x = args[-1]
        else:
            procedure = evaluate(head, scope)
            values = [evaluate(arg, scope) for arg in args]
            if not isinstance(procedure, Procedure):
                return procedure(*values)
            x, scope = procedure.body, Scope(procedure.params, values, procedure.scope)


def run_reference(source: str) -> Any:
    scope = Scope(outer=None)
    scope.update(GLOBAL_NAMES)
    value = None
    for form in parse_all(source):
        value = evaluate(form, scope)
    return value


# -- measurement ------------------------------------------------------------------------------------


def run_ours(source: str) -> Any:
    return Interpreter().eval_source(source)


def cpu_seconds(run: Callable[[str], Any], source: str) -> float:
    started = time.process_time()
    result = run(source)
    elapsed = time.process_time() - started
    if result != 0:
        raise AssertionError(f"{run.__name__} returned {result!r}, expected 0")
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args(argv)
    source = PROGRAM.format(iterations=options.iterations)
    ours: list[float] = []
    reference: list[float] = []
    for _ in range(options.rounds):
        ours.append(cpu_seconds(run_ours, source))
        reference.append(cpu_seconds(run_reference, source))
    ours_median, reference_median = statistics.median(ours), statistics.median(reference)
    print(f"tail-recursive countdown of {options.iterations:,} iterations, "
          f"median CPU seconds of {options.rounds} rounds")
    print(f"  loops.sexp (read, analyse once, run):  {ours_median:.3f} s")
    print(f"  minimal tail-calling Lisp:             {reference_median:.3f} s")
    print(f"  ratio loops.sexp / minimal:            {ours_median / reference_median:.2f}")


if __name__ == "__main__":
    main()
