"""Bad command lines fail fast with a clear message and no traceback."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.timeout(90)
def test_bad_input_unknown_flag(tmp_path, train_run):
    run = train_run(["--bogus_flag=3"], tmp_path / "td")
    assert run.wait(timeout=60) == 2, run.describe()
    assert "Traceback" not in run.output, run.describe()
    errors = [ln for ln in run.stderr_lines if "error:" in ln]
    assert len(errors) == 1, run.describe()
    assert "--bogus_flag" in errors[0], errors
    assert run.stderr_lines[-1] == errors[0], "the error is the last thing printed"
    assert not (tmp_path / "td").exists()
    run.assert_no_leftovers()


@pytest.mark.timeout(120)
def test_bad_input_unknown_env(tmp_path, train_run):
    run = train_run(["--num_workers=2"], tmp_path / "td", env_id="NoSuchEnvAtAll-v0")
    rc = run.wait(timeout=90)  # the bound: an unknown env must not hang the runner
    assert rc != 0, run.describe()
    assert "NoSuchEnvAtAll-v0" in run.output, run.describe()
    assert "Traceback" not in run.output, run.describe()
    run.assert_no_leftovers()


@pytest.mark.timeout(90)
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_bad_input_gpu_device_without_gpu(tmp_path, train_run):
    run = train_run(["--device=gpu", "--num_workers=2"], tmp_path / "td")
    rc = run.wait(timeout=60)
    assert rc != 0, run.describe()
    assert "--device=gpu" in run.output and "CUDA" in run.output, run.describe()
    assert "Traceback" not in run.output, run.describe()
    run.assert_no_leftovers()
