"""`python -m sample_factory.export_onnx --experiment=NAME`: export the deterministic policy of a run to ONNX.

Graph inputs:  obs [B, *obs_shape] (the env's dtype), and rnn_state [B, H] float32 for a recurrent model.
Graph outputs: actions [B] int64 (argmax, Discrete) or [B, D] float32 (Gaussian mean, Box), values [B] float32,
and new_rnn_state [B, H] for a recurrent model. B is a dynamic axis. Feed zeros as rnn_state at an episode start.

Needs the optional extra: pip install -e .[onnx]. Uses torch's TorchScript-based exporter (dynamo=False): with
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

import numpy as np
import torch
from torch import Tensor, nn

from sample_factory.experiment import resolve_experiment_dir
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.policy_api import Policy, load_policy

OPSET = 17  # supported by every onnxruntime from 1.14 on; the ops used here (Gemm, GRU-cell math, ArgMax) are old


def import_onnx() -> tuple[Any, Any]:
    """(onnx, onnxruntime), or ImportError with the install command."""
    try:
        import onnx
        import onnxruntime
    except ImportError as e:
        raise ImportError(f"ONNX export needs the optional extra: pip install -e .[onnx] ({e})") from e
    return onnx, onnxruntime


class DeterministicPolicy(nn.Module):
    """forward(obs [B, ...], rnn_state [B, H]?) -> (actions, values [B], new_rnn_state [B, H]?) for tracing."""

    def __init__(self, model: ActorCritic):
        super().__init__()
        self.model = model

    def forward(self, obs: Tensor, rnn_state: Tensor | None = None) -> tuple[Tensor, ...]:
        params, values, new_state = self.model.forward_step(obs, rnn_state)
        actions = self.model.distribution(params).mode()  # [B] argmax of logits, or [B, D] mean
        return (actions, values) if new_state is None else (actions, values, new_state)


def io_names(recurrent: bool) -> tuple[list[str], list[str]]:
    if recurrent:
        return ["obs", "rnn_state"], ["actions", "values", "new_rnn_state"]
    return ["obs"], ["actions", "values"]


def export_model(model: ActorCritic, obs_shape: Sequence[int], obs_dtype: Any, output: str | Path) -> Path:
    """Trace `model` (moved to CPU, eval mode) into an ONNX file and check it with onnx.checker."""
    onnx, _ = import_onnx()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    wrapper = DeterministicPolicy(copy.deepcopy(model)).cpu().eval()  # a copy: the caller's model stays put
    # Batch 2, not 1: a size-1 dim is easily specialised away while tracing, dynamic_axes then lies.
    obs = torch.as_tensor(np.zeros((2, *obs_shape), dtype=obs_dtype))
    args: tuple[Tensor, ...] = (obs,)
    if model.recurrent:
        args += (torch.zeros(2, model.rnn_state_size),)
    inputs, outputs = io_names(model.recurrent)
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
    return export_model(policy.model, policy.obs_shape, policy.obs_space.dtype, output)


def max_abs_diff_vs_torch(policy: Policy, onnx_path: str | Path, batch: int = 5, seed: int = 0) -> float:
    """Run the ONNX file with onnxruntime and the torch model on the same random inputs; the largest difference."""
    _, ort = import_onnx()
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((batch, *policy.obs_shape)).astype(policy.obs_space.dtype)
    feeds = {"obs": obs}
    if policy.recurrent:
        feeds["rnn_state"] = rng.standard_normal((batch, policy.rnn_state_size)).astype(np.float32)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)
    with torch.no_grad():
        model = DeterministicPolicy(copy.deepcopy(policy.model)).cpu().eval()
        want = model(*(torch.as_tensor(v) for v in feeds.values()))
    return max(float(np.max(np.abs(g.astype(np.float64) - w.numpy()))) for g, w in zip(got, want, strict=True))


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sample_factory.export_onnx", description=__doc__.split("\n")[0])
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
    inputs, outputs = io_names(policy.recurrent)
    print(f"wrote {output}: inputs {inputs}, outputs {outputs}; max |onnxruntime - torch| = {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
