"""`python train.py --env=CartPole-v1 --experiment=NAME`: parse the config and run the runner."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from sample_factory.config import parse_cfg
from sample_factory.runner import run


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_cfg(argv)
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
