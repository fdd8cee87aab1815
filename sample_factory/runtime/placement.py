"""Which device each learner rank and each policy worker runs on (--learner_devices, --policy_worker_devices,
--learners_per_policy), decided once in the runner so that every process gets its own device string.

The rule (docs/scale-out.md, "One machine, many GPUs"):
- learners are numbered policy-major: policy 0 rank 0, policy 0 rank 1, ..., policy 1 rank 0, ...; an explicit
  --learner_devices list is taken in that order and cycled; without one, --device=cpu puts all on the CPU and with
  GPUs learner k gets GPU k mod G (G = the GPUs torch sees, i.e. after CUDA_VISIBLE_DEVICES);
- policy workers likewise (policy 0 worker 0, policy 0 worker 1, ...) from --policy_worker_devices; without it,
  worker i of policy p shares the device of policy p's learner rank i mod --learners_per_policy.
GPU numbers are torch's: with CUDA_VISIBLE_DEVICES=2,3 the GPUs are 0 and 1 here."""

from __future__ import annotations

import copy
import multiprocessing.util
import os
from collections.abc import Callable
from typing import NamedTuple

import torch

from sample_factory.config import Config, ConfigError


class Placement(NamedTuple):
    learners: dict[tuple[int, int], str]  # (policy, rank) -> device string ("cpu", "cuda:1")
    policy_workers: dict[tuple[int, int], str]  # (policy, worker) -> device string


def parse_devices(text: str, flag: str, num_gpus: int) -> list[str]:
    """ "0,1" / "cpu,cpu" / "cuda:1,cpu" -> torch device strings; an index beyond the visible GPUs is an error."""
    items = [x.strip() for x in text.split(",")]
    if "" in items:
        raise ConfigError(f"--{flag}={text!r} has an empty entry")
    out = []
    for item in items:
        if item == "cpu":
            out.append("cpu")
            continue
        index = item[len("cuda:") :] if item.startswith("cuda:") else item
        if not index.isdigit():
            raise ConfigError(f"--{flag}: {item!r} is not a GPU index, cuda:N or cpu")
        if int(index) >= num_gpus:
            raise ConfigError(
                f"--{flag}: GPU {index} does not exist: torch sees {num_gpus} GPU(s) (numbered after "
                "CUDA_VISIBLE_DEVICES)"
            )
        out.append(f"cuda:{int(index)}")
    return out


def place(cfg: Config, device: str, num_gpus: int) -> Placement:
    """The devices of every learner rank and policy worker. `device`: the resolved --device (cpu, gpu, cuda:N);
    `num_gpus`: torch.cuda.device_count()."""
    P, N, W = cfg.num_policies, cfg.learners_per_policy, cfg.policy_workers_per_policy
    learner_keys = [(p, r) for p in range(P) for r in range(N)]
    if cfg.learner_devices:
        listed = parse_devices(cfg.learner_devices, "learner_devices", num_gpus)
        learners = {key: listed[k % len(listed)] for k, key in enumerate(learner_keys)}
    elif device == "gpu" and num_gpus > 1:
        learners = {key: f"cuda:{k % num_gpus}" for k, key in enumerate(learner_keys)}
    else:  # cpu, one GPU, or one named device (cuda:1) for everything: --device as it is
        learners = {key: device for key in learner_keys}
    worker_keys = [(p, i) for p in range(P) for i in range(W)]
    if cfg.policy_worker_devices:
        listed = parse_devices(cfg.policy_worker_devices, "policy_worker_devices", num_gpus)
        workers = {key: listed[k % len(listed)] for k, key in enumerate(worker_keys)}
    else:
        workers = {(p, i): learners[p, i % N] for p, i in worker_keys}
    return Placement(learners, workers)


def group_backend(devices: list[str]) -> str:
    """torch.distributed backend of one policy's learner ranks: NCCL where every rank has a GPU of its own, gloo
    otherwise (CPU ranks, or several ranks sharing a GPU, which NCCL refuses)."""
    if all(d.startswith("cuda") for d in devices) and len(set(devices)) == len(devices):
        return "nccl"
    return "gloo"


class RunPlacement(NamedTuple):
    """The runner's decisions: devices, and per data-parallel policy its group's (rendezvous file, backend)."""

    learners: dict[tuple[int, int], str]
    policy_workers: dict[tuple[int, int], str]
    groups: dict[int, tuple[str, str]]

    @staticmethod
    def cfg_for(cfg: Config, device: str) -> Config:
        """`cfg` for a component on `device` (a copy where the device differs from --device)."""
        if device == cfg.device:
            return cfg
        cfg = copy.copy(cfg)
        cfg.device = device
        return cfg


def group_store(policy: int) -> str:
    """The rendezvous file of policy `policy`'s learner group: in the runner's multiprocessing temp folder, which is
    private to the user (mkdtemp, 0700), new for each run and removed with it (algo/data_parallel.py)."""
    return os.path.join(multiprocessing.util.get_temp_dir(), f"learner_group_p{policy}")


def place_components(cfg: Config, log: Callable[[str], None]) -> RunPlacement:
    """Devices of every learner rank and policy worker of the run (cfg.device already resolved), logged when they
    are not all on --device, and a rendezvous file per data-parallel learner group."""
    explicit = cfg.learner_devices or cfg.policy_worker_devices
    num_gpus = torch.cuda.device_count() if cfg.device != "cpu" or explicit else 0
    placement = place(cfg, cfg.device, num_gpus)
    groups = {}
    if cfg.learners_per_policy > 1:
        for p in range(cfg.num_policies):
            devices = [placement.learners[p, r] for r in range(cfg.learners_per_policy)]
            groups[p] = (group_store(p), group_backend(devices))
    if explicit or cfg.learners_per_policy > 1 or num_gpus > 1:
        learners = ", ".join(f"{p}.{r}: {d}" for (p, r), d in placement.learners.items())
        workers = ", ".join(f"{p}.{i}: {d}" for (p, i), d in placement.policy_workers.items())
        backends = ", ".join(f"policy {p}: {cfg.learners_per_policy} ranks over {b}" for p, (_, b) in groups.items())
        log(f"placement: learners {learners} | policy workers {workers}" + (f" | {backends}" if backends else ""))
    return RunPlacement(placement.learners, placement.policy_workers, groups)
