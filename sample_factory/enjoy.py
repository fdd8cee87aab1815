"""`python enjoy.py --env=... --experiment=... --train_dir=...`: evaluate the latest checkpoint of an experiment.

Loads cfg.json (flags typed now override it), runs --max_num_episodes episodes with the trained policy (core state
carried across steps and reset at episode ends), and prints each episode's return and length and the mean +- std.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from sample_factory.cfg import build_parser, finalize_cfg, typed_flags
from sample_factory.checkpoint import checkpoint_dir, load_latest_checkpoint
from sample_factory.envs.env_utils import make_env
from sample_factory.model.actor_critic import ActorCritic


def load_experiment_cfg(argv: Sequence[str]) -> argparse.Namespace:
    typed = typed_flags(argv)
    cfg = build_parser().parse_args(list(argv))
    path = Path(cfg.train_dir) / cfg.experiment / "cfg.json"
    if not path.exists():
        raise FileNotFoundError(f"no experiment at {path.parent} (cfg.json not found)")
    saved = json.loads(path.read_text())
    merged = {**vars(cfg), **saved, **typed}
    merged["device"] = typed.get("device", "cpu")
    return finalize_cfg(argparse.Namespace(**merged))


@torch.inference_mode()
def evaluate(cfg: argparse.Namespace, policy_id: int = 0) -> list[tuple[float, int]]:
    env = make_env(cfg)
    model = ActorCritic(cfg, env.observation_space, env.action_space).eval()
    loaded = load_latest_checkpoint(checkpoint_dir(cfg, policy_id))
    if loaded is None:
        raise FileNotFoundError(f"no checkpoint in {checkpoint_dir(cfg, policy_id)}")
    state, path = loaded
    model.load_state_dict(state["model"])
    print(f"loaded {path} (policy version {state['policy_version']}, {state['env_steps']} env steps)")
    episodes: list[tuple[float, int]] = []
    frames = 0
    obs, _ = env.reset(seed=cfg.seed)
    h = torch.zeros(1, model.rnn_state_size) if model.recurrent else None
    ret, length = 0.0, 0
    while len(episodes) < cfg.max_num_episodes and frames < cfg.max_num_frames:
        params, _, h = model.forward_step(torch.as_tensor(np.asarray(obs)).unsqueeze(0), h)
        dist = model.distribution(params)
        action = (dist.mode() if cfg.eval_deterministic else dist.sample())[0].numpy()
        obs, reward, term, trunc, _ = env.step(action)
        ret, length, frames = ret + float(reward), length + 1, frames + 1
        if term or trunc:
            episodes.append((ret, length))
            print(f"episode {len(episodes)}: reward {ret:.2f}, length {length}")
            ret, length = 0.0, 0
            obs, _ = env.reset()
            if h is not None:
                h = torch.zeros_like(h)
    env.close()
    return episodes


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_experiment_cfg(argv)
        episodes = evaluate(cfg)
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"enjoy: {e}", file=sys.stderr)
        return 1
    if episodes:
        r = np.array([e[0] for e in episodes])
        n = np.array([e[1] for e in episodes])
        print(
            f"{len(episodes)} episodes: reward {r.mean():.2f} +- {r.std():.2f}, length {n.mean():.1f} +- {n.std():.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
