"""Device placement of learner ranks and policy workers (runtime/placement.py), with fake GPU counts: the rule
documented in docs/scale-out.md ("One machine, many GPUs")."""

from __future__ import annotations

import os

import pytest
import torch

from sample_factory.config import ConfigError, parse_cfg
from sample_factory.runtime.placement import group_backend, place, place_components


def cfg_of(*flags: str):
    return parse_cfg(["--env=CartPole-v1", *flags])


def test_cpu_puts_everything_on_the_cpu():
    p = place(cfg_of("--learners_per_policy=2", "--policy_workers_per_policy=2"), "cpu", num_gpus=4)
    assert set(p.learners.values()) == {"cpu"} and set(p.policy_workers.values()) == {"cpu"}
    assert sorted(p.learners) == [(0, 0), (0, 1)]


def test_a_population_gets_one_gpu_per_policy_and_its_workers_follow_their_learner():
    p = place(cfg_of("--num_policies=4", "--policy_workers_per_policy=2"), "gpu", num_gpus=4)
    assert p.learners == {(i, 0): f"cuda:{i}" for i in range(4)}
    assert p.policy_workers == {(i, w): f"cuda:{i}" for i in range(4) for w in range(2)}


def test_one_gpu_keeps_the_device_flag_as_it_is():
    p = place(cfg_of("--learners_per_policy=2"), "gpu", num_gpus=1)
    assert set(p.learners.values()) == {"gpu"} and set(p.policy_workers.values()) == {"gpu"}


def test_learner_ranks_round_robin_over_the_visible_gpus():
    cfg = cfg_of("--num_policies=2", "--learners_per_policy=2", "--policy_workers_per_policy=3")
    p = place(cfg, "gpu", num_gpus=3)
    assert p.learners == {(0, 0): "cuda:0", (0, 1): "cuda:1", (1, 0): "cuda:2", (1, 1): "cuda:0"}
    # worker i of policy p: the device of rank i mod 2 of that policy
    assert [p.policy_workers[1, i] for i in range(3)] == ["cuda:2", "cuda:0", "cuda:2"]


def test_explicit_lists_are_taken_in_order_and_cycled():
    cfg = cfg_of(
        "--num_policies=2",
        "--learners_per_policy=2",
        "--learner_devices=1,cuda:0,cpu",
        "--policy_worker_devices=cpu",
    )
    p = place(cfg, "gpu", num_gpus=2)
    assert p.learners == {(0, 0): "cuda:1", (0, 1): "cuda:0", (1, 0): "cpu", (1, 1): "cuda:1"}
    assert set(p.policy_workers.values()) == {"cpu"}
    fake_cpus = place(cfg_of("--learners_per_policy=2", "--learner_devices=cpu,cpu"), "cpu", num_gpus=0)
    assert fake_cpus.learners == {(0, 0): "cpu", (0, 1): "cpu"}


@pytest.mark.parametrize(
    "devices, message",
    [("2", "GPU 2 does not exist"), ("0,,1", "empty entry"), ("gpu0", "not a GPU index"), ("cuda:x", "not a GPU")],
)
def test_bad_device_lists(devices: str, message: str):
    with pytest.raises(ConfigError, match=message):
        place(cfg_of(f"--learner_devices={devices}"), "gpu", num_gpus=2)


def test_backend_nccl_only_where_every_rank_has_a_gpu_of_its_own():
    assert group_backend(["cuda:0", "cuda:1"]) == "nccl"
    assert group_backend(["cuda:0", "cuda:0"]) == "gloo"  # NCCL refuses two ranks on one GPU
    assert group_backend(["cpu", "cpu"]) == "gloo"
    assert group_backend(["cuda:0", "cpu"]) == "gloo"


def test_the_runner_counts_gpus_as_torch_sees_them(monkeypatch):
    """CUDA_VISIBLE_DEVICES=5,7 leaves torch 2 GPUs, numbered 0 and 1: the placement uses those numbers."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    lines = []
    cfg = cfg_of("--learners_per_policy=2", "--policy_workers_per_policy=2")
    cfg.device = "gpu"
    run = place_components(cfg, lines.append)
    assert run.learners == {(0, 0): "cuda:0", (0, 1): "cuda:1"}
    store, backend = run.groups[0]
    assert backend == "nccl" and os.stat(os.path.dirname(store)).st_mode & 0o077 == 0  # a private folder
    assert lines and "0.1: cuda:1" in lines[0] and "2 ranks over nccl" in lines[0]
    assert run.cfg_for(cfg, "cuda:1").device == "cuda:1" and cfg.device == "gpu"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--serial_mode=True"], "--serial_mode"),
        (["--with_pbt=True", "--num_policies=2"], "--with_pbt"),
        (["--replay_proportion=0.5", "--replay_buffer_num_slots=64"], "--exp_replayer=uniform"),
        (["--sampler_only=True"], "--sampler_only"),
        (["--batch_size=32", "--rollout=32", "--num_batches_per_epoch=1"], "leaves a rank without one"),
        (["--collective_timeout_sec=60"], "below --heartbeat_timeout_sec=60"),
    ],
)
def test_what_a_learner_group_does_not_run_with(flags: list[str], message: str, capsys):
    with pytest.raises(SystemExit):
        cfg_of("--learners_per_policy=2", *flags)
    assert message in capsys.readouterr().err
