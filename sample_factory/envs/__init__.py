"""Envs: creation and probing, the env groups that step one split and check what envs return, observation and
action conversion, and the built-in families (Atari, MuJoCo, VizDoom, PettingZoo)."""
