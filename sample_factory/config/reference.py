"""What is generated from the option table (`make docs` writes both):
`python -m sample_factory.config.reference > docs/config-reference.md` (the config reference) and
`python -m sample_factory.config.reference fields > sample_factory/config/fields.py` (the options' typed
attributes of `Config`). Tests fail when either is out of date."""

from __future__ import annotations

import sys

from sample_factory.config.options import OPTIONS
from sample_factory.config.presets import PRESET_ENVS, PRESETS


def markdown_reference() -> str:
    lines = [
        "# Config reference",
        "",
        "Generated from `sample_factory/config/options.py` by `make docs` "
        "(`python -m sample_factory.config.reference`).",
        "Flags written `--a / --b` are aliases. Booleans take `True`/`False` (a bare `--flag` means True).",
        "",
    ]
    for group_name, options in OPTIONS.items():
        lines += [f"## {group_name}", "", "| flag | type | default | description |", "|---|---|---|---|"]
        for opt in options:
            flags = " / ".join(f"`{f}`" for f in opt.flags)
            tname = opt.type_name
            if opt.choices:
                tname += " (" + ", ".join(opt.choices) + ")"
            lines.append(f"| {flags} | {tname} | `{opt.default}` | {opt.help} |")
        lines.append("")
    lines += [
        "## Presets",
        "",
        "Applied by env family to flags not given on the command line; see `cfg.json`. A gymnasium id that no "
        "family names gets the preset of its spaces (vector_discrete, vector_continuous or image) with `--gamma` from "
        "its episode length (0.99, or 1 - 10 / steps up to 0.999 for episodes over 1,000 steps). A preset's "
        "`--learner_main_loop_num_cores` is capped at half the cores the run may use (at least 1; its CPU affinity, "
        "e.g. taskset, and cgroup quota count, not the machine's core count), so that the samplers keep the rest.",
        "",
    ]
    for preset, values in PRESETS.items():
        lines += [f"### {preset} ({PRESET_ENVS[preset]})", "", "| flag | value |", "|---|---|"]
        lines += [f"| `--{k}` | `{v}` |" for k, v in values.items()]
        lines.append("")
    return "\n".join(lines)


LINE_LENGTH = 120  # pyproject.toml's ruff line-length: the generated module is linted like the rest


def fields_module() -> str:
    """The source of config/fields.py: one annotation per option, grouped as in the table, with its default."""
    lines = [
        '"""Generated from config/options.py by `make docs` (`python -m sample_factory.config.reference fields`); '
        "do not edit.",
        "The type of every option's value, so that editors and readers see each option attribute of `Config`.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "",
        "class OptionFields:",
        '    """Annotations only: argparse (or `Config.from_dict`) sets every option on the instance."""',
    ]
    for group_name, options in OPTIONS.items():
        lines += ["", f"    # {group_name}"]
        for opt in options:
            choices = f"; one of {', '.join(opt.choices)}" if opt.choices else ""
            field, comment = f"    {opt.name}: {opt.annotation}", f"# default {opt.default!r}{choices}"
            if len(field) + 2 + len(comment) <= LINE_LENGTH:
                lines.append(f"{field}  {comment}")
            else:  # ruff's line length: the comment goes on the line above
                lines += [f"    {comment}", field]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["fields"]:
        print(fields_module(), end="")
    elif not sys.argv[1:]:
        print(markdown_reference())
    else:
        sys.exit("usage: python -m sample_factory.config.reference [fields]")
