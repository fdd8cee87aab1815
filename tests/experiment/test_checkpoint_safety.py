"""What a checkpoint file may do to a run: a crafted file never runs code (weights_only loading everywhere, the serial
snapshot signed), an unreadable newest file is moved aside instead of outliving the good ones in the rotation, a
really full disk gives one line and keeps the old checkpoint, and --algo cannot change on resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.evaluation.enjoy import main as enjoy_main
from sample_factory.evaluation.policy_api import load_policy
from sample_factory.experiment.checkpoints import (
    CheckpointError,
    UnsafeCheckpointError,
    checkpoint_dir,
    list_checkpoints,
    load_checkpoint_file,
    load_latest_checkpoint,
    load_policy_checkpoint,
    save_checkpoint,
)
from sample_factory.experiment.folder import ExperimentError, merge_for_resume
from sample_factory.runtime.serial_snapshot import SNAPSHOT_NAME, load_snapshot
from tests.experiment.test_checkpoints_resume import SERIAL, train


class RunsACommand:
    """Pickles as a call of os.system: unpickling it creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def plant(path: Path, marker: Path) -> None:
    """A checkpoint-shaped file whose unpickling would run a command."""
    torch.save({"model": RunsACommand(marker), "policy_version": 9999, "env_steps": 1}, path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Real serial runs, each resumed from by a test: APPO with its trajectory replay and DQN with its replay
    buffer, both saved (--save_replay_buffer)."""
    td = tmp_path_factory.mktemp("safety")
    appo = ["--train_for_env_steps=3000", "--replay_proportion=0.5", "--replay_buffer_num_slots=64"]
    assert train(td, "appo", *appo, "--save_replay_buffer=True") == 0
    dqn = ["--algo=DQN", "--batch_size=64", "--learning_starts=500", "--encoder_mlp_layers=32"]
    assert train(td, "dqn", *dqn, "--train_for_env_steps=3000", "--save_replay_buffer=True") == 0
    return td


def copy_run(runs: Path, name: str, tmp_path: Path) -> Path:
    shutil.copytree(runs / name, tmp_path / name)
    return tmp_path / name


# ---- item 9: nothing runs code from a file --------------------------------------------------------------------
def test_real_appo_and_dqn_checkpoints_load_weights_only(runs):
    appo, _ = load_latest_checkpoint(runs / "appo" / "checkpoint_p0")
    assert appo["algo"]["replay"]["filled"] > 0 and "store" in appo["algo"]["replay"]
    dqn, _ = load_latest_checkpoint(runs / "dqn" / "checkpoint_p0")
    replay = dqn["algo"]["replay"]
    assert replay["filled_blocks"] > 0 and replay["rng"]["bit_generator"] == "PCG64" and "target" in dqn["algo"]


def test_a_crafted_checkpoint_is_refused_by_every_loader(runs, tmp_path, capsys):
    exp = copy_run(runs, "appo", tmp_path)
    marker = tmp_path / "marker"
    crafted = exp / "checkpoint_p0" / "checkpoint_000009999_1.pth"
    plant(crafted, marker)
    with pytest.raises(UnsafeCheckpointError, match=r"refused to load .*checkpoint_000009999_1\.pth.*posix\.system"):
        load_latest_checkpoint(exp / "checkpoint_p0")
    cfg = parse_cfg([*SERIAL, f"--train_dir={tmp_path}", "--experiment=appo"])
    with pytest.raises(UnsafeCheckpointError):
        load_policy_checkpoint(cfg, 0)
    assert crafted.exists(), "a refused file is left where it is, for the user to look at"
    with pytest.raises(UnsafeCheckpointError):
        load_policy(exp)
    with pytest.raises(UnsafeCheckpointError):
        load_policy(exp, checkpoint=crafted)
    capsys.readouterr()
    assert enjoy_main([f"--train_dir={tmp_path}", "--experiment=appo", "--no_render", "--max_num_episodes=1"]) != 0
    out = "".join(capsys.readouterr())
    assert "enjoy: error: refused to load" in out and "Traceback" not in out, out
    # training from it: refused with one line before anything starts
    assert train(tmp_path, "appo", "--train_for_env_steps=6000") != 0
    out = capsys.readouterr().out
    assert len([ln for ln in out.splitlines() if "refused to load" in ln]) == 1 and "Traceback" not in out, out
    assert not marker.exists(), "unpickling the crafted file ran its command"


def test_a_garbage_file_is_unreadable_not_unsafe(tmp_path):
    path = tmp_path / "checkpoint_000000001_1.pth"
    path.write_bytes(b"\x00garbage\xff" * 7)
    with pytest.raises(CheckpointError, match="not a checkpoint file") as e:
        load_checkpoint_file(path)
    assert not isinstance(e.value, UnsafeCheckpointError)


def test_a_planted_serial_snapshot_is_not_unpickled(runs, tmp_path, capsys):
    exp = copy_run(runs, "appo", tmp_path)
    cfg = parse_cfg([*SERIAL, f"--train_dir={tmp_path}", "--experiment=appo"])
    latest = list_checkpoints(exp / "checkpoint_p0")[-1]
    key = tuple(int(x) for x in latest.stem.split("_")[1:3])
    marker = tmp_path / "marker"
    torch.save({"components": RunsACommand(marker)}, exp / SNAPSHOT_NAME)  # a plain torch file, as before signing
    state, why = load_snapshot(exp, cfg, key)
    assert state is None and "not signed" in why and not marker.exists(), why
    # a signed file whose payload was swapped
    signed = (runs / "appo" / SNAPSHOT_NAME).read_bytes()
    torch.save({"components": RunsACommand(marker)}, tmp_path / "payload")
    (exp / SNAPSHOT_NAME).write_bytes(signed[:40] + (tmp_path / "payload").read_bytes())
    state, why = load_snapshot(exp, cfg, key)
    assert state is None and "not signed" in why and not marker.exists(), why
    capsys.readouterr()
    assert train(tmp_path, "appo", "--train_for_env_steps=4000") == 0
    out = capsys.readouterr().out
    assert "not signed" in out and "resuming from the checkpoint instead" in out and not marker.exists(), out
    # the run's own (signed) snapshot still gives the exact resume
    shutil.copytree(runs / "appo", tmp_path / "own" / "appo")
    assert train(tmp_path / "own", "appo", "--train_for_env_steps=4000") == 0
    out = capsys.readouterr().out
    assert "exact resume from the serial snapshot" in out, out


# ---- item 7: broken files do not count towards --keep_checkpoints ---------------------------------------------
def test_a_truncated_newest_checkpoint_is_moved_aside_and_rotation_keeps_the_good_one(runs, tmp_path, capsys):
    exp = copy_run(runs, "appo", tmp_path)
    d = exp / "checkpoint_p0"
    good = list_checkpoints(d)[-1]
    state = load_checkpoint_file(good)
    # a newer file, truncated (as by a crash of the machine mid-write on a file system without ordering)
    broken = d / f"checkpoint_{state['policy_version'] + 100:09d}_{state['env_steps'] + 100000}.pth"
    shutil.copy(good, broken)
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 3])
    (exp / SNAPSHOT_NAME).unlink()  # resume from the checkpoint files
    capsys.readouterr()
    assert train(tmp_path, "appo", "--train_for_env_steps=6000", "--keep_checkpoints=1") == 0
    out = capsys.readouterr().out
    assert f"resumed from {good}" in out, out
    assert f"moved the unreadable checkpoint {broken.name} aside to {broken.name}.corrupt" in out, out
    assert (d / f"{broken.name}.corrupt").exists() and not broken.exists()
    kept = (exp / "sf_log.txt").read_text()  # the experiment's own log says so too, not only the console
    assert f"moved the unreadable checkpoint {broken.name} aside" in kept and f"{broken} failed to load" in kept, kept
    left = list_checkpoints(d)
    assert len(left) == 1 and left[0] != good and load_checkpoint_file(left[0])["env_steps"] > state["env_steps"]


def test_readers_do_not_move_files(tmp_path):
    d = tmp_path / "checkpoint_p0"
    save_checkpoint(d, {"w": torch.zeros(2)}, 1, 10, keep=0)
    bad = save_checkpoint(d, {"w": torch.zeros(2)}, 2, 20, keep=0)
    bad.write_bytes(bad.read_bytes()[:50])
    _, path = load_latest_checkpoint(d)  # enjoy, load_policy, PBT: never touch a folder they do not own
    assert path.name == "checkpoint_000000001_10.pth" and bad.exists()
    cfg = parse_cfg([*SERIAL, f"--train_dir={tmp_path}", "--experiment=x"])
    cfg.evaluation_run = True
    (tmp_path / "x").mkdir()
    shutil.move(d, checkpoint_dir(cfg, 0))
    assert load_policy_checkpoint(cfg, 0)[1].name == "checkpoint_000000001_10.pth"
    assert (checkpoint_dir(cfg, 0) / bad.name).exists()


# ---- item 8: a really full disk ------------------------------------------------------------------------------
def mount_tiny(mnt: Path, size: str = "1m"):
    """A tmpfs of `size` (1 MiB) at `mnt` for the test (root only; skipped where it cannot be mounted)."""
    mnt.mkdir(parents=True)
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def tiny_fs(tmp_path):
    yield from mount_tiny(tmp_path / "tiny")


@pytest.fixture
def tiny_checkpoint_fs(tmp_path):
    """The checkpoint folder of experiment `full` on its own tiny file system (the rest of the run, its TensorBoard
    files included, writes elsewhere)."""
    yield from mount_tiny(tmp_path / "td" / "full" / "checkpoint_p0")


def fill(directory: Path, leave: int = 16384) -> None:
    """Fill the file system but for `leave` bytes: a checkpoint's first bytes still fit, its tensors do not (torch's
    zip writer then raises RuntimeError with the ENOSPC only as its context; on a disk with no byte left the error
    would come as an OSError from the file's close instead)."""
    fd = os.open(directory / f"filler_{uuid.uuid4().hex}", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\xff" * size)
                except OSError:
                    break
        os.ftruncate(fd, max(os.fstat(fd).st_size - leave, 0))
    finally:
        os.close(fd)


def test_a_full_disk_keeps_the_old_checkpoint_with_one_clear_error(tiny_fs):
    d = tiny_fs / "checkpoint_p0"
    old = save_checkpoint(d, {"w": torch.ones(1000)}, 1, 10, keep=1)
    fill(tiny_fs)
    with pytest.raises(CheckpointError, match=r"could not write checkpoint .*: No space left on device; the previous"):
        save_checkpoint(d, {"w": torch.zeros(100_000)}, 2, 20, keep=1)
    assert list_checkpoints(d) == [old] and torch.equal(load_checkpoint_file(old)["w"], torch.ones(1000))
    assert sorted(os.listdir(d)) == [old.name], "a temp file was left behind"


def test_a_run_on_a_full_disk_stops_with_one_error_line(tiny_checkpoint_fs, capsys):
    """A whole serial run whose disk fills after its first checkpoint (a callback fills it)."""
    args = ["--save_every_sec=1", "--train_for_seconds=20", "--callbacks=tests.experiment.disk_filler:FillDisk"]
    capsys.readouterr()
    rc = train(tiny_checkpoint_fs.parents[1], "full", *args)
    out = capsys.readouterr().out
    assert rc != 0, out
    errors = [ln for ln in out.splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "checkpoint" in errors[0], out
    assert "Traceback" not in out, out
    ckpts = list_checkpoints(tiny_checkpoint_fs)
    assert len(ckpts) == 1 and "model" in load_checkpoint_file(ckpts[0]), ckpts


def test_cfg_json_is_written_durably(tmp_path, monkeypatch):
    from sample_factory.experiment import folder

    synced = []
    real = os.fsync
    monkeypatch.setattr(folder.os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real(fd))
    cfg = parse_cfg([*SERIAL, f"--train_dir={tmp_path}", "--experiment=durable"])
    _, _, lock = folder.prepare_experiment_dir(cfg)
    lock.release()
    assert any(p.endswith(".cfg.json.tmp") for p in synced), synced  # the file, before the rename
    assert str(tmp_path / "durable") in synced, synced  # the folder, after it
    assert json.loads((tmp_path / "durable" / "cfg.json").read_text())["experiment"] == "durable"


# ---- item 5: --algo is fixed for an experiment ----------------------------------------------------------------
@pytest.mark.parametrize("saved, typed", [("DQN", "APPO"), ("APPO", "DQN")])
def test_algo_cannot_change_on_resume(runs, saved, typed):
    name = "dqn" if saved == "DQN" else "appo"
    saved_cfg = json.loads((runs / name / "cfg.json").read_text())
    assert saved_cfg["algo"] == saved
    cfg = parse_cfg([*SERIAL, f"--train_dir={runs}", f"--experiment={name}", f"--algo={typed}"])
    with pytest.raises(ExperimentError, match=rf"--algo={typed} differs from the experiment's saved value '{saved}'"):
        merge_for_resume(cfg, saved_cfg)


def test_options_newer_than_the_saved_cfg_take_their_defaults_not_todays_preset():
    """MountainCarContinuous-v0 runs made before its sparse_continuous preset (gSDE) saved no use_sde: resumed, the
    model must be the one the checkpoint holds (a learned log-std), not the preset's gSDE model."""
    saved = vars(parse_cfg(["--env=MountainCarContinuous-v0"])).copy()
    for key in ("use_sde", "sde_sample_freq"):
        del saved[key]
    saved["preset"] = "vector_continuous"
    cfg = parse_cfg(["--env=MountainCarContinuous-v0", "--train_for_env_steps=5000"])
    assert cfg.use_sde and cfg.sde_sample_freq == 1000  # today's preset
    merge_for_resume(cfg, saved)
    assert not cfg.use_sde and cfg.sde_sample_freq == -1 and cfg.preset == "vector_continuous"
    assert cfg.train_for_env_steps == 5000  # typed now: kept
    # typed on resume, gSDE would change the model's parameters: refused
    typed = parse_cfg(["--env=MountainCarContinuous-v0", "--use_sde=True"])
    with pytest.raises(ExperimentError, match="--use_sde=True differs from the experiment's saved value False"):
        merge_for_resume(typed, {**saved, "use_sde": False})


def test_algo_change_is_refused_in_one_line(runs, tmp_path, capsys):
    copy_run(runs, "dqn", tmp_path)
    before = sorted(os.listdir(tmp_path / "dqn" / "checkpoint_p0"))
    capsys.readouterr()
    assert train(tmp_path, "dqn", "--algo=APPO", "--train_for_env_steps=6000") != 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "--algo=APPO" in ln]
    assert len(lines) == 1 and "cannot change on resume" in lines[0] and "Traceback" not in out, out
    assert sorted(os.listdir(tmp_path / "dqn" / "checkpoint_p0")) == before


# ---- issue 51 item 4: what a checkpoint means cannot change on resume ----------------------------------------
def test_dueling_cannot_change_on_resume(runs, tmp_path, capsys):
    """--dueling has the same parameter shapes either way: a resume that flipped it read the advantages head as Q
    and exited 0. Refused in one line; the checkpoints and cfg.json stay as they were."""
    copy_run(runs, "dqn", tmp_path)
    exp = tmp_path / "dqn"
    saved_cfg = (exp / "cfg.json").read_bytes()
    before = sorted(os.listdir(exp / "checkpoint_p0"))
    capsys.readouterr()
    assert train(tmp_path, "dqn", "--dueling=False", "--train_for_env_steps=6000") != 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "--dueling=False" in ln]
    assert len(lines) == 1 and "cannot change on resume" in lines[0] and "Traceback" not in out, out
    assert sorted(os.listdir(exp / "checkpoint_p0")) == before and (exp / "cfg.json").read_bytes() == saved_cfg


def test_a_model_flag_changed_behind_the_typed_flags_is_refused_in_one_line(runs, tmp_path, capsys):
    """cfg.json's model no longer matches the checkpoint (edited, or written by another version): the checkpoint's
    own cfg names the flag, in one line, instead of one load_state_dict line per parameter."""
    copy_run(runs, "appo", tmp_path)
    exp = tmp_path / "appo"
    cfg = json.loads((exp / "cfg.json").read_text())
    cfg["encoder_mlp_layers"] = [32]
    (exp / "cfg.json").write_text(json.dumps(cfg))
    (exp / SNAPSHOT_NAME).unlink()
    capsys.readouterr()
    assert train(tmp_path, "appo", "--train_for_env_steps=6000") != 0
    out = capsys.readouterr().out
    errors = [ln for ln in out.splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and "--encoder_mlp_layers=[32]" in errors[0], out
    assert "cannot change on resume" in errors[0] and "Traceback" not in out and "size mismatch" not in out, out


def test_check_model_fits_names_the_shape_flag_that_changed():
    from sample_factory.envs.env_utils import probe_env
    from sample_factory.experiment.checkpoints import check_model_fits
    from sample_factory.model.actor_critic import ActorCritic

    small = parse_cfg([*SERIAL, "--encoder_mlp_layers=32", "--use_rnn=False"])
    big = parse_cfg([*SERIAL, "--encoder_mlp_layers=48", "--use_rnn=False"])
    obs, act, *_ = probe_env(small, False)
    state = {"model": ActorCritic(small, obs, act).state_dict(), "policy_version": 3, "env_steps": 10}
    # a checkpoint older than the record of its flags: only the shapes can tell
    with pytest.raises(CheckpointError, match=r"does not fit the model of flags of this run: .* has shape \(32, 4\)"):
        check_model_fits(big, ActorCritic(big, obs, act), state, Path("c.pth"))
    trained = {**vars(big), "env_framestack": 1, "encoder_mlp_layers": [48]}
    with pytest.raises(CheckpointError, match=r"--env_framestack=4 \(trained with 1\)"):
        check_model_fits(big, ActorCritic(big, obs, act), {**state, "cfg": trained}, Path("c.pth"))
    check_model_fits(small, ActorCritic(small, obs, act), state, Path("c.pth"))  # fits: nothing raised


# ---- issue 51 item 10: a checkpoint that is not one of ours ----------------------------------------------------
@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda s: s.pop("model"), "holds no model weights"),
        (lambda s: s.update(env_steps="lots"), "env_steps is 'lots', not a count"),
    ],
)
def test_a_checkpoint_without_weights_or_counts_is_refused_naming_the_file(runs, tmp_path, capsys, damage, message):
    exp = copy_run(runs, "appo", tmp_path)
    (exp / SNAPSHOT_NAME).unlink()
    latest = list_checkpoints(exp / "checkpoint_p0")[-1]
    state = load_checkpoint_file(latest)
    damage(state)
    torch.save(state, latest)
    capsys.readouterr()
    assert train(tmp_path, "appo", "--train_for_env_steps=6000") != 0
    out = capsys.readouterr().out
    errors = [ln for ln in out.splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and message in errors[0] and latest.name in errors[0], out
    assert "Traceback" not in out and not list((exp / "checkpoint_p0").glob("*lots*")), out


# ---- issue 51 item 19: a transient read error sets nothing aside ---------------------------------------------
@pytest.mark.parametrize(
    "error", [OSError(5, "Input/output error"), PermissionError(13, "Permission denied"), MemoryError()]
)
def test_a_transient_read_error_stops_the_start_and_moves_nothing(tmp_path, monkeypatch, error):
    """A newest checkpoint that failed to load for a reason that may pass was renamed *.corrupt and the run resumed
    from an older one, silently losing the newer training. Now the start stops with one line; nothing is moved."""
    import sample_factory.experiment.checkpoints as checkpoints

    d = tmp_path / "checkpoint_p0"
    save_checkpoint(d, {"w": torch.zeros(2)}, 1, 10, keep=0)
    newest = save_checkpoint(d, {"w": torch.ones(2)}, 2, 20, keep=0)
    real = checkpoints.torch.load

    def load(path, *args, **kwargs):
        if Path(path) == newest:
            raise error
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoints.torch, "load", load)
    with pytest.raises(CheckpointError, match=rf"could not read checkpoint {newest}: .*it is left as it is") as e:
        load_latest_checkpoint(d, set_aside=True, quiet=True)
    assert "\n" not in str(e.value)
    assert sorted(os.listdir(d)) == ["checkpoint_000000001_10.pth", "checkpoint_000000002_20.pth"]
    # a really unreadable newest file is still set aside (truncated: EINVAL from the zip reader's seek, or garbage)
    monkeypatch.setattr(checkpoints.torch, "load", real)
    newest.write_bytes(newest.read_bytes()[:-5])
    _, path = load_latest_checkpoint(d, set_aside=True, quiet=True)
    assert path.name == "checkpoint_000000001_10.pth" and (d / f"{newest.name}.corrupt").exists()


# ---- issue 51 item 17: the runner reads the weights, not the replay buffer ------------------------------------
def test_the_runner_reads_the_weights_of_the_checkpoint_not_its_replay_buffer(runs, tmp_path):
    """The runner loaded the whole newest checkpoint (a replay buffer of gigabytes included) only to publish the
    weights, before the learner loaded it again. It maps the file now: what it reads is about the weights' size.
    (rchar counts the bytes of read calls; pages of a mapped file that are never touched are never read.)"""
    from sample_factory.envs.env_utils import probe_env
    from sample_factory.model.actor_critic import ActorCritic
    from sample_factory.run_setup import initial_weights

    exp = copy_run(runs, "appo", tmp_path)
    latest = list_checkpoints(exp / "checkpoint_p0")[-1]
    state = load_checkpoint_file(latest)
    state["algo"]["replay"]["store"]["padding"] = torch.ones(16 * 2**20)  # 64 MiB standing in for a big buffer
    torch.save(state, latest)
    cfg = parse_cfg([*SERIAL, f"--train_dir={tmp_path}", "--experiment=appo"])
    vars(cfg).update({k: v for k, v in json.loads((exp / "cfg.json").read_text()).items() if k in vars(cfg)})
    obs, act, *_ = probe_env(cfg, False)

    def rchar() -> int:
        return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])

    before = rchar()
    weights, steps, _ = initial_weights(cfg, ActorCritic(cfg, obs, act), obs, act)
    read = rchar() - before
    assert steps == [state["env_steps"]] and weights[0].version == state["policy_version"]
    assert read < 16 * 2**20, f"read {read / 2**20:.1f} MiB of a {latest.stat().st_size / 2**20:.0f} MiB checkpoint"


# ---- issue 51 item 20: the snapshot key must be private to its user -------------------------------------------
def test_a_snapshot_key_others_can_read_is_not_used(tmp_path, monkeypatch):
    """The key's mode and owner were not checked when it was read: a key readable (or written) by others lets them
    sign a snapshot that this user's runs unpickle."""
    from sample_factory.runtime.serial_snapshot import save_snapshot, snapshot_key_path

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    cfg = parse_cfg([*SERIAL, f"--train_dir={tmp_path}", "--experiment=x"])
    exp = tmp_path / "x"
    exp.mkdir()
    save_snapshot(exp, cfg, [], None, None, {"checkpoint": (1, 10), "env_steps": [10]})
    key = snapshot_key_path()
    assert key.stat().st_mode & 0o777 == 0o600
    state, why = load_snapshot(exp, cfg, (1, 10))
    assert state is not None, why
    key.chmod(0o644)
    state, why = load_snapshot(exp, cfg, (1, 10))
    assert state is None and "is not private to this user" in why and "mode 644" in why, why
    with pytest.raises(RuntimeError, match="not private"):  # nor signs a new one (the runner warns and goes on)
        save_snapshot(exp, cfg, [], None, None, {"checkpoint": (1, 10), "env_steps": [10]})


# ---- issue 51 item 16: a final save cut short by a kill keeps the training -------------------------------------
def test_a_final_save_killed_while_writing_the_replay_buffer_keeps_the_weights(tmp_path, monkeypatch, capsys):
    """With --save_replay_buffer the final save takes minutes for gigabytes, longer than the launcher's stop wait
    (60 s) or Slurm's KillWait (30 s): a kill during it lost everything since the last periodic save. The final
    save now writes the checkpoint without the buffer first; here the write of the whole one is cut short."""
    import sample_factory.workers.learner as learner_module

    real, calls = learner_module.save_checkpoint, []

    def save_checkpoint(directory, state, version, env_steps, keep):
        calls.append("replay" in state["algo"])
        if calls == [False, True]:  # the final save's second write: the kill
            raise RuntimeError("killed while writing the replay buffer")
        return real(directory, state, version, env_steps, keep)

    monkeypatch.setattr(learner_module, "save_checkpoint", save_checkpoint)
    dqn = ["--algo=DQN", "--batch_size=64", "--learning_starts=500", "--encoder_mlp_layers=32"]
    train(tmp_path, "dqn", *dqn, "--train_for_env_steps=3000", "--save_replay_buffer=True")
    out = capsys.readouterr().out
    assert calls == [False, True], calls  # no periodic save in a run this short: the final one only
    (final,) = list_checkpoints(tmp_path / "dqn" / "checkpoint_p0")
    state = load_checkpoint_file(final)
    assert "replay" not in state["algo"] and state["env_steps"] > 0, out
