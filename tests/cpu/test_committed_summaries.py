"""`python -m bench report` reproduces the summary.md of every committed run folder, byte for byte (no GPU).

When the report changes, regenerate the committed summaries: `python -m bench report results/<run> --force`.
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from bench.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "results"
RUNS = sorted(path.parent for path in RESULTS.rglob("metadata.json")
              if "experiment" in json.loads(path.read_text()) and (path.parent / "summary.md").is_file())
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def _without_plots(text):
    """The summary without its "## Plots" section (what `report --no-plots` writes)."""
    return re.sub(r"^## Plots\n.*?(?=^## )", "", text, flags=re.DOTALL | re.MULTILINE)


def test_there_are_committed_runs():
    assert {folder.name for folder in RUNS} >= {"experiment_A", "experiment_B"}, RUNS


@pytest.mark.parametrize("folder", RUNS, ids=[folder.name for folder in RUNS])
def test_report_reproduces_the_committed_summary(tmp_path, folder):
    out = tmp_path / "out"
    assert main(["report", str(folder), "--out", str(out), *([] if HAVE_MATPLOTLIB else ["--no-plots"])]) == 0
    committed = (folder / "summary.md").read_text()
    if not HAVE_MATPLOTLIB:
        committed = _without_plots(committed)
    assert (out / "summary.md").read_text() == committed, (
        f"{folder}/summary.md is not what `python -m bench report` writes: regenerate it with --force")
