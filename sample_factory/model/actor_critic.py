"""Actor-critic model: encoder (model/encoders.py, chosen from the observation space) -> optional recurrent core
-> policy and value heads. Observations come in as dicts key -> tensor (envs/spaces.py); the key "action_mask"
is not encoded but masks the discrete actions of the policy's distribution."""

from __future__ import annotations

import math
from typing import cast

import gymnasium as gym
import torch
from torch import Tensor, nn

from sample_factory.algo.distributions import gaussian_dims, make_distribution, num_action_params, squash_means
from sample_factory.algo.sde import initial_sde_log_std, sde_log_std, sde_noise
from sample_factory.config import Config
from sample_factory.envs.spaces import ACTION_MASK_KEY, OBS_KEY, obs_subspaces
from sample_factory.model.encoders import ConvEncoder, encoder_out_size, make_encoder
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


CORES: dict[str, type[GruCore] | type[LstmCore]] = {"gru": GruCore, "lstm": LstmCore}


class _Tower(nn.Module):
    """Encoder + optional core: one for both heads when weights are shared, one each otherwise."""

    core: GruCore | LstmCore | None

    def __init__(self, cfg: Config, obs_space: gym.Space):
        super().__init__()
        self.encoder = make_encoder(cfg, obs_space)
        encoded = encoder_out_size(self.encoder)
        core_type = CORES[cfg.rnn_type]
        self.core = core_type(encoded, cfg.rnn_size, cfg.rnn_num_layers) if cfg.use_rnn else None
        self.out_size: int = cfg.rnn_size if cfg.use_rnn else encoded
        self.state_size: int = self.core.state_size if self.core is not None else 0


def as_obs_tensors(obs: Tensor | dict[str, Tensor]) -> dict[str, Tensor]:
    """A bare tensor is accepted for a non-Dict observation space."""
    return {OBS_KEY: obs} if isinstance(obs, Tensor) else obs


def encoded_space(obs_space: gym.Space) -> gym.Space:
    """What the encoder sees: the observation space without the action mask."""
    if not isinstance(obs_space, gym.spaces.Dict):
        return obs_space
    keys = [k for k in obs_space.spaces if k != ACTION_MASK_KEY]
    if not keys:
        raise ValueError("a Dict observation needs at least one key besides 'action_mask'")
    return gym.spaces.Dict({k: obs_space.spaces[k] for k in keys})


class ActorCritic(nn.Module):
    def __init__(self, cfg: Config, obs_space: gym.Space, action_space: gym.Space):
        super().__init__()
        self.action_space = action_space
        self.dict_obs = isinstance(obs_space, gym.spaces.Dict)
        enc_space = encoded_space(obs_space)
        self.encoded_keys = list(obs_subspaces(enc_space))
        towers = [_Tower(cfg, enc_space) for _ in range(1 if cfg.actor_critic_share_weights else 2)]
        # a ModuleList registers their parameters; typed as the list of towers it is read as
        self.towers = cast(list[_Tower], nn.ModuleList(towers))
        self.cores = [t.core for t in towers if t.core is not None]  # one per tower with --use_rnn, else none
        self.recurrent = cfg.use_rnn
        # Only float observations are normalized (per key); image frames are scaled by their encoder.
        float_keys = {
            k: sp
            for k, sp in obs_subspaces(enc_space).items()
            if isinstance(sp, gym.spaces.Box) and sp.dtype.kind == "f"
        }
        self.obs_normalizers = (  # a ModuleDict (buffers in the state dict), typed as the dict it is read as
            cast(
                dict[str, RunningMeanStd],
                nn.ModuleDict({k: RunningMeanStd(tuple(sp.shape)) for k, sp in float_keys.items()}),
            )
            if cfg.normalize_input and float_keys
            else None
        )
        # With --normalize_returns the value head predicts normalized returns; everything outside the model (buffers,
        # V-trace, GAE) sees real-scale values through denormalize_values.
        self.returns_normalizer = RunningMeanStd(()) if cfg.normalize_returns else None
        self.state_sizes = [t.state_size for t in self.towers]
        self.rnn_state_size = sum(self.state_sizes)  # 0 without a core
        # Box actions (also inside a Tuple): a learned log-std per dimension, or (--adaptive_stddev) predicted per
        # state by extra policy-head outputs after the distribution parameters.
        self.gaussian_dims = gaussian_dims(action_space)
        self.adaptive_stddev = bool(cfg.adaptive_stddev and self.gaussian_dims)
        self.num_params = num_action_params(action_space)
        extra = self.gaussian_dims if self.adaptive_stddev else 0
        self.policy_head = nn.Linear(self.towers[0].out_size, self.num_params + extra)
        self.value_head = nn.Linear(self.towers[-1].out_size, 1)
        self.log_std = None
        # --use_sde (algo/sde.py): the std per state from the policy features and sigma [L, D], appended to the
        # params as --adaptive_stddev's are; the acting noise is z @ (eps * sigma) with a matrix eps held per agent.
        self.use_sde = bool(cfg.use_sde and self.gaussian_dims)
        self.sde_log_sigma = None
        if self.use_sde:
            L = self.towers[0].out_size
            init = initial_sde_log_std(cfg.initial_stddev, L)
            self.sde_log_sigma = nn.Parameter(torch.full((L, self.gaussian_dims), init))
        elif self.gaussian_dims and not self.adaptive_stddev:
            self.log_std = nn.Parameter(torch.full((self.gaussian_dims,), math.log(cfg.initial_stddev)))
        self.tanh_scale = float(cfg.continuous_tanh_scale) if self.gaussian_dims else 0.0
        self._initialize(cfg.policy_initialization)
        for m in self.modules():
            if isinstance(m, ConvEncoder):
                m.use_channels_last()
        if self.adaptive_stddev:  # start at --initial_stddev like the learned-parameter variant
            with torch.no_grad():
                self.policy_head.bias[self.num_params :] = math.log(cfg.initial_stddev)

    def run_conv_encoders_in(self, dtype: torch.dtype) -> bool:
        """Inference copy: conv encoders compute in `dtype` (ConvEncoder.run_in); False when there is none."""
        convs = [m for m in self.modules() if isinstance(m, ConvEncoder)]
        for m in convs:
            m.run_in(dtype)
        return bool(convs)

    def _initialize(self, kind: str) -> None:
        if kind == "torch_default":
            return
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                if kind == "orthogonal":
                    nn.init.orthogonal_(m.weight, gain=math.sqrt(2))
                else:
                    nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:  # a custom encoder's layer may have none
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.GRUCell, nn.LSTMCell)):
                nn.init.orthogonal_(m.weight_hh)
                nn.init.xavier_uniform_(m.weight_ih)
                nn.init.zeros_(m.bias_ih)
                nn.init.zeros_(m.bias_hh)
        # Small policy outputs start near-uniform; a unit-gain value head matches the return scale.
        nn.init.orthogonal_(self.policy_head.weight, gain=0.01)
        nn.init.orthogonal_(self.value_head.weight, gain=1.0)

    @property
    def sde_shape(self) -> tuple[int, int] | None:
        """[L, D] of an agent's exploration matrix with --use_sde, else None."""
        if self.sde_log_sigma is None:
            return None
        L, D = self.sde_log_sigma.shape
        return L, D

    def heads(self, feats: list[Tensor]) -> tuple[Tensor, Tensor]:
        """feats [B, F] per tower -> (action params [B, P], values [B])."""
        # forward, not __call__: ~4 us a call (encoders.run_layers)
        params = self.policy_head.forward(feats[0])
        if self.sde_log_sigma is not None:  # --use_sde
            params = torch.cat([params.float(), sde_log_std(feats[0], self.sde_log_sigma)], dim=1)
        return params, self.value_head.forward(feats[-1]).squeeze(-1)

    def sde_noise(self, policy_features: Tensor, eps: Tensor) -> Tensor:
        """policy_features [B, L] (feats[0] of `features`), eps [B, L, D] each row's matrix -> [B, D] noise."""
        assert self.sde_log_sigma is not None, "sde_noise is for a model with --use_sde"
        return sde_noise(policy_features, eps, self.sde_log_sigma)

    def _encoder_input(self, obs: dict[str, Tensor]) -> Tensor | dict[str, Tensor]:
        """Normalized; a plain tensor for non-Dict spaces (so custom encoders keep their tensor API)."""
        obs = self.normalize_obs(obs)
        return {k: obs[k] for k in self.encoded_keys} if self.dict_obs else obs[OBS_KEY]

    def forward_step(
        self, obs: Tensor | dict[str, Tensor], rnn_state: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """One step for a batch: obs {key: [B, *shape]}, rnn_state [B, H] (already reset where needed) ->
        (action params [B, P], values [B], new rnn_state [B, H] or None)."""
        feats, new_state = self.features(obs, rnn_state)
        params, values = self.heads(feats)
        return params, values, new_state

    def features(self, obs: Tensor | dict[str, Tensor], rnn_state: Tensor | None) -> tuple[list[Tensor], Tensor | None]:
        """`forward_step` before the heads: (features [B, F] per tower, new rnn_state [B, H] or None)."""
        x_in = self._encoder_input(as_obs_tensors(obs))
        feats = [tower.encoder(x_in) for tower in self.towers]
        if not self.cores:
            return feats, None
        assert rnn_state is not None, "a recurrent model steps from its state"
        new_states = []
        for i, (core, h) in enumerate(zip(self.cores, rnn_state.split(self.state_sizes, dim=1), strict=True)):
            feats[i], h = core(feats[i], h)
            new_states.append(h)
        return feats, torch.cat(new_states, dim=1)

    def forward_sequence(
        self, obs: Tensor | dict[str, Tensor], rnn_states: Tensor | None, is_first: Tensor, recurrence: int
    ) -> tuple[Tensor, Tensor]:
        """Trajectories for training: obs {key: [B, L, *shape]}, stored rnn_states [B, L, H], is_first [B, L].
        BPTT restarts every `recurrence` steps from the stored state; the state is zeroed where an episode starts.
        Returns (action params [B, L, P], values [B, L])."""
        B, L = is_first.shape
        flat = {k: v.reshape(B * L, *v.shape[2:]) for k, v in as_obs_tensors(obs).items()}
        if not self.recurrent:
            params, values, _ = self.forward_step(flat, None)
            return params.view(B, L, -1), values.view(B, L)
        assert rnn_states is not None, "a recurrent model trains from the stored states"
        keep = (~is_first).float().unsqueeze(-1)  # [B, L, 1]
        x_in = self._encoder_input(flat)
        encoded = [t.encoder(x_in).view(B, L, -1) for t in self.towers]
        feats_seq: list[list[Tensor]] = [[] for _ in self.towers]
        h: Tensor
        for t in range(L):
            if t % recurrence == 0:
                h = rnn_states[:, t]
            h = h * keep[:, t]
            new_states = []
            for i, (core, hi) in enumerate(zip(self.cores, h.split(self.state_sizes, dim=1), strict=True)):
                x, hi = core(encoded[i][:, t], hi)
                feats_seq[i].append(x)
                new_states.append(hi)
            h = torch.cat(new_states, dim=1)
        feats = [torch.stack(f, dim=1).reshape(B * L, -1) for f in feats_seq]
        params, values = self.heads(feats)
        return params.view(B, L, -1), values.view(B, L)

    def normalize_obs(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        if self.obs_normalizers is None:
            return obs
        return {k: self.obs_normalizers[k](v.float()) if k in self.obs_normalizers else v for k, v in obs.items()}

    def denormalize_values(self, values: Tensor) -> Tensor:
        return values if self.returns_normalizer is None else self.returns_normalizer.denormalize(values)

    def normalize_values(self, values: Tensor) -> Tensor:
        return values if self.returns_normalizer is None else self.returns_normalizer.normalize(values)

    def update_returns_normalizer(self, returns: Tensor, mask: Tensor | None = None) -> None:
        """returns [...] value targets; mask (same shape, bool): only those count."""
        if self.returns_normalizer is not None:
            self.returns_normalizer.update(returns.reshape(-1), None if mask is None else mask.reshape(-1))

    def update_normalizers(self, obs: Tensor | dict[str, Tensor], mask: Tensor | None = None) -> None:
        """obs {key: [N, *shape]} of a training batch; mask [N] (bool): only those samples count."""
        if self.obs_normalizers is not None:
            obs = as_obs_tensors(obs)
            for k, norm in self.obs_normalizers.items():
                norm.update(obs[k], mask)

    def distribution(self, params: Tensor, action_mask: Tensor | None = None):
        """params [B, P]; action_mask [B, A] (nonzero = allowed) for masked discrete actions."""
        log_std: Tensor | None = self.log_std
        if self.adaptive_stddev or self.use_sde:
            params, log_std = params[:, : self.num_params], params[:, self.num_params :]
        if self.tanh_scale > 0:
            params = squash_means(self.action_space, params, self.tanh_scale)
        return make_distribution(self.action_space, params, log_std, action_mask)
