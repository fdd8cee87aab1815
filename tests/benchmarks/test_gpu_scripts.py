"""benchmarks/gpu_check.sh and gpu_wheels.sh run from the repository root whatever the caller's folder, and name the
modules and scripts of benchmarks/ that exist (they run on a lent GPU machine, where a wrong path costs a lease)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.sh"))


def test_the_scripts_change_to_the_repository_root():
    assert {p.name for p in SCRIPTS} >= {"gpu_check.sh", "gpu_wheels.sh"}
    for script in SCRIPTS:
        for rel in re.findall(r'cd "\$\(dirname "\$\{BASH_SOURCE\[0\]\}"\)/([./]*)"', script.read_text()):
            assert (script.parent / rel / "setup.py").resolve().is_file(), (
                f"{script.name}: cd .../{rel} is not the root"
            )


def test_the_scripts_name_modules_and_files_that_exist():
    for script in SCRIPTS:
        text = script.read_text()
        for module in re.findall(r"-m ((?:benchmarks|sample_factory)(?:\.\w+)+)", text):
            path = REPO / Path(*module.split("."))
            assert path.with_suffix(".py").is_file() or (path / "__main__.py").is_file(), f"{script.name}: {module}"
        for rel in re.findall(r"\b((?:benchmarks|sample_factory)/[\w/]+\.(?:sh|py))", text):
            assert (REPO / rel).is_file(), f"{script.name}: {rel}"


def test_the_old_gpu_setup_flags_still_make_the_setup_they_name():
    """gpu_check.sh frames compares today's GPU setup with the one it replaced, given as flags on today's preset: they
    must still parse into that setup (asynchronous V-trace, SF2's 8 envs per worker) on a GPU box."""
    from sample_factory.config import parse_cfg

    text = (REPO / "benchmarks" / "gpu_check.sh").read_text()
    flags = re.search(r'OLD_GPU_SETUP="(.*?)"', text, re.S).group(1).replace("\\\n", " ").split()
    cfg = parse_cfg(["--env=atari_pong", "--device=gpu", "--num_workers=16", *flags])
    assert (cfg.async_rl, cfg.with_vtrace, cfg.num_envs_per_worker, cfg.rollout) == (True, True, 8, 32)
    assert (cfg.batch_size, cfg.num_batches_per_epoch, cfg.num_epochs) == (1024, 4, 4)
    assert (cfg.lr_schedule, cfg.learning_rate, cfg.nonlinearity, cfg.encoder_conv_architecture) == (
        "constant",
        2.5e-4,
        "relu",
        "convnet_nature",
    )
