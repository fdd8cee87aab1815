import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

# Each check runs in a fresh interpreter: a fork server is one per process, so one started earlier in the pytest
# process (with other preloads) would decide what these children see.
SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import psutil

    from sample_factory.runtime.fork_server import mp_context, start_early


    def report(conn):
        conn.send(sorted(m for m in ("torch", "torch._dynamo", "sample_factory.runner") if m in sys.modules))


    if __name__ == "__main__":
        start_early()
        assert "torch" not in sys.modules, "start_early must not import torch in the caller"
        deadline = time.monotonic() + 30
        while not any("multiprocessing.forkserver" in " ".join(c.cmdline()) for c in psutil.Process().children()):
            assert time.monotonic() < deadline, "no fork server started"
            time.sleep(0.05)
        ctx = mp_context()
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=report, args=(child,))
        p.start()
        print(parent.recv())
        p.join(30)
        assert p.exitcode == 0
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="fork servers: Linux")
def test_fork_server_started_early_gives_children_torch_and_the_runner_preloaded(tmp_path):
    # A child has torch and our modules without importing them, so it starts in well under a second; torch._dynamo
    # is not among them: nothing on a run's path needs it (tests/algo/test_optim.py), and preloading it would hold
    # up the first child by as long as importing torch does.
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == str(["sample_factory.runner", "torch"])
