"""The suite table of the learning benchmark (`benchmarks.benchmark_learning`).

One `SuiteEnv` per env: the target ("solved") reward and where it comes from, the env-step and wall-time budget of
one run at each budget level, the seeds per level, extra train flags and published numbers to compare against.

Budget levels:
- `ci`: seconds per run, only to show that the pipeline works (tests, smoke runs); the numbers mean nothing.
- `short`: what fits a 2-core CPU machine, so that one suite takes about an hour or less.
- `full`: the budgets that papers report (MuJoCo 1M env steps, Atari 10M env steps = 40M frames), or, where no
  standard exists, a budget set here and said so.

A run stops at whichever comes first, its env steps or its wall time (`--train_for_env_steps`,
`--train_for_seconds`); the wall-time cap of `full` is a safety net, not part of the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LEVELS = ("ci", "short", "full")
# Seconds between progress lines (= progress.csv rows = curve points) per level: fine enough for short runs,
# coarse enough that a 10M-step Atari run does not write tens of thousands of rows.
REPORT_INTERVAL_SEC = {"ci": 1.0, "short": 5.0, "full": 10.0}
NOT_FILLED = "not filled (no published number known for certain for this setting)"
SET_HERE = "set here; no standard budget exists for this env"
# CleanRL's PPO benchmark tables (docs.cleanrl.dev/rl-algorithms/ppo/, "Experiment results", tag pr-424): mean
# +- std of the final episodic return over seeds. MuJoCo: ppo_continuous_action.py on the v4 envs (the v5 envs
# here have the same dynamics and rewards) at 1M env steps; Atari: ppo_atari.py on the NoFrameskip-v4 games at
# 10M env steps = 40M frames.
CLEANRL_MUJOCO = "CleanRL ppo_continuous_action.py, {} at 1M env steps (docs.cleanrl.dev/rl-algorithms/ppo/, pr-424)"
CLEANRL_ATARI = "CleanRL ppo_atari.py, {} at 10M env steps = 40M frames (docs.cleanrl.dev/rl-algorithms/ppo/, pr-424)"


@dataclass(frozen=True)
class Budget:
    env_steps: int
    seconds: int  # wall-time cap of one run (--train_for_seconds)
    seeds: int


@dataclass(frozen=True)
class Reference:
    """A published number to compare against; value None where none is known for certain."""

    label: str
    value: float | None
    source: str


@dataclass(frozen=True)
class SuiteEnv:
    env: str
    threshold: float | None  # None: report the return at the budget
    threshold_source: str
    budgets: dict[str, Budget]
    budget_source: str
    extra_flags: tuple[str, ...] = ()  # env settings only: training settings live in config/presets.py
    references: tuple[Reference, ...] = field(default_factory=tuple)

    def budget(self, level: str) -> Budget:
        return self.budgets[level]


def _levels(ci: Budget, short: Budget, full: Budget) -> dict[str, Budget]:
    return {"ci": ci, "short": short, "full": full}


_NO_TARGET = "no target: the return at the step budget is reported"
_GYM = "the gymnasium registry's reward_threshold of {}, a mean return over 100 consecutive episodes"
_CLASSIC_CI = Budget(50_000, 20, 1)


def _classic(env: str, threshold: float, short: Budget, full: Budget) -> SuiteEnv:
    return SuiteEnv(
        env=env,
        threshold=threshold,
        threshold_source=_GYM.format(env),
        budgets=_levels(_CLASSIC_CI, short, full),
        budget_source=SET_HERE,
        references=(Reference("published", None, NOT_FILLED),),
    )


def _mujoco(env: str, gym_threshold: float | None, cleanrl: Reference) -> SuiteEnv:
    # short: 3 envs x 2 seeds x 400 s = 40 min at most (HalfCheetah-v5 ran at ~600 FPS overall in a 30 s ci run
    # on 2 shared cores, so a run may end at its cap before 300k steps).
    note = f"gymnasium registers reward_threshold={gym_threshold}; not used" if gym_threshold else "none registered"
    return SuiteEnv(
        env=env,
        threshold=None,
        threshold_source=f"no target: the return at the step budget is reported ({note})",
        budgets=_levels(Budget(20_000, 30, 1), Budget(300_000, 400, 2), Budget(1_000_000, 4 * 3600, 5)),
        budget_source="full: 1M env steps, the budget of the MuJoCo benchmarks in the PPO paper (Schulman et al. "
        "2017, arXiv:1707.06347)",
        references=(cleanrl,),
    )


def _atari(env: str, threshold: float | None, threshold_source: str, cleanrl: Reference) -> SuiteEnv:
    return SuiteEnv(
        env=env,
        threshold=threshold,
        threshold_source=threshold_source,
        # short: one game runs at roughly 900 env steps/s on 2 cores (benchmarks/notebook.md), so 500k steps take
        # about 10 minutes and the four games fit in an hour.
        budgets=_levels(Budget(5_000, 30, 1), Budget(500_000, 900, 1), Budget(10_000_000, 48 * 3600, 3)),
        budget_source="full: 10M env steps = 40M frames, the Atari budget of the PPO paper (Schulman et al. 2017, "
        "arXiv:1707.06347)",
        references=(cleanrl,),
    )


def _doom(env: str, short: Budget) -> SuiteEnv:
    return SuiteEnv(
        env=env,
        threshold=None,
        threshold_source="no target: the return at the step budget is reported",
        budgets=_levels(Budget(5_000, 30, 1), short, Budget(10_000_000, 24 * 3600, 3)),
        budget_source=SET_HERE,
        references=(Reference("Sample Factory (Petrenko et al. 2020)", None, NOT_FILLED),),
    )


# The MinAtar paper's DQN (Young & Tian 2019, arXiv:1903.03176; NUM_FRAMES = 5,000,000 in the MinAtar repository's
# examples/dqn.py) is published as learning curves only: the values below are its DQN curve (30 seeds, moving average
# over 100 episodes) read off the repository's img/learning_curves.gif as the mean over 4.75M-5M frames by
# benchmarks/minatar_reference_curves.py. The paper's games had all 6 actions: the `minatar_v0` suite trains them so
# (the `-v0` ids), the `minatar` suite each game's minimal action set (`-v1`, what a user's first run gets); its
# Seaquest curve predates MinAtar 1.0.11's oxygen fix.
MINATAR_GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
MINATAR_DQN_AT_5M = {"Asterix": 16.8, "Breakout": 10.0, "Freeway": 50.2, "Seaquest": 20.0, "SpaceInvaders": 43.6}
MINATAR_DQN_SOURCE = (
    "the MinAtar paper's DQN curve at 4.75M-5M frames, read off github.com/kenjyoung/MinAtar img/learning_curves.gif "
    "(commit 4241f24) by benchmarks/minatar_reference_curves.py; all 6 actions"
)


def _minatar(game: str, version: str) -> SuiteEnv:
    """`version` v1: the game's minimal action set; v0: all 6 actions, the paper's protocol."""
    protocol = "" if version == "v0" else ", where these -v1 ids have the minimal set"
    return SuiteEnv(
        env=f"MinAtar/{game}-{version}",
        threshold=None,
        threshold_source=_NO_TARGET,
        # MinAtar has no frame skip: one env step is one frame. short: APPO ran ~680k env steps in 180 s on 2
        # shared cores (docs/results.md), so 1M steps fit the 600 s cap and the five games about an hour; DQN
        # (one minibatch per sampled transition) gets much less of its budget done by the cap.
        budgets=_levels(Budget(5_000, 30, 1), Budget(1_000_000, 600, 1), Budget(5_000_000, 24 * 3600, 3)),
        budget_source="full: 5M env steps = 5M frames, the budget of the MinAtar paper (Young & Tian 2019, "
        "arXiv:1903.03176)",
        references=(
            Reference(
                "MinAtar paper DQN (Young & Tian 2019)",
                MINATAR_DQN_AT_5M[game],
                MINATAR_DQN_SOURCE
                + protocol
                + ("; Seaquest before MinAtar 1.0.11's oxygen fix" if game == "Seaquest" else ""),
            ),
        ),
    )


SUITES: dict[str, tuple[SuiteEnv, ...]] = {
    "classic": (
        _classic("CartPole-v1", 475.0, Budget(500_000, 300, 3), Budget(1_000_000, 3600, 5)),
        _classic("Acrobot-v1", -100.0, Budget(1_000_000, 240, 3), Budget(2_000_000, 3600, 5)),
        _classic("MountainCar-v0", -110.0, Budget(3_000_000, 240, 3), Budget(5_000_000, 3600, 5)),
        # short, worst case (every run at its cap): 3 x (300 + 240 + 240 + 480) s = 63 min. LunarLander's Box2D
        # physics is the slowest of the four: it gets the longest cap.
        _classic("LunarLander-v3", 200.0, Budget(3_000_000, 480, 3), Budget(5_000_000, 3 * 3600, 5)),
        # The other envs the classic presets name (CartPole-v0: classic_control; Pendulum-v1: continuous_control).
        _classic("CartPole-v0", 195.0, Budget(300_000, 120, 3), Budget(1_000_000, 3600, 5)),
        SuiteEnv(
            env="Pendulum-v1",
            threshold=-200.0,
            threshold_source="set here (gymnasium registers none): a mean return of -200, a pendulum swung up and "
            "held from every start",
            budgets=_levels(_CLASSIC_CI, Budget(500_000, 300, 3), Budget(1_000_000, 3600, 5)),
            budget_source=SET_HERE,
            references=(Reference("published", None, NOT_FILLED),),
        ),
        # sparse_continuous (gSDE); in the no_preset suite until 2026-11-28, with its space's defaults
        _classic("MountainCarContinuous-v0", 90.0, Budget(1_000_000, 900, 2), Budget(3_000_000, 3600, 5)),
    ),
    # gymnasium envs that no family preset names, trained with the defaults their spaces choose
    # (config/presets.py SPACE_PRESETS): how a user's first untuned env fares. Two seeds each by default
    # (docs/results.md has runs of up to 6 seeds).
    "no_preset": (
        _classic("FrozenLake-v1", 0.70, Budget(1_000_000, 300, 2), Budget(2_000_000, 3600, 5)),
        _classic("Taxi-v4", 8.0, Budget(1_000_000, 400, 2), Budget(5_000_000, 3600, 5)),
        _classic("InvertedPendulum-v5", 950.0, Budget(300_000, 400, 2), Budget(1_000_000, 3600, 5)),
        # 2M env steps: seed 0 with 1M (2026-11-26) ended at 183, still climbing (~960 env steps/s on 2 loaded cores).
        _classic("LunarLanderContinuous-v3", 200.0, Budget(2_000_000, 2400, 2), Budget(3_000_000, 3 * 3600, 5)),
        # A fourth continuous env (1M env steps took 4.3-4.7 min on 2 quiet cores, 13 min beside the test suite).
        _classic("InvertedDoublePendulum-v5", 9100.0, Budget(1_000_000, 1200, 2), Budget(1_000_000, 3600, 5)),
        # Image observations ([96, 96, 3] frames, continuous actions): the `image` preset. Box2D physics and
        # pygame's drawing of every frame cost ~2.5 ms a step: ~200 env steps/s on 2 cores with the learner.
        _classic("CarRacing-v3", 900.0, Budget(1_000_000, 3600, 1), Budget(3_000_000, 6 * 3600, 3)),
        # gymnasium registers neither a step limit nor a threshold: capped at Taxi's 200 steps; -17 is the return
        # of Sutton and Barto's safe path along the top row (the shortest path, along the cliff, returns -13).
        SuiteEnv(
            env="CliffWalking-v1",
            threshold=-17.0,
            threshold_source="set here: the return of the safe path (gymnasium registers none)",
            budgets=_levels(_CLASSIC_CI, Budget(1_000_000, 300, 2), Budget(2_000_000, 3600, 5)),
            budget_source=SET_HERE,
            extra_flags=("--max_episode_steps=200",),
            references=(Reference("published", None, NOT_FILLED),),
        ),
    ),
    "mujoco": (
        _mujoco(
            "HalfCheetah-v5",
            4800.0,
            Reference("CleanRL PPO", 1442.64, CLEANRL_MUJOCO.format("HalfCheetah-v4: 1442.64 +- 46.03")),
        ),
        _mujoco(
            "Hopper-v5",
            3800.0,
            Reference("CleanRL PPO", 2382.86, CLEANRL_MUJOCO.format("Hopper-v4: 2382.86 +- 271.74")),
        ),
        _mujoco(
            "Walker2d-v5",
            None,
            Reference("CleanRL PPO", 2287.95, CLEANRL_MUJOCO.format("Walker2d-v4: 2287.95 +- 571.78")),
        ),
    ),
    "atari": (
        _atari(
            "atari_pong",
            18.0,
            "issue #11 (a Pong game scores between -21 and 21)",
            Reference("CleanRL PPO", 20.36, CLEANRL_ATARI.format("PongNoFrameskip-v4: 20.36 +- 0.20")),
        ),
        _atari(
            "atari_breakout",
            None,
            _NO_TARGET,
            Reference("CleanRL PPO", 414.66, CLEANRL_ATARI.format("BreakoutNoFrameskip-v4: 414.66 +- 28.09")),
        ),
        _atari(
            "atari_beamrider",
            None,
            _NO_TARGET,
            Reference("CleanRL PPO", 1915.93, CLEANRL_ATARI.format("BeamRiderNoFrameskip-v4: 1915.93 +- 484.58")),
        ),
        _atari("atari_spaceinvaders", None, _NO_TARGET, Reference("published PPO", None, NOT_FILLED)),
    ),
    # APPO by default; --extra=--algo=DQN for the minatar_dqn preset (give it its own --output and --train_dir)
    "minatar": tuple(_minatar(game, "v1") for game in MINATAR_GAMES),
    # the MinAtar paper's protocol (all 6 actions): the comparison with its DQN
    "minatar_v0": tuple(_minatar(game, "v0") for game in MINATAR_GAMES),
    "doom": (
        _doom("doom_basic", Budget(200_000, 450, 2)),
        _doom("doom_defend_the_center", Budget(500_000, 900, 2)),
        # the other scenarios the doom_frame preset names, one seed each
        _doom("doom_defend_the_line", Budget(200_000, 450, 1)),
        _doom("doom_health_gathering", Budget(200_000, 450, 1)),
        _doom("doom_take_cover", Budget(200_000, 450, 1)),
    ),
}


def suite_envs(suite: str, only: list[str] | None = None) -> list[SuiteEnv]:
    """The envs of `suite`, in table order; `only` picks a subset (an unknown name is an error)."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
    envs = list(SUITES[suite])
    if only:
        known = {e.env for e in envs}
        unknown = [name for name in only if name not in known]
        if unknown:
            raise ValueError(f"not in suite {suite!r}: {', '.join(unknown)} (it has {', '.join(sorted(known))})")
        envs = [e for e in envs if e.env in only]
    return envs
