"""The file-level pieces of PBT with separate member runs (pbt/members.py) and the coordinator's decisions between
segments (pbt/ray_backend.RayPopulation, driven here without Ray): member commands, progress reading, the checkpoint
transplant of a replacement (semantics and atomicity), the hyperparameter hand-over through pbt_p0.json, restarts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from sample_factory.config import parse_cfg, strip_flags
from sample_factory.experiment.checkpoints import list_checkpoints, load_latest_checkpoint, save_checkpoint
from sample_factory.pbt.members import (
    NEVER,
    copy_member_weights,
    latest_checkpoint_info,
    member_argv,
    read_progress,
    transplant_state,
    write_member_state,
)
from sample_factory.pbt.population import PopulationBasedTraining, load_pbt_state, save_pbt_state
from sample_factory.pbt.ray_backend import RayPopulation

POP = [
    "--env=CartPole-v1",
    "--num_policies=4",
    "--with_pbt=True",
    "--pbt_backend=ray",
    "--pbt_period_env_steps=1000",
    "--pbt_start_mutation=1000",
    "--pbt_replace_fraction=0.5",
    "--pbt_replace_reward_gap=0",
    "--pbt_replace_reward_gap_absolute=0",
    "--pbt_max_member_restarts=1",
    "--train_for_env_steps=5000",
    "--seed=3",
]


def pop_cfg(tmp_path: Path, *extra: str):
    return parse_cfg([*POP, f"--train_dir={tmp_path}", "--experiment=pop", *extra])


def test_member_argv_replaces_population_flags(tmp_path):
    argv = [
        *POP,
        "--num_workers",
        "1",
        "--experiment",
        "pop",
        f"--train_dir={tmp_path}",
        "--restart_behavior=overwrite",
    ]
    argv += ["--learning_rate=0.001", "--with_pbt"]  # a bool flag without a value, last
    cfg = parse_cfg(argv)
    assert strip_flags(["--seed", "7", "--with_pbt", "--gamma=0.9"], ["seed", "with_pbt"]) == ["--gamma=0.9"]
    cmd = member_argv(cfg, argv, tmp_path / "pop", 2, 3000)
    assert cmd[1:3] == ["-m", "sample_factory.train"]
    m = parse_cfg(cmd[3:])
    assert (m.num_policies, m.with_pbt, m.pbt_backend) == (1, True, "in_process")
    assert m.pbt_start_mutation == NEVER and m.train_for_env_steps == 3000
    assert (Path(m.train_dir), m.experiment, m.restart_behavior) == (tmp_path / "pop", "member_2", "resume")
    assert m.seed == 5  # cfg.seed + member index
    # everything else the user typed reaches the member unchanged
    assert (m.num_workers, m.learning_rate, m.pbt_period_env_steps) == (1, 0.001, 1000)
    for flag in ("--num_policies=4", "--pbt_backend=ray", "--seed=3", "--experiment", "--restart_behavior=overwrite"):
        assert flag not in cmd
    # the user's setting: the runner skips random-action decorrelation itself where a segment resumes a checkpoint
    assert m.decorrelate_envs_on_one_worker


def test_ray_backend_config_checks():
    with pytest.raises(SystemExit):
        parse_cfg([*POP, "--pbt_target_objective=value"])  # learner stats are not in progress.csv
    with pytest.raises(SystemExit):
        parse_cfg([*POP, "--lr_schedule=linear_decay"])
    with pytest.raises(SystemExit):
        parse_cfg([*POP, "--exploration_loss_schedule=linear_decay"])


def test_read_progress(tmp_path):
    cfg = pop_cfg(tmp_path)
    assert read_progress(cfg, tmp_path) == (None, pytest.approx(math.nan, nan_ok=True))
    csv = tmp_path / "progress.csv"
    csv.write_text("time_s,env_steps,fps_10s,reward_p0\n1.0,512,100.0,nan\n")
    steps, obj = read_progress(cfg, tmp_path)
    assert steps == 512 and math.isnan(obj)  # no finished episode yet
    # a row being appended (no newline yet) is not read; a column added later (len_p0) is fine
    csv.write_text("time_s,env_steps,fps_10s,reward_p0,len_p0\n1.0,512,1,nan,\n2.0,2048,1,23.500,9\n3.0,40")
    assert read_progress(cfg, tmp_path) == (2048, 23.5)
    csv.write_text("time_s,env_frames,fps_10s,reward_p0\n2.0,8000,1,-3.000\n")  # runs that count frames
    assert read_progress(cfg, tmp_path) == (8000, -3.0)


def _state(version: int, env_steps: int, seed: int) -> dict:
    """A learner checkpoint as Learner._state writes it, from a real APPO algorithm after one optimizer step."""
    cfg = parse_cfg(["--env=CartPole-v1", f"--seed={seed}"])
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "algo": {"optimizer": opt.state_dict()},
        "policy_version": version,
        "env_steps": env_steps,
        "rng": torch.get_rng_state(),
        "cfg": vars(cfg),
    }


def test_transplant_state_has_in_process_semantics():
    target, source = _state(7, 9000, seed=1), _state(30, 12000, seed=2)
    out = transplant_state(target, source)
    assert out["model"] is source["model"]  # the source's weights (normalizer statistics are in the model)
    assert (out["env_steps"], out["policy_version"]) == (9000, 8)  # own counter; the version moves on
    assert out["rng"] is target["rng"] and out["cfg"] is target["cfg"]
    assert out["algo"]["optimizer"]["state"] == {} and target["algo"]["optimizer"]["state"]  # moments dropped
    assert out["algo"]["optimizer"]["param_groups"] == target["algo"]["optimizer"]["param_groups"]
    # DQN: the target network follows the new weights, the rest of the target's algorithm state stays
    dqn = transplant_state({**target, "algo": {**target["algo"], "target": {"w": 0}, "counters": {"n": 5}}}, source)
    assert dqn["algo"]["target"] == source["model"] and dqn["algo"]["counters"] == {"n": 5}
    # the result loads into a fresh model and optimizer, as the resumed learner does
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    model.load_state_dict(out["model"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    opt.load_state_dict(out["algo"]["optimizer"])


def _member_with_checkpoint(root: Path, name: str, version: int, env_steps: int, seed: int) -> Path:
    d = root / name
    save_checkpoint(d / "checkpoint_p0", _state(version, env_steps, seed), version, env_steps, keep=2)
    return d


def test_copy_member_weights_writes_the_targets_newest_checkpoint(tmp_path):
    src = _member_with_checkpoint(tmp_path, "member_0", 30, 12000, seed=2)
    tgt = _member_with_checkpoint(tmp_path, "member_1", 7, 9000, seed=1)
    src_file, new_file = copy_member_weights(src, tgt, keep=2)
    assert src_file == list_checkpoints(src / "checkpoint_p0")[-1]
    assert new_file.name == "checkpoint_000000008_9000.pth"
    assert latest_checkpoint_info(tgt) == (new_file, 8, 9000)
    loaded, path = load_latest_checkpoint(tgt / "checkpoint_p0")
    source = torch.load(src_file, weights_only=False)
    assert path == new_file
    assert all(torch.equal(loaded["model"][k], source["model"][k]) for k in source["model"])


def test_copy_member_weights_is_atomic(tmp_path, monkeypatch):
    src = _member_with_checkpoint(tmp_path, "member_0", 30, 12000, seed=2)
    tgt = _member_with_checkpoint(tmp_path, "member_1", 7, 9000, seed=1)
    before = sorted(p.name for p in (tgt / "checkpoint_p0").iterdir())
    real_save = torch.save

    def dies_half_way(obj, f, *a, **kw):  # the coordinator dies (or the disk fills) in the middle of the write
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(Exception, match="No space left"):
        copy_member_weights(src, tgt, keep=2)
    monkeypatch.setattr(torch, "save", real_save)
    assert sorted(p.name for p in (tgt / "checkpoint_p0").iterdir()) == before  # no partial or temp file
    assert latest_checkpoint_info(tgt)[1:] == (7, 9000)  # the target resumes from its own checkpoint


def test_member_state_round_trip_reaches_the_members_learner(tmp_path):
    """The coordinator's hyperparameters of member 3 (perturbed from the flags) are what member 3's own run hands
    its learner: its PbtController loads pbt_p0.json into a one-policy PopulationBasedTraining."""
    cfg = pop_cfg(tmp_path)
    pbt = PopulationBasedTraining(cfg, 4)
    state = pbt.states[3]
    state.history.append({"env_steps": 1000, "kind": "mutation", "source": None, "changes": {}, "objectives": {}})
    write_member_state(tmp_path / "member_3", state)
    member_cfg = parse_cfg(member_argv(cfg, POP, tmp_path, 3, 2000)[3:])
    saved = load_pbt_state(tmp_path / "member_3", 1, member_cfg)
    assert saved[0].policy_id == 0 and saved[0].history == state.history
    member_pbt = PopulationBasedTraining(member_cfg, 1, states=saved)
    assert member_pbt.hyperparams(0) == state.hyperparams != pbt.hyperparams(0)


def _finished_segment(
    pop_dir: Path, i: int, env_steps: int, reward: float | str, version: int, ckpt_env_steps: int | None = None
) -> None:
    """What a member's segment leaves: its learner's final checkpoint (by default 100 collected env steps were not
    trained on) and a progress.csv row with the run's env-step counter and reward."""
    d = pop_dir / f"member_{i}"
    ckpt = env_steps - 100 if ckpt_env_steps is None else ckpt_env_steps
    save_checkpoint(d / "checkpoint_p0", _state(version, ckpt, seed=i), version, ckpt, 2)
    with open(d / "progress.csv", "a") as f:
        if f.tell() == 0:
            f.write("time_s,env_steps,fps_10s,reward_p0\n")
        f.write(f"1.0,{env_steps},1.0,{reward}\n")


def test_coordinator_decisions_replacement_restart_and_failure(tmp_path):
    cfg = pop_cfg(tmp_path)
    pop_dir = tmp_path / "pop"
    pop = RayPopulation(cfg, POP, pop_dir, None)
    assert [m.target for m in pop.members] == [1000] * 4
    rewards = {0: 50.0, 1: 10.0, 2: 40.0, 3: 30.0}
    for i in (0, 2, 3):
        _finished_segment(pop_dir, i, 1010, rewards[i], version=5)
        assert pop._on_segment_end(pop.members[i], {"exit_code": 0})
    # member 1, the worst of 4 known objectives (k = 2): replaced by member 0 or 2
    _finished_segment(pop_dir, 1, 1020, rewards[1], version=4)
    assert pop._on_segment_end(pop.members[1], {"exit_code": 0})
    event = pop.pbt.states[1].history[-1]
    assert event["kind"] == "replacement" and event["source"] in (0, 2)
    assert latest_checkpoint_info(pop_dir / "member_1")[1:] == (5, 920)  # version 4 + 1, its own env steps
    on_disk = load_pbt_state(pop_dir, 4, cfg)[1]
    assert on_disk.history == pop.pbt.states[1].history
    assert load_pbt_state(pop_dir / "member_1", 1, cfg)[0].hyperparams == on_disk.hyperparams
    assert pop.members[1].target == 2020  # one period past its own PBT step

    # a member that died is run again (same target), up to --pbt_max_member_restarts=1, then leaves the population
    m = pop.members[2]
    assert pop._on_segment_end(m, {"exit_code": 137}) and m.restarts == 1 and m.target == 2010
    assert not pop._on_segment_end(m, {"exit_code": None, "error": "ActorDiedError"}) and m.status == "failed"
    assert math.isnan(pop.objectives()[2])  # no longer ranked, nor a source

    # a segment in which no episode finished keeps the member's last known objective
    _finished_segment(pop_dir, 0, 2050, "nan", version=6)
    assert pop._on_segment_end(pop.members[0], {"exit_code": 0}) and pop.objectives()[0] == 50.0

    # a clean exit before the target: the member's own stop rule ended it; the budget: finished
    _finished_segment(pop_dir, 3, 1500, 33.0, version=9)
    assert not pop._on_segment_end(pop.members[3], {"exit_code": 0}) and pop.members[3].status == "stopped"
    _finished_segment(pop_dir, 0, 5000, 60.0, version=9)
    pop.members[0].target = 5000
    assert not pop._on_segment_end(pop.members[0], {"exit_code": 0}) and pop.members[0].status == "finished"
    assert len(pop.pbt.states[0].history) == 2  # no decision at the end of training

    # a resumed coordinator takes up each member where its files are
    again = RayPopulation(cfg, POP, pop_dir, None)
    assert again.members[0].status == "finished" and again.members[1].target == 2020
    assert [s.history for s in again.pbt.states] == [s.history for s in pop.pbt.states]


def test_copy_member_weights_sets_the_targets_unreadable_files_aside(tmp_path):
    """A broken newer file in the (stopped) target must not outlive its good checkpoints in the rotation."""
    src = _member_with_checkpoint(tmp_path, "member_0", 30, 12000, seed=2)
    tgt = _member_with_checkpoint(tmp_path, "member_1", 7, 9000, seed=1)
    broken = tgt / "checkpoint_p0" / "checkpoint_000000050_20000.pth"
    broken.write_bytes(b"\x00not a checkpoint")
    _, new_file = copy_member_weights(src, tgt, keep=1)
    assert list_checkpoints(tgt / "checkpoint_p0") == [new_file] and new_file.name == "checkpoint_000000008_9000.pth"
    assert (tgt / "checkpoint_p0" / f"{broken.name}.corrupt").exists()
    src_broken = src / "checkpoint_p0" / "checkpoint_000000099_99999.pth"
    src_broken.write_bytes(b"\x00not a checkpoint")
    copy_member_weights(src, tgt, keep=1)
    assert src_broken.exists(), "the source (possibly running) is only read"


def test_coordinator_never_copies_a_member_that_has_not_trained(tmp_path, capsys):
    """Member 1's first segment ended before its learner took an SGD step (its checkpoint: policy version 0, its
    initial random weights) with the best reward of the population (that of a random policy). It is not ranked, so
    the worst member copies a member that trained; and the ended segment is no PBT step for member 1 itself."""
    cfg = pop_cfg(tmp_path, "--pbt_replace_fraction=0.25", "--train_for_env_steps=20000")
    pop_dir = tmp_path / "pop"
    pop = RayPopulation(cfg, POP, pop_dir, None)
    # the segment collected 2176 env steps; the learner's one iteration was cut before its first SGD step
    _finished_segment(pop_dir, 1, 2176, 500.0, version=0, ckpt_env_steps=0)
    assert pop._on_segment_end(pop.members[1], {"exit_code": 0})
    for i, reward in ((2, 40.0), (3, 30.0), (0, 10.0)):
        _finished_segment(pop_dir, i, 1010, reward, version=5)
        assert pop._on_segment_end(pop.members[i], {"exit_code": 0})
    out = capsys.readouterr().out
    # member 0 is the worst of the trained 0, 2, 3 (k = 1): its source is member 2, not the untrained member 1
    event = pop.pbt.states[0].history[-1]
    assert event["kind"] == "replacement" and event["source"] == 2 and event["untrained"] == [1]
    copied = torch.load(latest_checkpoint_info(pop_dir / "member_0")[0], weights_only=False)["model"]
    source = torch.load(latest_checkpoint_info(pop_dir / "member_2")[0], weights_only=False)["model"]
    assert all(torch.equal(copied[k], source[k]) for k in source)
    assert pop.members[0].version == 6 == latest_checkpoint_info(pop_dir / "member_0")[1]
    assert "member 0 replacement from member 2 (checkpoint_000000005_910.pth" in out
    assert "(not ranked, never trained: member 1)" in out
    # member 1's segment was no PBT step; its next one restarts from 0 env steps: the ended one's length + a period
    assert pop.pbt.states[1].history == [] and pop.pbt.states[1].last_pbt_env_steps == 0
    assert pop.members[1].target == 0 + 2176 + 1000
    assert (
        "member 1: no PBT step at 2176 env steps: its learner has not trained yet (policy version 0); its next "
        "segment trains to 3176 env steps" in out
    )


def test_coordinator_grows_segments_until_the_member_trains(tmp_path, capsys):
    """Segments too short for the learner's first SGD step (a period below its iteration) are no PBT steps; each next
    one is longer by a period than the last, also when a cut iteration moved the checkpoint's env steps (they count
    as trained although no SGD step was taken); the PBT step comes once the member trained, and a resumed
    coordinator keeps the rule."""
    cfg = pop_cfg(tmp_path, "--train_for_env_steps=20000")
    pop_dir = tmp_path / "pop"
    pop = RayPopulation(cfg, POP, pop_dir, None)
    m = pop.members[2]
    _finished_segment(pop_dir, 2, 2176, 20.0, version=0, ckpt_env_steps=0)  # from 0: no iteration
    assert pop._on_segment_end(m, {"exit_code": 0}) and m.target == 3176
    _finished_segment(pop_dir, 2, 4224, 21.0, version=0, ckpt_env_steps=4096)  # from 0: one iteration, cut
    assert pop._on_segment_end(m, {"exit_code": 0}) and m.target == 4096 + 4224 + 1000
    assert pop.pbt.states[2].history == [] and m.objective == 21.0  # the reward of the weights it holds
    _finished_segment(pop_dir, 2, 9330, 25.0, version=8, ckpt_env_steps=8192)  # from 4096: trained
    assert pop._on_segment_end(m, {"exit_code": 0})
    assert [e["env_steps"] for e in pop.pbt.states[2].history] == [9330] and m.target == 10330
    assert pop.pbt.states[2].last_pbt_policy_version == 8
    assert capsys.readouterr().out.count("member 2: no PBT step") == 2
    # a member replaced at its step that has not trained since: its next due step waits, also for a resumed
    # coordinator (the version at the last step is in pbt_p<i>.json)
    pop.pbt.states[2].last_pbt_policy_version = 9
    save_pbt_state(pop_dir, [pop.pbt.states[2]])
    _finished_segment(pop_dir, 2, 10400, 26.0, version=9, ckpt_env_steps=9330)
    again = RayPopulation(cfg, POP, pop_dir, None)
    assert [e["env_steps"] for e in again.pbt.states[2].history] == [9330]
    assert again.members[2].target == 9330 + (10400 - 9330) + 1000
    assert "its learner has not trained since its last PBT step (policy version 9)" in capsys.readouterr().out
