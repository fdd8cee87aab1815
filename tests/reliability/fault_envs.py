"""Misbehaving CartPole variants for the reliability tests, registered with gymnasium on import.

Use them from a worker process with `--env=tests.reliability.fault_envs:<Id>` (cwd = repo root): make_env imports
the module first, so the ids exist in every process.

Every env counts its own steps; the fault happens once that counter reaches `SF_FAULT_AT_STEP` (default 100,
larger than the up-to-2*rollout random decorrelation steps an actor takes at start, which bypass the checks).

- RaiseAtStep-v0   raises RuntimeError once (see "once" below), then behaves.
- AbortAtStep-v0   os.abort() once: the worker dies from SIGABRT like a segfaulting native env.
- NanObs-v0        NaN observations from the fault step on, always.
- WrongShape-v0    observations of shape (5,) instead of (4,) from the fault step on, always.
- NanReward-v0     NaN rewards from the fault step on, always.
- EchoAction-v0    no fault: the observation also carries the action just taken (checks of the training data).
- ServerHangsOnClose-v0  starts a helper process (`sleep`, like a simulator's server) and, once it has stepped,
                   hangs in close() before it stops it: its actor does not stop in time and is killed, leaving the
                   helper running (the env probe, which never steps, closes it normally).
- ServerHangsInInit-v0  starts the same helper, then hangs in its constructor (the env probe times out).
- SlowStart-v0      starts the same helper and takes $SF_TEST_START_SECONDS (1 by default) doing so, in its
                   constructor; it behaves from then on and stops the helper in close().
- SlowFirstReset-v0  the same on its first reset, as a VizDoom env starts its engine.
The helper sleeps $SF_TEST_SERVER_SECONDS (600 by default): a value of its own lets a test find it.

"Once": the first env (in any process) that reaches the fault step creates the file named by
`SF_FAULT_ONCE_FILE` with O_EXCL and faults; every env that finds the file already there behaves normally, so a
restarted worker runs on. Without the variable the fault happens every time.
"""

from __future__ import annotations

import os
import subprocess
import time

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

FAULT_AT_STEP_VAR = "SF_FAULT_AT_STEP"
ONCE_FILE_VAR = "SF_FAULT_ONCE_FILE"


def fault_step() -> int:
    return int(os.environ.get(FAULT_AT_STEP_VAR, "100"))


def claim_once() -> bool:
    """True when this caller is the one that should fault (first to create the once-file, or no once-file)."""
    path = os.environ.get(ONCE_FILE_VAR)
    if not path:
        return True
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


class FaultyCartPole(CartPoleEnv):
    """CartPole with a per-env step counter (not reset by episode ends) and a fault hook."""

    once = False  # fault one time only (see the module docstring)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps_taken = 0
        self.at = fault_step()
        self.faulted = False

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        self.steps_taken += 1
        if self.steps_taken >= self.at and not self.faulted:
            if not self.once or claim_once():
                obs, reward = self.fault(obs, reward)
            elif self.once:
                self.faulted = True  # someone else already had the one fault: never check the file again
        return obs, reward, term, trunc, info

    def fault(self, obs, reward):
        return obs, reward


class RaiseAtStep(FaultyCartPole):
    once = True

    def fault(self, obs, reward):
        self.faulted = True
        raise RuntimeError(f"injected fault: RaiseAtStep-v0 at step {self.steps_taken} (pid {os.getpid()})")


class AbortAtStep(FaultyCartPole):
    once = True

    def fault(self, obs, reward):
        os.abort()


class NanObs(FaultyCartPole):
    def fault(self, obs, reward):
        return np.full_like(obs, np.nan), reward


class WrongShape(FaultyCartPole):
    def fault(self, obs, reward):
        return np.zeros(5, dtype=np.float32), reward


class NanReward(FaultyCartPole):
    def fault(self, obs, reward):
        return obs, float("nan")


class EchoAction(CartPoleEnv):
    """CartPole whose observation carries a fifth value: the action the env just took (-1 after a reset), so that a
    training batch can be checked against what the envs did: obs[t + 1][4] == actions[t] within an episode."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        box = self.observation_space
        self.observation_space = gym.spaces.Box(
            np.append(box.low, -1.0).astype(np.float32), np.append(box.high, 1.0).astype(np.float32)
        )

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return np.append(obs, -1.0).astype(np.float32), info

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return np.append(obs, float(action)).astype(np.float32), reward, term, trunc, info


class ServerHangsOnClose(CartPoleEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.server = subprocess.Popen(["sleep", os.environ.get("SF_TEST_SERVER_SECONDS", "600")])
        self.stepped = False

    def step(self, action):
        self.stepped = True
        return super().step(action)

    def close(self):
        if self.stepped:
            time.sleep(600)
        self.server.kill()
        self.server.wait()


class ServerHangsInInit(ServerHangsOnClose):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        time.sleep(600)


class SlowStart(CartPoleEnv):
    slow_reset = False  # start on the first reset instead of in the constructor

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.server: subprocess.Popen | None = None
        if not self.slow_reset:
            self._start_server()

    def _start_server(self) -> None:
        self.server = subprocess.Popen(["sleep", os.environ.get("SF_TEST_SERVER_SECONDS", "600")])
        time.sleep(float(os.environ.get("SF_TEST_START_SECONDS", "1")))

    def reset(self, **kwargs):
        if self.server is None:
            self._start_server()
        return super().reset(**kwargs)

    def close(self):
        if self.server is not None:
            self.server.kill()
            self.server.wait()
            self.server = None


class SlowFirstReset(SlowStart):
    slow_reset = True


IDS = {
    "RaiseAtStep-v0": RaiseAtStep,
    "AbortAtStep-v0": AbortAtStep,
    "NanObs-v0": NanObs,
    "WrongShape-v0": WrongShape,
    "NanReward-v0": NanReward,
    "EchoAction-v0": EchoAction,
    "ServerHangsOnClose-v0": ServerHangsOnClose,
    "ServerHangsInInit-v0": ServerHangsInInit,
    "SlowStart-v0": SlowStart,
    "SlowFirstReset-v0": SlowFirstReset,
}

for _env_id, _cls in IDS.items():
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=f"{__name__}:{_cls.__name__}", max_episode_steps=500)
