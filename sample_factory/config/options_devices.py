"""The options that place learners and policy workers on devices and give one policy several learner processes
(a data-parallel learner group: algo/data_parallel.py, docs/scale-out.md)."""

from __future__ import annotations

from sample_factory.config.option_types import OptionGroup, opt


class DeviceOptions(OptionGroup, title="Devices and data-parallel learners"):
    """Where learners and policy workers run, and learner groups of several ranks per policy."""

    learners_per_policy: int = opt(
        1,
        "Learner processes (ranks) per policy: a data-parallel learner group. Each rank copies its share of every "
        "training batch (whole trajectories) straight out of the shared trajectory buffers, gradients are summed "
        "with torch.distributed (NCCL where every rank has a GPU of its own, gloo otherwise) so that an update "
        "equals one learner's on the whole batch, and rank 0 publishes the weights and writes the checkpoints. "
        "Not with --serial_mode, PBT, APPO replay (--exp_replayer=uniform) or --sampler_only.",
    )

    learner_devices: str = opt(
        "",
        "Devices of the learner processes, comma-separated, taken in order by policy 0 rank 0, policy 0 rank 1, "
        "..., policy 1 rank 0, ... and cycled when shorter: a GPU index as torch numbers them (after "
        "CUDA_VISIBLE_DEVICES), cuda:N or cpu (e.g. 0,1 or cpu,cpu). Empty: --device=cpu puts every learner on "
        "the CPU; with GPUs learner k in that order gets GPU k mod (number of visible GPUs).",
    )

    policy_worker_devices: str = opt(
        "",
        "Devices of the policy workers, comma-separated like --learner_devices, taken in order by policy 0 worker "
        "0, policy 0 worker 1, ..., policy 1 worker 0, ... and cycled. Empty: worker i of policy p runs on the "
        "device of that policy's learner rank i mod --learners_per_policy (inference next to its learner, one GPU "
        "per policy in a population when there are as many GPUs as policies).",
    )

    collective_timeout_sec: float = opt(
        45.0,
        "Longest wait of a learner rank in one torch.distributed operation (process-group start, barriers, "
        "all-reduces, broadcasts) of a --learners_per_policy > 1 group: past it the rank fails and the run stops "
        "instead of hanging on a rank that died or stalled. Below --heartbeat_timeout_sec, so that the failure "
        "says what happened before the waiting rank counts as silent.",
    )
