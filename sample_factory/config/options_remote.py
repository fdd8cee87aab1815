"""The options of remote samplers on Ray (--sampler_nodes: other machines sample for one run's learner,
distributed/), a section of the option table in options.py."""

from __future__ import annotations

from sample_factory.config.option_types import Option, str2bool

REMOTE_OPTIONS: list[Option] = [
    Option(
        "sampler_nodes",
        int,
        0,
        "Ray nodes that sample for this run besides the learner node (IMPALA's remote workers): each runs "
        "--num_workers actor workers and its policy workers and sends finished rollouts to the learner "
        "through Ray's object store. 0: everything on this machine. Needs Ray: the [ray] extra.",
    ),
    Option(
        "ray_address",
        str,
        None,
        "The Ray cluster of --sampler_nodes and of --pbt_backend=ray: host:port of its head, or auto "
        "(RAY_ADDRESS or the cluster this machine joined with ray start); default: a local Ray instance.",
    ),
    Option(
        "broadcast_interval",
        int,
        1,
        "Learner steps (policy versions) between two broadcasts of the weights to the sampler nodes.",
    ),
    Option(
        "local_samplers",
        str2bool,
        True,
        "With --sampler_nodes: also sample on the learner node (False: only the sampler nodes sample, and "
        "the run stops when the last one is lost).",
    ),
    Option(
        "remote_compression",
        str,
        "auto",
        "Compression of the uint8/bool arrays of transferred rollouts: none, zlib (level 1), or auto (zlib for "
        "an array when it measures faster than sending it raw over a --remote_link_mbps link).",
        choices=("none", "zlib", "auto"),
    ),
    Option(
        "remote_link_mbps",
        float,
        1000.0,
        "Bandwidth between a sampler node and the learner node assumed by --remote_compression=auto (Mbit/s).",
    ),
]
