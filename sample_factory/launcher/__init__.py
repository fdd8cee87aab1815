"""Experiment launcher: a sweep of ordinary train.py commands run as local processes, Ray tasks or Slurm jobs
(`python -m sample_factory.launcher --help`, docs/scale-out.md). Sweep modules import the description classes
from here: `from sample_factory.launcher import Experiment, ParamGrid, ParamList, RunDescription`."""

from sample_factory.launcher.sweep import Experiment, ParamGrid, ParamList, RunDescription

__all__ = ["Experiment", "ParamGrid", "ParamList", "RunDescription"]
