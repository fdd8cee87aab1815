"""Training algorithms: the `Algorithm` interface (base.py) and its registry (--algo, registry.py), APPO (appo.py),
and the pure math they use: return estimators, losses, action distributions."""
