"""What the DSL costs around a loop: an `iterative-loop` program against the same
`ExecuteValidateController` written in Python, on a zero-latency scripted LM.

Both run three iterations whose executor calls the same LLM task (a `defatom` in the DSL, the same
signature's predictor as a role call in Python), a validator that fails twice, and a controller that
continues until it passes; so the difference is the DSL's own work: compiling nothing (the program is
compiled once), evaluating the lambdas, the program's run around the loop. Measured in CPU time, the
two interleaved round by round in one process (which goes first alternates), the median of the per-round
ratios reported with their quartiles (on a loaded machine they scatter; more rounds narrow the median).
Beside it, the CPU time of an empty program's run (`task`: its `Run`, its phase and its result, no loop),
the floor of what any program adds around its loops, as a share of the Python loop's.

    .venv/bin/python -m benchmarks.sexp_loop_overhead [--rounds 31] [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Message, Response, TextPart, Usage  # noqa: E402

from benchmarks.overhead import cpu_seconds, median_ratio  # noqa: E402
from loops import ExecuteValidateController, current_run  # noqa: E402
from loops.sexp import compile as compile_program  # noqa: E402

PROGRAM = """
(defatom user:write (params (task string) (iteration int)) (instructions "Do {{task}}.") (returns (code string)))
(iterative-loop
  (max-iterations 3)
  (initial-input task)
  (test-command "tests")
  (executor (lambda (input iteration) (user:write (task input) (iteration iteration))))
  (validator (lambda (command iteration) (if (< iteration 3) 1 0)))
  (controller (lambda (attempt validation input iteration)
                (if (= validation 0) (list 'stop (get-field attempt "code")) (list 'continue input)))))
"""


class _Engine:
    def complete(self, request: Any) -> Response:
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(
            "[[ ## code ## ]]\nprint('done')\n\n[[ ## completed ## ]]")]), finish_reason="stop",
            usage=Usage(input_tokens=10, output_tokens=5))

    def __deepcopy__(self, memo: dict) -> _Engine:
        return self


def scripted_lm() -> dspy.LM:
    return dspy.LM("scripted/bench", engine=_Engine(), cache=False, num_retries=0)


def python_loop(signature: type[dspy.Signature]) -> ExecuteValidateController:
    """The same loop in Python: the executor makes the same role call of the running loop."""
    predictor = dspy.Predict(signature)

    def executor(current: Any, iteration: int) -> Any:
        prediction = current_run().call_now("user:write", predictor, task=current, iteration=iteration)
        return ("COMPLETE", prediction.code)  # a dict of strings would be taken for files to write

    def validator(command: str, iteration: int) -> int:
        return 1 if iteration < 3 else 0

    def controller(attempt: Any, validation: int, current: Any, iteration: int) -> tuple[str, Any]:
        return ("stop", attempt[1]) if validation == 0 else ("continue", current)

    return ExecuteValidateController(executor=executor, validator=validator, controller=controller,
                                     max_iterations=3, workspace=os.getcwd())


def measure(rounds: int, runs: int) -> tuple[float, tuple[float, float], float]:
    """The median ratio of the program's CPU time to the Python loop's, the quartiles of the per-round ratios, and
    an empty program's run as a share of the Python loop's (the median of its per-round shares)."""
    program, empty = compile_program(PROGRAM), compile_program("task")
    module = python_loop(program.named_predictors()[0][1].signature)
    assert program(task="t").result == module(initial_input="t", test_command="tests").final == "print('done')"
    program_s: list[float] = []
    python_s: list[float] = []
    shares: list[float] = []

    def program_batch() -> float:
        program_s.append(cpu_seconds(lambda: [program(task="t") for _ in range(runs)]))
        return program_s[-1]

    def python_batch() -> float:
        python_s.append(cpu_seconds(lambda: [module(initial_input="t", test_command="tests") for _ in range(runs)]))
        shares.append(cpu_seconds(lambda: [empty(task="t") for _ in range(runs)]) / python_s[-1])
        return python_s[-1]

    median = median_ratio(rounds, program_batch, python_batch)
    ratios = [program / python for program, python in zip(program_s, python_s, strict=True)]
    low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (median, median, median)
    return median, (low, high), statistics.median(shares)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--runs", type=int, default=20, help="runs per batch")
    args = parser.parse_args(argv)
    with dspy.context(lm=scripted_lm(), adapter=dspy.ChatAdapter()):
        ratio, (low, high), empty = measure(args.rounds, args.runs)
    print(f"iterative-loop program: {ratio:.3f}x the same ExecuteValidateController in Python "
          f"(CPU time, median of {args.rounds} interleaved rounds of {args.runs} runs, quartiles {low:.3f}-{high:.3f}; "
          "3 iterations and 3 LM calls a run, zero-latency LM)")
    print(f"an empty program's run (its Run, phase and result): {empty:.3f}x the Python loop's CPU time")


if __name__ == "__main__":
    main()
