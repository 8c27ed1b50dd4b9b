"""The house as data, checked: the layering drawn in docs/architecture.md holds for every import of every
module (imports inside functions included), there is no import cycle, every public module says what it
exports, and the size goals hold: no module over 600 lines but those docs/architecture.md allows and says why,
a `Run` of at most 300 lines, and no function over 60 lines in the runtime, the patterns or the CLI; and no step
of a pattern asks whether a phase is the built-in one (it calls the phase, `loops.running.module.Phase`)."""

from __future__ import annotations

import ast
import fnmatch
import importlib
import re
from pathlib import Path

import pytest

import loops
import loops.errors as errors
from loops.running.runtime import LIMIT_REASONS
from loops.sexp.errors import DslError

ROOT = Path(__file__).resolve().parents[1]
# Each top-level folder installs under the one `loops` namespace (pyproject.toml's package-dir).
FOLDERS = {"loops": "loops", "signatures": "loops.signatures", "sexp": "loops.sexp", "optimize": "loops.optimize"}


def modules() -> dict[str, Path]:
    """Every module of the library, by its import name."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [part for part in path.relative_to(ROOT / folder).with_suffix("").parts if part != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The nodes under `if TYPE_CHECKING:`: annotations for a type checker, never run."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for child in node.body for inner in ast.walk(child))
    return skipped


def imports_of(name: str, source: str, known: set[str]) -> set[str]:
    """The library's modules that the module `name` imports anywhere in `source`, by their import names."""
    tree = ast.parse(source)
    skipped = _type_checking_only(tree)
    is_package = name in known and MODULES.get(name, Path()).name == "__init__.py"
    targets = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
    found = set()
    for target in targets:
        while target and target not in known:  # `from loops.x import y` where y is a name in loops.x
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    known = set(sources)
    return {name: imports_of(name, source, known) for name, source in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: its strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def declared_layers() -> list[list[str]]:
    """The layers of docs/architecture.md's `layers` block, bottom first: each a list of module patterns."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"```layers\n(.*?)```", page, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    return [line.split() for line in reversed(block.group(1).strip().splitlines())]


def layer_of(module: str, layers: list[list[str]]) -> int:
    matches = [number for number, patterns in enumerate(layers)
               if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns)]
    assert len(matches) == 1, f"{module} is placed in {len(matches)} layers of docs/architecture.md, not one"
    return matches[0]


def layering_violations(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    return [f"{module} (layer {layer_of(module, layers)}) imports {imported} (layer {layer_of(imported, layers)})"
            for module, imported_modules in sorted(graph.items()) for imported in sorted(imported_modules)
            if layer_of(imported, layers) > layer_of(module, layers)]


SOURCES = {name: path.read_text(encoding="utf-8") for name, path in MODULES.items()}
GRAPH = import_graph(SOURCES)


def test_the_import_graph_has_no_cycle():
    assert cycles(GRAPH) == []


def test_every_import_points_down_the_declared_layers():
    assert layering_violations(GRAPH, declared_layers()) == []


def test_every_module_has_a_place_in_the_layers():
    layers = declared_layers()
    for module in MODULES:
        layer_of(module, layers)


@pytest.mark.parametrize(("module", "source"), [
    # Today's layout with each of the cycles the house removed put back, one at a time.
    ("loops.vocabulary.context", "from loops.running.runtime import Run\n"),
    ("loops.lm.embedded", "def f():\n    from loops.running.runtime import current_run\n"),
    ("loops.running.runtime", "def f():\n    from loops.notebook import step_html\n"),
    ("loops.signatures.results", "def f():\n    from loops.errors import DecisionError\n"),
    ("loops.cli.options", "from loops.cli import app\n"),
])
def test_the_checks_fail_when_a_removed_import_is_put_back(module, source):
    sources = {**SOURCES, module: SOURCES[module] + "\n" + source}
    graph = import_graph(sources)
    assert cycles(graph) or layering_violations(graph, declared_layers())


def test_a_cycle_through_a_function_level_import_is_found():
    graph = import_graph({"a": "import b\n", "b": "def f():\n    import a\n",
                          "c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"})
    assert cycles(graph) == [["a", "b"]]
    assert graph["c"] == set()  # annotations only: never imported at run time


# --- the rooms: each module of loops/ in a package that says what it holds, or at the top on purpose -----------

# The rooms of loops/, each a package (`lm` and `cli` were packages before the others).
ROOMS = {"vocabulary", "running", "recording", "observers", "patterns", "tools", "lm", "cli"}
# What stays at the top of loops/, and why (docs/architecture.md, "The rooms as packages"): the package and its
# `__main__`, what every room or no room needs (`errors`, `choices`, `identity`), the uses of loops above them all.
TOP_LEVEL = {"loops", "loops.__main__", "loops.errors", "loops.choices", "loops.identity", "loops.batch",
             "loops.batch_records", "loops.notebook"}
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def homeless(modules: list[str]) -> list[str]:
    """The modules of `modules` (of loops/) in no room and not on the short list of those at the top."""
    return [name for name in modules if name not in TOP_LEVEL and name.split(".")[1] not in ROOMS]


def test_every_module_of_loops_is_in_a_room_or_on_the_short_list_at_the_top():
    library = [name for name, path in MODULES.items() if path.is_relative_to(ROOT / "loops")]
    assert homeless(library) == []
    assert {path.parent.name for path in (ROOT / "loops").glob("*/__init__.py")} == ROOMS
    assert homeless(["loops.checks", "loops.vocabulary.checks"]) == ["loops.checks"]  # a module put back flat


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_is_a_package_that_says_what_it_holds_and_the_page_names_it(room):
    docstring = ast.get_docstring(ast.parse(SOURCES[f"loops.{room}"]))
    assert docstring and len(docstring.split()) >= 12, f"loops/{room}/__init__.py says too little of what it holds"
    assert f"`loops.{room}`" in PAGE or f"| `{room}` |" in PAGE, f"docs/architecture.md does not name {room}"


def test_each_old_path_names_a_module_of_its_room():
    """`loops._MOVED` (the paths of before the rooms, still importable: tests/loops/test_old_paths.py) holds each
    moved module where it now is, and nothing is left at its old path."""
    for old, room in loops._MOVED.items():
        assert f"loops.{room}.{old}" in MODULES and room in ROOMS, old
        assert f"loops.{old}" not in MODULES, f"loops/{old} is back at its old path"


# --- what each module exports --------------------------------------------------------------------------


PUBLIC = sorted(name for name in MODULES if not any(part.startswith("_") for part in name.split(".")))


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_module_says_what_it_exports(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names {missing}, which it does not define"


def readme_imports() -> list[tuple[str, str]]:
    """(module, name) of every `from loops... import name` and `loops.module.name` in the README, the docs and
    the benchmarks' README, code and prose alike."""
    found = []
    for page in [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in [page.read_text(encoding="utf-8")]:
            for module, names in re.findall(r"from (loops(?:\.\w+)*) import ([\w, ]+)", block):
                found += [(module, name.strip()) for name in names.split(",") if name.strip()]
            for dotted in re.findall(r"(?<![\w.])loops(?:\.\w+)+", block):
                if _span_attribute(dotted):
                    continue
                dotted = loops._room_path(dotted) or dotted  # a path of before the rooms (`loops.checks`)
                parts = dotted.split(".")
                module = max((".".join(parts[:end]) for end in range(1, len(parts))
                              if ".".join(parts[:end]) in MODULES), key=len)
                rest = parts[len(module.split(".")):]
                if rest and f"{module}.{rest[0]}" not in MODULES:
                    found.append((module, rest[0]))
    return sorted(set(found))


def _span_attribute(dotted: str) -> bool:
    """Whether `dotted` is one of the names `loops.observers.tracing` gives its spans and their attributes
    (`loops.batch.example`, `loops.stop_reason`, `loops.budget.*`): a name in a trace, not in a module."""
    from loops.observers.tracing import ATTRIBUTES, SPANS

    names = [*(name for name, _, _ in ATTRIBUTES), *(name for name, _, _ in SPANS.values())]
    return any(dotted == name or (name.endswith(".*") and dotted.startswith(name[:-2])) for name in names)


def test_the_readme_and_the_docs_use_only_what_the_modules_export():
    names = readme_imports()
    assert ("loops", "CreatorCriticIterator") in names and ("loops.lm", "local_lm") in names
    unexported = [(module, name) for module, name in names if name not in importlib.import_module(module).__all__]
    assert not unexported, f"the README or docs use names their modules do not export: {unexported}"


# --- the error tree ---------------------------------------------------------------------------------------


def test_every_error_the_library_raises_is_drawn_in_the_tree():
    drawn = set(re.findall(r"^\s*(?:[│ ]*[├└]── )?(\w+(?:Error|Reached|Passed|Divergence|Failed|Input))\b",
                           errors.__doc__, re.M))
    defined = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)}
    assert defined | {"DslError"} == drawn
    assert issubclass(errors.DeadlinePassed, errors.LimitReached) and issubclass(errors.DeadlinePassed, TimeoutError)
    assert issubclass(errors.ReplayDivergence, errors.ConfigurationError)
    assert issubclass(DslError, errors.LoopsError) and "DslError" in drawn
    raised = set()
    for source in SOURCES.values():
        raised.update(re.findall(r"raise (\w+(?:Error|Reached|Passed|Divergence|Failed|Exceeded|Input|Name))\(",
                                 source))
    library = {name for name in raised if hasattr(loops.errors, name) or hasattr(loops.sexp, name)}
    assert library <= drawn | set(loops.sexp.__all__)


# --- the size goals: short modules, a short run, short functions where the loop's logic lives ------------------

MAX_MODULE_LINES = 600
MAX_RUN_LINES = 300
LONG_FUNCTION_LINES = 60
# The runtime: `loops.running.runtime` and the rooms it is built from.
RUNTIME = {"loops.running.runtime", "loops.running.module", "loops.running.calls", "loops.running.replay",
           "loops.running.drivers", "loops.running.failures", "loops.running.steps", "loops.running.histories",
           "loops.running.roles", "loops.vocabulary.usage", "loops.vocabulary.deadline", "loops.vocabulary.budget",
           "loops.vocabulary.context"}
PATTERNS = {"loops.patterns.creator_critic", "loops.patterns.director", "loops.patterns.execute_validate",
            "loops.patterns.refine", "loops.patterns.prose"}
CLI = {name for name in MODULES if name == "loops.cli" or name.startswith("loops.cli.")}


def allowed_long_modules() -> dict[str, str]:
    """The modules docs/architecture.md allows over `MAX_MODULE_LINES`, each with why (its ```long-modules block:
    `module: why`)."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"```long-modules\n(.*?)```", page, re.S)
    assert block, "docs/architecture.md has no ```long-modules block"
    allowed = dict(line.split(":", 1) for line in block.group(1).strip().splitlines())
    return {name.strip(): why.strip() for name, why in allowed.items()}


def test_every_module_allowed_to_be_long_is_a_module_and_says_why():
    allowed = allowed_long_modules()
    assert set(allowed) <= set(MODULES)
    assert all(len(why.split()) >= 8 for why in allowed.values()), allowed


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_long_unless_the_architecture_allows_it(name):
    lines = len(SOURCES[name].splitlines())
    if name in allowed_long_modules():
        return
    assert lines <= MAX_MODULE_LINES, (f"{name} is {lines} lines, over {MAX_MODULE_LINES}: split it along a seam, "
                                       "or say in docs/architecture.md's long-modules block why it is one concern")


def test_the_run_is_short():
    runs = [(name, node) for name in sorted(RUNTIME) for node in ast.walk(ast.parse(SOURCES[name]))
            if isinstance(node, ast.ClassDef) and node.name == "Run"]
    assert len(runs) == 1, f"one class Run in the runtime's modules, found {[name for name, _ in runs]}"
    name, run = runs[0]
    lines = run.end_lineno - run.lineno + 1
    assert lines <= MAX_RUN_LINES, f"{name}.Run is {lines} lines, over {MAX_RUN_LINES}"


def long_functions(source: str) -> list[tuple[str, int]]:
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > LONG_FUNCTION_LINES]


@pytest.mark.parametrize("name", sorted(RUNTIME | PATTERNS | CLI))
def test_no_function_of_the_runtime_a_pattern_or_the_cli_is_long(name):
    assert not long_functions(SOURCES[name]), f"{name}: {long_functions(SOURCES[name])}"


def test_the_function_check_catches_a_long_function_and_knows_its_modules():
    body = "".join(f"    x{number} = {number}\n" for number in range(LONG_FUNCTION_LINES))
    assert long_functions(f"def f():\n{body}") == [("f", LONG_FUNCTION_LINES + 1)]
    assert long_functions(f"def f():\n{body[:-len(body.splitlines(True)[-1])]}") == []
    assert CLI and {"loops.cli", "loops.cli.options"} <= CLI
    assert all(name in MODULES for name in RUNTIME | PATTERNS)


# --- every limit checked in one place -------------------------------------------------------------------------

BUDGET_LIMITS = {"max_iterations", "timeout_s", "max_lm_calls", "max_context_chars", "context_warning_ratio",
                 "max_tokens", "max_cost_usd"}
# A limit that is no budget's: the embedded model's context window, counted before a prompt is sent.
NOT_A_BUDGET = {"loops.lm.embedded"}


def _reads_a_limit(node: ast.AST) -> bool:
    """Whether `node` reads a limit of a budget (`budget.max_tokens`, `run.budget.timeout_s`)."""
    return any(isinstance(part, ast.Attribute) and part.attr in BUDGET_LIMITS
               and (isinstance(part.value, ast.Name) and part.value.id == "budget"
                    or isinstance(part.value, ast.Attribute) and part.value.attr == "budget")
               for part in ast.walk(node))


def limit_checks(name: str, source: str) -> list[str]:
    """The limit checks written in `source`: a comparison with a budget's limit (whether one is set, `is None`,
    apart), or a `LimitReached` raised with a stop reason of a limit."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and not all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops) \
                and any(_reads_a_limit(part) for part in (node.left, *node.comparators)):
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("LimitReached") and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in LIMIT_REASONS:
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_every_limit_is_checked_by_the_budget():
    found = [check for name, source in SOURCES.items() if name != "loops.vocabulary.budget" and name not in NOT_A_BUDGET
             for check in limit_checks(name, source)]
    assert not found, "a limit is checked outside loops.vocabulary.budget (ask Budget instead):\n" + "\n".join(found)


@pytest.mark.parametrize("planted", [
    "def f(run):\n    return run.iteration >= run.budget.max_iterations\n",
    "def f(budget, spent):\n    if spent > budget.max_tokens:\n        raise LimitReached('tokens', 'spent')\n",
    "def f():\n    raise LimitReached('timeout', 'late')\n",
])
def test_the_limit_scan_finds_a_check_written_elsewhere(planted):
    assert limit_checks("loops.planted", planted)


VALUE_TYPES = [("loops.vocabulary.budget", "Budget"), ("loops.vocabulary.budget", "RetryPolicy"),
               ("loops.vocabulary.profile", "ModelProfile"), ("loops.running.steps", "Step"),
               ("loops.vocabulary.usage", "Usage"), ("loops.running.runtime", "LoopResult")]


@pytest.mark.parametrize(("module", "name"), VALUE_TYPES)
def test_every_field_of_a_public_value_type_has_its_own_docstring(module, name):
    """As pydantic-ai documents `UsageLimits`: a docstring under each field, which editors and doc generators
    show with the field."""
    tree = ast.parse(SOURCES[module])
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name).body
    fields = [node.target.id for node in body if isinstance(node, ast.AnnAssign)]
    documented = [node.target.id for node, after in zip(body, body[1:], strict=False)
                  if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                  and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)]
    assert fields and fields == documented, f"{name}: fields without a docstring: {set(fields) - set(documented)}"


# --- the patterns' steps call their phases, never asking whether one is built in ------------------------------


def builtin_branches(name: str, source: str) -> list[str]:
    """Where a pattern asks whether a phase is the built-in one outside building it: any `self._builtin...` read outside
    `__init__` (`_builtin_phases`, what a call takes, apart), and in a step (a function a run goes through: one that
    takes the run, and the `settings` its loop reads) any name of it at all (`builtin_executor`, `phase.builtin`). A
    step calls its phase (`loops.running.module.Phase`: `call`, `turn`, `ask`, `either`), which knows."""
    found = set()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.name == "__init__":
            continue
        parameters = {argument.arg for argument in [*function.args.args, *function.args.kwonlyargs]}
        step = function.name == "settings" or "run" in parameters
        for node in ast.walk(function):
            named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
            if "builtin" in named.lower() and (step or named.startswith("_builtin") and named != "_builtin_phases"):
                found.add(f"{name}:{node.lineno} in {function.name}: {ast.unparse(node)}")
    return sorted(found)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_no_step_of_a_pattern_asks_whether_a_phase_is_built_in(name):
    found = builtin_branches(name, SOURCES[name])
    assert not found, "a pattern's step asks whether a phase is built in (call the phase instead):\n" + "\n".join(found)


@pytest.mark.parametrize("planted", [
    'class P:\n    def _decide(self, run, success):\n        if "controller" not in self._builtin:\n            pass\n',
    'class P:\n    def settings(self):\n        return "phase" if "critic" not in self._builtin else "llm"\n',
    "def _execute(run, module):\n    return module.builtin_executor and run.iteration\n",
    'class P:\n    def _loop(self, run):\n        return self._phases["executor"].builtin\n',
    "class P:\n    def _first_input(self, given):\n        return given if self._builtin_executor else None\n",
])
def test_the_builtin_scan_finds_a_step_that_asks(planted):
    assert builtin_branches("loops.planted", planted)


def test_the_builtin_scan_lets_a_pattern_choose_its_phases_when_it_is_built():
    planted = ("class P:\n    def __init__(self, executor):\n        self._builtin = executor is None\n"
               "    def _check_inputs(self, given):\n        return self.builtin_executor or self._builtin_phases()\n")
    assert builtin_branches("loops.planted", planted) == []
