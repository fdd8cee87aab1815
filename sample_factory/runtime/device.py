"""The one place that turns the --device flag (auto, gpu, cpu, or a torch device string) into a torch device."""

from __future__ import annotations

import torch


def resolve_device_name(device: str) -> str:
    """auto -> gpu when torch sees CUDA, else cpu; gpu without CUDA is an error with one clear line."""
    if device == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    if device in ("gpu", "cuda") or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device={device} but no CUDA GPU is visible to torch; use --device=cpu")
        return "gpu" if device in ("gpu", "cuda") else device
    return device


def torch_device(device: str | torch.device) -> torch.device:
    """A torch device for a --device value (auto and gpu resolved as above)."""
    name = resolve_device_name(str(device))
    return torch.device("cuda" if name == "gpu" else name)


def bind_device(device: torch.device) -> None:
    """Make a placed GPU (cuda:N, runtime/placement.py) this process's current device, so that what uses the current
    device (streams, CUDA graphs, pinned-memory copies, NCCL) works on it."""
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
