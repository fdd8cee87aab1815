"""`python -m sample_factory.plot --experiment=A [--experiment=B ...]`: training curves of runs in one PNG.

Top panel: reward/mean, bottom panel: perf/fps, both against env steps, one line per experiment. The TensorBoard
event files are read by `read_scalars` below (TFRecord framing + tensorboardX's protobufs), so neither tensorboard
nor tensorflow is needed. The PNG needs matplotlib: pip install -e .[plot].
"""

from __future__ import annotations

import argparse
import struct
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sample_factory.experiment import DEFAULT_TRAIN_DIR, resolve_experiment_dir

PANELS = (("reward/mean", "mean episode reward"), ("perf/fps", "FPS"))


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
    (files by name, i.e. by creation time, so a resumed run continues after the first one)."""
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
        raise ImportError(f"plotting needs the optional extra: pip install -e .[plot] ({e})") from e
    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    return plt


def plot_experiments(
    experiments: Sequence[str], output: str | Path, train_dir: str | None = None, policy_id: int = 0
) -> Path:
    """Write the two-panel PNG for `experiments` to `output`; returns its path."""
    plt = import_pyplot()
    curves = {
        name: read_scalars(resolve_experiment_dir(name, train_dir) / ".summary" / str(policy_id))
        for name in experiments
    }
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(9, 3.2 * len(PANELS)), sharex=True, squeeze=False)
    try:
        for ax, (tag, label) in zip(axes[:, 0], PANELS):
            for name, scalars in curves.items():
                points = scalars.get(tag, [])
                if points:
                    steps, values = zip(*points)
                    ax.plot(steps, values, label=name, marker="." if len(points) < 30 else None)
                else:
                    print(f"plot: {name} has no {tag!r} yet (no finished episodes or summaries)", file=sys.stderr)
            ax.set_ylabel(label)
            ax.set_title(tag, fontsize=10)
            ax.grid(alpha=0.3)
            if ax.get_lines():
                ax.legend(fontsize=8)
        axes[-1, 0].set_xlabel("env steps")
        fig.tight_layout()
        output = Path(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(output, format="png", dpi=100)
    finally:
        plt.close(fig)
    return output


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sample_factory.plot", description=__doc__.split("\n")[0])
    p.add_argument("--experiment", action="append", required=True, help="Experiment name or folder; repeatable.")
    p.add_argument("--train_dir", default=None, help=f"Root folder of experiments (default {DEFAULT_TRAIN_DIR}).")
    p.add_argument("--output", default="plot.png", help="PNG file to write.")
    p.add_argument("--policy_id", type=int, default=0)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        out = plot_experiments(args.experiment, args.output, args.train_dir, args.policy_id)
    except (ImportError, FileNotFoundError) as e:
        print(f"plot: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
