"""Benchmarks, the soak test and plots. Training code never imports from here."""
