"""Every relative link in README.md, PERFORMANCE.md, docs/*.md and the results READMEs points to an existing file,
and every `results/...` path they name exists (no GPU)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "PERFORMANCE.md", *(ROOT / "docs").glob("*.md"),
                *(ROOT / "results").rglob("README.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
RESULTS_PATH = re.compile(r"`(results/[^`\s]*)`")
LONGEST_LINE = 300


def _ids(paths):
    return [path.relative_to(ROOT).as_posix() for path in paths]


def _without_code(text):
    """The text without code blocks and inline code spans (a link's text keeps its brackets)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(_without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor in the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to missing files: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_named_results_paths_exist(page):
    missing = [path for path in RESULTS_PATH.findall(page.read_text(encoding="utf-8"))
               if not re.search(r"[<>*{}]|DIR|OUT", path) and not (ROOT / path.rstrip(".,;:")).exists()]
    assert not missing, f"{page.relative_to(ROOT)}: names results paths that do not exist: {missing}"


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "PERFORMANCE.md", ROOT / "docs" / "attempts.md"],
                         ids=["README.md", "PERFORMANCE.md", "docs/attempts.md"])
def test_pages_stay_short(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    assert max(len(line) for line in lines) <= LONGEST_LINE
    if page.name == "README.md":
        assert len(lines) <= 150
    if page.name == "PERFORMANCE.md":
        assert page.stat().st_size < 40 * 1024
