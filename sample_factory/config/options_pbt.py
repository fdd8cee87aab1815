"""The PBT options (in-process population-based training, and PBT across nodes with --pbt_backend=ray): the "PBT"
group of the option table in options.py, where they are declared for the parser, the checks and the reference."""

from __future__ import annotations

from sample_factory.config.option_types import Option, str2bool

PBT_OPTIONS: list[Option] = [
    Option(
        "with_pbt",
        str2bool,
        False,
        "Population-based training over the --num_policies policies: the worst ones periodically take over "
        "the weights of better ones, and hyperparameters are perturbed.",
    ),
    Option(
        "pbt_period_env_steps",
        int,
        5_000_000,
        "Env steps of one policy between two of its PBT steps (replacement or mutation).",
    ),
    Option(
        "pbt_start_mutation",
        int,
        20_000_000,
        "No replacement or mutation before this many env steps of a policy, so the initially diverse "
        "policies can develop first.",
    ),
    Option(
        "pbt_replace_fraction",
        float,
        0.3,
        "Fraction of the population (rounded up) that counts as worst, and as best: a worst policy may be "
        "replaced by a random one of the best.",
    ),
    Option("pbt_mutation_rate", float, 0.15, "Probability that each hyperparameter is perturbed in a PBT step."),
    Option(
        "pbt_replace_reward_gap",
        float,
        0.1,
        "A replacement needs the better policy's objective to exceed the worse one's by this fraction of "
        "the better one's absolute objective.",
    ),
    Option(
        "pbt_replace_reward_gap_absolute",
        float,
        1e-6,
        "A replacement also needs the objective gap to exceed this absolute value.",
    ),
    Option(
        "pbt_optimize_gamma",
        str2bool,
        False,
        "Let PBT perturb the discount factor as well (kept within [0.9, 0.9999]).",
    ),
    Option(
        "pbt_target_objective",
        str,
        "true_objective",
        "Per-policy statistic PBT ranks policies by (higher is better): true_objective is the mean episode "
        "reward (once --stats_avg episodes, at most 10, finished); any other name is a statistic of the "
        "policy's learner (e.g. value, entropy; the train/* TensorBoard tags).",
    ),
    Option(
        "pbt_perturb_min",
        float,
        1.1,
        "Smallest factor by which a perturbed hyperparameter is multiplied or divided.",
    ),
    Option(
        "pbt_perturb_max",
        float,
        1.5,
        "Largest factor by which a perturbed hyperparameter is multiplied or divided.",
    ),
    Option(
        "pbt_backend",
        str,
        "in_process",
        "Where the population trains: in_process (the --num_policies policies share one run's actor workers) "
        "or ray (each policy is a separate train.py run placed by Ray, possibly on another node; train_dir "
        "must be a folder all nodes see; docs/scale-out.md, PBT across nodes).",
        choices=("in_process", "ray"),
    ),
    Option(
        "pbt_cpus_per_member",
        int,
        0,
        "--pbt_backend=ray: CPUs a population member reserves (0: its --num_workers + 1).",
    ),
    Option(
        "pbt_gpus_per_member",
        float,
        0.0,
        "--pbt_backend=ray: GPUs (or a fraction of one) a population member reserves.",
    ),
    Option(
        "pbt_max_member_restarts",
        int,
        3,
        "--pbt_backend=ray: times a member whose run died is restarted from its last checkpoint before the "
        "population stops as failed.",
    ),
    Option(
        "pbt_mix_policies_in_one_env",
        str2bool,
        True,
        "Multi-agent envs: agents of one env may be controlled by different policies (False: one policy per env).",
    ),
]
