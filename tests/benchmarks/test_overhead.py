import re

import dspy

from benchmarks.overhead import MinimalLoop, NoRuntimeLoop, main, openai_lm, openai_server, scripted_lm


def test_the_loop_with_no_runtime_reaches_the_minimal_loops_answer_on_both_engines():
    # The floor lines compare it with the minimal loop: it must run the same role calls to the same draft.
    with dspy.context(lm=scripted_lm(run_aware=False), adapter=dspy.ChatAdapter()):
        assert NoRuntimeLoop()("a slogan") == MinimalLoop()("a slogan") == "revised draft"
    with openai_server() as base_url:
        lm = openai_lm(base_url)
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            assert NoRuntimeLoop()("a slogan") == "revised draft"
        lm.close()


def test_the_floor_lines_print_a_ratio_for_each_engine(capsys):
    main(["--rounds", "1", "--runs", "1", "--lines", "floor"])
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == ["floor", "openai/, floor"]
    assert all(float(re.search(r" (\d+\.\d+)x ", line).group(1)) > 0 for line in printed), printed
