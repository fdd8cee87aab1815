"""The before/after speed tool runs one train.py command on an older commit and on this checkout, alternated."""

from __future__ import annotations

import re
import shutil

import pytest

from benchmarks import commit_ab

pytestmark = [
    pytest.mark.process,  # two training runs and `git archive`
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        shutil.which("git") is None or not (commit_ab.ROOT / ".git").exists(), reason="needs a git checkout"
    ),
]


def test_both_sides_run_and_the_ratio_is_printed(capsys, tmp_path):
    flags = ["--env=CartPole-v1", "--num_workers=1", "--train_for_env_steps=3000", "--device=cpu"]
    commit_ab.main(["--old=HEAD", "--rounds=1", "--", *flags])
    out = capsys.readouterr().out
    assert re.search(r"round 0 old: [\d,]+ env steps/s", out) and re.search(r"round 0 new: [\d,]+ env steps/s", out)
    assert re.search(r"median old \(HEAD\) [\d,]+, new [\d,]+ env steps/s: new/old \d+\.\d{3}", out), out


def test_the_command_must_name_an_env():
    with pytest.raises(SystemExit, match="--env="):
        commit_ab.main(["--old=HEAD", "--", "--num_workers=1"])
