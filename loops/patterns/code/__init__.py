"""The code loop's own room: what `ExecuteValidateController` (and `loops fix`) does around the model,
none of which needs an LM.

- `loops.patterns.code.python`: reading code out of an answer, aliasing a right function under a wrong name,
  the tests' output as a short digest, the interface a workspace's tests expect;
- `loops.patterns.code.requests`: the executor's input (`code_request`) and the next iteration's (`next_request`);
- `loops.patterns.code.draws`: the candidate strategy (`Draw`, `GREEDY_DRAWS`, `draws`) and the worked examples;
- `loops.patterns.code.controller`: attempt scoring and the controller that needs no LLM (`tests_controller`);
- `loops.patterns.code.defaults`: how the loop runs on each kind of model (`code_loop_defaults`).
"""

from loops.patterns.code.controller import attempt_score, code_of, tests_controller
from loops.patterns.code.defaults import (
    EMBEDDED_CODE_LOOP,
    HOSTED_CODE_LOOP,
    POLICIES,
    CodeLoopDefaults,
    Policy,
    code_loop_defaults,
)
from loops.patterns.code.draws import GREEDY_DRAWS, PENALIZED_MAX_TOKENS, WORKED_EXAMPLES, Draw, draws, worked_examples
from loops.patterns.code.python import (
    END_OF_FENCED_CODE,
    Interface,
    align_names,
    defined_functions,
    extract_code,
    failure_digest,
    hardcoded_asserts,
    module_the_tests_import,
    names_the_tests_miss,
    read_interface,
)
from loops.patterns.code.requests import code_request, next_request

__all__ = [
    "END_OF_FENCED_CODE",
    "EMBEDDED_CODE_LOOP",
    "GREEDY_DRAWS",
    "HOSTED_CODE_LOOP",
    "PENALIZED_MAX_TOKENS",
    "POLICIES",
    "WORKED_EXAMPLES",
    "CodeLoopDefaults",
    "Draw",
    "Interface",
    "Policy",
    "align_names",
    "attempt_score",
    "code_loop_defaults",
    "code_of",
    "code_request",
    "defined_functions",
    "draws",
    "extract_code",
    "failure_digest",
    "hardcoded_asserts",
    "names_the_tests_miss",
    "next_request",
    "module_the_tests_import",
    "read_interface",
    "tests_controller",
    "worked_examples",
]
