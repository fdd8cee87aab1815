"""Read the MinAtar paper's DQN returns at 5M frames off the learning-curve figure its repository publishes.

The paper (Young & Tian 2019, arXiv:1903.03176) gives its results as curves only. This script digitizes the DQN
curve (the blue one: 30 seeds, moving average of returns over 100 episodes, all 6 actions) of
`img/learning_curves.gif` in github.com/kenjyoung/MinAtar (read at commit 4241f24) and prints, per game, its mean over
4.75M-5M frames; benchmarks/learning_suites.py quotes these numbers as the `minatar` suite's reference:

    python -m benchmarks.minatar_reference_curves path/to/learning_curves.gif

Each panel's left and right axes and its y ticks are found from the dark pixels; the tick values are the figure's
labels (written below, one list per panel, since labels are pixels). One pixel is 0.04-0.45 return units by panel.
"""

from __future__ import annotations

import argparse

import numpy as np
from PIL import Image

# panel boxes (left, top, right, bottom) in the 3038 x 1629 figure, and the figure's y-tick labels, bottom to top
PANELS: dict[str, tuple[tuple[int, int, int, int], tuple[float, ...]]] = {
    "Seaquest": ((520, 150, 1330, 700), (0, 5, 10, 15, 20)),
    "Breakout": ((1480, 150, 2300, 700), (0, 5, 10, 15)),
    "Asterix": ((60, 950, 830, 1450), (0, 5, 10, 15, 20)),
    "Freeway": ((1130, 950, 1920, 1450), (0, 10, 20, 30, 40, 50)),
    "SpaceInvaders": ((2180, 950, 3010, 1450), (0, 50, 100, 150, 200)),
}
DQN_RGB = (0, 114, 178)  # matplotlib's colorblind palette blue: the figure's "DQN"
FRAMES = 5_000_000  # the x axis ends at 5M frames


def dqn_return(panel: np.ndarray, ticks: tuple[float, ...], from_frames: float, to_frames: float) -> float:
    """Mean of the DQN curve between two frame counts in one panel (`panel`: [H, W, 3] RGB ints)."""
    dark = panel.sum(axis=2) < 150
    dark_per_col = dark.sum(axis=0)
    axis_cols = np.where(dark_per_col > 0.6 * dark_per_col.max())[0]
    left, right = int(axis_cols.min()), int(axis_cols.max())
    tick_rows = np.where(dark[:, max(left - 12, 0) : left - 3].sum(axis=1) >= 6)[0]
    runs = np.split(tick_rows, np.where(np.diff(tick_rows) > 2)[0] + 1)
    tick_y = np.array([run.mean() for run in runs if len(run)])[::-1]  # bottom (largest y) first
    if len(tick_y) != len(ticks):
        raise SystemExit(f"found {len(tick_y)} y ticks where the figure has {len(ticks)}: not the expected figure")
    slope, intercept = np.polyfit(tick_y, np.array(ticks, dtype=float), 1)  # return as a linear function of y
    blue = np.all(np.abs(panel - np.array(DQN_RGB)) < 50, axis=2)
    width = right - left
    cols = range(left + int(from_frames / FRAMES * width), left + int(to_frames / FRAMES * width))
    ys = [np.where(blue[:, x])[0].mean() for x in cols if blue[:, x].any()]
    if not ys:
        raise SystemExit("no DQN-coloured pixels in the range: not the expected figure")
    return float(slope * np.mean(ys) + intercept)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("figure", help="img/learning_curves.gif of github.com/kenjyoung/MinAtar")
    p.add_argument("--from_frames", type=float, default=4_750_000, help="start of the averaged range (frames)")
    p.add_argument("--to_frames", type=float, default=4_975_000, help="end of the range (frames; the axis ends at 5M)")
    args = p.parse_args()
    image = np.asarray(Image.open(args.figure).convert("RGB")).astype(int)
    if image.shape[:2] != (1629, 3038):
        raise SystemExit(f"{args.figure}: {image.shape[1]}x{image.shape[0]} pixels, not the 3038x1629 figure expected")
    for game, ((x0, y0, x1, y1), ticks) in PANELS.items():
        value = dqn_return(image[y0:y1, x0:x1], ticks, args.from_frames, args.to_frames)
        print(f"{game}: {value:.1f}")


if __name__ == "__main__":
    main()
