"""The one form of every install hint the package prints: the README's, run from the repository root with the
project's virtualenv and pinned by constraints.txt, quoted so that zsh does not expand the brackets."""

from __future__ import annotations

import shlex

PIP = ".venv/bin/pip install -c constraints.txt"


def install_hint(extra: str = "", packages: tuple[str, ...] = ()) -> str:
    """The command that installs this package with `extra` (e.g. "atari"; "" for the base install), or, given
    `packages`, those other packages (e.g. ("mpe2",), which no extra of ours brings)."""
    if packages:
        return f"{PIP} {' '.join(shlex.quote(p) for p in packages)}"
    return f"{PIP} -e '.[{extra}]'" if extra else f"{PIP} -e ."
