"""Envs and callbacks for the callback and episode-statistics tests; imported in every process of a run through
`--env=tests.experiment.hooks:SuccessCartPole-v0` and `--callbacks=tests.experiment.hooks:RecordingCallbacks`.

RecordingCallbacks appends one JSON line per hook call to <SF_TEST_HOOK_DIR>/<pid>.jsonl (one file per process, so
the test can tell which process ran a hook)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from sample_factory.experiment.callbacks import Callbacks, register_callbacks

HOOK_DIR_VAR = "SF_TEST_HOOK_DIR"
RAISE_IN_VAR = "SF_TEST_RAISE_IN"


class SuccessCartPole(CartPoleEnv):
    """CartPole whose final info says whether the pole stayed up for 30 steps (`success`), how long it lasted in
    `episode_extra_stats` (`steps_up`) and carries a non-numeric key the statistics must not touch."""

    def reset(self, **kwargs):
        self.steps = 0
        return super().reset(**kwargs)

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        self.steps += 1
        trunc = trunc or self.steps >= 60
        if term or trunc:
            info = {"success": self.steps >= 30, "episode_extra_stats": {"steps_up": self.steps}, "note": "text"}
        return obs, r, term, trunc, info


gym.register("SuccessCartPole-v0", entry_point=SuccessCartPole)


class BadStatCartPole(SuccessCartPole):
    """Reports a non-number under `success`."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        if term or trunc:
            info["success"] = "yes"
        return obs, r, term, trunc, info


gym.register("BadStatCartPole-v0", entry_point=BadStatCartPole)


def _record(hook: str, **fields) -> None:
    directory = os.environ.get(HOOK_DIR_VAR)
    if directory:
        line = json.dumps({"hook": hook, "pid": os.getpid(), **fields}, default=str)
        with open(Path(directory) / f"{os.getpid()}.jsonl", "a") as f:
            f.write(line + "\n")
    if os.environ.get(RAISE_IN_VAR) == hook:
        raise ValueError(f"injected failure in {hook}")


class RecordingCallbacks(Callbacks):
    def on_experiment_start(self, cfg, exp_dir):
        _record("on_experiment_start", exp_dir=str(exp_dir), env=cfg.env)

    def on_episode_end(self, episode):
        _record(
            "on_episode_end",
            worker=episode.worker,
            env_index=episode.env_index,
            agent=episode.agent,
            policy_id=episode.policy_id,
            ret=episode.episode_return,
            length=episode.length,
            info_keys=sorted(episode.info),
        )
        return {"hook_len": float(episode.length)}

    def on_training_result(self, policy_id, result):
        _record("on_training_result", policy_id=policy_id, keys=sorted(result))
        result["hook_seen"] = 1.0

    def on_checkpoint(self, policy_id, path, kind):
        _record("on_checkpoint", policy_id=policy_id, path=path, kind=kind)

    def on_pbt_decision(self, decision):
        _record("on_pbt_decision", **decision)

    def on_worker_restarted(self, role, index, reason, restarts):
        _record("on_worker_restarted", role=role, index=index, reason=reason, restarts=restarts)

    def on_experiment_end(self, cfg, exp_dir, result):
        _record("on_experiment_end", **result)


register_callbacks("recording", RecordingCallbacks)


def read_hook_calls(directory: Path) -> list[dict]:
    calls = []
    for f in sorted(Path(directory).glob("*.jsonl")):
        calls += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return calls
