"""The sampling options (actor workers, envs per worker, policy workers, the throughput tuner) and the env
options (backend, frame skip and stack, observation keys, episode limits)."""

from __future__ import annotations

from sample_factory.config.option_types import OptionGroup, opt


class SamplingOptions(OptionGroup, title="Sampling"):
    """Actor workers, envs per worker, policy workers and the throughput tuner."""

    num_workers: int | None = opt(
        None,
        "Number of actor worker processes (default: the CPU cores this process may use: its affinity, e.g. "
        "taskset, capped by a cgroup CPU quota).",
    )

    num_envs_per_worker: int = opt(2, "Envs stepped by one actor worker.")

    num_envs: int | None = opt(
        None,
        "CleanRL's: the total number of envs, spread evenly over the workers (sets --num_envs_per_worker; "
        "without a typed --num_workers, the workers are the most cores that divide it).",
    )

    worker_num_splits: int = opt(
        2, "Groups the envs of a worker are split into for double-buffered sampling (divides num_envs_per_worker)."
    )

    policy_workers_per_policy: int = opt(1, "Policy worker processes serving inference for each policy.")

    num_policies: int = opt(
        1,
        "Number of policies trained at once, each with its own learner, policy workers, checkpoints and "
        "summaries; they share the actor workers (docs/multi-policy-and-pbt.md).",
    )

    policy_mapping: str | None = opt(
        None,
        "Multi-agent envs with several policies mixed in one env: a mapping registered with "
        "sample_factory.workers.policy_mapping.register_policy_mapping that picks each agent's policy at episode "
        "start (default: uniformly at random).",
    )

    rollout: int = opt(
        32, "Trajectory length collected per env before it is handed to the learner.", aliases=("num_steps",)
    )

    min_traj_buffers_per_worker: int = opt(
        2,
        "Shared trajectory buffers per split of each actor worker (more buffers: more tolerance to learner "
        "hiccups, more policy lag).",
    )

    decorrelate_envs_on_one_worker: bool = opt(
        True,
        "Step the envs of a worker a different random number of times at start so episodes are decorrelated. "
        "Not applied where the run resumes a checkpoint nor to a restarted worker: there the policy has trained, "
        "and episodes begun with random actions would be counted as its own.",
    )

    decorrelate_experience_max_seconds: float = opt(
        0.0,
        "Each split of each actor worker waits a random time, uniform in [0, this], after creating its envs and "
        "before its first inference request, so the rollouts of different workers do not finish in lockstep "
        "(the learner then gets an even stream instead of bursts). 0: no wait (Sample Factory's default). Not "
        "applied in --serial_mode or to a restarted worker.",
    )

    force_envs_single_thread: bool = opt(True, "Limit native thread pools in actor workers (threadpoolctl).")

    set_workers_cpu_affinity: bool = opt(True, "Pin actor workers to CPU cores (psutil).")

    default_niceness: int = opt(
        0,
        "Niceness of the learner and policy-worker processes (0: the runner's); actor workers run "
        "--actor_worker_niceness above it. Below 0 needs root or CAP_SYS_NICE.",
    )

    actor_worker_niceness: int = opt(
        10,
        "How much nicer than --default_niceness the actor workers run (at most 19, never below the runner's; "
        "Sample Factory uses 10): where busy processes outnumber the cores, the learner and inference, which "
        "the others wait for, get the CPU first and the envs use what is left (measured in "
        "benchmarks/notebook.md). 0: every process at the same priority.",
    )

    sampler_only: bool = opt(False, "Collect experience without training (throughput measurement).")

    auto_tune: bool = opt(
        False,
        "Before training, pick --num_workers, --num_envs_per_worker, --worker_num_splits, "
        "--policy_workers_per_policy and --learner_main_loop_num_cores for this machine with the throughput tuner "
        "(python -m sample_factory.tools.tune: short training runs, minutes) and train with the pick; flags typed "
        "on the command line are kept, and nothing that changes learning per sample is touched. The pick is "
        "cached per env, flags and machine in --auto_tune_cache_dir: later runs reuse it at once.",
    )

    auto_tune_cache_dir: str = opt(
        "~/.cache/sample_factory/auto_tune",
        "Where --auto_tune keeps its picks (one JSON file per env, flags and machine; delete it to tune again).",
    )

    auto_tune_seconds: float | None = opt(
        None,
        "Length of each --auto_tune trial run (default: 20 s for envs stepping faster than 20k steps/s in one "
        "process, else 60 s).",
    )

    auto_tune_max_trials: int = opt(
        8,
        "--auto_tune's search runs after the defaults' run (then 2 confirmation runs each of the defaults and "
        "of the pick).",
    )

    message_queue: str = opt(
        "socket",
        "Transport of the small messages between processes: socket (Unix SOCK_SEQPACKET, kill-safe, default) "
        "or faster_fifo (Sample Factory's; a process killed inside a put can leave its lock held and hang the "
        "run: docs/architecture.md).",
        choices=("socket", "faster_fifo"),
    )


class EnvOptions(OptionGroup, title="Envs"):
    """How envs are made and stepped: backend, frame skip and stack, observation keys, episode limits."""

    env_backend: str = opt(
        "auto",
        "How an actor worker steps the envs of a split: gymnasium (one python env each), gymnasium_vector "
        "(gymnasium's own batched numpy implementation of the env, one call per split: CartPole), envpool (one "
        "batched EnvPool call per split; Atari and MuJoCo names, needs the [envpool] extra), or auto: "
        "gymnasium_vector where the env has one, else gymnasium.",
        choices=("auto", "gymnasium", "gymnasium_vector", "envpool"),
    )

    env_frameskip: int = opt(4, "Atari and VizDoom: frames per agent step (Atari max-pools over the last two).")

    env_episodic_life: bool = opt(
        True,
        "Atari: a lost life ends the training episode (the game goes on); evaluation always plays whole games "
        "and episode rewards are always reported per whole game.",
    )

    env_framestack: int = opt(4, "Atari: stacked frames per observation.")

    obs_keys: list[str] = opt(
        [],
        "Dict observations: the keys the model reads, comma-separated (gymnasium's FilterObservation). Empty: "
        "every key an encoder takes (Box, Discrete, MultiBinary, MultiDiscrete); others, such as MiniGrid's text "
        "mission, are left out and the run says which at start.",
    )

    env_sticky_actions: float = opt(0.25, "Atari: probability of repeating the previous action.")

    env_seed_offset: int = opt(0, "Added to the per-env seed (seed * 1000 + worker * envs + env).")

    max_episode_steps: int | None = opt(
        None,
        "Truncate every episode after this many agent steps (gymnasium's TimeLimit, as gym.make's argument of "
        "the same name: a truncation, so values bootstrap past it). Default: the env's own limit; envs that "
        "register none (CliffWalking-v1, ...) run an episode until the env ends it. Gymnasium ids and custom "
        "envs; Atari and VizDoom games keep their own limits.",
    )
