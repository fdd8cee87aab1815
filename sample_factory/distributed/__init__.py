"""One training run over several machines (--sampler_nodes): sampler nodes on a Ray cluster feed the learner node.

- rollouts.py: the pure pieces (packing slots into transferable batches and back, compression, policy-lag checks);
- sampler_node.py: the Ray actor that runs a sampler-only runtime (actor + policy workers) on its node;
- remote_samplers.py: the learner-node side (placement, importing rollouts, weight broadcasts, lost nodes);
- ray_init.py: joining a Ray cluster, or starting a local Ray that listens on 127.0.0.1 only (also for the launcher
  and PBT across nodes);
- local_cluster.py: a multi-node Ray cluster on loopback for tests and benchmarks.

Nothing here imports Ray at module import time: Ray is an optional extra.
"""
