"""The evaluation options: those periodic evaluation during training and enjoy.py both read, and those only enjoy.py
reads (train.py refuses the latter with a line saying where they belong). Assembled into OPTIONS by options.py."""

from __future__ import annotations

from sample_factory.config.option_types import Option, _num, str2bool

# Read by train.py (periodic evaluation, passed on to the enjoy.py it runs) and by enjoy.py.
EVAL_OPTIONS: list[Option] = [
    Option(
        "eval_every_env_steps",
        _num,
        -1,
        "During training, evaluate the latest checkpoint in a separate process this often (-1: never).",
    ),
    Option("eval_episodes", int, 10, "Episodes per periodic evaluation during training."),
    Option(
        "eval_policies",
        str,
        "all",
        "Policies the periodic evaluation covers: all, or indices like 0,2. Each is evaluated on a fresh "
        "checkpoint of its own when its env steps pass a multiple of --eval_every_env_steps, one evaluation "
        "at a time.",
    ),
    Option(
        "eval_env_overrides",
        str,
        None,
        "Env options changed for evaluation only (periodic and enjoy.py), as name=value pairs: e.g. "
        "env_sticky_actions=0,env_frameskip=4. Allowed: env, seed and the env_* options.",
    ),
    Option("max_num_frames", _num, 1e9, "Stop evaluating after this many env steps."),
    Option("eval_deterministic", str2bool, False, "Take the most likely action (argmax / Gaussian mean)."),
    Option(
        "capture_video",
        str2bool,
        False,
        "CleanRL's name: record every periodic evaluation (--eval_every_env_steps) as one mp4, "
        "<experiment>/videos/eval_<env steps>_p<policy>.mp4 (needs the [video] extra). Without "
        "--eval_every_env_steps: ten over the budget, or one every 100,000 agent steps.",
    ),
]

# Read by enjoy.py only: train.py refuses them (options.ENJOY_ONLY_GROUP).
ENJOY_OPTIONS: list[Option] = [
    Option("max_num_episodes", int, 10, "Episodes to evaluate."),
    Option("policy_index", int, 0, "Which policy of a multi-policy experiment to evaluate."),
    Option("load_checkpoint_kind", str, "latest", "Which checkpoint to evaluate.", choices=("latest", "best")),
    Option("no_render", str2bool, False, "Do not open a window (headless evaluation)."),
    Option("fps", float, 0.0, "Slow on-screen rendering down to this many frames per second (0: as fast as possible)."),
    Option("save_video", str2bool, False, "Write the evaluated episodes as mp4 into the experiment folder."),
    Option("video_frames", _num, 1e9, "At most this many frames per video."),
    Option("video_name", str, "replay", "Video file name: <name>.mp4 holds every evaluated episode."),
    Option("video_per_episode", str2bool, False, "Also write one mp4 per episode: <name>_ep<N>.mp4."),
    Option(
        "eval_results_file",
        str,
        None,
        "Where enjoy.py writes its JSON summary (default: <experiment>/eval_results.json).",
    ),
]
