"""A sweep for the launcher: 3 learning rates x 2 seeds of CartPole around the classic_control preset's 3e-3, and
one larger MLP. Each run trains 100k env steps; the runs go to ./train_dir/cartpole_lr/ (the launcher's default
--train_dir is a folder named after the run).

    python -m sample_factory.launcher --run=examples/sweeps/cartpole_lr.py --dry_run
    python -m sample_factory.launcher --run=examples/sweeps/cartpole_lr.py

What to expect (final reward, 2026-11-26 on a loaded 2-core machine, --max_parallel=2, 155 s in all; see
docs/scale-out.md): lr 1e-3 is still far from CartPole's 500 (189, 197), the preset's 3e-3 is close (376, 351),
1e-2 varies most between seeds (320, 461); the wide MLP at 3e-3: 255.

cartpole_lr.yaml beside this file describes the same sweep in YAML.
"""

from sample_factory.launcher import Experiment, ParamGrid, ParamList, RunDescription

BASE = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_env_steps=100000"

RUN = RunDescription(
    "cartpole_lr",
    experiments=[
        Experiment("lr", BASE, ParamGrid([("learning_rate", [1e-3, 3e-3, 1e-2]), ("seed", [0, 1])])),
        Experiment("wide", BASE, ParamList([{"encoder_mlp_layers": [256, 256], "seed": 0}])),
    ],
)
