"""Soak test: `python -m benchmarks.soak [--minutes=30] [--env=CartPole-v1] [--sample_every_sec=60] [flags]`.

Runs a multi-process training run (`python -m sample_factory.train`, budget longer than the soak) and samples, every
--sample_every_sec, the RSS and open fds of the runner and each of its descendants plus the /dev/shm entries (the
ones this run maps or that carry its pids; the machine-wide count is shown too). At the end it prints the
least-squares slope of each series after --warmup_samples samples and PASS/FAIL against the targets: RSS grows by
less than 1 MB/min per process, fd and /dev/shm counts stay flat. Then it stops the run with SIGINT and checks that
it exits 0 and that no process of the run survives. Exit status: 0 on PASS.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from sample_factory.experiment.exit_codes import interrupted_exit_code

SHM = Path("/dev/shm")
RSS_MB_PER_MIN_MAX = 1.0
COUNT_PER_MIN_MAX = 0.2  # "flat": well under one more fd / shm entry per 5 minutes


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than 2 points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0


def label(p: psutil.Process, runner_pid: int) -> str:
    name = "runner" if p.pid == runner_pid else p.name()
    return name if name == "runner" or name.startswith("sf_") else f"{name}[{p.pid}]"  # forkserver, tracker


def run_shm(pids: set[int]) -> tuple[int, int]:
    """(count, bytes) of /dev/shm entries mapped by `pids` or named after one of them (pym-<pid>-*, torch_<pid>_*)."""
    inodes = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                inodes |= {int(ln.split()[4]) for ln in f if f" {SHM}/" in ln}
        except (OSError, ValueError, IndexError):
            pass
    count = size = 0
    for e in os.scandir(SHM) if SHM.is_dir() else []:
        try:
            tag = re.match(r"^(?:pym-|torch_)(\d+)[-_]", e.name)
            if e.inode() in inodes or (tag and int(tag.group(1)) in pids):
                count, size = count + 1, size + e.stat().st_size
        except OSError:
            pass
    return count, size


def machine_shm() -> tuple[int, int]:
    count = size = 0
    for e in os.scandir(SHM) if SHM.is_dir() else []:
        try:
            count, size = count + 1, size + e.stat().st_size
        except OSError:  # removed meanwhile
            pass
    return count, size


def sample(runner: psutil.Process) -> dict[str, tuple[int, float, float, int]]:
    """label -> (pid, create time, RSS MB, open fds) for the runner and each of its descendants."""
    out = {}
    for p in [runner, *runner.children(recursive=True)]:
        try:
            with p.oneshot():
                out[label(p, runner.pid)] = (p.pid, p.create_time(), p.memory_info().rss / 2**20, p.num_fds())
        except psutil.Error:
            continue
    return out


def survivors(seen: dict[int, float]) -> list[str]:
    alive = []
    for pid, ct in seen.items():
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - ct) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{pid} ({p.name()})")
        except psutil.Error:
            pass
    return alive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="How long the soak runs.")
    parser.add_argument("--sample_every_sec", type=float, default=60.0, help="Seconds between resource samples.")
    parser.add_argument("--warmup_samples", type=int, default=2, help="Samples left out of the slopes (start-up).")
    parser.add_argument("--env", type=str, default="CartPole-v1", help="Env to train on.")
    parser.add_argument("--train_dir", type=str, default=None, help="Where the run lives (default: a temp folder).")
    args, train_flags = parser.parse_known_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # samples show up at once in a log file too
    train_dir = args.train_dir or tempfile.mkdtemp(prefix="sf_soak_")
    budget = args.minutes * 60 + 600  # longer than the soak: the run is stopped with SIGINT
    cmd = [sys.executable, "-m", "sample_factory.train", f"--env={args.env}", f"--train_dir={train_dir}"]
    cmd += ["--experiment=soak", f"--train_for_seconds={budget:.0f}", *train_flags]
    os.makedirs(train_dir, exist_ok=True)
    log_path = Path(train_dir, "soak_train.log")
    print(f"soak: {args.minutes} min, a sample every {args.sample_every_sec} s; run log {log_path}\n  {' '.join(cmd)}")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    runner = psutil.Process(proc.pid)
    series: dict[str, list[tuple[float, int, float, int]]] = {}  # label -> [(minute, pid, rss, fds)]
    shm_series: list[tuple[float, int, float]] = []  # (minute, count, MB)
    seen: dict[int, float] = {}  # pid -> create time, to check survivors at the end
    t0 = time.monotonic()
    try:
        i = 0
        while time.monotonic() - t0 < args.minutes * 60 and proc.poll() is None:
            minute = (time.monotonic() - t0) / 60
            procs = sample(runner)
            seen.update({v[0]: v[1] for v in procs.values()})
            count, size = run_shm({v[0] for v in procs.values()})
            m_count, m_size = machine_shm()
            shm_series.append((minute, count, size / 2**20))
            print(
                f"\n[sample {i}, {minute:.1f} min] /dev/shm of the run: {count} entries, {size / 2**20:.1f} MB "
                f"(machine: {m_count} entries, {m_size / 2**20:.1f} MB)"
            )
            print(f"  {'process':<24}{'pid':>8}{'RSS MB':>10}{'fds':>6}")
            for name, (pid, _, rss, fds) in sorted(procs.items()):
                series.setdefault(name, []).append((minute, pid, rss, fds))
                print(f"  {name:<24}{pid:>8}{rss:>10.1f}{fds:>6}")
            i += 1
            time.sleep(max(0.0, t0 + i * args.sample_every_sec - time.monotonic()))
    except KeyboardInterrupt:
        print("soak: interrupted, stopping the run")
    died_early = proc.poll() is not None
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    failures = [] if not died_early else [f"the run ended by itself (exit code {rc}) before the soak was over"]
    if not died_early and rc != interrupted_exit_code(signal.SIGINT):  # saved and stopped early: 130
        failures.append(f"the run exited with code {rc} after SIGINT")
    w = args.warmup_samples
    print(f"\nslopes over samples {w}.. (targets: RSS < {RSS_MB_PER_MIN_MAX} MB/min, fds and /dev/shm flat)")
    print(f"  {'process':<24}{'RSS MB/min':>12}{'fds/min':>10}  verdict")
    for name, rows in sorted(series.items()):
        pid = rows[-1][1]
        rows = [r for r in rows[w:] if r[1] == pid]  # a restarted worker: only its own samples
        xs = [r[0] for r in rows]
        rss_s, fds_s = slope(xs, [r[2] for r in rows]), slope(xs, [r[3] for r in rows])
        bad = []
        if len(rows) < 2:
            verdict = "too few samples"
        else:
            if rss_s >= RSS_MB_PER_MIN_MAX:
                bad.append("RSS grows")
            if fds_s > COUNT_PER_MIN_MAX and rows[-1][3] > rows[0][3]:
                bad.append("fds grow")
            verdict = "FAIL: " + ", ".join(bad) if bad else "ok"
        failures += [f"{name}: {b}" for b in bad]
        print(f"  {name:<24}{rss_s:>12.3f}{fds_s:>10.3f}  {verdict}")
    shm = shm_series[w:]
    xs = [s[0] for s in shm]
    n_s, mb_s = slope(xs, [s[1] for s in shm]), slope(xs, [s[2] for s in shm])
    shm_bad = len(shm) >= 2 and n_s > COUNT_PER_MIN_MAX and shm[-1][1] > shm[0][1]
    print(
        f"  {'/dev/shm (run)':<24}{mb_s:>12.3f}{n_s:>10.3f}  {'FAIL: grows' if shm_bad else 'ok'} (MB/min, entries/min)"
    )
    if shm_bad:
        failures.append("/dev/shm entries grow")
    if len(shm) < 2:
        failures.append(f"too few samples after the warm-up ({len(shm)}): run longer or sample more often")

    deadline = time.monotonic() + 15  # helpers (forkserver, resource tracker) exit just after the runner
    while (alive := survivors(seen)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if alive:
        failures.append(f"processes of the run still alive: {', '.join(alive)}")
    print(f"\nrun exit code after SIGINT: {rc}; surviving processes: {len(alive)}")
    if failures:
        print("FAIL\n  " + "\n  ".join(failures) + f"\n  (run log: {log_path})")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
