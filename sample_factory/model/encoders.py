"""Observation encoders, chosen from the observation space: an MLP for vectors (one-hot for Discrete), a conv net
(then an MLP) for images [C, H, W], and for Dict spaces one of these per key, concatenated. Image observations
arrive as uint8 and are scaled to [0, 1] here, so buffers and queues carry 4x fewer bytes."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import gymnasium as gym
import torch
from torch import Tensor, nn

from sample_factory.config import Config
from sample_factory.config.env_defaults import channels_last_frames
from sample_factory.model.activations import Tanh

NONLINEARITIES = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": Tanh}

# (out channels, kernel, stride) per conv layer
CONV_ARCHITECTURES = {
    "convnet_simple": [(32, 8, 4), (64, 4, 2), (128, 3, 2)],
    "convnet_nature": [(32, 8, 4), (64, 4, 2), (64, 3, 1)],
    # the MinAtar paper's network for 10x10 grids (its dense layer of 128 is --encoder_mlp_layers=128)
    "convnet_minatar": [(16, 3, 1)],
}


def run_layers(layers: nn.Sequential, x: Tensor) -> Tensor:
    """layers(x), calling each layer's `forward` directly (nested Sequentials too). nn.Module.__call__ (hook and
    tracing checks) costs about 4 us a layer, most of a small MLP's inference: the classic_control model on 64 rows
    took 70 us through the modules and 31 us through their forwards (1 thread). Forward hooks registered on these
    layers therefore do not run: hook the encoder module itself, which is still called (custom encoders: unchanged)."""
    for layer in layers:
        x = run_layers(layer, x) if type(layer) is nn.Sequential else layer.forward(x)
    return x


def _mlp(in_size: int, layers: list[int], nonlinearity: str) -> tuple[nn.Sequential, int]:
    mods: list[nn.Module] = []
    for size in layers:
        mods += [nn.Linear(in_size, size), NONLINEARITIES[nonlinearity]()]
        in_size = size
    return nn.Sequential(*mods), in_size


class MlpEncoder(nn.Module):
    """[B, *obs_shape] -> [B, out_size]; a Discrete observation [B] (an index) is one-hot encoded first."""

    def __init__(self, obs_space: gym.Space, layers: list[int], nonlinearity: str):
        super().__init__()
        self.one_hot = int(obs_space.n) if isinstance(obs_space, gym.spaces.Discrete) else 0
        in_size = self.one_hot or int(math.prod(obs_space.shape or ()))  # space_encoder's spaces all have a shape
        mlp, self.out_size = _mlp(in_size, layers, nonlinearity)
        self.net = nn.Sequential(nn.Flatten(), mlp)

    def forward(self, obs: Tensor) -> Tensor:
        if self.one_hot:
            obs = torch.nn.functional.one_hot(obs.long(), self.one_hot)
        return run_layers(self.net, obs.float())


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(torch.relu(self.conv1(torch.relu(x))))


def _impala_resnet(in_channels: int) -> nn.Sequential:
    """IMPALA's ResNet: 3 stages of (conv 3x3, max-pool 3x3 stride 2, 2 residual blocks) with 16, 32, 32 channels."""
    mods: list[nn.Module] = []
    for out_c in (16, 32, 32):
        mods += [nn.Conv2d(in_channels, out_c, 3, padding=1), nn.MaxPool2d(3, 2, padding=1)]
        mods += [_ResidualBlock(out_c), _ResidualBlock(out_c)]
        in_channels = out_c
    return nn.Sequential(*mods, nn.ReLU())


def min_frame_size(architecture: str) -> int:
    """The smallest height and width the architecture's convs accept (resnet_impala pads: any size)."""
    size = 1
    for _, kernel, stride in reversed(CONV_ARCHITECTURES.get(architecture, [])):
        size = (size - 1) * stride + kernel
    return size


class ConvEncoder(nn.Module):
    """[B, C, H, W] or [B, H, W, C] (uint8, bool or float) -> [B, out_size]: conv layers, flatten, MLP. [H, W, C]
    frames are read as a channels-last view of [B, C, H, W] (no copy where the convs run channels-last)."""

    def __init__(self, obs_space: gym.spaces.Box, architecture: str, layers: list[int], nonlinearity: str):
        super().__init__()
        self.hwc = channels_last_frames(obs_space.shape)
        chw = tuple(obs_space.shape[i] for i in ((2, 0, 1) if self.hwc else (0, 1, 2)))
        c, h, w = chw
        need = min_frame_size(architecture)
        if min(h, w) < need:
            raise ValueError(
                f"frames of {h}x{w} are smaller than --encoder_conv_architecture={architecture} takes (at least "
                f"{need}x{need}); --encoder_conv_architecture=resnet_impala takes any size, convnet_minatar 3x3 and up"
            )
        convs: list[nn.Module] = []
        if architecture == "resnet_impala":
            convs.append(_impala_resnet(c))
        else:
            for out_c, k, stride in CONV_ARCHITECTURES[architecture]:
                convs += [nn.Conv2d(c, out_c, k, stride), NONLINEARITIES[nonlinearity]()]
                c = out_c
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *chw)).shape[1]
        self.mlp, self.out_size = _mlp(flat, layers, nonlinearity)
        self.scale = 1.0 / 255.0 if obs_space.dtype == "uint8" else 1.0
        self.channels_last = False  # layout of the conv input (a bool: torch.save cannot pickle a memory_format)
        self.compute_dtype = torch.float32  # of weights and activations: bf16 in an inference copy (run_in)

    def use_channels_last(self) -> None:
        """NHWC weights: oneDNN's (and cuDNN's tensor-core) native conv layout. The Nature-size conv net's training
        step measured 1.6x faster on a 2-core CPU than in the default NCHW layout; .to(device), state_dict loads
        and optimizer moments keep the layout, and the function computed is the same. Called after weight init
        (nn.init needs contiguous weights)."""
        self.convs.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stub lacks it
        self.channels_last = True

    def run_in(self, dtype: torch.dtype) -> None:
        """Weights and activations in `dtype` (the policy worker's --inference_precision): oneDNN's bf16 conv
        kernels take half the time of fp32 at inference batch sizes, without autocast's per-call weight casts.
        The output stays fp32 for what follows (cores, heads, distributions). Weight loads convert on copy_."""
        self.to(dtype)
        self.compute_dtype = dtype
        first = self.convs[0]
        if self.channels_last and isinstance(first, nn.Conv2d) and first.weight.device.type == "cpu":
            # uint8 frames with few channels are slow to transpose to NHWC (8 Atari frames: 126 us of the 159 us
            # conversion); oneDNN reads NCHW frames into the first conv and the later convs stay NHWC. Forward of the
            # atari model in bf16, 1 thread: 1.04x / 1.08x / 1.11x / 1.06x at batch 8 / 16 / 32 / 64. Inference only:
            # the training step (autocast) measured 0.90x with it.
            first.to(memory_format=torch.contiguous_format)  # type: ignore[call-overload]
            self.channels_last = False  # the input layout

    def forward(self, obs: Tensor) -> Tensor:
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        # uint8 frames change layout before the dtype (4x fewer bytes to move); scaling in place is safe only on a
        # new tensor, i.e. when the dtype changed
        if self.hwc:
            obs = obs.permute(0, 3, 1, 2)  # [B, H, W, C] -> [B, C, H, W], channels-last strides
        x = obs.contiguous(memory_format=layout).to(self.compute_dtype)  # [B, C, H, W]
        if self.scale != 1.0:
            x = x.mul_(self.scale) if obs.dtype != self.compute_dtype else x * self.scale
        return run_layers(self.mlp, run_layers(self.convs, x)).float()


class DictEncoder(nn.Module):
    """{key: [B, *shape]} -> [B, sum of the per-key out_sizes]: one encoder per key, chosen from its space."""

    def __init__(self, cfg: Config, obs_space: gym.spaces.Dict):
        super().__init__()
        self.encoders = nn.ModuleDict({k: space_encoder(cfg, sub) for k, sub in obs_space.spaces.items()})
        self.out_size = sum(encoder_out_size(e) for e in self.encoders.values())

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        return torch.cat([enc(obs[k]) for k, enc in self.encoders.items()], dim=1)


_CUSTOM_ENCODERS: dict[str, Callable[[Config, gym.Space], nn.Module]] = {}


def register_encoder(name: str, factory: Callable[[Config, gym.Space], nn.Module]) -> None:
    """Register a custom encoder, selected with --encoder_custom=name. `factory(cfg, obs_space)` returns an nn.Module
    mapping a batch of observations [B, *obs_shape] to features [B, out_size] and having an `out_size` attribute.
    For a Dict observation space the module gets a dict key -> [B, *shape] (without "action_mask"). Register at
    import time of the module that defines it (workers import it too: see docs/custom-env-and-model.md)."""
    _CUSTOM_ENCODERS[name] = factory


def encoder_out_size(encoder: nn.Module) -> int:
    """The features per sample an encoder gives: its `out_size` (register_encoder's contract)."""
    size = getattr(encoder, "out_size", None)
    if not isinstance(size, numbers.Integral):
        raise TypeError(f"encoder {type(encoder).__name__} has out_size {size!r}: it needs an int (register_encoder)")
    return int(size)


def make_encoder(cfg: Config, obs_space: gym.Space) -> nn.Module:
    if cfg.encoder_custom:
        if cfg.encoder_custom not in _CUSTOM_ENCODERS:
            raise ValueError(f"--encoder_custom={cfg.encoder_custom} is not registered (register_encoder)")
        return _CUSTOM_ENCODERS[cfg.encoder_custom](cfg, obs_space)
    if isinstance(obs_space, gym.spaces.Dict):
        return DictEncoder(cfg, obs_space)
    return space_encoder(cfg, obs_space)


def space_encoder(cfg: Config, space: gym.Space) -> nn.Module:
    """The built-in encoder for one (non-Dict) observation space: conv for images ([C, H, W] or [H, W, C]), MLP
    otherwise."""
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 3:
        return ConvEncoder(space, cfg.encoder_conv_architecture, cfg.encoder_mlp_layers, cfg.nonlinearity)
    vector = isinstance(space, gym.spaces.Box) and len(space.shape) <= 2
    if vector or isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return MlpEncoder(space, cfg.encoder_mlp_layers, cfg.nonlinearity)
    raise ValueError(f"no encoder for observation space {space} (vectors and [C, H, W] or [H, W, C] images work)")
