"""Core RL algorithm pieces: return estimators, losses, action distributions."""
