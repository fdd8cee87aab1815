"""`python -m sample_factory.evaluation.export_onnx --experiment=NAME`: export a run's deterministic policy to ONNX.

Graph inputs:  obs [B, *obs_shape] (the env's dtype) — for a Dict observation space one input per key, named by the
key (an "action_mask" input masks the actions) — and rnn_state [B, H] float32 for a recurrent model.
Graph outputs: actions [B] int64 (argmax, Discrete) or [B, D] float32 (Gaussian mean brought into the bounds as in
training, --action_bounds: the same actions the Policy API returns), values [B] float32,
and new_rnn_state [B, H] for a recurrent model. B is a dynamic axis. Feed zeros as rnn_state at an episode start.

Needs the [onnx] extra. Uses torch's TorchScript-based exporter (dynamo=False): with
torch 2.13 it exports these models in well under a second and needs no package beyond onnx; the torch.export-based
exporter needs onnxscript as well and took ~7 s for a toy GRU model.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from sample_factory.config.extras import install_hint
from sample_factory.envs.spaces import ACTION_MASK_KEY, ObsField
from sample_factory.evaluation.policy_api import Policy, load_policy
from sample_factory.experiment.folder import resolve_experiment_dir
from sample_factory.model.actor_critic import ActorCritic

OPSET = 17  # supported by every onnxruntime from 1.14 on; the ops used here (Gemm, GRU-cell math, ArgMax) are old


def import_onnx() -> tuple[Any, Any]:
    """(onnx, onnxruntime), or ImportError with the install command."""
    try:
        import onnx
        import onnxruntime
    except ImportError as e:
        raise ImportError(f"ONNX export needs the optional extra: {install_hint('onnx')} ({e})") from e
    return onnx, onnxruntime


class DeterministicPolicy(nn.Module):
    """forward(*observation inputs [B, ...], rnn_state [B, H]?) -> (actions, values [B], new_rnn_state [B, H]?)
    for tracing; the observation inputs come in the order of `keys`."""

    low: Tensor  # [D] buffers, registered for a Box action space with --action_bounds clip or tanh
    high: Tensor

    def __init__(self, model: ActorCritic, keys: list[str], action_bounds: str = "none"):
        super().__init__()
        self.model, self.keys = model, keys
        space = model.action_space
        self.bounds = action_bounds if isinstance(space, gym.spaces.Box) else "none"
        if isinstance(space, gym.spaces.Box) and self.bounds != "none":
            self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32))

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        obs = dict(zip(self.keys, inputs, strict=False))
        rnn_state = inputs[len(self.keys)] if len(inputs) > len(self.keys) else None
        params, values, new_state = self.model.forward_step(obs, rnn_state)
        # [B] argmax of the (masked) logits, or [B, D] mean
        actions = self.model.distribution(params, obs.get(ACTION_MASK_KEY)).mode()
        if self.bounds == "clip":  # as envs/actions.bound_box, in the graph
            actions = torch.minimum(torch.maximum(actions, self.low), self.high)
        elif self.bounds == "tanh":
            actions = self.low + (torch.tanh(actions) + 1.0) * 0.5 * (self.high - self.low)
        return (actions, values) if new_state is None else (actions, values, new_state)


def io_names(keys: list[str], recurrent: bool) -> tuple[list[str], list[str]]:
    if recurrent:
        return [*keys, "rnn_state"], ["actions", "values", "new_rnn_state"]
    return list(keys), ["actions", "values"]


def example_inputs(fields: dict[str, ObsField], batch: int, rng: np.random.Generator | None = None) -> dict:
    """key -> [batch, *shape] array: standard normal floats (zeros without rng), zero integers, all actions allowed."""
    out = {}
    for k, f in fields.items():
        if k == ACTION_MASK_KEY:
            out[k] = np.ones((batch, *f.shape), dtype=f.dtype)
        elif f.dtype.kind == "f" and rng is not None:
            out[k] = rng.standard_normal((batch, *f.shape)).astype(f.dtype)
        else:
            out[k] = np.zeros((batch, *f.shape), dtype=f.dtype)
    return out


def export_model(
    model: ActorCritic, fields: dict[str, ObsField], output: str | Path, action_bounds: str = "clip"
) -> Path:
    """Trace `model` (moved to CPU, eval mode) into an ONNX file and check it with onnx.checker."""
    onnx, _ = import_onnx()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    keys = list(fields)
    # a copy: the caller's model stays put
    wrapper = DeterministicPolicy(copy.deepcopy(model), keys, action_bounds).cpu().eval()
    # Batch 2, not 1: a size-1 dim is easily specialised away while tracing, dynamic_axes then lies.
    args: tuple[Tensor, ...] = tuple(torch.as_tensor(v) for v in example_inputs(fields, 2).values())
    if model.recurrent:
        args += (torch.zeros(2, model.rnn_state_size),)
    inputs, outputs = io_names(keys, model.recurrent)
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript exporter announces its deprecation on every call; it is chosen on purpose (module doc).
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            wrapper,
            args,
            str(output),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={name: {0: "batch"} for name in inputs + outputs},
            opset_version=OPSET,
            dynamo=False,
        )
    onnx.checker.check_model(onnx.load(str(output)))
    return output


def export_policy(policy: Policy, output: str | Path) -> Path:
    """The policy's deterministic graph to `output`; see the module doc for inputs and outputs."""
    return export_model(policy.model, policy.fields, output, policy.action_bounds)


def max_abs_diff_vs_torch(policy: Policy, onnx_path: str | Path, batch: int = 5, seed: int = 0) -> float:
    """Run the ONNX file with onnxruntime and the torch model on the same random inputs; the largest difference."""
    _, ort = import_onnx()
    rng = np.random.default_rng(seed)
    feeds = example_inputs(policy.fields, batch, rng)
    if policy.recurrent:
        feeds["rnn_state"] = rng.standard_normal((batch, policy.rnn_state_size)).astype(np.float32)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)
    with torch.no_grad():
        model = DeterministicPolicy(copy.deepcopy(policy.model), list(policy.fields), policy.action_bounds).cpu().eval()
        want = model(*(torch.as_tensor(v) for v in feeds.values()))
    return max(float(np.max(np.abs(g.astype(np.float64) - w.numpy()))) for g, w in zip(got, want, strict=True))


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sample_factory.evaluation.export_onnx", description=__doc__.split("\n")[0]
    )
    p.add_argument("--experiment", required=True, help="Experiment name (or path to the experiment folder).")
    p.add_argument("--train_dir", default=None, help="Root folder of experiments (default ./train_dir).")
    p.add_argument("--output", default=None, help="ONNX file (default <train_dir>/<experiment>/policy_p<id>.onnx).")
    p.add_argument("--policy_id", type=int, default=0)
    p.add_argument("--checkpoint", default="latest", help="latest, best, or a path to a .pth file.")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_arg_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        import_onnx()
        policy = load_policy(args.experiment, args.train_dir, "cpu", args.checkpoint, args.policy_id)
        exp_dir = resolve_experiment_dir(args.experiment, args.train_dir)
        output = Path(args.output) if args.output else exp_dir / f"policy_p{args.policy_id}.onnx"
        export_policy(policy, output)
        diff = max_abs_diff_vs_torch(policy, output)
    except (ImportError, FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"export_onnx: {e}", file=sys.stderr)
        return 1
    inputs, outputs = io_names(list(policy.fields), policy.recurrent)
    print(f"wrote {output}: inputs {inputs}, outputs {outputs}; max |onnxruntime - torch| = {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
