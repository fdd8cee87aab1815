"""Process plumbing, no RL: message formats and channels, the component base with its process and serial drivers,
the supervisor and heartbeats, shared trajectory buffers and weights, the serial-mode snapshot."""
