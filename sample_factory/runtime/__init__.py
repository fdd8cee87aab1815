"""Process plumbing, no training logic: message formats and channels, the component base with its process and
serial drivers, the supervisor and heartbeats, shared trajectory buffers and weights (their layout follows the env
spaces and action distributions), the serial-mode snapshot."""
