"""The generated files must not drift from the option table: the config reference in docs/ and the typed option
attributes of Config (sample_factory/config/fields.py)."""

from pathlib import Path

from sample_factory.config.reference import fields_module, markdown_reference

ROOT = Path(__file__).resolve().parents[2]


def test_config_reference_is_up_to_date():
    doc = ROOT / "docs" / "config-reference.md"
    assert doc.read_text().strip() == markdown_reference().strip(), "run `make docs` to regenerate it"


def test_config_fields_are_up_to_date():
    fields = ROOT / "sample_factory" / "config" / "fields.py"
    assert fields.read_text() == fields_module(), "run `make docs` to regenerate it"


def test_generated_fields_fit_ruffs_line_length():
    """fields.py is linted like the rest: an option whose choices make its line too long gets its comment on the line
    above (--encoder_conv_architecture's four choices did)."""
    import tomllib

    from sample_factory.config.reference import LINE_LENGTH

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"] == LINE_LENGTH
    assert max(len(line) for line in fields_module().splitlines()) <= LINE_LENGTH
    assert "    # default 'convnet_simple'; one of" in fields_module()
