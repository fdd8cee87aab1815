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


FORK_HERE = textwrap.dedent(
    """
    import multiprocessing.forkserver
    import os
    import sys
    import threading
    import time

    import psutil

    import sample_factory.runner  # noqa: F401  (what the launcher has imported when it forks the fork server)
    from sample_factory.runtime.fork_server import NAME, fork_here, mp_context


    def report(conn):
        # the fork server's lock: held by the caller while it forked, free again in the copy (a sampler node's
        # component starts a fork server of its own)
        free = multiprocessing.forkserver._forkserver._lock.acquire(blocking=False)
        conn.send({"modules": sorted(m for m in ("torch", "sample_factory.runner") if m in sys.modules), "lock": free})


    if __name__ == "__main__":
        if sys.argv[1] == "thread":
            threading.Thread(target=threading.Event().wait, daemon=True).start()
        if sys.argv[1] == "cuda":  # as after torch.cuda.is_available() on a GPU machine: the copy cannot use CUDA
            import torch

            torch.cuda._is_in_bad_fork = lambda: True
        held = open(sys.argv[2], "w")  # an fd of the caller's (the experiment lock's, a log's)
        print("buffered before the fork", end="; ")  # stdout is a pipe: still in this process's buffer
        fork_here()
        server = psutil.Process(multiprocessing.forkserver._forkserver._forkserver_pid)
        ctx = mp_context()
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=report, args=(child,))
        p.start()
        got = parent.recv()
        p.join(30)
        assert p.exitcode == 0
        fds = [server.num_fds()]  # it closes the pipe of a child that exited once it reads its SIGCHLD
        while len(fds) < 50 and fds[-3:] != [fds[-1]] * 3:
            time.sleep(0.1)
            fds.append(server.num_fds())
        files = [f.path for f in server.open_files()]
        print({**got, "name": server.name(), "forked": server.cmdline() == psutil.Process().cmdline(),
               "holds_file": held.name in files, "fds": fds[-1]})
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="fork servers: Linux")
def test_fork_server_forked_from_the_launcher(tmp_path):
    # The launcher forks the fork server once its imports are done (2.1 CPU-s less per run than a fresh one's
    # imports). The copy holds only what a spawned one would: not the caller's files, not its unflushed output, not
    # its locks. With another thread running (its locks would be copied held) a fresh fork server starts instead, and
    # a copy that finds CUDA poisoned (the launcher asked the CUDA runtime) turns itself into one.
    script = tmp_path / "probe.py"
    script.write_text(FORK_HERE)
    got = {}
    for caller in ("alone", "thread", "cuda"):
        argv = [sys.executable, str(script), caller, str(tmp_path / "held.txt")]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=100)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("buffered before the fork") == 1, out.stdout
        got[caller] = eval(out.stdout.strip().splitlines()[-1].split("; ")[-1])
        assert got[caller]["modules"] == ["sample_factory.runner", "torch"] and got[caller]["lock"], got
        assert not got[caller]["holds_file"], got
    assert got["alone"]["forked"] and got["alone"]["name"] == "sf-forkserver", got
    assert not got["thread"]["forked"] and got["thread"]["name"] != "sf-forkserver", got
    assert got["alone"]["fds"] == got["thread"]["fds"], got  # no fd of the caller's but the ones it passes
    # a copy that finds CUDA unusable becomes the fresh fork server multiprocessing would have spawned
    assert not got["cuda"]["forked"] and got["cuda"]["name"] != "sf-forkserver", got
    assert got["cuda"]["fds"] == got["thread"]["fds"], got
