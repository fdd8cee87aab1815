"""One experiment's folder on disk: its lock and saved config, checkpoints, TensorBoard summaries and progress.csv."""
