from types import SimpleNamespace

import pytest
import torch

from sample_factory.experiment.checkpoints import (
    checkpoint_dir,
    checkpoint_env_frames,
    list_checkpoints,
    load_latest_checkpoint,
    save_checkpoint,
)


def _state(i: int) -> dict:
    return {"version": i, "model": {"w": torch.full((3,), float(i))}}


def _names(paths) -> list[str]:
    return [p.name for p in paths]


def test_checkpoint_dir_layout(tmp_path):
    cfg = SimpleNamespace(train_dir=str(tmp_path), experiment="exp")
    assert checkpoint_dir(cfg, 0) == tmp_path / "exp" / "checkpoint_p0"
    assert checkpoint_dir(cfg, 3).name == "checkpoint_p3"


def test_save_creates_directory_and_round_trips(tmp_path):
    d = tmp_path / "a" / "b"
    path = save_checkpoint(d, _state(5), version=5, env_frames=1234, keep=2)
    assert path.parent == d and path.exists()
    assert path.name == "checkpoint_000000005_1234.pth" and checkpoint_env_frames(path) == 1234
    loaded, loaded_path = load_latest_checkpoint(d)
    assert loaded_path == path
    assert loaded["version"] == 5
    assert torch.equal(loaded["model"]["w"], torch.full((3,), 5.0))


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_save_keeps_exactly_newest_n(tmp_path, keep):
    saved = []
    for v in range(1, 7):
        saved.append(save_checkpoint(tmp_path, _state(v), version=v, env_frames=100 * v, keep=keep))
        assert list_checkpoints(tmp_path) == saved[-keep:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(_names(saved[-keep:]))


def test_list_order_is_numeric_by_version_then_env_steps(tmp_path):
    # env_steps are not zero-padded: 9 < 10 < 100 numerically but not as strings.
    for version, steps in [(2, 5), (1, 100), (1, 9), (1, 10), (10, 1)]:
        save_checkpoint(tmp_path, _state(version), version=version, env_frames=steps, keep=100)
    (tmp_path / "checkpoint_bad.pth").write_bytes(b"x")  # not a checkpoint name: ignored
    (tmp_path / "other.pth").write_bytes(b"x")
    assert _names(list_checkpoints(tmp_path)) == [
        "checkpoint_000000001_9.pth",
        "checkpoint_000000001_10.pth",
        "checkpoint_000000001_100.pth",
        "checkpoint_000000002_5.pth",
        "checkpoint_000000010_1.pth",
    ]


def test_retention_uses_numeric_order(tmp_path):
    save_checkpoint(tmp_path, _state(1), version=1, env_frames=100, keep=2)
    save_checkpoint(tmp_path, _state(2), version=1, env_frames=9, keep=2)
    save_checkpoint(tmp_path, _state(3), version=1, env_frames=1000, keep=2)
    assert _names(list_checkpoints(tmp_path)) == ["checkpoint_000000001_100.pth", "checkpoint_000000001_1000.pth"]


def test_load_latest_returns_newest(tmp_path):
    for v in (3, 1, 2):
        save_checkpoint(tmp_path, _state(v), version=v, env_frames=v, keep=5)
    state, path = load_latest_checkpoint(tmp_path)
    assert state["version"] == 3
    assert path.name == "checkpoint_000000003_3.pth"


@pytest.mark.parametrize("corruption", ["garbage", "truncated"])
def test_load_latest_skips_unreadable_newest(tmp_path, capsys, corruption):
    good = save_checkpoint(tmp_path, _state(1), version=1, env_frames=10, keep=5)
    bad = save_checkpoint(tmp_path, _state(2), version=2, env_frames=20, keep=5)
    data = bad.read_bytes()
    bad.write_bytes(b"\x00garbage\xff" * 7 if corruption == "garbage" else data[: len(data) // 2])
    state, path = load_latest_checkpoint(tmp_path)
    assert path == good
    assert state["version"] == 1
    assert bad.name in capsys.readouterr().out  # skipping is reported, not silent
    assert bad.exists()  # loading never deletes


def test_load_latest_raises_when_nothing_loads(tmp_path):
    p = save_checkpoint(tmp_path, _state(1), version=1, env_frames=1, keep=5)
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match="no checkpoint could be loaded"):
        load_latest_checkpoint(tmp_path)


def test_load_latest_empty_or_missing_dir(tmp_path):
    assert load_latest_checkpoint(tmp_path) is None
    (tmp_path / "unrelated.txt").write_text("hi")
    assert load_latest_checkpoint(tmp_path) is None
    assert load_latest_checkpoint(tmp_path / "does_not_exist") is None


def test_no_temp_files_left_behind(tmp_path):
    for v in range(4):
        save_checkpoint(tmp_path, _state(v), version=v, env_frames=v, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["checkpoint_000000002_2.pth", "checkpoint_000000003_3.pth"]
    assert not any(n.startswith(".") or n.endswith(".tmp") for n in names)


def test_failed_save_does_not_replace_existing(tmp_path):
    good = save_checkpoint(tmp_path, _state(1), version=1, env_frames=1, keep=2)

    class Unpicklable:
        def __reduce__(self):
            raise TypeError("cannot pickle")

    with pytest.raises(TypeError):
        save_checkpoint(tmp_path, {"x": Unpicklable()}, version=1, env_frames=1, keep=2)
    state, path = load_latest_checkpoint(tmp_path)
    assert path == good and state["version"] == 1


def test_failed_save_leaves_no_temp_file(tmp_path):
    class Unpicklable:
        def __reduce__(self):
            raise TypeError("cannot pickle")

    with pytest.raises(TypeError):
        save_checkpoint(tmp_path, {"x": Unpicklable()}, version=1, env_frames=1, keep=2)
    assert list(tmp_path.iterdir()) == []
