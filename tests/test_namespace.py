"""Everything installs under the one `loops` namespace: a user's own `signatures.py` or `optimize.py`
in the working directory never shadows ours, with an editable or a regular install."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Run in a directory holding a user's own modules named like our folders: importing any of them fails.
PROGRAM = """
import json, sys
import dspy
from dspy.utils.dummies import DummyLM

import loops
import loops.optimize
import loops.sexp
import loops.signatures
from loops import CreatorCriticIterator

# Built-in roles on an LM that answers from a list...
lm = DummyLM([{"reasoning": "r", "draft": "D0"},
              {"accuracy_passed": True, "completeness_passed": True, "quality_passed": True, "feedback": "",
               "approved": True}])
with dspy.context(lm=lm):
    llm_run = CreatorCriticIterator()(requirements="a haiku")
# ...and custom phases, no LM at all.
phase_run = CreatorCriticIterator(creator=lambda requirements, context, iteration: "draft",
                                  critic=lambda requirements, draft, iteration: True,
                                  iterator=lambda requirements, draft, feedback, iteration: draft)(requirements="r")
print(json.dumps({
    "loops": loops.__file__,
    "signatures": loops.signatures.__file__,
    "sexp": loops.sexp.__file__,
    "optimize": loops.optimize.__file__,
    "runs": [[llm_run.final, llm_run.success], [phase_run.final, phase_run.success]],
    "shadowed": sorted(name for name in ("signatures", "optimize", "sexp") if name in sys.modules),
}))
"""


def user_directory(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    for name in ("signatures", "optimize", "sexp"):
        (work / f"{name}.py").write_text(f"raise ImportError('the user\\'s own {name}.py was imported')\n")
    return work


def run_program(cwd: Path, pythonpath: str | None = None) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["DSPY_CACHEDIR"] = str(cwd / ".dspy-cache")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    completed = subprocess.run([sys.executable, "-c", PROGRAM], cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def check(found: dict, package_root: Path) -> None:
    assert Path(found["loops"]).resolve().is_relative_to(package_root.resolve()), found["loops"]
    for package in ("signatures", "sexp", "optimize"):
        assert Path(found[package]).resolve().is_relative_to(package_root.resolve()), found[package]
    assert found["runs"] == [["D0", True], ["draft", True]]
    assert found["shadowed"] == []


def test_a_users_signatures_and_optimize_modules_do_not_shadow_ours_editable_install(tmp_path):
    found = run_program(user_directory(tmp_path))

    check(found, ROOT)
    assert Path(found["signatures"]).parent.resolve() == (ROOT / "signatures").resolve()  # the folder, mapped


def _setuptools_version() -> tuple[int, ...]:
    import setuptools

    return tuple(int(part) for part in setuptools.__version__.split(".")[:2] if part.isdigit())


@pytest.mark.slow
def test_a_users_signatures_and_optimize_modules_do_not_shadow_ours_regular_install(tmp_path):
    # Built from a copy, so the build leaves nothing behind in the repository.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", "notebooks"))
    site = tmp_path / "site"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), str(source)]
    if _setuptools_version() >= (68,):
        command.insert(4, "--no-build-isolation")  # the venv's own setuptools can build it offline
    built = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if built.returncode != 0 and "No matching distribution found for setuptools" in built.stderr:
        pytest.skip("pip's build isolation needs setuptools>=68, which no index here offers")
    assert built.returncode == 0, built.stderr[-3000:]

    installed = sorted(path.name for path in site.iterdir())
    importable = [name for name in installed if not name.endswith(".dist-info") and name != "bin"]
    assert importable == ["loops"], installed  # nothing but `loops` at the top level (bin/ holds the CLI script)
    assert [name for name in installed if name.endswith(".dist-info")] == ["loops-0.1.0.dist-info"]
    for package in ("signatures", "sexp", "optimize"):
        assert (site / "loops" / package / "__init__.py").is_file()

    found = run_program(user_directory(tmp_path), pythonpath=str(site))

    check(found, site)
