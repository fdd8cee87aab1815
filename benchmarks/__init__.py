"""The lab: throughput and learning benchmarks, side-by-sides with other frameworks, the soak test and the GPU
scripts. Not installed (setup.py packages sample_factory only); run from the repository root, e.g.
`python -m benchmarks.benchmark_learning --suite=classic`. Measurements and their history: benchmarks/notebook.md."""
