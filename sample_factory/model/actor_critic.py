"""Actor-critic model: encoder (model/encoders.py, chosen from the observation space) -> optional recurrent core
-> policy and value heads."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor, nn

from sample_factory.algo.distributions import gaussian_dims, make_distribution, num_action_params
from sample_factory.model.encoders import make_encoder
from sample_factory.model.normalization import RunningMeanStd


class GruCore(nn.Module):
    """Stacked GRU cells. State is [B, num_layers * size] so it fits one shared-buffer row."""

    def __init__(self, in_size: int, size: int, num_layers: int):
        super().__init__()
        self.cells = nn.ModuleList([nn.GRUCell(in_size if i == 0 else size, size) for i in range(num_layers)])
        self.size = size
        self.state_size = size * num_layers

    def forward(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, in], h [B, L*size] -> (out [B, size], new h [B, L*size])."""
        hs = h.split(self.size, dim=1)
        new = []
        for cell, hi in zip(self.cells, hs, strict=True):
            x = cell(x, hi)
            new.append(x)
        return x, torch.cat(new, dim=1)


class LstmCore(nn.Module):
    """Stacked LSTM cells. State is [B, num_layers * 2 * size]: (h, c) of each layer side by side."""

    def __init__(self, in_size: int, size: int, num_layers: int):
        super().__init__()
        self.cells = nn.ModuleList([nn.LSTMCell(in_size if i == 0 else size, size) for i in range(num_layers)])
        self.size = size
        self.state_size = 2 * size * num_layers

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, in], state [B, L*2*size] -> (out [B, size], new state [B, L*2*size])."""
        chunks = state.split(self.size, dim=1)
        new = []
        for i, cell in enumerate(self.cells):
            h, c = cell(x, (chunks[2 * i], chunks[2 * i + 1]))
            new += [h, c]
            x = h
        return x, torch.cat(new, dim=1)


CORES = {"gru": GruCore, "lstm": LstmCore}


class _Tower(nn.Module):
    """Encoder + optional core: one for both heads when weights are shared, one each otherwise."""

    def __init__(self, cfg: Any, obs_space: gym.Space):
        super().__init__()
        self.encoder = make_encoder(cfg, obs_space)
        core_type = CORES[cfg.rnn_type]
        self.core = core_type(self.encoder.out_size, cfg.rnn_size, cfg.rnn_num_layers) if cfg.use_rnn else None
        self.out_size = cfg.rnn_size if cfg.use_rnn else self.encoder.out_size
        self.state_size = self.core.state_size if self.core else 0


class ActorCritic(nn.Module):
    def __init__(self, cfg: Any, obs_space: gym.Space, action_space: gym.Space):
        super().__init__()
        self.action_space = action_space
        self.towers = nn.ModuleList([_Tower(cfg, obs_space)])
        if not cfg.actor_critic_share_weights:
            self.towers.append(_Tower(cfg, obs_space))
        self.recurrent = cfg.use_rnn
        # Only float observations are normalized; image frames are scaled by their encoder.
        is_float = isinstance(obs_space, gym.spaces.Box) and obs_space.dtype.kind == "f"
        self.obs_normalizer = RunningMeanStd(tuple(obs_space.shape)) if cfg.normalize_input and is_float else None
        # With --normalize_returns the value head predicts normalized returns; everything outside the model (buffers,
        # V-trace, GAE) sees real-scale values through denormalize_values.
        self.returns_normalizer = RunningMeanStd(()) if cfg.normalize_returns else None
        self.state_sizes = [t.state_size for t in self.towers]
        self.rnn_state_size = sum(self.state_sizes)  # 0 without a core
        self.policy_head = nn.Linear(self.towers[0].out_size, num_action_params(action_space))
        self.value_head = nn.Linear(self.towers[-1].out_size, 1)
        self.log_std = None
        if gaussian_dims(action_space):  # Box actions (also inside a Tuple): state-independent learned std
            self.log_std = nn.Parameter(torch.full((gaussian_dims(action_space),), math.log(cfg.initial_stddev)))
        self._initialize(cfg.policy_initialization)

    def _initialize(self, kind: str) -> None:
        if kind == "torch_default":
            return
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                if kind == "orthogonal":
                    nn.init.orthogonal_(m.weight, gain=math.sqrt(2))
                else:
                    nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.GRUCell, nn.LSTMCell)):
                nn.init.orthogonal_(m.weight_hh)
                nn.init.xavier_uniform_(m.weight_ih)
                nn.init.zeros_(m.bias_ih)
                nn.init.zeros_(m.bias_hh)
        # Small policy outputs start near-uniform; a unit-gain value head matches the return scale.
        nn.init.orthogonal_(self.policy_head.weight, gain=0.01)
        nn.init.orthogonal_(self.value_head.weight, gain=1.0)

    def _heads(self, feats: list[Tensor]) -> tuple[Tensor, Tensor]:
        return self.policy_head(feats[0]), self.value_head(feats[-1]).squeeze(-1)

    def forward_step(self, obs: Tensor, rnn_state: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """One step for a batch: obs [B, *obs_shape], rnn_state [B, H] (already reset where needed) ->
        (action params [B, P], values [B], new rnn_state [B, H] or None)."""
        obs = self.normalize_obs(obs)
        feats, new_states = [], []
        states = rnn_state.split(self.state_sizes, dim=1) if self.recurrent else [None] * len(self.towers)
        for tower, h in zip(self.towers, states, strict=True):
            x = tower.encoder(obs)
            if tower.core is not None:
                x, h = tower.core(x, h)
                new_states.append(h)
            feats.append(x)
        params, values = self._heads(feats)
        return params, values, torch.cat(new_states, dim=1) if self.recurrent else None

    def forward_sequence(
        self, obs: Tensor, rnn_states: Tensor | None, is_first: Tensor, recurrence: int
    ) -> tuple[Tensor, Tensor]:
        """Trajectories for training: obs [B, L, *obs_shape], stored rnn_states [B, L, H], is_first [B, L].
        BPTT restarts every `recurrence` steps from the stored state; the state is zeroed where an episode starts.
        Returns (action params [B, L, P], values [B, L])."""
        B, L = obs.shape[:2]
        if not self.recurrent:  # forward_step normalizes
            params, values, _ = self.forward_step(obs.reshape(B * L, *obs.shape[2:]), None)
            return params.view(B, L, -1), values.view(B, L)
        keep = (~is_first).float().unsqueeze(-1)  # [B, L, 1]
        obs = self.normalize_obs(obs)
        encoded = [t.encoder(obs.reshape(B * L, *obs.shape[2:])).view(B, L, -1) for t in self.towers]
        feats_seq: list[list[Tensor]] = [[] for _ in self.towers]
        h = None
        for t in range(L):
            if t % recurrence == 0:
                h = rnn_states[:, t]
            h = h * keep[:, t]
            new_states = []
            for i, (tower, hi) in enumerate(zip(self.towers, h.split(self.state_sizes, dim=1), strict=True)):
                x, hi = tower.core(encoded[i][:, t], hi)
                feats_seq[i].append(x)
                new_states.append(hi)
            h = torch.cat(new_states, dim=1)
        feats = [torch.stack(f, dim=1).reshape(B * L, -1) for f in feats_seq]
        params, values = self._heads(feats)
        return params.view(B, L, -1), values.view(B, L)

    def normalize_obs(self, obs: Tensor) -> Tensor:
        return obs if self.obs_normalizer is None else self.obs_normalizer(obs.float())

    def denormalize_values(self, values: Tensor) -> Tensor:
        return values if self.returns_normalizer is None else self.returns_normalizer.denormalize(values)

    def normalize_values(self, values: Tensor) -> Tensor:
        return values if self.returns_normalizer is None else self.returns_normalizer.normalize(values)

    def update_returns_normalizer(self, returns: Tensor) -> None:
        if self.returns_normalizer is not None:
            self.returns_normalizer.update(returns.reshape(-1))

    def update_normalizers(self, obs: Tensor) -> None:
        """obs [N, *obs_shape] of a training batch."""
        if self.obs_normalizer is not None:
            self.obs_normalizer.update(obs)

    def distribution(self, params: Tensor):
        return make_distribution(self.action_space, params, self.log_std)
