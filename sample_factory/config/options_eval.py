"""The evaluation options: those periodic evaluation during training and enjoy.py both read, and those only
enjoy.py reads (train.py refuses the latter with a line saying where they belong)."""

from __future__ import annotations

from sample_factory.config.option_types import Number, OptionGroup, opt


class EvalOptions(OptionGroup, title="Evaluation (train.py and enjoy.py)"):
    """Read by train.py (periodic evaluation, passed on to the enjoy.py it runs) and by enjoy.py."""

    eval_every_env_steps: Number = opt(
        -1, "During training, evaluate the latest checkpoint in a separate process this often (-1: never)."
    )

    eval_episodes: int = opt(10, "Episodes per periodic evaluation during training.")

    eval_policies: str = opt(
        "all",
        "Policies the periodic evaluation covers: all, or indices like 0,2. Each is evaluated on a fresh "
        "checkpoint of its own when its env steps pass a multiple of --eval_every_env_steps, one evaluation "
        "at a time.",
    )

    eval_env_overrides: str | None = opt(
        None,
        "Env options changed for evaluation only (periodic and enjoy.py), as name=value pairs: e.g. "
        "env_sticky_actions=0,env_frameskip=4. Allowed: env, seed and the env_* options.",
    )

    max_num_frames: Number = opt(1e9, "Stop evaluating after this many env steps.")

    eval_deterministic: bool = opt(False, "Take the most likely action (argmax / Gaussian mean).")

    capture_video: bool = opt(
        False,
        "CleanRL's name: record every periodic evaluation (--eval_every_env_steps) as one mp4, "
        "<experiment>/videos/eval_<env steps>_p<policy>.mp4 (needs the [video] extra). Without "
        "--eval_every_env_steps: ten over the budget, or one every 100,000 agent steps.",
    )


class EnjoyOptions(OptionGroup, title="Evaluation (enjoy.py only)"):
    """Read by enjoy.py only: train.py refuses them with a line saying where they belong."""

    max_num_episodes: int = opt(10, "Episodes to evaluate.")

    policy_index: int = opt(0, "Which policy of a multi-policy experiment to evaluate.")

    load_checkpoint_kind: str = opt("latest", "Which checkpoint to evaluate.", choices=("latest", "best"))

    no_render: bool = opt(False, "Do not open a window (headless evaluation).")

    fps: float = opt(0.0, "Slow on-screen rendering down to this many frames per second (0: as fast as possible).")

    save_video: bool = opt(False, "Write the evaluated episodes as mp4 into the experiment folder.")

    video_frames: Number = opt(1e9, "At most this many frames per video.")

    video_name: str = opt("replay", "Video file name: <name>.mp4 holds every evaluated episode.")

    video_per_episode: bool = opt(False, "Also write one mp4 per episode: <name>_ep<N>.mp4.")

    eval_results_file: str | None = opt(
        None, "Where enjoy.py writes its JSON summary (default: <experiment>/eval_results.json)."
    )
