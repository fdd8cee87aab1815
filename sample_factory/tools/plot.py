"""`python -m sample_factory.tools.plot --experiment=A [--experiment=B ...]`: training curves of runs in one PNG.

Top panel: reward/mean, bottom panel: perf/fps, both against env steps, one line per experiment. With
`--policy_id=all` every policy of each experiment (every numbered folder under <experiment>/.summary/) gets its own
line, labelled p0, p1, ... (prefixed with the experiment's name when there are several experiments); PBT
replacements recorded in <experiment>/pbt_p<i>.json are marked on the reward curve of the replaced policy.
The TensorBoard event files are read by `read_scalars` below (TFRecord framing + tensorboardX's protobufs), so
neither tensorboard nor tensorflow is needed. The PNG needs matplotlib (the [plot] extra).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sample_factory.config.extras import install_hint
from sample_factory.experiment.folder import DEFAULT_TRAIN_DIR, resolve_experiment_dir

PANELS = (("reward/mean", "mean episode reward"), ("perf/fps", "FPS"))
FPS_TAGS = ("perf/fps_env_frames", "perf/fps_env_steps", "perf/fps")  # the unit is in the tag (older runs: none)


def panel_points(scalars: dict[str, list[tuple[int, float]]], tag: str) -> tuple[str, list[tuple[int, float]]]:
    """The points of a panel, and the tag they came from (the FPS panel takes whichever unit the run logged)."""
    for t in FPS_TAGS if tag == "perf/fps" else (tag,):
        if scalars.get(t):
            return t, scalars[t]
    return tag, []


ALL_POLICIES = "all"


def _crc32c_table() -> list[int]:
    # CRC-32C (Castagnoli), reflected polynomial 0x82F63B78: the checksum TFRecord framing uses.
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord stores a rotated + offset CRC so that CRCs of data that itself contains CRCs stay well-behaved."""
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def iter_records(path: Path, verify: bool = True):
    """Payloads of the TFRecord file at `path`. Each record: uint64 length, uint32 masked CRC of the length bytes,
    data, uint32 masked CRC of data (little endian). A truncated last record (a writer still busy) ends the file
    quietly; a CRC mismatch ends it with a warning."""
    data = path.read_bytes()
    i = 0
    while i + 12 <= len(data):
        header = data[i : i + 8]
        (n,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[i + 8 : i + 12])
        if masked_crc32c(header) != len_crc:
            warnings.warn(f"{path}: corrupt record length at byte {i}; rest of the file skipped", stacklevel=2)
            return
        end = i + 12 + n + 4
        if end > len(data):
            return
        payload = data[i + 12 : i + 12 + n]
        if verify and masked_crc32c(payload) != struct.unpack("<I", data[end - 4 : end])[0]:
            warnings.warn(f"{path}: corrupt record at byte {i}; rest of the file skipped", stacklevel=2)
            return
        yield payload
        i = end


def read_scalars(event_dir: str | Path, verify: bool = True) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of one summary folder: {tag: [(step, value), ...]} in the order written
    (files by name, i.e. by creation time, so a resumed run continues after the first one). A session start
    (SessionLog START at step S, written by a resumed run) drops the earlier points past S, as TensorBoard does."""
    from tensorboardX.proto import event_pb2  # tensorboardX is a core dependency; only the protobufs are used

    event_dir = Path(event_dir)
    files = sorted(event_dir.glob("events.out.tfevents.*"))
    if not files:
        raise FileNotFoundError(f"no TensorBoard event files in {event_dir}")
    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in files:
        for payload in iter_records(path, verify):
            event = event_pb2.Event()
            event.ParseFromString(payload)
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                # a resumed session starts at this step: points past it were lost with the weights (as TensorBoard)
                for tag, points in scalars.items():
                    scalars[tag] = [(step, value) for step, value in points if step <= event.step]
                continue
            for v in event.summary.value:
                if v.HasField("simple_value"):
                    value = float(v.simple_value)
                elif v.HasField("tensor") and v.tensor.float_val:  # new-style scalar summaries
                    value = float(v.tensor.float_val[0])
                else:
                    continue  # histograms, images, text...
                scalars.setdefault(v.tag, []).append((int(event.step), value))
    return scalars


def import_pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(f"plotting needs the optional extra: {install_hint('plot')} ({e})") from e
    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    return plt


def policy_ids(exp_dir: str | Path) -> list[int]:
    """The policies that have a summary folder (<exp_dir>/.summary/<id>/), in numeric order."""
    summary = Path(exp_dir) / ".summary"
    ids = [int(d.name) for d in summary.iterdir() if d.is_dir() and d.name.isdigit()] if summary.is_dir() else []
    return sorted(ids)


def pbt_replacements(exp_dir: str | Path, policy_id: int) -> list[tuple[int, int]]:
    """(env steps of the replaced policy, source policy) of every PBT replacement of `policy_id`, from
    <exp_dir>/pbt_p<id>.json; empty when the run had no PBT or the file cannot be read."""
    path = Path(exp_dir) / f"pbt_p{policy_id}.json"
    try:
        history = json.loads(path.read_text()).get("history", [])
    except (OSError, ValueError):
        return []
    return [(int(e["env_steps"]), int(e["source"])) for e in history if e.get("kind") == "replacement"]


def parse_policy_id(value: str | int) -> int | str:
    """`--policy_id`: a policy number, or "all"."""
    if isinstance(value, int) or value.strip().lower() != ALL_POLICIES:
        number = int(value)
        if number < 0:
            raise ValueError(f"policy id must be >= 0 or {ALL_POLICIES!r}, got {value}")
        return number
    return ALL_POLICIES


def _curve_sources(experiments: Sequence[str], train_dir: str | None, policy_id: int | str) -> list[tuple]:
    """(label, experiment folder, policy) for every line to draw."""
    sources = []
    for name in experiments:
        exp_dir = resolve_experiment_dir(name, train_dir)
        if policy_id != ALL_POLICIES:
            sources.append((name, exp_dir, int(policy_id)))
            continue
        ids = policy_ids(exp_dir)
        if not ids:
            raise FileNotFoundError(f"no policy summaries in {exp_dir / '.summary'}")
        prefix = f"{name} " if len(experiments) > 1 else ""
        sources += [(f"{prefix}p{p}", exp_dir, p) for p in ids]
    return sources


def plot_experiments(
    experiments: Sequence[str], output: str | Path, train_dir: str | None = None, policy_id: int | str = 0
) -> Path:
    """Write the two-panel PNG for `experiments` to `output`; returns its path. `policy_id` is one policy of
    every experiment, or "all" for one line per policy."""
    policy_id = parse_policy_id(policy_id)
    plt = import_pyplot()
    curves = [
        (label, exp_dir, p, read_scalars(exp_dir / ".summary" / str(p)))
        for label, exp_dir, p in _curve_sources(experiments, train_dir, policy_id)
    ]
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(9, 3.2 * len(PANELS)), sharex=True, squeeze=False)
    try:
        for ax, (tag, label) in zip(axes[:, 0], PANELS):
            markers = []  # (x, y, colour) of PBT replacements, drawn over all lines
            units: set[str] = set()  # of the x axis
            for name, exp_dir, p, scalars in curves:
                source_tag, points = panel_points(scalars, tag)
                units.add("env frames" if source_tag.endswith("_env_frames") else "env steps")
                if not points:
                    print(f"plot: {name} has no {tag!r} yet (no finished episodes or summaries)", file=sys.stderr)
                    continue
                steps, values = zip(*points)
                (line,) = ax.plot(steps, values, label=name, marker="." if len(points) < 30 else None)
                if tag == "reward/mean" and policy_id == ALL_POLICIES:
                    markers += [(s, _value_at(points, s), line.get_color()) for s, _ in pbt_replacements(exp_dir, p)]
            for i, (x, y, color) in enumerate(markers):
                label_kw = {"label": "PBT replacement (source's weights loaded)"} if i == 0 else {}
                ax.plot([x], [y], linestyle="none", marker="v", markersize=7, color=color, mec="black", **label_kw)
            ax.set_ylabel(label)
            ax.set_title(tag, fontsize=10)
            ax.grid(alpha=0.3)
            if ax.get_lines():
                ax.legend(fontsize=8)
        unit = " or ".join(sorted(units)) or "env steps"
        axes[-1, 0].set_xlabel(unit if policy_id != ALL_POLICIES else f"{unit} of the policy")
        fig.tight_layout()
        output = Path(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(output, format="png", dpi=100)
    finally:
        plt.close(fig)
    return output


def _value_at(points: Sequence[tuple[int, float]], step: int) -> float:
    """The curve's value at `step`, linearly interpolated (held constant beyond its ends)."""
    if step <= points[0][0]:
        return points[0][1]
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if s0 <= step <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return points[-1][1]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sample_factory.tools.plot", description=__doc__.split("\n")[0])
    p.add_argument("--experiment", action="append", required=True, help="Experiment name or folder; repeatable.")
    p.add_argument("--train_dir", default=None, help=f"Root folder of experiments (default {DEFAULT_TRAIN_DIR}).")
    p.add_argument(
        "--output",
        default="plot.png",
        help="Where the PNG goes (default: plot.png in the folder you run this from; the path written is printed).",
    )
    p.add_argument(
        "--policy_id",
        type=parse_policy_id,
        default=0,
        help=f"Policy to plot (default 0), or {ALL_POLICIES!r}: one line per policy, labelled p0, p1, ...",
    )
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        out = plot_experiments(args.experiment, args.output, args.train_dir, args.policy_id)
    except (ImportError, FileNotFoundError, ValueError) as e:
        print(f"plot: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
