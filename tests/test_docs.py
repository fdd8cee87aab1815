"""The config reference in docs/ is generated from the parser and must not drift from it."""

from pathlib import Path

from sample_factory.config.reference import markdown_reference


def test_config_reference_is_up_to_date():
    doc = Path(__file__).resolve().parent.parent / "docs" / "config-reference.md"
    assert doc.read_text().strip() == markdown_reference().strip(), "run `make docs` to regenerate it"
