"""The learning benchmark's report (`python -m benchmarks.benchmark_learning`): from a suite's record, the markdown
tables (one summary row per env, one row per seed) and one PNG of curves per env. Pure functions of the record, so
`--plot_only` regenerates them without running anything."""

from __future__ import annotations

import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FINAL_POINTS = 5  # a run's final reward: the mean of its last FINAL_POINTS progress rows


def file_safe(name: str) -> str:
    """An env id as a file-name part (`MinAtar/Breakout-v1` -> `MinAtar_Breakout-v1`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def mean_curve(curves: Sequence[tuple[Sequence[float], Sequence[float]]], n: int = 200) -> tuple[list, list]:
    """Mean of several (x, y) curves over the x range all of them cover (linear interpolation on a common grid)."""
    import numpy as np

    lo, hi = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    if hi <= lo:
        return [], []
    grid = np.linspace(lo, hi, n)
    ys = [np.interp(grid, np.asarray(x, float), np.asarray(y, float)) for x, y in curves]
    return grid.tolist(), np.mean(ys, axis=0).tolist()


def _fmt(value: float | None, spec: str = ",.1f") -> str:
    return "n/a" if value is None else format(value, spec)


def summarize_env(runs: Sequence[dict]) -> dict:
    """Across the finished seeds (an interrupted run, to be resumed, counts only as unfinished): final reward mean,
    sample std, min, max; how many reached the threshold; medians of the env steps / wall seconds to it (over the
    seeds that reached it) and of the FPS; the mean and std of the seeds' last periodic evaluations and the fewest
    env steps among them."""
    unfinished = [r for r in runs if not r.get("complete", True)]
    runs = [r for r in runs if r.get("complete", True)]
    finals = [r["final_reward"] for r in runs if r["final_reward"] is not None]
    hits = [r for r in runs if r["reached"]]
    fps = [r["fps"] for r in runs if r["fps"]]
    last_evals = [r["evals"][-1] for r in runs if r.get("evals")]
    return {
        "seeds": len(runs),
        "unfinished": len(unfinished),
        "with_reward": len(finals),
        "final_mean": statistics.fmean(finals) if finals else None,
        "final_std": statistics.stdev(finals) if len(finals) > 1 else (0.0 if finals else None),
        "final_min": min(finals) if finals else None,
        "final_max": max(finals) if finals else None,
        "reached": len(hits),
        "median_env_steps_to_threshold": statistics.median(r["env_steps_to_threshold"] for r in hits) if hits else None,
        "median_wall_s_to_threshold": statistics.median(r["wall_s_to_threshold"] for r in hits) if hits else None,
        "median_fps": statistics.median(fps) if fps else None,
        "with_eval": len(last_evals),
        "eval_mean": statistics.fmean(e[1] for e in last_evals) if last_evals else None,
        "eval_std": statistics.stdev(e[1] for e in last_evals) if len(last_evals) > 1 else None,
        "eval_env_steps": min(e[0] for e in last_evals) if last_evals else None,
    }


def _evaluations_text(s: dict) -> str:
    if not s["with_eval"]:
        return "n/a"
    spread = "" if s["eval_std"] is None else f" ± {s['eval_std']:.1f}"
    return f"{s['eval_mean']:.1f}{spread} ({s['with_eval']} seed(s), at {s['eval_env_steps']:,}+ env steps)"


def _evaluation_text(evals: Sequence[Sequence[float]] | None) -> str:
    if not evals:
        return "n/a"
    steps, reward, episodes = evals[-1]
    return f"{reward:.1f} at {int(steps):,} env steps ({int(episodes)} episodes)"


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _budget_text(b: dict, passthrough: list[str] | None = None) -> str:
    text = f"{b['env_steps']:,} env steps or {b['seconds']:,} s"
    overrides = [f for f in passthrough or [] if f.startswith(("--train_for_env_steps", "--train_for_seconds"))]
    return f"{text}, overridden by {' '.join(overrides)}" if overrides else text


def _reference_text(refs: Sequence[dict], with_source: bool) -> str:
    parts = []
    for ref in refs:
        value = "not filled" if ref["value"] is None else f"{ref['value']:g}"
        source = f" ({ref['source']})" if with_source and ref["value"] is not None else ""
        parts.append(f"{ref['label']}: {value}{source}")
    return "; ".join(parts) or "none"


def runs_by_env(doc: dict) -> dict[str, list[dict]]:
    """Recorded runs of every env of the doc, in table order, sorted by seed."""
    runs = doc.get("runs", {}).values()
    return {env: sorted((r for r in runs if r["env"] == env), key=lambda r: r["seed"]) for env in doc.get("envs", {})}


def render_markdown(doc: dict, pngs: dict[str, str]) -> str:
    """The report: commands, date, machine, one summary row per env, then per env its settings, sources, one row
    per seed and its plot (`pngs`: env -> file name)."""
    m = doc.get("machine", {})
    level = doc.get("budget", "?")
    lines = [
        f"# Learning benchmark: suite `{doc.get('suite')}`, budget `{level}`",
        "",
        "Command(s), from the repository root:",
        "",
        "```bash",
        *doc.get("commands", []),
        "```",
        "",
        f"Last run finished: {doc.get('updated', 'n/a')}. Machine: {m.get('cpu', '?')}, {m.get('cpu_count', '?')} "
        f"logical CPUs ({m.get('cpus_usable', '?')} usable), {m.get('ram_gib', '?')} GiB RAM, GPU: "
        f"{m.get('gpu') or 'none'}; Python {m.get('python', '?')}, torch {m.get('torch', '?')}, gymnasium "
        f"{m.get('gymnasium', '?')}; {m.get('os', '?')}.",
        "",
        f"Final reward: mean of the last {FINAL_POINTS} progress rows of a run, each the mean return of the last 100 "
        "episodes; mean ± sample std (min..max) over seeds. Steps and minutes to the threshold: first progress row "
        "at or above it, median over the seeds that reached it. Minutes: training wall time from progress.csv "
        "(worker start to the row, summed over the sessions of a resumed run). FPS: env steps collected / seconds, "
        "from the run's final summary line(s). Each run stops at its env-step budget or its wall-time cap, "
        "whichever comes first. Last evaluation: the mean return of a run's last periodic evaluation (train.py "
        "`--eval_every_env_steps`, in the protocol its flags give, e.g. `--eval_epsilon`), mean ± std over seeds.",
        "",
        "| env | seeds | budget per run | final reward | threshold | reached | median env steps to threshold "
        "| median minutes to threshold | median FPS | published | last evaluation |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_env = runs_by_env(doc)
    for env, info in doc.get("envs", {}).items():
        s = summarize_env(by_env[env])
        if s["final_mean"] is None:
            final = "n/a"
        elif s["with_reward"] == 1:
            final = f"{s['final_mean']:.1f} (1 seed)"
        else:
            final = f"{s['final_mean']:.1f} ± {s['final_std']:.1f} ({s['final_min']:.1f}..{s['final_max']:.1f})"
        thr = info["threshold"]
        minutes = s["median_wall_s_to_threshold"]
        reached = "n/a" if thr is None else f"{s['reached']}/{s['seeds']}"
        lines.append(
            _row(
                env,
                f"{s['seeds']} (+{s['unfinished']} unfinished)" if s["unfinished"] else s["seeds"],
                _budget_text(info["budget"], info.get("passthrough_flags")),
                final,
                _fmt(thr, "g"),
                reached,
                _fmt(s["median_env_steps_to_threshold"], ",.0f"),
                _fmt(None if minutes is None else minutes / 60, ".2f"),
                _fmt(s["median_fps"], ",.0f"),
                _reference_text(info["references"], with_source=False),
                _evaluations_text(s),
            )
        )
    for env, info in doc.get("envs", {}).items():
        b = info["budget"]
        lines += [
            "",
            f"## {env}",
            "",
            f"- Threshold: {_fmt(info['threshold'], 'g')}. Source: {info['threshold_source']}.",
            f"- Budget `{level}`: {_budget_text(b, info.get('passthrough_flags'))} per run, {b['seeds']} seed(s) by "
            f"default. Source: {info['budget_source']}.",
            f"- Extra train flags: {' '.join(info['extra_flags']) or 'none (the env family preset applies)'}",
        ]
        if info.get("passthrough_flags"):
            lines.append(f"- Passed with `--extra` (after the flags above): {' '.join(info['passthrough_flags'])}")
        for r in info["references"]:
            value = r["source"] if r["value"] is None else f"{r['value']:g} (source: {r['source']})"
            lines.append(f"- Compare: {r['label']}: {value}")
        lines += [
            "",
            "| seed | exit | stopped because | env steps | minutes | final reward | best reward "
            "| env steps to threshold | minutes to threshold | FPS | last evaluation |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in by_env[env]:
            to_min = None if r["wall_s_to_threshold"] is None else r["wall_s_to_threshold"] / 60
            lines.append(
                _row(
                    r["seed"],
                    r["rc"],
                    r["stop_reason"] or "n/a",
                    f"{r['env_steps']:,}",
                    f"{r['wall_s'] / 60:.2f}",
                    _fmt(r["final_reward"]),
                    _fmt(r["best_reward"]),
                    _fmt(r["env_steps_to_threshold"], ",.0f"),
                    _fmt(to_min, ".2f"),
                    _fmt(r["fps"], ",.0f"),
                    _evaluation_text(r.get("evals")),
                )
            )
        if env in pngs:
            lines += ["", f"![{env}: mean reward vs env steps and vs minutes]({pngs[env]})"]
    return "\n".join(lines) + "\n"


def plot_env(env: str, runs: Sequence[dict], threshold: float | None, title: str, path: Path) -> Path:
    """Two panels (mean reward vs env steps, vs wall-clock minutes): one thin line per seed, their mean, and the
    threshold as a dashed line."""
    from sample_factory.tools.plot import import_pyplot

    plt = import_pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    try:
        for ax, column, scale, xlabel in ((axes[0], 0, 1.0, "env steps"), (axes[1], 1, 1 / 60, "wall-clock minutes")):
            curves = []
            for r in runs:
                if r["curve"]:
                    x = [p[column] * scale for p in r["curve"]]
                    y = [p[2] for p in r["curve"]]
                    # a legend of more than 8 seeds would cover the curves: one entry for all of them then
                    label = f"seed {r['seed']}" if len(runs) <= 8 else ("_nolegend_" if curves else "one line per seed")
                    ax.plot(x, y, lw=0.8, alpha=0.6, label=label)
                    curves.append((x, y))
            if len(curves) > 1:
                gx, gy = mean_curve(curves)
                ax.plot(gx, gy, lw=2.2, color="black", label=f"mean of {len(curves)} seeds")
            if threshold is not None:
                ax.axhline(threshold, ls="--", lw=1, color="tab:red", label=f"threshold {threshold:g}")
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("mean episode reward (last 100 episodes)")
        axes[0].legend(fontsize=8)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)
    return path


def write_report(doc: dict, out_dir: Path) -> list[Path]:
    """Write <suite>_<env>.png for every env with a curve, then <suite>.md; returns the paths written."""
    suite, level = doc.get("suite", "suite"), doc.get("budget", "?")
    written, pngs = [], {}
    for env, runs in runs_by_env(doc).items():
        if not any(r["curve"] for r in runs):
            continue
        name = f"{suite}_{file_safe(env)}.png"
        b = doc["envs"][env]["budget"]
        title = f"{env}, budget {level} ({_budget_text(b)} per run), {len(runs)} seed(s)"
        try:
            written.append(plot_env(env, runs, doc["envs"][env]["threshold"], title, out_dir / name))
            pngs[env] = name
        except ImportError as e:
            print(f"no plot for {env}: {e}", file=sys.stderr)
    md = out_dir / f"{suite}.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(render_markdown(doc, pngs))
    return [*written, md]
