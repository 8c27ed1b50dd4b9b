"""Python-specific helpers of the code loop: turning a model's answer into code, a test run into an
instruction, and a workspace's tests into the interface the code must have.

None of this needs an LM: the Execute–Validate–Controller loop uses these helpers around the model
(`extract_code` on every answer, `align_names` on every attempt, `failure_digest` after a failed test
run, `read_interface` before the first attempt).
"""

from __future__ import annotations

import ast
import builtins
import fnmatch
import importlib.util
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from loops.signatures.results import ValidationResult
from loops.tools.validators import PYTEST_FILES as TEST_FILE_PATTERNS
from loops.tools.validators import test_files

__all__ = [
    "END_OF_FENCED_CODE",
    "Interface",
    "align_names",
    "defined_functions",
    "extract_code",
    "failure_digest",
    "hardcoded_asserts",
    "module_the_tests_import",
    "names_the_tests_miss",
    "read_interface",
    "test_command_programs",
]

DIGEST_CHARS = 800
MAX_TEST_FILES = 20
MAX_TEST_FILE_BYTES = 200_000
_BUILTINS = frozenset(dir(builtins))


# --- turning a model's answer into code -------------------------------------------------------------

# Where a plain-text answer's code ends: the close of its first fence, on a line of its own. `extract_code`
# keeps only the first fence, so what a small model writes after it (an explanation, example usage, often
# hundreds of tokens) is generated for nothing; a stop sequence ends the generation there instead. An opening
# fence carries its language ("```python") or starts the answer, so it does not match; a bare one after prose
# would end the answer before its code (SmolLM2-135M on MBPP's validation split: none of 351 answers).
END_OF_FENCED_CODE = ("\n```\n",)


def extract_code(text: str) -> str:
    """The code in an answer: inside the first fence if there is one, without leading prose, cut back
    to the longest prefix that parses (small models trail off mid-repetition), and without the
    example usage that would run on import."""
    fence = re.search(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", text, re.S)
    lines = (fence.group(1) if fence else text).splitlines()
    code_line = re.compile(r"\s*(def |class |import |from |@|async def |[A-Za-z_][\w.]*\s*=)")
    start = next((n for n, line in enumerate(lines) if code_line.match(line)), 0)
    lines = lines[start:]
    if not _parses(lines):
        # Try the prefixes ending before each top-level statement, longest first.
        cuts = [n for n, line in enumerate(lines) if n and line[:1].strip() and not line.startswith(("#", ")"))]
        lines = next((lines[:cut] for cut in reversed(cuts) if _parses(lines[:cut])), lines)
    return _without_examples("\n".join(lines)).strip() + "\n"


def _without_examples(code: str) -> str:
    """Drop top-level calls, asserts and `if __name__ == "__main__":` blocks.

    Small models end a file with `print(f(5))  # Example usage`, which runs when the tests import
    the file and, with a wrong call, hides a right function behind an import-time error.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    dropped: set[int] = set()
    for node in tree.body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        main_guard = isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
        if (isinstance(node, ast.Expr) and not docstring) or isinstance(node, ast.Assert) or main_guard:
            dropped.update(range(node.lineno - 1, node.end_lineno))
    return "\n".join(line for number, line in enumerate(code.splitlines()) if number not in dropped)


def _parses(lines: list[str]) -> bool:
    try:
        ast.parse("\n".join(lines))
    except SyntaxError:
        return False
    return True


def defined_functions(code: str) -> list[str]:
    """The top-level functions a file defines, in order; [] when it does not parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def align_names(code: str, names: list[str] | tuple[str, ...]) -> tuple[str, list[str]]:
    """Alias the file's one function to the names the tests call but the file does not define.

    A small model often writes the right function under its own name (tests call `Split`, it writes
    `odd_list`) and repeats that name however it is told. Returns the code and the aliases added.
    """
    defined = defined_functions(code)
    missing = [name for name in names if name not in defined]
    spare = [function for function in defined if function not in names]
    if not missing or len(spare) != 1:
        return code, []
    aliases = [f"{name} = {spare[0]}" for name in missing]
    return code.rstrip("\n") + "\n\n" + "\n".join(aliases) + "\n", aliases


# --- turning a test run into an instruction ---------------------------------------------------------


def names_the_tests_miss(validation: ValidationResult, code: str) -> list[str]:
    """Names the tests use (a NameError, a failed import) that the code never mentions."""
    output = f"{validation.stdout}\n{validation.stderr}"
    found = re.findall(r"NameError: name '(\w+)' is not defined|cannot import name '(\w+)'", output)
    names = dict.fromkeys(name for pair in found for name in pair if name)
    return [name for name in names if not re.search(rf"\b{re.escape(name)}\b", code)]


def failure_digest(validation: ValidationResult, code: str = "") -> str:
    """A short, actionable account of why the validation failed, for the executor's next attempt."""
    if validation.ok:
        return ""
    output = f"{validation.stdout}\n{validation.stderr}"
    notes: list[str] = []
    if validation.timed_out:
        notes.append(f"The tests timed out ({validation.error}): look for an endless loop or recursion.")
    try:
        ast.parse(code)
    except SyntaxError as error:
        notes.append(f"Your code does not parse: {error.msg} at line {error.lineno}. Output only Python code.")
    defined = defined_functions(code)
    missed = names_the_tests_miss(validation, code)
    for name in missed:
        have = ", ".join(f"`{function}`" for function in defined) or "no function"
        notes.append(f"The tests call `{name}` but your file defines {have}: name the function `{name}`.")
    for name in dict.fromkeys(re.findall(r"NameError: name '(\w+)' is not defined", output)):
        if name not in missed:
            notes.append(f"NameError: your code uses `{name}` without defining or importing it.")
    if "RecursionError" in output:
        notes.append("RecursionError: your function calls itself without end; do not call it recursively.")
    for kind in ("TypeError", "AttributeError", "IndexError", "KeyError", "ValueError", "ModuleNotFoundError"):
        match = re.search(rf"^E?\s*({kind}: .*)$", output, re.M)
        if match:
            notes.append(f"{match.group(1).strip()}.")
    failing = list(dict.fromkeys(re.findall(r"^>\s+(assert .*)$", output, re.M)))[:3]
    notes.extend(f"This test fails: {assertion.strip()}" for assertion in failing)
    if not notes:
        tail = [line for line in output.splitlines() if line.strip()][-5:]
        notes.append(f"The tests failed (exit code {validation.exit_code}):\n" + "\n".join(tail))
    return "\n".join(notes)[:DIGEST_CHARS]


# --- reading the interface the tests expect ---------------------------------------------------------


@dataclass(frozen=True)
class Interface:
    """What the tests need of the target file: the names they import from it or call, each with the
    first call's arguments rendered by kind (`Split(list)`), and the import lines that name it."""

    calls: tuple[tuple[str, str], ...] = ()  # (name, rendered call) in order of first appearance
    imports: tuple[str, ...] = ()
    test_files: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.calls)

    def __bool__(self) -> bool:
        return bool(self.calls)

    def describe(self, target_file: str) -> str:
        """The instruction for the executor: which names, called how, the file must define."""
        if not self.calls:
            return ""
        shown = ", ".join(f"`{rendered}`" for _, rendered in self.calls)
        return f"The tests call {shown}: define exactly these names in {target_file}, with these arguments."


def read_interface(workspace: str | Path, test_command: str = "", target_file: str = "solution.py") -> Interface:
    """The interface the tests expect of `target_file`, read from the workspace's test files
    (`test_*.py`, `*_test.py`, and the `.py` files the test command names) and from a `python -c`
    program in the test command. Never raises: unreadable or unparseable sources are skipped."""
    module = PurePosixPath(target_file).with_suffix("").as_posix().replace("/", ".")
    found = _test_sources(Path(workspace), test_command, target_file)
    sources, files = [source for _, source in found], tuple(name for name, _ in found)
    calls: dict[str, str] = {}
    imports: list[str] = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        found_calls, found_imports = _interface_of(tree, module)
        for name, rendered in found_calls:
            calls.setdefault(name, rendered)
        imports.extend(line for line in found_imports if line not in imports)
    return Interface(calls=tuple(calls.items()), imports=tuple(imports), test_files=files)


def module_the_tests_import(workspace: str | Path | None, test_command: str = "") -> str | None:
    """The file the tests expect the code in, from what they import (`from mul import mul` -> `mul.py`): the one
    module they import that is neither the standard library's nor installed nor a test file; among several,
    the one the workspace lacks. None when there is none, or no one such module. With no workspace (yet),
    the test command's own `python -c` program alone is read."""
    workspace = Path(workspace) if workspace is not None else None
    candidates: dict[str, None] = {}
    for _, source in _test_sources(workspace, test_command, ""):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            candidates.update(dict.fromkeys(name for name in names if _could_be_the_target(name)))
    if len(candidates) > 1 and workspace is not None:
        candidates = {name: None for name in candidates if not _module_file(workspace, name).exists()}
    return _module_file(Path(), next(iter(candidates))).as_posix() if len(candidates) == 1 else None


def _could_be_the_target(module: str) -> bool:
    top = module.partition(".")[0]
    if top in sys.stdlib_module_names or any(fnmatch.fnmatch(f"{top}.py", pattern) for pattern in TEST_FILE_PATTERNS):
        return False
    try:
        return importlib.util.find_spec(top) is None
    except (ImportError, ValueError):
        return False


def _module_file(workspace: Path, module: str) -> Path:
    return workspace.joinpath(*module.split(".")).with_suffix(".py")


def test_command_programs(test_command: str | None) -> list[str]:
    """The programs a test command runs inline (`python -c '...'`), in order; none when it does not parse."""
    return _programs_in(_command_words(test_command))


def _command_words(test_command: str | None) -> list[str]:
    try:
        return shlex.split(test_command or "")
    except ValueError:  # an unbalanced quote: nothing can be read from it
        return []


def _programs_in(words: list[str]) -> list[str]:
    return [program for flag, program in zip(words, words[1:], strict=False) if flag == "-c"]


def _test_sources(workspace: Path | None, test_command: str, target_file: str) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    words = _command_words(test_command)
    programs = _programs_in(words)
    if programs:
        found["<test command>"] = programs[0]
    candidates: list[Path] = []
    if workspace is not None and workspace.is_dir():
        for word in words:
            path = workspace / word.split("::")[0]
            if word.endswith(".py") or "::" in word:
                candidates.append(path)
        candidates.extend(test_files(workspace))
    for path in candidates:
        if len(found) >= MAX_TEST_FILES:
            break
        try:
            name = path.relative_to(workspace).as_posix()
            if name == target_file or name in found or not path.is_file():
                continue
            if path.stat().st_size > MAX_TEST_FILE_BYTES:
                continue
            found[name] = path.read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError):
            continue
    return list(found.items())


def _interface_of(tree: ast.Module, module: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The target's names a test source uses: imported by name, called after `from module import *`,
    or called as `module.name(...)`."""
    imported: list[str] = []  # names imported from the target, in order
    star = False
    module_aliases: set[str] = set()
    other: set[str] = set()  # names bound from elsewhere: other imports, the file's own definitions
    lines: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module and not node.level:
            if all(alias.name != "*" for alias in node.names):
                lines.append(ast.unparse(node))
            for alias in node.names:
                if alias.name == "*":
                    star = True
                else:
                    imported.append(alias.name)
                    if alias.asname:
                        other.add(alias.asname)  # called under another name: the definition is alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == module:
                    module_aliases.add(alias.asname or alias.name)
                    lines.append(ast.unparse(node))
                else:
                    other.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            other.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            other.add(node.name)
            if not isinstance(node, ast.ClassDef):  # parameters, e.g. pytest fixtures, are not the target's
                other.update(arg.arg for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            other.add(node.id)
        elif isinstance(node, ast.Lambda):
            other.update(arg.arg for arg in node.args.args)
    calls: dict[str, str] = {}
    for node in _in_order(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = None
        if isinstance(function, ast.Name):
            if function.id in imported or (star and function.id not in other and function.id not in _BUILTINS):
                name = function.id
        elif (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
              and function.value.id in module_aliases):
            name = function.attr
        if name is not None and name not in calls:
            calls[name] = f"{name}({', '.join(_argument_kinds(node))})"
    ordered = [(name, calls[name]) for name in imported if name in calls]
    ordered += [(name, name) for name in imported if name not in calls]
    ordered += [(name, rendered) for name, rendered in calls.items() if name not in imported]
    return list(dict(ordered).items()), lines


def _in_order(tree: ast.AST) -> list[ast.AST]:
    """The nodes of a tree in source order (ast.walk is breadth first)."""
    nodes = [node for node in ast.walk(tree) if hasattr(node, "lineno")]
    return sorted(nodes, key=lambda node: (node.lineno, node.col_offset))


def _argument_kinds(call: ast.Call) -> list[str]:
    kinds = [_kind(argument) for argument in call.args]
    kinds += [f"{keyword.arg}={_kind(keyword.value)}" if keyword.arg else "**kwargs" for keyword in call.keywords]
    return kinds


def _kind(node: ast.expr) -> str:
    if isinstance(node, ast.Starred):
        return "*args"
    try:
        value: Any = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _DISPLAYS.get(type(node), "value")
    return type(value).__name__


_DISPLAYS = {ast.List: "list", ast.ListComp: "list", ast.Tuple: "tuple", ast.Dict: "dict", ast.DictComp: "dict",
             ast.Set: "set", ast.SetComp: "set", ast.JoinedStr: "str"}


# --- code that answers the tests rather than the task ----------------------------------------------

# Values an honest function returns for its base cases (`if n == 0: return 1`): never taken as hard-coded.
_TRIVIAL = (None, True, False, 0, 1, -1, "", (), [], {})
_NO_VALUE = object()


def hardcoded_asserts(code: str, tests: str) -> list[str]:
    """The asserts of `tests` (`assert f(args) == expected`) that `code` answers with the expected value
    itself, returned from a branch on those arguments (`if n == 10: return 16796`, a conditional
    expression) or looked up in a literal dict keyed by them (`{10: 16796}[n]`): code that passes such a
    test without computing its answer. Base-case values (None, booleans, 0, 1, -1, empty) are not counted,
    so `if n == 0: return 1` is honest. Code or tests that do not parse give []."""
    try:
        code_tree, test_tree = ast.parse(code), ast.parse(tests)
    except SyntaxError:
        return []
    answers = _literal_answers(code_tree)
    found = []
    for node in ast.walk(test_tree):
        tested = _tested_call(node) if isinstance(node, ast.Assert) else None
        if tested is None:
            continue
        arguments, expected = tested
        if _is_trivial(expected):
            continue
        if any(_same(value, expected) and conditions and all(any(_same(condition, argument) for argument in arguments)
                                                            for condition in conditions)
               for conditions, value in answers):
            found.append(ast.unparse(node))
    return found


def _tested_call(node: ast.Assert) -> tuple[list[Any], Any] | None:
    """The literal arguments and expected value of `assert f(args) == expected` (either way round)."""
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    for call, other in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            arguments = [_literal(argument) for argument in [*call.args, *(keyword.value for keyword in call.keywords)]]
            expected = _literal(other)
            if expected is not _NO_VALUE and arguments and _NO_VALUE not in arguments:
                return arguments, expected
    return None


def _literal_answers(tree: ast.Module) -> list[tuple[list[Any], Any]]:
    """Each literal the code answers with, and the literals the branch leading to it compares a name with."""
    answers = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            conditions = _compared_literals(node.test)
            answers += [(conditions, value) for value in _returned_literals(node.body)]
        elif isinstance(node, ast.IfExp):
            answers.append((_compared_literals(node.test), _literal(node.body)))
        elif isinstance(node, ast.Dict):
            answers += [([_literal(key)], _literal(value)) for key, value in zip(node.keys, node.values, strict=True)
                        if key is not None]
    return [(conditions, value) for conditions, value in answers
            if value is not _NO_VALUE and _NO_VALUE not in conditions]


def _compared_literals(test: ast.expr) -> list[Any]:
    """The literals a condition compares names with: `n == 10`, `(a, b) == (1, 2)`, `x == 1 and y == 2`."""
    found = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq | ast.Is):
            left, right = node.left, node.comparators[0]
            for name, literal in ((left, right), (right, left)):
                if isinstance(name, ast.Name | ast.Tuple | ast.List) and _literal(literal) is not _NO_VALUE \
                        and _literal(name) is _NO_VALUE:
                    value = _literal(literal)
                    found += list(value) if isinstance(name, ast.Tuple | ast.List) and isinstance(value, tuple | list) \
                        else [value]
    return found


def _returned_literals(body: list[ast.stmt]) -> list[Any]:
    """The literals a branch returns directly (not those of nested functions or branches)."""
    return [_literal(statement.value) for statement in body
            if isinstance(statement, ast.Return) and statement.value is not None]


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO_VALUE


def _same(one: Any, other: Any) -> bool:
    """Equal as the tests compare them, and of one kind (True is not 1)."""
    try:
        return type(one) is type(other) and bool(one == other)
    except Exception:  # an odd literal's __eq__: not the same
        return False


def _is_trivial(value: Any) -> bool:
    return any(_same(value, trivial) for trivial in _TRIVIAL)
