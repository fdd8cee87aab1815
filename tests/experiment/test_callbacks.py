"""User hooks (--callbacks) and episode statistics (--episode_info_keys, info["episode_extra_stats"]): the pure
pieces, the runner's bookkeeping (progress.csv columns, TensorBoard, final summary), and real runs that check every
hook is called in the process the docs name, with what it is documented to get, and that a raising hook or a bad
statistic stops the run with one clear line instead of restarting workers."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest

from sample_factory.config import ConfigError, parse_cfg
from sample_factory.experiment.callbacks import (
    CallbackError,
    Callbacks,
    EpisodeStatsError,
    call_hook,
    callbacks_class,
    episode_stats,
    hook_stats,
    overrides,
)
from sample_factory.experiment.progress import ProgressTracker
from sample_factory.experiment.summaries import SummaryWriters
from tests.experiment.hooks import HOOK_DIR_VAR, RAISE_IN_VAR, RecordingCallbacks, read_hook_calls
from tests.integration.conftest import TrainRun, tensorboard_tags

HOOKS = "--callbacks=tests.experiment.hooks:RecordingCallbacks"
SUCCESS_ENV = "tests.experiment.hooks:SuccessCartPole-v0"


# ---- pure pieces ------------------------------------------------------------------------------------------------
def test_episode_stats_takes_named_keys_and_extra_stats():
    info = {"success": True, "kills": 3, "note": "text", "episode_extra_stats": {"dist": 2.5}}
    assert episode_stats(info, ["success", "kills", "missing"]) == {"success": 1.0, "kills": 3.0, "dist": 2.5}
    assert episode_stats(info, []) == {"dist": 2.5}  # the extra stats need no flag
    assert episode_stats({"success": False}, ["success"]) == {"success": 0.0}
    with pytest.raises(EpisodeStatsError, match="'note'.*not a number: 'text'"):
        episode_stats(info, ["note"])
    assert hook_stats(None, "h") == {} and hook_stats({"a": 1}, "h") == {"a": 1.0}
    with pytest.raises(CallbackError, match="returned list"):
        hook_stats([1], "h")


def test_callbacks_are_found_by_registered_name_or_module_path():
    assert callbacks_class("recording") is RecordingCallbacks
    assert callbacks_class("tests.experiment.hooks:RecordingCallbacks") is RecordingCallbacks
    with pytest.raises(ConfigError, match="not a registered name"):
        callbacks_class("nope")
    with pytest.raises(ConfigError, match="cannot import"):
        callbacks_class("tests.experiment.hooks:Nope")
    with pytest.raises(ConfigError, match="not a subclass"):
        callbacks_class("tests.experiment.hooks:SuccessCartPole")


def test_call_hook_names_the_hook_and_overrides_sees_only_overridden_hooks():
    class Boom(Callbacks):
        def on_checkpoint(self, policy_id, path, kind):
            raise KeyError("x")

    with pytest.raises(CallbackError, match=r"callback Boom.on_checkpoint raised KeyError: 'x'"):
        call_hook(Boom(), "on_checkpoint", 0, "p", "latest")
    assert overrides(Boom(), "on_checkpoint") and not overrides(Boom(), "on_episode_end")
    assert not overrides(None, "on_checkpoint") and call_hook(None, "on_checkpoint", 0, "p", "latest") is None


def test_episode_stats_reach_csv_tensorboard_and_final_summary(tmp_path):
    cfg = parse_cfg(["--env=CartPole-v1", "--stats_avg=4"])
    progress = ProgressTracker(cfg)
    writers = SummaryWriters(tmp_path, 1, cfg=cfg)
    progress.add_samples(0, 100, [(10.0, 10)], {})
    writers.progress_row(progress)  # before any statistic: no extra column yet
    progress.add_samples(0, 100, [(20.0, 20), (30.0, 30)], {"success": [1.0, 0.0], "dist": [4.0, 6.0]})
    progress.add_samples(0, 100, [(20.0, 20)] * 4, {"success": [1.0] * 4})  # the window keeps the last 4
    writers.progress_row(progress)
    writers.write(progress)
    writers.close()
    rows = list(csv.DictReader(open(tmp_path / "progress.csv")))
    assert list(rows[0]) == ["time_s", "env_steps", "fps_10s", "reward_p0", "dist_p0", "success_p0"]
    assert rows[0]["success_p0"] == "" and float(rows[1]["success_p0"]) == 1.0 and float(rows[1]["dist_p0"]) == 5.0
    assert progress.episode_stats_means(0) == {"dist": 5.0, "success": 1.0}
    assert "policy_stats/success" in tensorboard_tags(tmp_path / ".summary" / "0")
    assert "policy 0 episode stats: dist 5, success 1" in progress.final_summary(1.0)
    assert "success 1" in progress.line()
    # a resumed run appends to the file with the columns it has
    again = SummaryWriters(tmp_path, 1, cfg=cfg)
    again.progress_row(progress)
    again.close()
    assert len(list(csv.DictReader(open(tmp_path / "progress.csv")))) == 3


# ---- real runs --------------------------------------------------------------------------------------------------
@pytest.fixture
def hook_dir(tmp_path, monkeypatch):
    d = tmp_path / "hooks"
    d.mkdir()
    monkeypatch.setenv(HOOK_DIR_VAR, str(d))
    return d


def start(tmp_path: Path, args: list[str], env_id: str = SUCCESS_ENV, **kwargs) -> TrainRun:
    # A feed-forward model (the GRU 512 of the global defaults only adds minutes here), 2 envs per worker (the counts
    # below are for 4 envs) and iterations of one batch (several training results within 4000 env steps), where the
    # defaults of the envs' spaces would give 64 envs per worker and 8 batches of 512
    base = ["--num_workers=2", "--report_interval_sec=1", "--experiment_summaries_interval=1", "--save_every_sec=2"]
    base += ["--use_rnn=False", "--num_envs_per_worker=2", "--num_batches_per_epoch=1"]
    return TrainRun([*base, *args], tmp_path / "td", env_id=env_id, **kwargs)


@pytest.mark.timeout(150)
def test_every_hook_runs_in_its_process_and_episode_stats_are_logged(tmp_path, hook_dir):
    # 4000 env steps: at least 62 finished episodes (at most 60 steps each, 4 envs) and a few training reports
    run = start(tmp_path, [HOOKS, "--episode_info_keys=success", "--train_for_env_steps=4000"])
    try:
        assert run.wait(timeout=120) == 0, run.describe()
        run.assert_no_leftovers()
    finally:
        run.kill()
    calls = read_hook_calls(hook_dir)
    by_hook: dict[str, list[dict]] = {}
    for c in calls:
        by_hook.setdefault(c["hook"], []).append(c)
    runner_pid = run.proc.pid
    names = {pid: seen.names for pid, seen in run.seen.items()}

    def ran_in(hook: str, role: str) -> bool:
        return all(any(n.startswith(role) for n in names.get(c["pid"], ())) for c in by_hook[hook])

    assert [c["pid"] for c in by_hook["on_experiment_start"]] == [runner_pid]
    assert [c["pid"] for c in by_hook["on_experiment_end"]] == [runner_pid]
    assert ran_in("on_episode_end", "sf_actor_") and ran_in("on_training_result", "sf_learner_0"), names
    assert ran_in("on_checkpoint", "sf_learner_0"), names
    episodes = by_hook["on_episode_end"]
    # each call's worker is the actor process it ran in; both workers need not have finished an episode: on a loaded
    # machine the first can take all 4000 env steps before the second has started (a fresh-clone CI run, 2026-11-28)
    assert len(episodes) >= 50 and {e["worker"] for e in episodes} <= {0, 1}
    assert all(f"sf_actor_{e['worker']}" in names.get(e["pid"], ()) for e in episodes), names
    assert all(e["policy_id"] == 0 and e["agent"] == 0 and 0 <= e["env_index"] < 4 for e in episodes)
    assert all(e["info_keys"] == ["episode_extra_stats", "note", "success"] for e in episodes)
    assert all(1 <= e["length"] <= 60 and e["ret"] == e["length"] for e in episodes)  # CartPole: +1 per step
    assert {"loss", "entropy", "env_steps", "version"} <= set(by_hook["on_training_result"][0]["keys"])
    ckpts = by_hook["on_checkpoint"]
    assert {c["kind"] for c in ckpts} == {"latest"} and all(
        Path(c["path"]).name.startswith("checkpoint_") for c in ckpts
    )
    end = by_hook["on_experiment_end"][0]
    assert end["exit_code"] == 0 and "reached 4000 env steps" in end["stop_reason"]
    assert end["checkpoint"][0] == ckpts[-1]["path"] and Path(end["checkpoint"][0]).exists()
    assert set(end["episode_stats"][0]) == {"success", "steps_up", "hook_len"}
    assert "on_pbt_decision" not in by_hook and "on_worker_restarted" not in by_hook

    # the statistics: progress.csv columns, TensorBoard, the final summary; the hook's added train key
    rows = [r for r in run.progress_rows() if r.get("success_p0")]
    assert rows and all(0.0 <= float(r["success_p0"]) <= 1.0 for r in rows)
    assert all(1.0 <= float(r["steps_up_p0"]) <= 60.0 for r in rows)
    tags = tensorboard_tags(run.exp_dir / ".summary" / "0")
    assert {"policy_stats/success", "policy_stats/steps_up", "policy_stats/hook_len", "train/hook_seen"} <= tags
    assert re.search(r"policy 0 episode stats: hook_len [\d.]+, steps_up [\d.]+, success [\d.]+", run.output)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "hook, role",
    [("on_episode_end", "actor"), ("on_training_result", "learner"), ("on_experiment_start", None)],
)
def test_a_raising_hook_stops_the_run_with_one_line(tmp_path, hook_dir, hook, role):
    run = start(tmp_path, [HOOKS, "--train_for_seconds=60"], extra_env={RAISE_IN_VAR: hook})
    try:
        assert run.wait(timeout=90) == 1, run.describe()
        run.assert_no_leftovers()
    finally:
        run.kill()
    line = f"callback RecordingCallbacks.{hook} raised ValueError: injected failure in {hook}"
    errors = [ln for ln in run.output.splitlines() if "ERROR" in ln]
    assert errors and all(line in ln for ln in errors), run.describe()
    assert "Traceback" not in run.output and "restarting it" not in run.output, run.describe()
    if role is not None:
        assert re.search(rf"stopping: {role} \S+ failed: CallbackError: {re.escape(line)}", run.output), run.describe()


@pytest.mark.timeout(120)
def test_a_statistic_that_is_not_a_number_stops_the_run(tmp_path):
    run = start(
        tmp_path, ["--episode_info_keys=success", "--train_for_seconds=60"], "tests.experiment.hooks:BadStatCartPole-v0"
    )
    try:
        assert run.wait(timeout=90) == 1, run.describe()
        run.assert_no_leftovers()
    finally:
        run.kill()
    assert "EpisodeStatsError: episode statistic 'success' from the env's info is not a number: 'yes'" in run.output
    assert "restarting it" not in run.output, run.describe()


@pytest.mark.timeout(150)
def test_worker_restart_hook(tmp_path, hook_dir):
    # The first env to reach step 100 aborts (2 workers x 2 envs: ~400 env steps into the run): a budget of env
    # steps 4x that, not seconds, so the crash (the hook runs when the runner sees it) comes well before the end at
    # any machine speed.
    env = {"SF_FAULT_ONCE_FILE": str(tmp_path / "once"), "SF_FAULT_AT_STEP": "100"}
    run = start(
        tmp_path, [HOOKS, "--train_for_env_steps=1600"], "tests.reliability.fault_envs:AbortAtStep-v0", extra_env=env
    )
    try:
        assert run.wait(timeout=100) == 0, run.describe()
        run.assert_no_leftovers()
    finally:
        run.kill()
    restarts = [c for c in read_hook_calls(hook_dir) if c["hook"] == "on_worker_restarted"]
    assert len(restarts) == 1, run.describe()
    r = restarts[0]
    assert r["pid"] == run.proc.pid and r["role"] == "actor" and r["restarts"] == 1 and "exit code -6" in r["reason"]


@pytest.mark.timeout(180)
def test_pbt_decision_hook_in_serial_mode(tmp_path, hook_dir):
    from sample_factory.runner import Runner

    argv = ["--env=CartPole-v1", "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=8", "--rollout=16"]
    argv += ["--batch_size=128", "--num_policies=2", "--with_pbt=True", "--pbt_period_env_steps=1000"]
    argv += ["--pbt_start_mutation=1000", "--pbt_mutation_rate=1.0", "--seed=3", "--train_for_env_steps=6000"]
    argv += [f"--train_dir={tmp_path}", "--experiment=pbt", "--callbacks=recording"]
    runner = Runner(parse_cfg(argv))
    assert runner.run() == 0
    calls = read_hook_calls(hook_dir)
    decisions = [c for c in calls if c["hook"] == "on_pbt_decision"]
    history = [e for p in range(2) for e in json.loads((tmp_path / "pbt" / f"pbt_p{p}.json").read_text())["history"]]
    assert 0 < len(decisions) <= len(history), (decisions, history)  # history also has mutations that changed nothing
    assert all(d["pid"] == os.getpid() and d["kind"] in ("mutation", "replacement") for d in decisions)
    assert all(
        d["changes"] and d["env_steps"] >= 1000 and set(d["hyperparams"]) >= set(d["changes"]) for d in decisions
    )
    assert [c["hook"] for c in calls][0] == "on_experiment_start" and calls[-1]["hook"] == "on_experiment_end"
