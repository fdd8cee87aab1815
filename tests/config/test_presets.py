"""config/presets.py is data: tables of option -> value, each value with a one-line reason and no dated measurement
history (that lives in benchmarks/notebook.md, which the comments link to)."""

import ast
import re
from pathlib import Path

from sample_factory.config import all_options
from sample_factory.config import presets as presets_module
from sample_factory.config.presets import GPU_PRESETS, PRESETS

SOURCE = Path(presets_module.__file__)
ROOT = SOURCE.parents[2]


def _tables(tree: ast.Module) -> list[ast.Dict]:
    """Every dict literal in the module whose keys are option names (the tables, GPU_PRESETS' inner ones)."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        and node.keys
        and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys if k is not None)
        and any(k is not None and k.value in {o.name for o in all_options()} for k in node.keys)  # type: ignore[union-attr]
    ]


def test_every_preset_value_names_an_option_and_parses_as_its_type():
    options = {opt.name: opt for opt in all_options()}
    for name, table in [*PRESETS.items(), *(("gpu " + k, v) for k, v in GPU_PRESETS.items())]:
        for key, value in table.items():
            assert key in options, f"{name}: {key} is not an option"
            opt = options[key]
            parsed = opt.type(",".join(map(str, value)) if isinstance(value, list) else str(value))
            assert parsed == value, f"{name}: --{key}={value!r} parses as {parsed!r}"
            if opt.choices:
                assert value in opt.choices, f"{name}: --{key}={value!r} not one of {opt.choices}"


def test_every_value_in_a_table_has_a_one_line_reason():
    """A trailing comment on the value's line, or a comment line right above it (for a spread or a long reason)."""
    lines = SOURCE.read_text().splitlines()
    tables = _tables(ast.parse(SOURCE.read_text()))
    assert len(tables) >= 15  # the family, DQN, space and GPU tables
    missing = []
    for table in tables:
        for key, value in zip(table.keys, table.values, strict=True):
            line = lines[value.end_lineno - 1]  # type: ignore[operator]
            above = lines[(key or value).lineno - 2].strip()
            if "#" not in line and not above.startswith("#"):
                missing.append(f"line {value.lineno}: {ast.unparse(key) if key is not None else '**'}")
    assert not missing, f"values without a reason: {missing}"


def test_no_dated_measurement_history_in_the_preset_tables():
    """Dates belong with their measurements in benchmarks/notebook.md; the code links there."""
    text = SOURCE.read_text()
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "move the dated measurement to benchmarks/notebook.md"
    for doc in ("benchmarks/notebook.md", "docs/results.md"):
        headings = [_anchor(h) for h in re.findall(r"^#+ (.*)$", (ROOT / doc).read_text(), re.M)]
        for anchor in sorted(set(re.findall(re.escape(doc) + r"#([\w-]+)", text))):
            assert anchor in headings, f"presets.py links to {doc}#{anchor}, which no heading makes"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
