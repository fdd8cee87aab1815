"""The options of remote samplers on Ray (--sampler_nodes: other machines sample for one run's learner,
distributed/)."""

from __future__ import annotations

from sample_factory.config.option_types import OptionGroup, opt


class RemoteOptions(OptionGroup, title="Remote samplers (Ray)"):
    """Other machines sample for one run's learner (distributed/)."""

    sampler_nodes: int = opt(
        0,
        "Ray nodes that sample for this run besides the learner node (IMPALA's remote workers): each runs "
        "--num_workers actor workers and its policy workers and sends finished rollouts to the learner "
        "through Ray's object store. 0: everything on this machine. Needs Ray: the [ray] extra.",
    )

    ray_address: str | None = opt(
        None,
        "The Ray cluster of --sampler_nodes and of --pbt_backend=ray: host:port of its head, or auto "
        "(RAY_ADDRESS or the cluster this machine joined with ray start); default: a local Ray instance.",
    )

    broadcast_interval: int = opt(
        1, "Learner steps (policy versions) between two broadcasts of the weights to the sampler nodes."
    )

    local_samplers: bool = opt(
        True,
        "With --sampler_nodes: also sample on the learner node (False: only the sampler nodes sample, and "
        "the run stops when the last one is lost).",
    )

    remote_compression: str = opt(
        "auto",
        "Compression of the uint8/bool arrays of transferred rollouts: none, zlib (level 1), or auto (zlib for "
        "an array when it measures faster than sending it raw over a --remote_link_mbps link).",
        choices=("none", "zlib", "auto"),
    )

    remote_link_mbps: float = opt(
        1000.0, "Bandwidth between a sampler node and the learner node assumed by --remote_compression=auto (Mbit/s)."
    )
