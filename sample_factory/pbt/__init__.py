"""Population-based training: the pure population logic (population.py) and the runner-side controller."""
