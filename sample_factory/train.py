"""`python train.py --env=CartPole-v1 --experiment=NAME`: parse the config and run the runner (or, with
--pbt_backend=ray, coordinate a population of such runs)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from sample_factory.config import parse_cfg
from sample_factory.runner import run


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_cfg(argv)
    if cfg.with_pbt and cfg.pbt_backend == "ray":  # a coordinator of separate member runs (pbt/ray_backend.py)
        from sample_factory.pbt.ray_backend import run_population

        return run_population(cfg, argv)
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
