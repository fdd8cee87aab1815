"""A sweep for the launcher: 2 learning rates x 2 seeds of CartPole, and one larger MLP.

    python -m sample_factory.launcher --run=examples/sweeps/cartpole_lr.py --train_dir=./train_dir/sweeps --dry_run
    python -m sample_factory.launcher --run=examples/sweeps/cartpole_lr.py --train_dir=./train_dir/sweeps

cartpole_lr.yaml beside this file describes the same sweep in YAML.
"""

from sample_factory.launcher import Experiment, ParamGrid, ParamList, RunDescription

BASE = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_env_steps=100000"

RUN = RunDescription(
    "cartpole_lr",
    experiments=[
        Experiment("lr", BASE, ParamGrid([("learning_rate", [1e-4, 3e-4]), ("seed", [0, 1])])),
        Experiment("wide", BASE, ParamList([{"encoder_mlp_layers": [256, 256], "seed": 0}])),
    ],
)
