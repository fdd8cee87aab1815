"""Evaluation during training (--eval_every_env_steps): the evaluator's schedule (which policy, when, one at a time,
nothing piling up) with stand-in evaluation commands; real enjoy.py evaluations of a checkpoint (deterministic
actions, env overrides); and training runs (multi-process with one policy, serial with two) that evaluate their
checkpoints, write eval/eval_<env steps>_p<policy>.json and log eval/* scalars to each policy's TensorBoard."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from sample_factory.config import parse_cfg
from sample_factory.evaluation import periodic_eval
from sample_factory.evaluation.periodic_eval import PeriodicEvaluator
from sample_factory.evaluation.policy_api import load_policy
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.tools.plot import read_scalars
from tests.evaluation.option_env import ENV_ID as ECHO_ENV_ID
from tests.evaluation.option_env import OptionEchoEnv
from tests.policy_helpers import Run, fake_experiment, one_torch_thread, rollout_lengths, train_tiny

REPO_ROOT = Path(__file__).resolve().parents[2]
EVALUATED = re.compile(
    r"evaluation of policy (\d+) at (\d+) env steps: reward (-?[\d.]+) \+- ([\d.]+) over (\d+) episodes \((\w+) actions"
)


class Recorder:
    """What the evaluator asks of the runner: checkpoint requests, log lines, TensorBoard scalars."""

    def __init__(self):
        self.requests: list[int] = []
        self.logs: list[str] = []
        self.scalars: list[tuple[int, str, float, int]] = []
        self.now = 0.0

    def evaluator(self, cfg) -> PeriodicEvaluator:
        add = lambda p, tag, value, steps: self.scalars.append((p, tag, value, steps))  # noqa: E731
        (Path(cfg.train_dir) / cfg.experiment).mkdir(parents=True, exist_ok=True)
        return PeriodicEvaluator(
            cfg,
            Path(cfg.train_dir) / cfg.experiment,
            self.requests.append,
            self.logs.append,
            add,
            clock=lambda: self.now,
        )


def _cfg(tmp_path: Path, *flags: str):
    return parse_cfg(["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=x", "--num_workers=1", *flags])


def _fake_command(reward: float = 1.0, fail: bool = False, loaded: int | None = None):
    """A stand-in for enjoy: a tiny python process that writes the results file (or fails with a message);
    `loaded`: the env frames of the checkpoint it says it loaded."""

    def command(policy: int, result_file: Path) -> list[str]:
        if fail:
            return [sys.executable, "-c", "import sys; sys.exit('enjoy: error: broken checkpoint')"]
        res = {"episodes": 2, "reward_mean": reward + policy, "reward_std": 0.5, "length_mean": 10.0 + policy}
        if loaded is not None:
            res["checkpoint_env_steps"] = loaded
        return [sys.executable, "-c", f"import json; json.dump({res!r}, open({str(result_file)!r}, 'w'))"]

    return command


def _finish(ev: PeriodicEvaluator, steps: list[int], timeout: float = 30) -> dict | None:
    """Run the loop until the running evaluation is over; its result (None if it failed)."""
    deadline = time.monotonic() + timeout
    while ev.running is not None and time.monotonic() < deadline:
        if (res := ev.update(steps)) is not None:
            return res
        time.sleep(0.02)
    assert ev.running is None, "evaluation did not finish"
    return None


def test_result_file_names_round_trip():
    """Readers of eval/ (the learning benchmark) parse the names the evaluator writes, and nothing else."""
    name = periodic_eval.eval_result_name(1_000_000, 3)
    assert name == "eval_1000000_p3.json" and periodic_eval.parse_eval_result_name(name) == (1_000_000, 3)
    for other in ("eval_1000000_p3.json.tmp", "eval_x_p0.json", "results.json", "eval_96_p0.mp4"):
        assert periodic_eval.parse_eval_result_name(other) is None


def test_schedule_one_at_a_time_per_policy_without_piling_up(tmp_path):
    cfg = _cfg(tmp_path, "--num_policies=3", "--eval_policies=0,2", "--eval_every_env_steps=100")
    rec = Recorder()
    ev = rec.evaluator(cfg)
    ev.command = _fake_command()
    ev.update([50, 500, 50])
    assert rec.requests == [] and not ev.queue  # policy 1 is not evaluated; 0 and 2 are not due yet

    ev.update([100, 500, 250])
    assert rec.requests == [0] and list(ev.queue) == [2]  # one checkpoint asked for at a time, in order
    ev.on_checkpoint(2, str(tmp_path / "checkpoint_000000009_240.pth"))  # not the one asked for: ignored
    ev.on_checkpoint(1, str(tmp_path / "checkpoint_000000009_240.pth"))
    assert ev.running is None
    ev.on_checkpoint(0, str(tmp_path / "checkpoint_000000005_96.pth"))
    assert ev.running is not None and ev.running.policy == 0

    # Multiples passed meanwhile are skipped: 0 (being evaluated) and 2 (queued) are not queued again.
    ev.on_env_frames([400, 900, 700])
    assert list(ev.queue) == [2] and rec.requests == [0]
    res = _finish(ev, [400, 900, 700])
    assert res["env_steps"] == 96 and res["reward_mean"] == 1.0
    assert (tmp_path / "x" / "eval" / "eval_96_p0.json").exists()
    assert rec.scalars == [
        (0, "eval/reward_mean", 1.0, 96),
        (0, "eval/reward_std", 0.5, 96),
        (0, "eval/episode_length", 10.0, 96),
    ]
    assert rec.logs[-1].startswith("evaluation of policy 0 at 96 env steps: reward 1.00 +- 0.50 over 2 episodes")
    # Then policy 2's turn; policy 0, due again since it passed 200 while busy, queues behind it.
    assert rec.requests == [0, 2] and list(ev.queue) == [0]
    ev.on_checkpoint(2, str(tmp_path / "checkpoint_000000011_650.pth"))
    assert _finish(ev, [400, 900, 700])["reward_mean"] == 3.0
    assert rec.scalars[-1] == (2, "eval/episode_length", 12.0, 650)
    # Round robin: 2 passed 300..700 while queued or busy, so it is due again, behind 0; each is queued once.
    assert rec.requests == [0, 2, 0] and list(ev.queue) == [2]
    assert ev.next_at == {0: 500, 2: 800}


def test_lost_checkpoint_request_and_failed_evaluation(tmp_path):
    cfg = _cfg(tmp_path, "--num_policies=2", "--eval_every_env_steps=100")
    rec = Recorder()
    ev = rec.evaluator(cfg)
    ev.command = _fake_command(fail=True)
    ev.update([100, 100])
    assert rec.requests == [0]
    rec.now = periodic_eval.CHECKPOINT_TIMEOUT_SEC + 1  # learner 0 never answered: give up, go on with policy 1
    ev.update([100, 100])
    assert rec.requests == [0, 1]
    assert "periodic evaluation of policy 0 skipped: no checkpoint within" in rec.logs[-1]
    ev.on_checkpoint(1, str(tmp_path / "checkpoint_000000003_120.pth"))
    assert _finish(ev, [150, 150]) is None
    assert rec.logs[-1] == "periodic evaluation of policy 1 failed (exit code 1): enjoy: error: broken checkpoint"
    assert rec.scalars == []


def test_result_is_labelled_by_the_checkpoint_evaluated(tmp_path):
    """enjoy loads the newest checkpoint: when training wrote a newer one before enjoy started, the result carries
    the frames of the one evaluated, and that one is not evaluated again at the end."""
    cfg = _cfg(tmp_path, "--eval_every_env_steps=100")
    rec = Recorder()
    ev = rec.evaluator(cfg)
    ev.command = _fake_command(loaded=180)
    ev.update([110])
    ev.on_checkpoint(0, str(_checkpoint(tmp_path, 0, 96)))
    _checkpoint(tmp_path, 0, 180)
    assert _finish(ev, [180])["env_steps"] == 180
    assert [f.name for f in (tmp_path / "x" / "eval").glob("eval_*")] == ["eval_180_p0.json"]
    assert rec.scalars[0] == (0, "eval/reward_mean", 1.0, 180)
    ev.finish([230], interrupted=False)  # due at 200, and the newest checkpoint is the one evaluated
    assert rec.requests == [0] and len(rec.scalars) == 3


def test_resumed_run_goes_on_with_its_schedule(tmp_path):
    """A resume evaluates at the next multiple, not at once; an evaluation that was due and not over when the run
    stopped runs at once; a changed interval goes on from the last multiple evaluated; a resume from an older
    checkpoint, or a start without one, follows the checkpoint."""
    cfg = _cfg(tmp_path, "--eval_every_env_steps=100")
    rec = Recorder()
    ev = rec.evaluator(cfg)
    ev.command = _fake_command()
    ev.update([130])
    ev.on_checkpoint(0, str(_checkpoint(tmp_path, 0, 98)))  # below the multiple: the learner lags
    assert _finish(ev, [130])["env_steps"] == 98
    ev.update([260])  # due at 200; the run stops before this evaluation is over
    ev.on_checkpoint(0, str(_checkpoint(tmp_path, 0, 255)))
    ev.stop()

    resumed = rec.evaluator(cfg)
    assert resumed.next_at == {0: 200}
    resumed.command = _fake_command()
    resumed.update([270])  # the lost evaluation runs at once
    assert rec.requests == [0, 0, 0]
    resumed.on_checkpoint(0, str(_checkpoint(tmp_path, 0, 270)))
    assert _finish(resumed, [270])["env_steps"] == 270

    again = rec.evaluator(cfg)
    assert again.next_at == {0: 300}
    again.update([290])
    assert rec.requests == [0, 0, 0] and not again.queue  # nothing due before 300
    assert rec.evaluator(_cfg(tmp_path, "--eval_every_env_steps=250")).next_at == {0: 250}
    assert rec.evaluator(_cfg(tmp_path, "--eval_every_env_steps=40")).next_at == {0: 240}
    for newer in (255, 270):  # e.g. moved aside as unreadable: the run resumes from 98
        _checkpoint(tmp_path, 0, newer).unlink()
    assert rec.evaluator(cfg).next_at == {0: 100}
    _checkpoint(tmp_path, 0, 98).unlink()
    assert rec.evaluator(cfg).next_at == {0: 100}  # no checkpoint: a new start
    _checkpoint(tmp_path, 0, 270)
    (tmp_path / "x" / "eval" / periodic_eval.SCHEDULE_NAME).write_text('{"every": 1')  # cut off while written
    assert rec.evaluator(cfg).next_at == {0: 100}


def _checkpoint(tmp_path: Path, policy: int, steps: int) -> Path:
    """An (empty) checkpoint file as the learner names it: the stand-in evaluation does not read it."""
    path = tmp_path / "x" / f"checkpoint_p{policy}" / f"checkpoint_{steps:09d}_{steps}.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def test_due_evaluations_run_at_the_end_of_training(tmp_path):
    """The run ends while policy 0 is being evaluated and has passed another multiple, and while policy 1 waits
    for its turn: the running one is waited for, both due ones run on the final checkpoints."""
    cfg = _cfg(tmp_path, "--num_policies=2", "--eval_every_env_steps=100")
    rec = Recorder()
    ev = rec.evaluator(cfg)
    ev.command = _fake_command()
    ev.update([100, 100])
    ev.on_checkpoint(0, str(_checkpoint(tmp_path, 0, 96)))
    ev.update([250, 250])  # 0 passes 200 while busy; 1 waits in the queue for its turn
    assert ev.running is not None and rec.requests == [0] and list(ev.queue) == [1]
    _checkpoint(tmp_path, 0, 250)
    _checkpoint(tmp_path, 1, 250)
    ev.finish([250, 250], interrupted=False)
    assert ev.running is None
    assert [(p, steps) for p, tag, _, steps in rec.scalars if tag == "eval/reward_mean"] == [
        (0, 96),
        (1, 250),
        (0, 250),
    ]
    assert sorted(f.name for f in (tmp_path / "x" / "eval").iterdir()) == [
        "eval_250_p0.json",
        "eval_250_p1.json",
        "eval_96_p0.json",
        periodic_eval.SCHEDULE_NAME,
    ]
    # Resumed, both go on at 300 (the final evaluations were at 250), not at once; each policy's entry is kept.
    resumed = rec.evaluator(cfg)
    assert resumed.next_at == {0: 300, 1: 300}
    resumed.command = _fake_command()
    resumed.update([310, 260])
    resumed.on_checkpoint(0, str(_checkpoint(tmp_path, 0, 305)))
    assert _finish(resumed, [310, 260])["env_steps"] == 305
    assert rec.evaluator(cfg).next_at == {0: 400, 1: 300}
    assert sum("an evaluation was due at the end" in line for line in rec.logs) == 2


def test_due_evaluations_at_the_end_are_skipped_when_interrupted_or_bounded(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, "--eval_every_env_steps=100")
    rec = Recorder()
    ev = rec.evaluator(cfg)
    ev.command = _fake_command()
    ev.update([150])
    ev.finish([150], interrupted=True)
    assert rec.logs == ["periodic evaluation of policy 0 skipped: training was interrupted or stopped by an error"]
    assert ev.running is None and not ev.queue

    # An evaluation that takes too long is stopped at the bound, with a line saying so.
    monkeypatch.setattr(periodic_eval, "FINAL_EVAL_TIMEOUT_SEC", 0.5)
    ev = rec.evaluator(cfg)
    ev.clock = time.monotonic
    ev.command = lambda policy, result_file: [sys.executable, "-c", "import time; time.sleep(30)"]
    ev.update([150])
    _checkpoint(tmp_path, 0, 150)
    start = time.monotonic()
    ev.finish([150], interrupted=False)
    assert time.monotonic() - start < 10 and ev.running is None
    assert "periodic evaluation of policy 0 at 150 env steps stopped: over 0 s at the end of training" in rec.logs[-1]


def test_capture_video_records_each_evaluation(tmp_path):
    cfg = _cfg(tmp_path, "--eval_every_env_steps=100", "--capture_video=True")
    cmd = PeriodicEvaluator(cfg, tmp_path, lambda p: None, print).command(0, tmp_path / "eval" / "eval_96_p0.json")
    assert cmd[-3:] == ["--save_video=True", "--video_per_episode=False", "--video_name=videos/eval_96_p0"]
    with pytest.raises(SystemExit):  # it records the periodic evaluations: there must be some
        _cfg(tmp_path, "--capture_video=True", "--eval_every_env_steps=-1")


@pytest.mark.parametrize(
    ("flags", "frames", "every"),
    [
        (["--train_for_env_steps=500000"], 1, 50_000),  # ten recordings over the budget
        ([], 1, 100_000),  # no budget: every 100k agent steps
        ([], 4, 400_000),  # in frames on Atari
    ],
)
def test_capture_video_alone_picks_an_interval(tmp_path, flags, frames, every):
    """--capture-video alone was refused until --eval_every_env_steps was added (issue 53)."""
    rec = Recorder()
    cfg = _cfg(tmp_path, "--capture-video", *flags)
    cfg.frames_per_env_step = frames  # as the runner sets it
    ev = rec.evaluator(cfg)
    assert ev.enabled and ev.every == every
    unit = "env frames" if frames > 1 else "env steps"
    assert rec.logs == [f"--capture_video: an evaluation is recorded every {every} {unit} (--eval_every_env_steps)"]
    assert not Recorder().evaluator(_cfg(tmp_path)).enabled  # without it: no periodic evaluation


def _evaluate(cfg, exp_dir: Path, policy: int = 0) -> dict:
    """One real periodic evaluation (enjoy.py in a subprocess) of the policy's latest checkpoint."""
    rec = Recorder()
    ev = rec.evaluator(cfg)
    steps = [cfg.eval_every_env_steps] * cfg.num_policies
    ev.update(steps)
    assert rec.requests == [policy]
    ev.on_checkpoint(policy, str(list_checkpoints(exp_dir / f"checkpoint_p{policy}")[-1]))
    res = _finish(ev, steps, timeout=120)
    assert res is not None, rec.logs
    return res


# Hang bounds: 30-73 s each at load 7-13 (training and/or an enjoy.py process each importing torch).
@pytest.mark.timeout(180)
def test_periodic_evaluation_is_deterministic_when_asked(tmp_path, monkeypatch):
    """--eval_deterministic reaches the evaluation: its episodes are those of our own rollout with the most likely
    actions of the same checkpoint from the same seed."""
    monkeypatch.chdir(REPO_ROOT)
    exp = train_tiny(tmp_path, "x", "--use_rnn=False", "--encoder_mlp_layers=32", "--seed=3")
    cfg = _cfg(tmp_path, "--eval_every_env_steps=100", "--eval_episodes=3", "--eval_deterministic=True")
    res = _evaluate(cfg, exp)
    assert res["deterministic"] is True and res["episodes"] == 3
    with one_torch_thread():
        policy = load_policy(exp, checkpoint=res["checkpoint"])
        assert res["lengths"] == rollout_lengths(policy, "CartPole-v1", 3, 3, deterministic=True)


@pytest.mark.timeout(180)
def test_env_overrides_reach_the_evaluation_env(tmp_path, monkeypatch):
    """Trained with env_frameskip=4, env_sticky_actions=0.25 (the defaults); evaluated with overrides: the
    evaluation's episodes are 7 steps long and pay nothing, and the results say which overrides were used."""
    monkeypatch.chdir(REPO_ROOT)
    env = OptionEchoEnv(4, 0.25)
    flags = [f"--env=tests.evaluation.option_env:{ECHO_ENV_ID}", "--use_rnn=False", "--encoder_mlp_layers=16"]
    exp, _ = fake_experiment(tmp_path, "x", flags, env.observation_space, env.action_space)
    overrides = "env_frameskip=7,env_sticky_actions=0"
    cfg = parse_cfg(
        [
            *flags,
            f"--train_dir={tmp_path}",
            "--experiment=x",
            "--num_workers=1",
            "--eval_every_env_steps=100",
            "--eval_episodes=2",
            f"--eval_env_overrides={overrides}",
        ]
    )
    assert (cfg.env_frameskip, cfg.env_sticky_actions) == (4, 0.25)  # training plays the defaults
    res = _evaluate(cfg, exp)
    assert res["lengths"] == [7, 7] and res["rewards"] == [0.0, 0.0]
    assert res["env_overrides"] == {"env_frameskip": 7, "env_sticky_actions": 0.0}
    assert res["deterministic"] is False  # sampled unless asked


def _stop_when(run: Run, done, timeout: float) -> str:
    """Wait for `done(output)`, then stop the run with SIGINT (a clean stop that closes the TensorBoard writers)."""
    deadline = time.monotonic() + timeout
    while run.proc.poll() is None and time.monotonic() < deadline and not done(run.output):
        time.sleep(0.2)
    signalled = run.proc.poll() is None
    if signalled:
        run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) in ((130, 0) if signalled else (0,)), run.output  # 130: interrupted; 0: it had just ended
    return run.output


def _check_results(exp: Path, logged: list[tuple], policies: set[int], deterministic: bool) -> None:
    """Every logged evaluation has its json and its TensorBoard scalars on its policy's writer."""
    assert {p for p, *_ in logged} == policies
    for p in policies:
        scalars = read_scalars(exp / ".summary" / str(p))
        for tag in ("eval/reward_mean", "eval/reward_std", "eval/episode_length"):
            assert tag in scalars, (p, sorted(scalars))
        written = {tag: dict(scalars[tag]) for tag in ("eval/reward_mean", "eval/reward_std", "eval/episode_length")}
        for q, steps, reward, _, episodes, actions in logged:
            if q != p:
                continue
            res = json.loads((exp / "eval" / f"eval_{steps}_p{p}.json").read_text())
            assert res["policy_index"] == p and res["deterministic"] is deterministic
            assert actions == ("deterministic" if deterministic else "sampled")
            assert Path(res["checkpoint"]).parent.name == f"checkpoint_p{p}"
            assert res["episodes"] == episodes == len(res["rewards"])
            assert res["reward_mean"] == pytest.approx(reward, abs=0.005)
            assert written["eval/reward_mean"][steps] == pytest.approx(res["reward_mean"], rel=1e-5)
            assert written["eval/reward_std"][steps] == pytest.approx(res["reward_std"], rel=1e-5)
            assert written["eval/episode_length"][steps] == pytest.approx(res["length_mean"], rel=1e-5)


def _logged(out: str) -> list[tuple]:
    return [(int(p), int(s), float(r), float(sd), int(n), a) for p, s, r, sd, n, a in EVALUATED.findall(out)]


@pytest.mark.timeout(300)
def test_two_policies_evaluated_during_training(tmp_path):
    """Serial mode, two policies: each gets its own checkpoint, evaluation, json and TensorBoard scalars;
    --eval_env_overrides is passed on."""
    args = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=pe2", "--serial_mode=True"]
    args += ["--num_workers=1", "--num_envs_per_worker=4", "--batch_size=128", "--num_policies=2", "--device=cpu"]
    args += ["--use_rnn=False", "--encoder_mlp_layers=32", "--train_for_seconds=240", "--report_interval_sec=1"]
    args += ["--eval_every_env_steps=3000", "--eval_episodes=2", "--eval_env_overrides=seed=5"]
    # Policies that stay poor play short episodes with sampled actions: an evaluation is mostly its process start.
    args += ["--learning_rate=1e-6", "--keep_checkpoints=1000"]
    run = Run(args)
    try:
        out = _stop_when(run, lambda o: {p for p, *_ in _logged(o)} == {0, 1}, timeout=240)
    finally:
        run.kill()
    assert not re.search("periodic evaluation.*(failed|no checkpoint)", out), out  # the SIGINT may skip one
    logged = _logged(out)
    _check_results(tmp_path / "pe2", logged, {0, 1}, deterministic=False)
    for p, steps, *_ in logged:
        res = json.loads((tmp_path / "pe2" / "eval" / f"eval_{steps}_p{p}.json").read_text())
        assert res["env_overrides"] == {"seed": 5}
        assert res["checkpoint_env_steps"] == steps  # the checkpoint asked for was the one evaluated


@pytest.mark.timeout(120)
def test_evaluation_due_when_training_ends_is_run(tmp_path):
    """Evaluations every 2,500 env steps in a 6,000-step run: the one due as training ends is not dropped, it runs
    on the final checkpoint (before the fix only the first result appeared, with no log line)."""
    args = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=end", "--serial_mode=True"]
    args += ["--num_workers=1", "--num_envs_per_worker=4", "--batch_size=128", "--device=cpu", "--use_rnn=False"]
    args += ["--encoder_mlp_layers=32", "--train_for_env_steps=6000", "--eval_every_env_steps=2500"]
    args += ["--eval_episodes=2"]
    run = Run(args)
    try:
        assert run.wait(100) == 0, run.output
    finally:
        run.kill()
    final = int(list_checkpoints(tmp_path / "end" / "checkpoint_p0")[-1].stem.split("_")[2])
    assert final > 5000  # past the second multiple
    logged = _logged(run.output)
    assert logged[-1][:2] == (0, final), run.output
    _check_results(tmp_path / "end", logged, {0}, deterministic=False)


@pytest.mark.timeout(300)
def test_periodic_evaluation_multiprocess(tmp_path):
    """The default process mode, one policy: the learner process writes the checkpoint asked for."""
    args = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=pe", "--num_workers=2", "--device=cpu"]
    args += ["--eval_every_env_steps=20000", "--eval_episodes=3", "--train_for_seconds=240", "--report_interval_sec=1"]
    run = Run(args)
    try:
        out = _stop_when(run, lambda o: bool(EVALUATED.search(o)), timeout=240)
    finally:
        run.kill()
    assert not re.search("periodic evaluation.*(failed|no checkpoint)", out), out
    logged = _logged(out)
    assert all(steps > 0 and n == 3 for _, steps, _, _, n, _ in logged), logged
    _check_results(tmp_path / "pe", logged, {0}, deterministic=False)
