"""One training run over several machines (--sampler_nodes): sampler nodes on a Ray cluster feed the learner node.

- rollouts.py: the pure pieces (packing slots into transferable batches and back, compression, policy-lag checks);
- sampler_node.py: the Ray actor that runs a sampler-only runtime (actor + policy workers) on its node;
- remote_samplers.py: the learner-node side (placement, importing rollouts, weight broadcasts, lost nodes);
- local_cluster.py: a multi-node Ray cluster on loopback for tests and benchmarks.

Nothing here imports Ray at module import time: Ray is an optional extra.
"""
