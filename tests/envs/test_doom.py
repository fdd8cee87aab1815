"""VizDoom envs (sample_factory/envs/doom.py). Tests that run the game skip when the [vizdoom] extra is missing."""

import math
import mmap
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest

from sample_factory.config import parse_cfg
from sample_factory.config.extras import install_hint
from sample_factory.envs.doom import DOOM_ENVS, doom_env_id, downscale_screen, make_doom_env


def _need_vizdoom():
    return pytest.importorskip("vizdoom", reason="VizDoom tests need the [vizdoom] extra: pip install -e .[vizdoom]")


def _cfg(*extra: str):
    return parse_cfg(["--env=doom_basic", "--num_workers=1", *extra])


def _engines() -> set[int]:
    """pids of the vizdoom engine processes this test process runs."""
    return {p.pid for p in psutil.Process().children() if p.name() == "vizdoom"}


def _doom_shm() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("ViZDoom")}


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch):
    """The engine makes an (empty) ./_vizdoom dir in the working directory: keep it out of the repository."""
    monkeypatch.chdir(tmp_path)


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def _check_obs(space: gym.spaces.Dict, obs: dict) -> None:
    assert set(obs) == set(space.spaces)
    assert obs["screen"].dtype == np.uint8 and obs["screen"].shape == (3, 72, 128)
    assert obs["screen"].flags.c_contiguous
    if "gamevariables" in obs:
        assert obs["gamevariables"].dtype == np.float32
        assert np.isfinite(obs["gamevariables"]).all()
    assert space.contains(obs)


# ---- without vizdoom ----------------------------------------------------------------------------------------
def test_doom_env_id_maps_names_and_passes_vizdoom_ids():
    assert doom_env_id("doom_basic") == "VizdoomBasic-v1"
    assert doom_env_id("doom_health_gathering_supreme") == "VizdoomHealthGatheringSupreme-v1"
    assert doom_env_id("doom_defend_the_center") == "VizdoomDefendCenter-v1"
    assert doom_env_id("VizdoomBasic-MultiBinary-v1") == "VizdoomBasic-MultiBinary-v1"
    assert doom_env_id("VizdoomFreedoom2MAP01-S3-v0") == "VizdoomFreedoom2MAP01-S3-v0"
    for other in ("CartPole-v1", "atari_pong", "ALE/Pong-v5", "doom_no_such_scenario", "Vizdoom", "doom"):
        assert doom_env_id(other) is None


def test_missing_vizdoom_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vizdoom", None)  # makes `import vizdoom` raise ImportError
    with pytest.raises(ValueError, match=re.escape(f"needs an optional package: {install_hint('vizdoom')}")):
        make_doom_env(_cfg(), "VizdoomBasic-v1")


def test_downscale_screen_block_mean_and_nearest():
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (144, 256, 3), dtype=np.uint8)
    small = downscale_screen(frame, 72, 128)
    blocks = frame.reshape(72, 2, 128, 2, 3).astype(np.int64)
    expected = (blocks.sum(axis=(1, 3)) + 2) // 4  # rounded mean of each 2x2 block
    assert small.dtype == np.uint8 and small.flags.c_contiguous
    np.testing.assert_array_equal(small, expected.transpose(2, 0, 1))
    np.testing.assert_array_equal(downscale_screen(frame, 144, 256), frame.transpose(2, 0, 1))
    # Not a whole multiple: nearest pixel.
    odd = downscale_screen(frame[:120, :160], 72, 128)
    assert odd.shape == (3, 72, 128)
    np.testing.assert_array_equal(odd[:, 1, 1], frame[1, 1])
    assert downscale_screen(frame[..., :1], 72, 128).shape == (1, 72, 128)  # grayscale configs


# ---- with vizdoom -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(DOOM_ENVS))
def test_scenario_spaces_and_random_steps(name):
    _need_vizdoom()
    env = make_doom_env(_cfg(), DOOM_ENVS[name])
    try:
        space = env.observation_space
        assert isinstance(space, gym.spaces.Dict) and set(space.spaces) <= {"screen", "gamevariables"}
        assert space["screen"] == gym.spaces.Box(0, 255, (3, 72, 128), np.uint8)
        if name == "doom_deathmatch":  # binary buttons plus delta buttons: vizdoom's Dict, our Tuple
            assert isinstance(env.action_space, gym.spaces.Tuple)
            assert isinstance(env.action_space[0], gym.spaces.Discrete)
            assert isinstance(env.action_space[1], gym.spaces.Box)
        else:
            assert isinstance(env.action_space, gym.spaces.Discrete)
        obs, info = env.reset(seed=1)
        _check_obs(space, obs)
        assert obs["screen"].any()  # a real frame, not a blank buffer
        env.action_space.seed(1)
        for _ in range(20):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            _check_obs(space, obs)
            assert type(reward) is float and math.isfinite(reward)
            assert type(terminated) is bool and type(truncated) is bool
            if terminated or truncated:
                obs, _ = env.reset()
                _check_obs(space, obs)
    finally:
        env.close()


def test_gamevariables_only_when_the_scenario_has_some():
    _need_vizdoom()
    for name, has_vars in (("doom_defend_the_center", True), ("doom_my_way_home", False)):
        env = make_doom_env(_cfg(), DOOM_ENVS[name])
        try:
            assert ("gamevariables" in env.observation_space.spaces) == has_vars
            obs, _ = env.reset(seed=0)
            assert ("gamevariables" in obs) == has_vars
            if has_vars:  # AMMO2 and HEALTH at the start of defend_the_center
                assert env.observation_space["gamevariables"].shape == (2,)
                assert obs["gamevariables"][1] == 100.0
        finally:
            env.close()


@pytest.mark.parametrize("frameskip", [1, 4, 7])
def test_frame_skip_repeats_actions_and_sums_rewards(frameskip):
    """doom_basic: living reward -1 per tic, time limit 300 tics. Doing nothing, an episode lasts
    ceil(300 / frameskip) agent steps, each worth -frameskip (the last one only the tics left) and -300 in all;
    it is a truncation (bootstrapped), and its final observation is the last frame, not a blank one."""
    _need_vizdoom()
    env = make_doom_env(_cfg(f"--env_frameskip={frameskip}"), "doom_basic")
    try:
        env.reset(seed=0)
        rewards = []
        while True:
            obs, reward, terminated, truncated, _ = env.step(0)  # action 0: no button pressed
            rewards.append(reward)
            if terminated or truncated:
                break
        assert len(rewards) == math.ceil(300 / frameskip)
        assert set(rewards[:-1]) <= {-float(frameskip)}
        assert sum(rewards) == -300.0
        assert truncated and not terminated
        assert obs["screen"].any()
    finally:
        env.close()


def test_vizdoom_ids_and_framework_action_rows():
    """A registered id with every button free: MultiDiscrete([2] * 3), fed with the int64 rows our buffers hold;
    Discrete actions may come as numpy integers and the Tuple as (index, float32 row)."""
    _need_vizdoom()
    env = make_doom_env(_cfg(), "VizdoomBasic-MultiBinary-v1")
    try:
        assert env.action_space == gym.spaces.MultiDiscrete([2, 2, 2])
        env.reset(seed=0)
        env.step(np.array([1, 0, 1], dtype=np.int64))
    finally:
        env.close()
    env = make_doom_env(_cfg(), "doom_basic")
    try:
        env.reset(seed=0)
        env.step(np.int64(3))
        env.step(np.array(2))
    finally:
        env.close()
    env = make_doom_env(_cfg(), "doom_deathmatch")
    try:
        env.reset(seed=0)
        _, reward, *_ = env.step((np.int64(1), np.array([0.5, -1.0, 0.0], dtype=np.float32)))
        assert math.isfinite(reward)
    finally:
        env.close()


def test_unknown_vizdoom_id_suggests_close_names():
    _need_vizdoom()
    with pytest.raises(ValueError, match="VizdoomBasic-v1"):
        make_doom_env(_cfg(), "VizdoomBasik-v1")


def test_rgb_array_render():
    _need_vizdoom()
    env = make_doom_env(_cfg(), "doom_basic", render_mode="rgb_array")
    try:
        assert env.render_mode == "rgb_array"
        env.reset(seed=0)
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.shape == (144, 256, 3) and frame.any()
    finally:
        env.close()


def test_close_frees_the_game_and_leaves_no_files(tmp_path):
    _need_vizdoom()
    shm_before, engines_before = _doom_shm(), _engines()
    env = make_doom_env(_cfg(), "doom_basic")
    config_dir = env.env.config_dir  # env: DoomAction(DoomEnv(...))
    env.reset(seed=0)
    env.step(0)
    assert len(_engines() - engines_before) == 1
    assert len(_doom_shm() - shm_before) == 3  # the engine's shared memory and two message queues
    env.close()
    env.close()  # twice is harmless
    assert _engines() == engines_before
    assert _doom_shm() == shm_before
    assert not os.path.exists(config_dir)
    assert not (tmp_path / "_vizdoom.ini").exists()  # the engine's config goes to a private temp dir


def _make_and_step_in_child(cfg, conn) -> None:
    try:
        env = make_doom_env(cfg, "doom_basic")
        obs, _ = env.reset(seed=3)
        for _ in range(10):
            obs, *_ = env.step(env.action_space.sample())
        env.close()
        conn.send(("ok", obs["screen"].shape, obs["screen"].dtype.str))
    except Exception as e:
        conn.send(("error", repr(e)))
    finally:
        conn.close()


def test_env_works_in_a_fresh_forkserver_process():
    _need_vizdoom()
    ctx = multiprocessing.get_context("forkserver")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_make_and_step_in_child, args=(_cfg(), child), daemon=True)
    proc.start()
    child.close()
    try:
        assert parent.poll(120), "the child did not answer in 120 s"
        assert parent.recv() == ("ok", (3, 72, 128), "|u1")
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    assert proc.exitcode == 0


def _start_child(code: str, cwd: Path) -> subprocess.Popen:
    """`python -c code` with this repository importable; its stdout is a text pipe."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=cwd, env=env_vars)


def _kill_then_expect_clean(
    proc: subprocess.Popen, engines: list[psutil.Process], shm_left: Callable[[], set[str]], path: str, timeout: float
) -> None:
    """SIGKILL the child: within `timeout` s its engines exit, and its /dev/shm files and `path` are removed."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + timeout
    while (_running(engines) or shm_left() or os.path.exists(path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(engines), "the vizdoom engine outlived its killed controller"
    assert not shm_left()
    assert not os.path.exists(path)


def _end_child(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    proc.stdout.close()


def test_killed_process_leaves_no_engine_behind(tmp_path):
    """A hung worker is SIGKILLed by the supervisor without closing its envs: the watchdog must stop the engine
    and remove its /dev/shm files and config dir."""
    _need_vizdoom()
    shm_before = _doom_shm()
    code = textwrap.dedent(
        """
        import time
        from types import SimpleNamespace
        from sample_factory.envs.doom import make_doom_env
        env = make_doom_env(SimpleNamespace(env_frameskip=4), "doom_basic")
        env.reset(seed=0)
        print(env.env.watchdog is not None, env.env.config_dir, flush=True)
        time.sleep(120)
        """
    )
    proc = _start_child(code, tmp_path)
    try:
        armed, config_dir = proc.stdout.readline().split()
        assert armed == "True"
        engines = [p for p in psutil.Process(proc.pid).children() if p.name() == "vizdoom"]
        assert len(engines) == 1
        _kill_then_expect_clean(proc, engines, lambda: _doom_shm() - shm_before, config_dir, 15)
    finally:
        _end_child(proc)


def test_a_process_killed_while_its_engine_starts_leaves_no_engine_behind(tmp_path):
    """SIGKILL inside DoomGame.init() (a run stopped while its actors started their envs: the supervisor kills an
    actor that does not stop in time): the engine runs but has no watchdog yet. The sweeper must stop it and remove
    its /dev/shm files; otherwise it waits for its controller forever, holding the component's inherited
    multiprocessing fds (the fork server and resource tracker outlived a CI run with it). Simulated: the child calls
    DoomGame.init() itself, as DoomEnv.reset does, and is killed before any watchdog is armed."""
    _need_vizdoom()
    code = textwrap.dedent(
        """
        import time
        from types import SimpleNamespace
        from sample_factory.envs.doom import _config_root, make_doom_env
        env = make_doom_env(SimpleNamespace(env_frameskip=4), "doom_basic")
        env.unwrapped.game.init()  # the engine starts; DoomEnv.reset would arm its watchdog only after this
        print(env.env.watchdog is None, _config_root(), flush=True)
        time.sleep(120)
        """
    )
    proc = _start_child(code, tmp_path)
    engines: list[psutil.Process] = []
    ours: set[str] = set()
    try:
        unwatched, root = proc.stdout.readline().split()
        assert unwatched == "True"
        engines = [p for p in psutil.Process(proc.pid).children() if p.name() == "vizdoom"]
        assert len(engines) == 1
        cmdline = engines[0].cmdline()
        instance = cmdline[cmdline.index("+viz_instance_id") + 1]
        ours = {f"ViZDoom{kind}{instance}" for kind in ("SM", "MQCtr", "MQDoom")}
        assert ours <= _doom_shm(), "the engine's /dev/shm files"
        _kill_then_expect_clean(proc, engines, lambda: _doom_shm() & ours, root, 20)
    finally:
        _end_child(proc)
        for engine in _running(engines):
            engine.kill()
        psutil.wait_procs(engines, timeout=10)
        for name in ours & _doom_shm():
            os.unlink(f"/dev/shm/{name}")


def test_close_stops_an_engine_that_outlives_the_game_close(tmp_path):
    """An engine that does not stop when its game closes (seen when a run was stopped while its envs started) is
    killed by env.close(), and its /dev/shm files removed. Simulated: vizdoom's close does nothing."""
    _need_vizdoom()
    shm_before, engines_before = _doom_shm(), _engines()
    env = make_doom_env(_cfg(), "doom_basic")
    env.reset(seed=0)
    engines = [psutil.Process(pid) for pid in _engines() - engines_before]
    assert len(engines) == 1
    game_close = env.unwrapped.close
    env.unwrapped.close = lambda: None  # the engine keeps running and keeps its files
    try:
        env.close()
        assert not _running(engines), "env.close() left the engine running"
        assert _doom_shm() == shm_before
    finally:
        env.unwrapped.close = game_close
        game_close()  # the game object learns its engine is gone (no error, no hang)


def test_a_crash_during_game_init_leaves_no_files(tmp_path):
    """A process that dies before any engine watchdog is armed (a CI actor segfaulted inside DoomGame.init(), after
    the controller had made its message queues) leaves nothing: the sweeper removes the ViZDoom /dev/shm files no
    process maps any more and the process's config dirs, and keeps the files a living process maps.
    Simulated: the child makes an env (arming the sweeper), creates and maps two queue-like files as vizdoom's
    controller does, and kills itself with SIGSEGV."""
    _need_vizdoom()
    tag = f"SFT{os.getpid()}"
    theirs = [f"/dev/shm/ViZDoomMQCtr{tag}a", f"/dev/shm/ViZDoomMQDoom{tag}a"]
    ours = f"/dev/shm/ViZDoomMQCtr{tag}b"  # mapped by this (living) test process: must stay
    code = textwrap.dedent(
        f"""
        import mmap, os, signal
        from types import SimpleNamespace
        from sample_factory.envs.doom import _config_root, make_doom_env
        env = make_doom_env(SimpleNamespace(env_frameskip=4), "doom_basic")
        maps = []
        for name in {theirs!r}:
            fd = os.open(name, os.O_CREAT | os.O_RDWR, 0o644)
            os.ftruncate(fd, 4096)
            maps.append(mmap.mmap(fd, 4096))
        print(_config_root(), flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
        """
    )
    fd = os.open(ours, os.O_CREAT | os.O_RDWR, 0o644)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    try:
        os.ftruncate(fd, 4096)
        mapped = mmap.mmap(fd, 4096)
        proc = subprocess.run(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env_vars, timeout=60
        )
        assert proc.returncode < 0  # died by a signal (pygame turns SIGSEGV into an abort)
        root = proc.stdout.split()[0]
        deadline = time.monotonic() + 15
        while (any(map(os.path.exists, theirs)) or os.path.exists(root)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [f for f in theirs if os.path.exists(f)], "the crashed process's files were left behind"
        assert not os.path.exists(root)
        assert os.path.exists(ours), "the sweeper removed a file that a living process maps"
        mapped.close()
    finally:
        os.close(fd)
        for name in [*theirs, ours]:
            if os.path.exists(name):
                os.unlink(name)


def test_a_normal_exit_stops_the_sweeper(tmp_path):
    """The sweeper of a process that exits normally is stopped at exit (it would otherwise outlive the process by a
    second or two) and the config root is removed."""
    _need_vizdoom()
    code = textwrap.dedent(
        """
        from types import SimpleNamespace
        from sample_factory.envs import doom
        env = doom.make_doom_env(SimpleNamespace(env_frameskip=4), "doom_basic")
        env.reset(seed=0)
        env.close()
        print(doom._sweeper[1].pid, doom._config_root(), flush=True)
        """
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env_vars, timeout=60
    )
    assert proc.returncode == 0
    pid, root = proc.stdout.split()
    assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    assert not os.path.exists(root)
