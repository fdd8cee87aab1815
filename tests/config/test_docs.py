"""The generated config reference in docs/ must not drift from the option groups and the presets."""

from pathlib import Path

from sample_factory.config.reference import markdown_reference

ROOT = Path(__file__).resolve().parents[2]


def test_config_reference_is_up_to_date():
    doc = ROOT / "docs" / "config-reference.md"
    assert doc.read_text().strip() == markdown_reference().strip(), "run `make docs` to regenerate it"
