"""Launcher: python train.py --env=CartPole-v1 --experiment=NAME [--train_dir=DIR] ..."""

import sys

from sample_factory import missing_dependency

try:
    from sample_factory.train import main
except ModuleNotFoundError as e:  # `python3 train.py` without the virtualenv: one line, not a traceback
    if (line := missing_dependency(e, "train.py")) is None:
        raise
    sys.exit(line)

if __name__ == "__main__":
    sys.exit(main(command=True))
