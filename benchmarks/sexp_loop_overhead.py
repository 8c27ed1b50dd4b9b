"""What the DSL costs around a loop: an `iterative-loop` program against the same
`ExecuteValidateController` written in Python, on a zero-latency scripted LM.

Both run three iterations whose executor calls the same LLM task (a `defatom` in the DSL, the same
signature's predictor as a role call in Python), a validator that fails twice, and a controller that
continues until it passes; so the difference is the DSL's own work: compiling nothing (the program is
compiled once), evaluating the lambdas, the program's run around the loop. Measured in CPU time, the
two interleaved round by round in one process, the median of the per-round ratios reported.

    .venv/bin/python -m benchmarks.sexp_loop_overhead [--rounds 15] [--runs 40]
"""

from __future__ import annotations

import argparse
import os
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


def measure(rounds: int, runs: int) -> float:
    program = compile_program(PROGRAM)
    module = python_loop(program.named_predictors()[0][1].signature)
    assert program(task="t").result == module(initial_input="t", test_command="tests").final == "print('done')"
    return median_ratio(rounds, lambda: cpu_seconds(lambda: [program(task="t") for _ in range(runs)]),
                        lambda: cpu_seconds(lambda: [module(initial_input="t", test_command="tests")
                                                     for _ in range(runs)]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=40, help="runs per batch")
    args = parser.parse_args(argv)
    with dspy.context(lm=scripted_lm(), adapter=dspy.ChatAdapter()):
        ratio = measure(args.rounds, args.runs)
    print(f"iterative-loop program: {ratio:.3f}x the same ExecuteValidateController in Python "
          f"(CPU time, median of {args.rounds} interleaved rounds of {args.runs} runs, 3 iterations and 3 LM "
          "calls a run, zero-latency LM)")


if __name__ == "__main__":
    main()
