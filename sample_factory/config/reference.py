"""The generated config reference: `python -m sample_factory.config.reference > docs/config-reference.md`
(what `make docs` runs)."""

from __future__ import annotations

from sample_factory.config.options import _BOOL, OPTIONS, _num, int_list
from sample_factory.config.presets import CLASSIC_CONTROL_ENVS, CONTINUOUS_CONTROL_ENVS, PRESETS


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
        for name, aliases, typ, default, help_text, extra in options:
            flags = " / ".join(f"`--{n}`" for n in (name, *aliases))
            tname = {_BOOL: "bool", int_list: "int list", _num: "number"}.get(typ, getattr(typ, "__name__", str(typ)))
            if "choices" in extra:
                tname += " (" + ", ".join(extra["choices"]) + ")"
            lines.append(f"| {flags} | {tname} | `{default}` | {help_text} |")
        lines.append("")
    lines += ["## Presets", "", "Applied by env family to flags not given on the command line; see `cfg.json`.", ""]
    for preset, values in PRESETS.items():
        envs = {
            "classic_control": ", ".join(CLASSIC_CONTROL_ENVS),
            "continuous_control": ", ".join(CONTINUOUS_CONTROL_ENVS),
        }
        envs = envs.get(preset, "atari_*, ALE/*")
        lines += [f"### {preset} ({envs})", "", "| flag | value |", "|---|---|"]
        lines += [f"| `--{k}` | `{v}` |" for k, v in values.items()]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_reference())
