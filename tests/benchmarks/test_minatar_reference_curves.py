"""The digitizer of the MinAtar paper's DQN curves, on a drawn figure whose curve values are known."""

import numpy as np
import pytest

from benchmarks import minatar_reference_curves as mrc


def _panel(ticks: tuple[float, ...], curve: list[tuple[float, float]]) -> np.ndarray:
    """A white [400, 600, 3] panel: axes from x=50 to x=550, y ticks every 80 px from y=370 up, and the DQN-blue
    curve as line segments through (frames, return) points."""
    img = np.full((400, 600, 3), 255, dtype=int)
    img[20:380, 50:53] = 0  # left axis
    img[20:380, 548:551] = 0  # right axis
    y_of = {v: 370 - 80 * i for i, v in enumerate(ticks)}
    for y in y_of.values():
        img[y - 1 : y + 2, 38:50] = 0  # tick marks left of the axis
    per_unit = 80 / (ticks[1] - ticks[0])
    for (f0, v0), (f1, v1) in zip(curve, curve[1:]):
        for x in range(50 + int(f0 / mrc.FRAMES * 498), 50 + int(f1 / mrc.FRAMES * 498)):
            t = (x - 50 - f0 / mrc.FRAMES * 498) / ((f1 - f0) / mrc.FRAMES * 498)
            y = int(round(370 - (v0 + t * (v1 - v0)) * per_unit))
            img[y - 2 : y + 2, x] = mrc.DQN_RGB
    return img


def test_reads_the_curve_mean_over_a_frame_range():
    ticks = (0.0, 5.0, 10.0, 15.0)
    img = _panel(ticks, [(0, 0.0), (1_000_000, 9.0), (4_000_000, 12.0), (5_000_000, 12.0)])
    assert mrc.dqn_return(img, ticks, 4_750_000, 4_975_000) == pytest.approx(12.0, abs=0.1)
    assert mrc.dqn_return(img, ticks, 900_000, 1_000_000) == pytest.approx(8.55, abs=0.15)  # the rising part


def test_refuses_a_figure_it_does_not_know():
    ticks = (0.0, 5.0, 10.0, 15.0)
    img = _panel(ticks, [(0, 1.0), (5_000_000, 1.0)])
    with pytest.raises(SystemExit, match="y ticks"):
        mrc.dqn_return(img, (0.0, 5.0, 10.0), 4_750_000, 4_975_000)
    img = _panel(ticks, [(0, 1.0), (2_000_000, 1.0)])  # no curve at the end
    with pytest.raises(SystemExit, match="DQN-coloured"):
        mrc.dqn_return(img, ticks, 4_750_000, 4_975_000)
