"""Optional Weights & Biases logging (--with_wandb): every scalar written to a policy's TensorBoard writer is also
logged to one W&B run per experiment.

`SummaryWriters` wraps each TensorBoard writer in a `TeeWriter`, so whatever reaches TensorBoard (train/*, reward/*,
perf/*, policy_lag/*, eval/*, pbt/*, custom metrics) reaches W&B under the same tag, prefixed with `p<policy>/` when
there are several policies. Scalars are buffered and logged once per summary interval, one W&B row per (policy,
env steps), with the policy's env steps as the x axis (`define_metric`), so policies whose env step counts differ do
not fight over W&B's own monotonic step.

The run id is saved in the experiment folder (`wandb_run_id.txt`): a resumed experiment continues the same W&B run.
Runs go to `$WANDB_DIR` when it is set, else into the experiment folder. With WANDB_MODE=offline nothing touches the
network (`wandb sync <run folder>` uploads later). wandb is imported only here, and only with --with_wandb.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from sample_factory.config import Config, ConfigError
from sample_factory.config.extras import install_hint

WANDB_ID_FILE = "wandb_run_id.txt"


def import_wandb() -> Any:
    try:
        import wandb
    except ImportError as e:
        raise ConfigError(f"--with_wandb needs the wandb package: {install_hint('wandb')}") from e
    return wandb


class WandbLogger:
    """One W&B run for the experiment; `add_scalar` buffers, `flush` logs, `finish` closes the run."""

    def __init__(self, cfg: Config, exp_dir: Path, num_policies: int):
        wandb = import_wandb()
        id_path = Path(exp_dir) / WANDB_ID_FILE
        run_id = id_path.read_text().strip() if id_path.exists() else uuid.uuid4().hex[:12]
        kwargs: dict[str, Any] = dict(
            project=cfg.wandb_project,
            entity=cfg.wandb_user,
            group=cfg.wandb_group or cfg.env,
            job_type=cfg.wandb_job_type,
            tags=list(cfg.wandb_tags) or None,
            name=cfg.experiment,
            id=run_id,
            resume="allow",
            # Components print the progress line and logs to stdout: W&B must not wrap it.
            settings=wandb.Settings(console="off"),
            # read here, not left to wandb: its process-wide settings would keep the first run's folder
            dir=os.environ.get("WANDB_DIR") or str(exp_dir),
        )
        self.run = wandb.init(**kwargs)
        id_path.write_text(run_id)
        # A resumed run's flags may differ (budgets, intervals): the latest values win.
        self.run.config.update(dict(vars(cfg)), allow_val_change=True)
        self.prefixes = [f"p{p}/" if num_policies > 1 else "" for p in range(num_policies)]
        for prefix in self.prefixes:
            self.run.define_metric(f"{prefix}env_steps")
            self.run.define_metric(f"{prefix}*", step_metric=f"{prefix}env_steps")
        self.pending: dict[tuple[int, int], dict[str, float]] = {}  # (policy, env steps) -> {tag: value}

    def add_scalar(self, policy: int, tag: str, value: float, step: int | None) -> None:
        row = self.pending.setdefault((policy, int(step or 0)), {})
        row[self.prefixes[policy] + tag] = float(value)

    def flush(self) -> None:
        """Log the buffered scalars: one row per (policy, env steps), in env-step order."""
        for (policy, step), row in sorted(self.pending.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            self.run.log({**row, f"{self.prefixes[policy]}env_steps": step})
        self.pending = {}

    def finish(self) -> None:
        if self.run is not None:
            self.flush()
            self.run.finish()
            self.run = None

    def tee(self, writer: Any, policy: int) -> TeeWriter:
        return TeeWriter(writer, self, policy)


class TeeWriter:
    """A TensorBoard writer whose add_scalar also goes to W&B; everything else is the writer's."""

    def __init__(self, writer: Any, logger: WandbLogger, policy: int):
        self.writer, self.logger, self.policy = writer, logger, policy

    def add_scalar(self, tag: str, value: float, global_step: int | None = None, *args: Any, **kwargs: Any) -> None:
        self.writer.add_scalar(tag, value, global_step, *args, **kwargs)
        self.logger.add_scalar(self.policy, tag, value, global_step)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)
