"""What users run besides training: training curves (plot.py, `sf-plot`) and the throughput tuner (tune.py,
`sf-tune`; auto_tune.py is train.py's --auto_tune). Training code never imports from here; the benchmarks live in
the repository's benchmarks/ folder, outside the package."""
