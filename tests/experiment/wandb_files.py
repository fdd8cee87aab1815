"""Reads what an offline W&B run wrote, without the network and without wandb's private reader: the run file
`run-<id>.wandb` is a LevelDB-style log (a 7-byte header ':W&B' + magic + version, then 32 KiB blocks of records,
each a 7-byte header crc32 / length / type and a chunk; FULL, or FIRST MIDDLE... LAST pieces of one protobuf
`Record`)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

_BLOCK = 32 * 1024
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def run_records(path: Path) -> list:
    """Every wandb_internal_pb2.Record in the run file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if len(data) < _HEADER:
        return []  # still being created
    assert data[:4] == b":W&B", f"not a W&B run file: {path}"
    records, pos, pieces = [], _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if pos + _HEADER + length > len(data):
            break  # a record still being written
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 0:
            continue
        pieces += chunk
        if kind in (_FULL, _LAST):
            rec = pb.Record()
            rec.ParseFromString(pieces)
            records.append(rec)
            pieces = b""
    return records


def history_rows(path: Path) -> list[dict[str, float]]:
    """The logged rows ({key: value}) of a run file, in order."""
    rows = []
    for rec in run_records(path):
        if rec.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item}
            )
    return rows


def offline_runs(wandb_dir: Path, timeout: float = 30.0) -> list[Path]:
    """The run files of the offline runs under a WANDB_DIR (or a run's `dir`), once each is complete: wandb's
    service process writes the file on its own and may still be at it when `finish()` has returned (it completes
    before the process that logged exits)."""
    deadline = time.monotonic() + timeout
    while True:
        paths = sorted(Path(wandb_dir).glob("wandb/offline-run-*/run-*.wandb"))
        done = [p for p in paths if any(r.WhichOneof("record_type") == "exit" for r in run_records(p))]
        if len(done) == len(paths) or time.monotonic() > deadline:
            return paths
        time.sleep(0.1)
