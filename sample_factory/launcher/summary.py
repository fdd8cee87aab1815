"""The end-of-sweep summary: one row per experiment (status, backend job id, exit code, wall time, final reward,
log), printed as a table and written as JSON next to the logs."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sample_factory.launcher.jobs import Job, Result, format_seconds

SUMMARY_JSON = "summary.json"
_STOPPING = re.compile(r"stopping: (.+)")


def final_reward(exp_dir: Path) -> float | None:
    """reward_p0 of the last row of the experiment's progress.csv (None when missing or no episode finished)."""
    try:
        with open(exp_dir / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return None
    for row in reversed(rows):  # the last complete row (a killed writer may leave a torn one)
        try:
            value = float(row["reward_p0"])
        except (KeyError, TypeError, ValueError):
            continue
        return value if math.isfinite(value) else None
    return None


def stop_reason(log_path: Path) -> str | None:
    """The run's own 'stopping: <reason>' line, the last in its log."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    found = _STOPPING.findall(text)
    return found[-1].strip() if found else None


def summary_rows(jobs: Sequence[Job], results: Sequence[Result]) -> list[dict[str, Any]]:
    by_name = {j.name: j for j in jobs}
    rows = []
    for r in results:
        job = by_name[r.name]
        row = r.to_dict()
        row["wall_s"] = r.wall_s
        row["final_reward"] = final_reward(job.exp_dir)
        row["stop_reason"] = stop_reason(job.log_path)
        row["experiment_dir"] = str(job.exp_dir)
        row["command"] = job.argv
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    header = ["experiment", "status", "job id", "exit", "wall s", "final reward", "log"]
    body = []
    for row in rows:
        reward = row["final_reward"]
        body.append(
            [
                row["name"],
                row["status"],
                (row["job_id"] or "-")[:16],  # Ray's task ids are long; the JSON has them whole
                "-" if row["exit_code"] is None else str(row["exit_code"]),
                format_seconds(row["wall_s"]),
                "-" if reward is None else f"{reward:.2f}",
                row["log_path"] or "-",
            ]
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(line.rstrip() for line in lines)


def write_summary(sweep_dir: Path, run_name: str, backend: str, rows: Sequence[dict[str, Any]]) -> Path:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / SUMMARY_JSON
    data = {"run": run_name, "backend": backend, "written": time.strftime("%Y-%m-%d %H:%M:%S"), "experiments": rows}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
    return path
