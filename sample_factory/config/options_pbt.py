"""The PBT options (in-process population-based training, and PBT across nodes with --pbt_backend=ray)."""

from __future__ import annotations

from sample_factory.config.option_types import OptionGroup, opt


class PbtOptions(OptionGroup, title="PBT"):
    """Population-based training, in-process or across nodes with --pbt_backend=ray."""

    with_pbt: bool = opt(
        False,
        "Population-based training over the --num_policies policies: the worst ones periodically take over "
        "the weights of better ones, and hyperparameters are perturbed.",
    )

    pbt_period_env_steps: int = opt(
        5_000_000, "Env steps of one policy between two of its PBT steps (replacement or mutation)."
    )

    pbt_start_mutation: int = opt(
        20_000_000,
        "No replacement or mutation before this many env steps of a policy, so the initially diverse "
        "policies can develop first.",
    )

    pbt_replace_fraction: float = opt(
        0.3,
        "Fraction of the population (rounded up) that counts as worst, and as best: a worst policy may be "
        "replaced by a random one of the best.",
    )

    pbt_mutation_rate: float = opt(0.15, "Probability that each hyperparameter is perturbed in a PBT step.")

    pbt_replace_reward_gap: float = opt(
        0.1,
        "A replacement needs the better policy's objective to exceed the worse one's by this fraction of "
        "the better one's absolute objective.",
    )

    pbt_replace_reward_gap_absolute: float = opt(
        1e-6, "A replacement also needs the objective gap to exceed this absolute value."
    )

    pbt_optimize_gamma: bool = opt(False, "Let PBT perturb the discount factor as well (kept within [0.9, 0.9999]).")

    pbt_target_objective: str = opt(
        "true_objective",
        "Per-policy statistic PBT ranks policies by (higher is better): true_objective is the mean episode "
        "reward (once --stats_avg episodes, at most 10, finished); any other name is a statistic of the "
        "policy's learner (e.g. value, entropy; the train/* TensorBoard tags).",
    )

    pbt_perturb_min: float = opt(1.1, "Smallest factor by which a perturbed hyperparameter is multiplied or divided.")

    pbt_perturb_max: float = opt(1.5, "Largest factor by which a perturbed hyperparameter is multiplied or divided.")

    pbt_backend: str = opt(
        "in_process",
        "Where the population trains: in_process (the --num_policies policies share one run's actor workers) "
        "or ray (each policy is a separate train.py run placed by Ray, possibly on another node; train_dir "
        "must be a folder all nodes see; docs/scale-out.md, PBT across nodes).",
        choices=("in_process", "ray"),
    )

    pbt_cpus_per_member: int = opt(
        0, "--pbt_backend=ray: CPUs a population member reserves (0: its --num_workers + 1)."
    )

    pbt_gpus_per_member: float = opt(
        0.0, "--pbt_backend=ray: GPUs (or a fraction of one) a population member reserves."
    )

    pbt_max_member_restarts: int = opt(
        3,
        "--pbt_backend=ray: times a member whose run died is restarted from its last checkpoint before the "
        "population stops as failed.",
    )

    pbt_mix_policies_in_one_env: bool = opt(
        True, "Multi-agent envs: agents of one env may be controlled by different policies (False: one policy per env)."
    )
