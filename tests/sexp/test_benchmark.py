from benchmarks import sexp_tail_calls


def test_the_reference_interpreter_runs_the_benchmark_program_with_tail_calls():
    assert sexp_tail_calls.run_reference(sexp_tail_calls.PROGRAM.format(iterations=20_000)) == 0
    assert sexp_tail_calls.run_reference("(begin (define sq (lambda (x) (* x x))) (sq 7))") == 49
    assert sexp_tail_calls.run_reference("(if (< 1 2) (quote yes) 0)") == "yes"


def test_the_benchmark_prints_both_timings_and_their_ratio(capsys):
    sexp_tail_calls.main(["--iterations", "2000", "--rounds", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "tail-recursive countdown of 2,000 iterations, median CPU seconds of 1 rounds"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "loops.sexp (read, analyse once, run)", "minimal tail-calling Lisp", "ratio loops.sexp / minimal",
    ]


def test_the_loop_overhead_benchmark_runs_both_loops_to_the_same_result_and_prints_the_ratio(capsys):
    from benchmarks import sexp_loop_overhead

    sexp_loop_overhead.main(["--rounds", "1", "--runs", "2"])
    line = capsys.readouterr().out.strip()
    assert line.startswith("iterative-loop program: ") and "x the same ExecuteValidateController in Python" in line
    assert float(line.split(": ")[1].split("x")[0]) > 0
