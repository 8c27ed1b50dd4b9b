"""The notebooks in notebooks/ are committed without outputs, use only the public API, and each draws a plot.

They are executed by the README's test command (`make test` runs `pytest --nbmake notebooks`)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
EXPECTED = ["01_creator_critic_iterator.ipynb", "02_execute_validate_controller.ipynb", "03_director_loop.ipynb",
            "04_sexp_front_end.ipynb", "05_optimization.ipynb"]
PLOTS = ("plot_run(", ".plot.", ".plot(", "plt.subplots(")


def notebooks():
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def code_of(path):
    return [("".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"])
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "code"]


def test_there_is_a_notebook_per_pattern_the_dsl_and_optimization():
    assert [path.name for path in notebooks()] == EXPECTED


@pytest.mark.parametrize("path", notebooks(), ids=lambda path: path.name)
def test_a_notebook_is_committed_without_outputs_or_execution_counts(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]

    dirty = [index for index, cell in enumerate(cells) if cell["cell_type"] == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]

    assert not dirty, (f"{path.name} has outputs or execution counts in cells {dirty}: clear them before committing "
                       f"(jupyter nbconvert --clear-output --inplace notebooks/{path.name})")


@pytest.mark.parametrize("path", notebooks(), ids=lambda path: path.name)
def test_a_notebook_starts_by_saying_what_it_is_for(path):
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]

    assert first["cell_type"] == "markdown" and "".join(first["source"]).startswith("# ")


@pytest.mark.parametrize("path", notebooks(), ids=lambda path: path.name)
def test_a_notebook_uses_the_public_api_and_draws_a_plot(path):
    code = "\n".join(code_of(path))

    assert "from tests" not in code and "import tests" not in code, "a notebook cannot import the test helpers"
    assert "._" not in code.replace("._repr", ""), "a notebook uses only public names"
    assert any(plot in code for plot in PLOTS), f"{path.name} draws no plot"


@pytest.mark.parametrize("front_end", ["notebook", "nbconvert"])
def test_the_notebooks_extra_brings_jupyter_to_open_them_and_nbconvert_to_clear_them(front_end):
    # The README says "open them in Jupyter" and the test above "jupyter nbconvert --clear-output": both come with
    # pip install -e '.[notebooks]'.
    shown = subprocess.run([sys.executable, "-m", front_end, "--version"], capture_output=True, text=True, timeout=120,
                           check=False)
    assert shown.returncode == 0 and shown.stdout.strip()[:1].isdigit(), shown.stdout + shown.stderr
