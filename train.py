"""Launcher: python train.py --env=CartPole-v1 --experiment=NAME [--train_dir=DIR] ..."""

import sys

from sample_factory.train import main

if __name__ == "__main__":
    sys.exit(main(command=True))
