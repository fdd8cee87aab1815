"""docs/architecture.md's package tree is generated from the code (config/reference.py, `make docs`): it names every
module of the package with its docstring's first sentence, and this test fails when the page is stale. Also here: the
manual's relative links (docs/, the README, the lab notebook) point at files that exist, since pages and data move."""

from __future__ import annotations

import re
from pathlib import Path

from sample_factory.config import reference

REPO = Path(__file__).resolve().parents[2]


def test_the_architecture_page_has_the_tree_of_the_code():
    text = reference.ARCHITECTURE.read_text()
    assert reference.architecture_page(text) == text, (
        "docs/architecture.md's package tree is stale: run `make docs` "
        "(python -m sample_factory.config.reference architecture > docs/architecture.md)"
    )


def test_the_tree_names_every_module_and_no_other():
    tree = reference.package_tree()
    listed = set(re.findall(r"^\s+(\w+\.py)\s", tree + "\n", re.M))
    modules = {p.name for p in reference.PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert listed == modules
    for pkg in ("algo/", "config/", "runtime/", "workers/", "tools/"):
        assert f"\n  {pkg}" in tree
    assert "benchmark" not in tree.replace("benchmarks", "")  # the lab is not in the package


def test_a_summary_is_the_docstrings_first_sentence_cut_at_a_clause(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Short one. Second sentence."""\n')
    assert reference._summary(module) == "Short one"
    long = "Alpha " + "word " * 30 + "end"
    module.write_text(f'"""{long[:40]}, {long}."""\n')
    assert reference._summary(module) == long[:40]
    module.write_text("x = 1\n")
    assert reference._summary(module) == ""


def test_the_manuals_relative_links_resolve():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "notebook.md"]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)
