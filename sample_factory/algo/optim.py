"""Adam for the learners: torch's fused Adam kernel behind a small optimizer of our own.

Why not `torch.optim.Adam(fused=True)` itself: every `torch.optim.Optimizer` imports `torch._dynamo` when it is
built (its param-group methods are wrapped to keep dynamo out, and `step` calls dynamo's graph breaks), which took
1.0-1.1 s on a 2-core machine and sat on the path to a run's first SGD step (the fork server preloaded it for every
process). This class calls the same kernel (`torch._fused_adam_`) with the same state, so its updates are
bit-identical to `torch.optim.Adam(fused=True)` (tests/algo/test_optim.py), and it reads and writes torch's
`state_dict` format: checkpoints load into either optimizer.

Only what the learners use: one or more param groups with lr, betas, eps and weight_decay (L2, as torch's Adam);
no amsgrad, maximize, sparse or complex parameters."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

FUSED_DEVICES = ("cpu", "cuda")  # where torch ships the fused Adam kernel (others: torch.optim.Adam, unfused)
# torch.optim.Adam's param-group keys besides the hyperparameters: written so that torch can load our state dicts
_TORCH_GROUP_FLAGS = {
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": True,
    "decoupled_weight_decay": False,
}
_UNSUPPORTED = ("amsgrad", "maximize", "differentiable", "capturable", "decoupled_weight_decay")


def fused_adam_available(params: Iterable[Tensor]) -> bool:
    """Whether `FusedAdam` can optimize these parameters (floating point, on a device with the kernel)."""
    return hasattr(torch, "_fused_adam_") and all(
        p.device.type in FUSED_DEVICES and p.is_floating_point() and not p.is_complex() for p in params
    )


class FusedAdam:
    """Adam (Kingma & Ba, 2015) with torch.optim.Adam's interface as the learners use it: `param_groups`, `state`,
    `step`, `zero_grad`, `state_dict`, `load_state_dict`."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        params = list(params)
        if not params:
            raise ValueError("FusedAdam got an empty parameter list")
        if not fused_adam_available(params):
            raise ValueError("FusedAdam needs floating-point parameters on " + " or ".join(FUSED_DEVICES))
        group = {"params": params, "lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        self.param_groups: list[dict[str, Any]] = [{**group, **_TORCH_GROUP_FLAGS}]
        self.state: dict[Tensor, dict[str, Tensor]] = defaultdict(dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.requires_grad_(False)
                    p.grad.zero_()

    def _moments(self, p: Tensor) -> dict[str, Tensor]:
        state = self.state[p]
        if not state:  # as torch's fused Adam: a float32 step counter on the parameter's device
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, found_inf: Tensor | None = None) -> None:
        """One Adam update of every parameter that has a gradient. found_inf: a float scalar on the parameters'
        device; where it is 1 the kernel leaves parameters, moments and step counts as they were (the skip is
        decided on the device, as torch's GradScaler does it, so the host never waits for the GPU)."""
        for group in self.param_groups:
            # [(device, dtype)] -> the lists torch's kernel takes: params, grads, exp_avgs, exp_avg_sqs, steps
            lists: dict[tuple, tuple[list[Tensor], ...]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedAdam does not support sparse gradients")
                s = self._moments(p)
                ls = lists.setdefault((p.device, p.dtype), ([], [], [], [], []))
                for lst, t in zip(ls, (p, p.grad, s["exp_avg"], s["exp_avg_sq"], s["step"]), strict=True):
                    lst.append(t)
            beta1, beta2 = group["betas"]
            for params, grads, exp_avgs, exp_avg_sqs, steps in lists.values():
                torch._foreach_add_(steps, 1)
                torch._fused_adam_(
                    params,
                    grads,
                    exp_avgs,
                    exp_avg_sqs,
                    [],  # max_exp_avg_sqs: amsgrad only
                    steps,
                    amsgrad=False,
                    lr=lr if isinstance(lr := group["lr"], Tensor) else float(lr),  # a tensor: kl_adaptive
                    beta1=float(beta1),
                    beta2=float(beta2),
                    weight_decay=float(group["weight_decay"]),
                    eps=float(group["eps"]),
                    maximize=False,
                    found_inf=found_inf,
                )
                if found_inf is not None:  # a skipped step does not count (torch's fused Adam does the same)
                    torch._foreach_sub_(steps, [found_inf] * len(steps))

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's format: parameters numbered in group order, state keyed by those numbers."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            groups.append(
                {**{k: v for k, v in group.items() if k != "params"}, "params": [index[id(p)] for p in group["params"]]}
            )
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if s}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict of this class or of torch.optim.Adam (any implementation): hyperparameters from the
        saved groups, moments cast to each parameter's dtype and device, step counters to float32 there."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"optimizer state has {len(saved_groups)} param groups, this optimizer {len(self.param_groups)}"
            )
        for saved, group in zip(saved_groups, self.param_groups, strict=True):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"optimizer state has a group of {len(saved['params'])} parameters where this one has "
                    f"{len(group['params'])}"
                )
            if bad := [k for k in _UNSUPPORTED if saved.get(k)]:
                raise ValueError(f"optimizer state uses Adam options FusedAdam does not support: {bad}")
        by_index = {
            i: p
            for saved, group in zip(saved_groups, self.param_groups, strict=True)
            for i, p in zip(saved["params"], group["params"], strict=True)
        }
        self.state = defaultdict(dict)
        for i, s in state_dict["state"].items():
            p = by_index[int(i)]
            # copies: the kernel updates them in place, and the caller's dict (a loaded checkpoint) stays as it was
            self.state[p] = {
                k: torch.as_tensor(v).to(dtype=torch.float32 if k == "step" else p.dtype, device=p.device, copy=True)
                for k, v in s.items()
            }
        for saved, group in zip(saved_groups, self.param_groups, strict=True):
            for k in ("lr", "eps", "weight_decay"):
                group[k] = saved[k]
            if isinstance(group["lr"], Tensor):  # a device-side rate (kl_adaptive) goes where the parameters are
                group["lr"] = group["lr"].to(device=group["params"][0].device, dtype=torch.float32, copy=True)
            group["betas"] = tuple(saved["betas"])


Optimizer = torch.optim.Optimizer | FusedAdam  # what the learners' algorithms step
