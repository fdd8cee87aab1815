"""sample_factory.plot: the TFRecord reader against event files written by tensorboardX, and the PNG for two
tiny experiments (one of them resumed, so its summaries span two event files)."""

from __future__ import annotations

import struct
import sys

import pytest
from tensorboardX import SummaryWriter

from sample_factory.plot import crc32c, import_pyplot, masked_crc32c, read_scalars
from sample_factory.plot import main as plot_main
from tests.policy_helpers import train_tiny

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_events(d, points: dict[str, list[tuple[int, float]]]) -> None:
    w = SummaryWriter(str(d))
    for tag, pts in points.items():
        for step, value in pts:
            w.add_scalar(tag, value, step)
    w.close()


def test_crc32c_known_values():
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert crc32c(b"") == 0
    assert masked_crc32c(b"") == 0xA282EAD8  # mask of a zero CRC is just the offset


def test_read_scalars_roundtrip(tmp_path):
    points = {"reward/mean": [(10, 1.5), (20, 2.5), (35, -3.0)], "perf/fps": [(10, 1000.0)]}
    write_events(tmp_path, points)
    assert read_scalars(tmp_path) == points


def test_read_scalars_tolerates_a_torn_tail_and_reports_corruption(tmp_path):
    write_events(tmp_path, {"a": [(1, 1.0), (2, 2.0)]})
    (path,) = tmp_path.glob("events.out.tfevents.*")
    data = path.read_bytes()
    path.write_bytes(data + struct.pack("<Q", 100) + b"\x00\x00")  # a writer caught mid-record
    assert read_scalars(tmp_path) == {"a": [(1, 1.0), (2, 2.0)]}
    corrupt = bytearray(data)
    corrupt[-6] ^= 0xFF  # inside the last record's payload
    path.write_bytes(bytes(corrupt))
    with pytest.warns(UserWarning, match="corrupt record"):
        assert read_scalars(tmp_path) == {"a": [(1, 1.0)]}
    with pytest.raises(FileNotFoundError):
        read_scalars(tmp_path / "empty")


def test_plot_two_experiments(tmp_path, capsys):
    pytest.importorskip("matplotlib")  # `make venv` installs the [plot] extra
    train_tiny(tmp_path, "a")
    # Resume "a" for more steps: the second run writes a second event file; the steps keep increasing.
    train_tiny(tmp_path, "a", "--train_for_env_steps=8192")
    train_tiny(tmp_path, "b", "--learning_rate=1e-3")

    scalars = read_scalars(tmp_path / "a" / ".summary" / "0")
    steps = [s for s, _ in scalars["reward/mean"]]
    assert len(steps) >= 2 and steps == sorted(steps) and len(set(steps)) == len(steps), steps
    assert steps[-1] >= 8192 and "perf/fps" in scalars and "train/loss" in scalars

    out = tmp_path / "plots" / "curves.png"
    assert plot_main(["--experiment=a", "--experiment=b", f"--train_dir={tmp_path}", f"--output={out}"]) == 0
    assert out.read_bytes()[:8] == PNG_SIGNATURE and out.stat().st_size > 5000
    assert f"wrote {out}" in capsys.readouterr().out


def test_plot_errors(tmp_path, monkeypatch, capsys):
    assert plot_main(["--experiment=nope", f"--train_dir={tmp_path}"]) == 1
    assert "no TensorBoard event files" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install -e \.\[plot\]"):
        import_pyplot()
