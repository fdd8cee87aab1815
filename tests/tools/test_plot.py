"""sample_factory.tools.plot: the TFRecord reader against event files written by tensorboardX, the PNG for two
tiny experiments (one of them resumed, so its summaries span two event files), and every policy of a population
(--policy_id=all) with its PBT replacements."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from tensorboardX import SummaryWriter

from sample_factory.tools.plot import (
    crc32c,
    import_pyplot,
    masked_crc32c,
    parse_policy_id,
    pbt_replacements,
    plot_experiments,
    policy_ids,
    read_scalars,
)
from sample_factory.tools.plot import main as plot_main
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
    assert steps[-1] >= 8192 and "perf/fps_env_steps" in scalars and "train/loss" in scalars

    out = tmp_path / "plots" / "curves.png"
    assert plot_main(["--experiment=a", "--experiment=b", f"--train_dir={tmp_path}", f"--output={out}"]) == 0
    assert out.read_bytes()[:8] == PNG_SIGNATURE and out.stat().st_size > 5000
    assert f"wrote {out}" in capsys.readouterr().out


def test_plot_errors(tmp_path, monkeypatch, capsys):
    assert plot_main(["--experiment=nope", f"--train_dir={tmp_path}"]) == 1
    assert "no TensorBoard event files" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install -c constraints.txt -e '\.\[plot\]'"):
        import_pyplot()


def test_parse_policy_id():
    assert parse_policy_id("all") == "all" and parse_policy_id(" ALL ") == "all"
    assert parse_policy_id("3") == 3 and parse_policy_id(2) == 2
    for bad in ("-1", "p1", ""):
        with pytest.raises(ValueError):
            parse_policy_id(bad)


def _legend_labels(monkeypatch) -> list[list[str]]:
    """Run plot_experiments with pyplot.close recording the legend texts of each panel before closing."""
    plt = import_pyplot()
    seen: list[list[str]] = []
    real_close = plt.close

    def close(fig=None):
        if fig is not None:
            seen.extend([t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes)
        real_close(fig)

    monkeypatch.setattr(plt, "close", close)
    return seen


def test_plot_all_policies_of_a_population(tmp_path, monkeypatch, capsys):
    """--policy_id=all: one line per numbered summary folder (numeric order, other folders ignored), labelled
    p0..pN; replacements from pbt_p<i>.json get one extra legend entry; several experiments prefix the labels."""
    pytest.importorskip("matplotlib")
    exp = tmp_path / "pop"
    for p in (0, 1, 10):
        write_events(
            exp / ".summary" / str(p), {"reward/mean": [(100, 1.0 + p), (200, 5.0 + p)], "perf/fps": [(100, 9.0)]}
        )
    (exp / ".summary" / "notes").mkdir()
    history = [
        {"env_steps": 150, "kind": "replacement", "source": 10, "changes": {}, "objectives": {}},
        {"env_steps": 180, "kind": "mutation", "source": None, "changes": {}, "objectives": {}},
    ]
    (exp / "pbt_p1.json").write_text(json.dumps({"policy_id": 1, "hyperparams": {}, "history": history}))
    (exp / "pbt_p0.json").write_text("{not json")  # unreadable state: no markers, no failure
    assert policy_ids(exp) == [0, 1, 10]
    assert pbt_replacements(exp, 1) == [(150, 10)] and pbt_replacements(exp, 0) == [] == pbt_replacements(exp, 7)

    labels = _legend_labels(monkeypatch)
    out = tmp_path / "all.png"
    assert plot_main(["--experiment=pop", f"--train_dir={tmp_path}", f"--output={out}", "--policy_id=all"]) == 0
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    reward_labels, fps_labels = labels
    assert reward_labels == ["p0", "p1", "p10", "PBT replacement (source's weights loaded)"], reward_labels
    assert fps_labels == ["p0", "p1", "p10"], fps_labels

    # Two experiments: labels name the experiment; the default (policy 0) keeps one plain line per experiment.
    write_events(tmp_path / "other" / ".summary" / "0", {"reward/mean": [(100, 2.0)], "perf/fps": [(100, 3.0)]})
    labels.clear()
    plot_experiments(["pop", "other"], out, str(tmp_path), "all")
    assert labels[0][:4] == ["pop p0", "pop p1", "pop p10", "other p0"], labels
    labels.clear()
    plot_experiments(["pop", "other"], out, str(tmp_path))
    assert labels == [["pop", "other"], ["pop", "other"]]

    assert plot_main(["--experiment=none", f"--train_dir={tmp_path}", "--policy_id=all", f"--output={out}"]) == 1
    assert "no policy summaries" in capsys.readouterr().err


def test_plot_all_policies_of_a_real_pbt_run(tmp_path):
    """A tiny real run with two policies and PBT: the summary layout and state files the plot reads."""
    pytest.importorskip("matplotlib")
    pbt = ["--with_pbt=True", "--pbt_period_env_steps=512", "--pbt_start_mutation=512"]
    exp = train_tiny(tmp_path, "pbt", "--num_policies=2", *pbt)
    assert policy_ids(exp) == [0, 1]
    for p in (0, 1):
        assert read_scalars(exp / ".summary" / str(p))["reward/mean"]
        state = json.loads((exp / f"pbt_p{p}.json").read_text())
        assert state["history"], state  # PBT took decisions
        assert len(pbt_replacements(exp, p)) == sum(e["kind"] == "replacement" for e in state["history"])
    out = plot_experiments(["pbt"], tmp_path / "pbt.png", str(tmp_path), "all")
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_help_says_where_the_png_goes(capsys):
    with pytest.raises(SystemExit) as exc:
        plot_main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Where the PNG goes (default: plot.png in the folder you run this from" in out


def test_readme_lists_the_plot_tool():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    tools = readme[readme.index("## Tools") : readme.index("## Read on")]
    assert "sf-plot --experiment=" in tools and "python -m sample_factory.tools.plot" in tools
