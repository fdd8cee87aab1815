import math
import os
import re

import pytest

from benchmarks import benchmark_startup


@pytest.mark.timeout(240)
def test_every_way_of_starting_and_ending_a_run_runs_and_is_compared(capsys):
    assert benchmark_startup.main(["--rounds=1", "--steps=1000"]) == 0
    out = capsys.readouterr().out
    counted = os.access(benchmark_startup.CPUACCT, os.W_OK)  # CPU seconds only where a cpuacct group can be made
    for mode in ("forked", "fresh", "exit_gc"):
        m = re.search(rf"median {mode}\s*: +([\d.]+) s wall, +([\d.na]+) CPU-s", out)
        assert m and float(m.group(1)) > 0, out
        assert math.isnan(float(m.group(2))) != counted, out
    assert "forked / fresh: wall" in out and "forked / exit_gc: wall" in out, out
