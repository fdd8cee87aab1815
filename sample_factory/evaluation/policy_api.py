"""Use a trained agent in your own loop: `load_policy(...)` returns a `Policy` that acts on numpy observations.

    policy = load_policy("cartpole", train_dir="./train_dir")
    state = policy.initial_state()            # None for a feed-forward model
    obs, _ = env.reset()
    while True:
        action, state = policy.act(obs, state, deterministic=True)
        obs, reward, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset()
            state = policy.initial_state()

For vectorized envs use `act_batch` with obs [B, *obs_shape] and `reset_state(state, done_mask)` at episode ends.
Recurrent state is a numpy array ([H] for one observation, [B, H] for a batch); pass a torch tensor instead and it
stays a torch tensor on the policy's device (no host round trip per step on CUDA).
Actions are returned exactly as the training actors sent them to the env (Box actions are not clipped).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sample_factory.algo.dqn import epsilon_greedy
from sample_factory.config import Config
from sample_factory.envs.actions import action_converter, bound_box
from sample_factory.envs.env_utils import make_env
from sample_factory.envs.spaces import ACTION_MASK_KEY, OBS_KEY, as_obs_dict, is_dict_space, obs_fields
from sample_factory.experiment.checkpoints import list_best_checkpoints, load_checkpoint_file, load_latest_checkpoint
from sample_factory.experiment.folder import resolve_experiment_dir
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runtime.device import torch_device

State = np.ndarray | torch.Tensor | None


def find_best_checkpoint(ckpt_dir: Path) -> Path:
    """The best checkpoint of a checkpoint folder (the learner keeps one, replaced when the metric improves)."""
    found = list_best_checkpoints(ckpt_dir)
    if not found:
        raise FileNotFoundError(
            f"no best checkpoint (best_*.pth) in {ckpt_dir}; this run did not save one, use checkpoint='latest'"
        )
    return found[-1]


def _load_checkpoint(exp_dir: Path, checkpoint: str | Path, policy_id: int, device: torch.device) -> tuple[dict, Path]:
    ckpt_dir = exp_dir / f"checkpoint_p{policy_id}"
    if checkpoint == "latest":
        loaded = load_latest_checkpoint(ckpt_dir, map_location=device)
        if loaded is None:
            raise FileNotFoundError(f"no checkpoint in {ckpt_dir}")
        return loaded
    path = find_best_checkpoint(ckpt_dir) if checkpoint == "best" else Path(checkpoint)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file {path} not found")
    return load_checkpoint_file(path, device), path


def _build_cfg(exp_dir: Path, ckpt_cfg: dict | None) -> Config:
    """Option defaults <- cfg.json <- the cfg stored in the checkpoint (it describes exactly these weights).
    Defaults fill options added after the run was made."""
    cfg_json = exp_dir / "cfg.json"
    if not cfg_json.exists() and not ckpt_cfg:
        raise FileNotFoundError(f"no experiment at {exp_dir} (cfg.json not found)")
    saved = json.loads(cfg_json.read_text()) if cfg_json.exists() else {}
    return Config.from_dict({**saved, **(ckpt_cfg or {})})


class Policy:
    """A trained actor-critic in eval mode on one device. All methods run under torch.inference_mode."""

    def __init__(
        self,
        model: ActorCritic,
        cfg: Config,
        obs_space: gym.Space,
        action_space: gym.Space,
        device: torch.device,
        checkpoint_path: Path | None = None,
        policy_version: int | None = None,
        env_steps: int | None = None,
    ):
        self.model = model.to(device).eval()
        self.cfg = cfg
        self.obs_space, self.action_space = obs_space, action_space
        self.device = device
        self.checkpoint_path, self.policy_version, self.env_steps = checkpoint_path, policy_version, env_steps
        self.fields = obs_fields(obs_space)
        # () style shape of a plain observation; key -> shape for a Dict observation
        self.obs_shape = (
            {k: f.shape for k, f in self.fields.items()} if is_dict_space(obs_space) else self.fields[OBS_KEY].shape
        )
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.num_actions = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else 0
        # A Q-network's policy head holds Q-values (or advantages): its only policy is the greedy one.
        self.greedy = getattr(cfg, "algo", "APPO") == "DQN"
        self.eval_epsilon = float(getattr(cfg, "eval_epsilon", 0.0)) if self.greedy else 0.0  # DQN: --eval_epsilon
        self.action_bounds = cfg.action_bounds
        self.convert_action = action_converter(action_space, self.action_bounds)

    @property
    def recurrent(self) -> bool:
        return bool(self.model.recurrent)

    @property
    def rnn_state_size(self) -> int:
        """H: width of the recurrent state (0 for a feed-forward model)."""
        return int(self.model.rnn_state_size)

    def initial_state(self, batch_size: int | None = None) -> np.ndarray | None:
        """Zero state: [H] for one observation, [batch_size, H] for a batch; None for a feed-forward model."""
        if not self.recurrent:
            return None
        shape = (self.rnn_state_size,) if batch_size is None else (batch_size, self.rnn_state_size)
        return np.zeros(shape, dtype=np.float32)

    @staticmethod
    def reset_state(state: State, done_mask: Any) -> State:
        """Zero the rows of `state` [B, H] whose episode ended (done_mask [B] bool); returns a new array/tensor."""
        if state is None:
            return None
        if isinstance(state, torch.Tensor):
            done = torch.as_tensor(np.asarray(done_mask), dtype=torch.bool, device=state.device)
            return state.masked_fill(done.view(-1, *([1] * (state.dim() - 1))), 0.0)
        rows = np.asarray(done_mask, dtype=bool)
        return np.where(rows.reshape(-1, *([1] * (state.ndim - 1))), 0.0, state).astype(state.dtype, copy=False)

    def _is_single(self, obs: Any) -> bool:
        """One observation (not a batch)?"""
        d = as_obs_dict(obs, self.obs_space)
        k = next(iter(self.fields))
        return tuple(np.shape(d[k])) == self.fields[k].shape

    def _obs_tensors(self, obs: Any, single: bool = False) -> dict[str, torch.Tensor]:
        """An observation batch (array, tensor, or dict of them for Dict spaces) -> {key: [B, *shape]} on device."""
        d = as_obs_dict(obs, self.obs_space)
        out = {}
        for k, f in self.fields.items():
            if k not in d:
                raise ValueError(f"observation key {k!r} is missing (expected keys {sorted(self.fields)})")
            v = d[k]
            t = v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v, dtype=f.dtype))
            if single:
                t = t.unsqueeze(0)
            if tuple(t.shape[1:]) != f.shape:
                what = "observations" if k == OBS_KEY else f"observation {k!r}"
                raise ValueError(f"expected {what} of shape [B, {', '.join(map(str, f.shape))}], got {list(t.shape)}")
            out[k] = t.to(self.device)
        return out

    def _state_tensor(self, state: State, batch: int) -> torch.Tensor | None:
        if not self.recurrent:
            return None
        if state is None:
            return torch.zeros(batch, self.rnn_state_size, device=self.device)
        t = state if isinstance(state, torch.Tensor) else torch.as_tensor(np.asarray(state, dtype=np.float32))
        if tuple(t.shape) != (batch, self.rnn_state_size):
            raise ValueError(f"expected rnn state of shape [{batch}, {self.rnn_state_size}], got {list(t.shape)}")
        return t.to(self.device, torch.float32)

    @staticmethod
    def _state_out(new_state: torch.Tensor | None, like: State) -> State:
        # Same kind as given: torch in -> torch out (stays on device); numpy or None in -> numpy out.
        if new_state is None or isinstance(like, torch.Tensor):
            return new_state
        return new_state.cpu().numpy()

    @torch.inference_mode()
    def act_batch(self, obs: Any, state: State = None, deterministic: bool = False) -> tuple[np.ndarray, State]:
        """obs [B, *obs_shape] (Dict spaces: {key: [B, *shape]}), state [B, H] or None (zeros) ->
        (actions [B] int64 or [B, D] float32 within the Box bounds (--action_bounds), new state). Tuple actions
        come as stored rows [B, K]; `act` returns them as tuples."""
        actions, new_state = self._act(self._obs_tensors(obs), state, deterministic)
        if isinstance(self.action_space, gym.spaces.Box):  # env-ready: within the bounds (--action_bounds)
            actions = bound_box(actions, self.action_space, self.action_bounds)
        return actions, new_state

    @torch.inference_mode()
    def act_rows(self, obs: Any, state: State = None, deterministic: bool = False) -> tuple[np.ndarray, State]:
        """Like act_batch, but actions as stored in training ([B] or [B, K] rows, Box parts not yet brought into
        the bounds): what sample_factory.envs.env_group.EnvGroup.step takes. `obs` may be an EnvGroup's obs dict."""
        if not is_dict_space(self.obs_space) and isinstance(obs, dict):
            obs = obs[OBS_KEY]
        return self._act(self._obs_tensors(obs), state, deterministic)

    def _act(self, o: dict[str, torch.Tensor], state: State, deterministic: bool) -> tuple[np.ndarray, State]:
        batch = next(iter(o.values())).shape[0]
        params, _, new_state = self.model.forward_step(o, self._state_tensor(state, batch))
        dist = self.model.distribution(params, o.get(ACTION_MASK_KEY))
        actions = dist.mode() if deterministic or self.greedy else dist.sample()  # [B] or [B, D]
        if self.eval_epsilon > 0 and not deterministic:  # DQN's epsilon-greedy evaluation (Discrete actions)
            actions = epsilon_greedy(actions, self.eval_epsilon, self.num_actions, o.get(ACTION_MASK_KEY))
        return actions.cpu().numpy(), self._state_out(new_state, state)

    def act(self, obs: Any, state: State = None, deterministic: bool = False) -> tuple[int | np.ndarray, State]:
        """One observation, state [H] or None -> (the env-ready action: python int, [D] array, tuple; new state [H])."""
        batch_state = None if state is None else state[None]
        with torch.inference_mode():
            actions, new_state = self._act(self._obs_tensors(obs, single=True), batch_state, deterministic)
        if self.discrete:
            action = int(actions[0])
        else:
            action = actions[0] if self.convert_action is None else self.convert_action(actions[0])
        return action, None if new_state is None else new_state[0]

    @torch.inference_mode()
    def value(self, obs: Any, state: State = None) -> float | np.ndarray:
        """Critic value: a float for one observation (state [H]), a [B] array for a batch (state [B, H])."""
        single = self._is_single(obs)
        o = self._obs_tensors(obs, single)
        s = None if state is None else (state[None] if single else state)
        _, values, _ = self.model.forward_step(o, self._state_tensor(s, next(iter(o.values())).shape[0]))  # [B]
        return float(values[0]) if single else values.cpu().numpy()

    def __repr__(self) -> str:
        return (
            f"Policy({self.cfg.env}, obs {self.obs_shape}, actions {self.action_space}, "
            f"{'recurrent H=' + str(self.rnn_state_size) if self.recurrent else 'feed-forward'}, "
            f"{self.env_steps} env steps, device {self.device})"
        )


def load_policy(
    experiment_dir_or_name: str | Path,
    train_dir: str | Path | None = None,
    device: str | torch.device = "cpu",
    checkpoint: str | Path = "latest",
    policy_id: int = 0,
    obs_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
    eval_epsilon: float | None = None,
) -> Policy:
    """Load a trained policy: `load_policy("cartpole")`, `load_policy("train_dir/cartpole")`, or a checkpoint file
    as SB3's `PPO.load(path)` takes one: `load_policy("train_dir/cartpole/checkpoint_p0/checkpoint_....pth")` (its
    experiment and policy are the folders it is in).

    checkpoint: 'latest' (newest loadable checkpoint_*.pth), 'best' (newest best_*.pth) or a path to a .pth file.
    obs_space/action_space: give them to skip creating the env once to read its spaces (needed when the env is a
    custom one that is not registered in this process).
    eval_epsilon: DQN only, the probability of a random action in act() without deterministic=True; None: the
    experiment's --eval_epsilon.
    """
    first = Path(experiment_dir_or_name)
    if first.suffix == ".pth":  # a checkpoint file: <experiment>/checkpoint_p<policy>/<file>
        if checkpoint != "latest":
            raise ValueError(f"load_policy got a checkpoint file {first} and checkpoint={checkpoint!r}: give one")
        first = Path(train_dir) / first if train_dir is not None and not first.is_file() else first
        in_policy = re.fullmatch(r"checkpoint_p(\d+)", first.parent.name)
        policy_id = int(in_policy.group(1)) if in_policy else policy_id
        experiment_dir_or_name, train_dir, checkpoint = first.parent.parent, None, first
    exp_dir = resolve_experiment_dir(experiment_dir_or_name, train_dir)
    if not exp_dir.is_dir() and checkpoint in ("latest", "best"):
        raise FileNotFoundError(f"no experiment folder {exp_dir}")
    dev = torch_device(device)
    state, path = _load_checkpoint(exp_dir, checkpoint, policy_id, dev)
    cfg = _build_cfg(exp_dir, state.get("cfg"))
    if obs_space is None or action_space is None:
        env = make_env(cfg)
        obs_space, action_space = obs_space or env.observation_space, action_space or env.action_space
        env.close()
    model = ActorCritic(cfg, obs_space, action_space)
    model.load_state_dict(state["model"])
    if eval_epsilon is not None:
        cfg.eval_epsilon = eval_epsilon
    return Policy(
        model,
        cfg,
        obs_space,
        action_space,
        dev,
        checkpoint_path=path,
        policy_version=state.get("policy_version"),
        env_steps=state.get("env_steps"),
    )
