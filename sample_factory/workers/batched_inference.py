"""The policy worker's inference step: one call of the algorithm class's `act` (forward + action sampling) per
batch of requests, fed from staging buffers and, on CUDA, replayed from CUDA graphs (--inference_cuda_graphs).

Why graphs: the Atari model's forward pass cost 0.55 ms on an H200 at batch 16, 64 and 256 alike: the time is the
CPU launching a few dozen small kernels, not the GPU computing. A captured graph launches them all at once.

Buckets: a graph has fixed shapes, so one is captured per bucket of batch sizes (powers of two from MIN_BUCKET,
up to the largest batch the worker can get, which is a bucket itself), lazily at the first batch that needs it.
A batch of n rows is copied into the first n rows of its bucket's static input tensors, the graph replays, and the
first n rows of its output tensors are the answer. The rows past n hold whatever an earlier batch left there (an
action mask starts all-allowed): every row is computed independently, so they change nothing but the cost.

What a graph bakes in, and why it stays right:
- The model's parameters and buffers are read by address: weight updates must copy into the same tensors
  (SharedWeights.load_into does; tests/workers/test_policy_worker.py keeps it so).
- Python values (cfg, deterministic) are constants of the capture: the worker's cfg does not change during a run,
  and a graph is kept per (bucket, deterministic).
- Random sampling: torch's CUDA generator registers with the capture, and every replay advances its Philox
  offset, so each replay draws new numbers.

Copies: the worker gathers a batch's rows from the shared slots straight into `staging(n)` (pinned memory on
CUDA): one CPU copy, then one non-blocking copy per input to the device. Outputs come back into pinned buffers by
non-blocking copies and one stream synchronize, instead of one blocking copy (and sync) per output.

Fallback: any failure to capture or replay (an op that reads a value back to the host, an unsupported kernel) logs
one line and `BatchedInference` infers eagerly from then on, like model/compile.py's fallback for torch.compile.

Mode "padded" runs the bucket path without graphs (static buffers, padding, slicing): what the graphs replay,
observable on a machine without CUDA (tests, the benchmark on CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from sample_factory.algo.base import ActResult, Algorithm
from sample_factory.config import Config
from sample_factory.envs.spaces import ACTION_MASK_KEY
from sample_factory.model.actor_critic import ActorCritic

MIN_BUCKET = 8
MAX_BUCKET = 4096  # larger batches run eagerly (a few MB of frames per graph and its activations at most)
WARMUP_CALLS = 2  # eager calls before a capture: lazy initialization (cuBLAS handles, cuDNN plans) is not capturable
MODES = ("eager", "padded", "graphs")


class Inputs(NamedTuple):
    """One batch's inputs, [rows, ...] each."""

    obs: dict[str, Tensor]  # {key: [rows, *shape]}, the action mask included
    rnn_states: Tensor | None  # [rows, H] as stored (not yet reset); None without a recurrent core
    is_first: Tensor | None  # [rows] bool: reset the state of this row; None without a recurrent core
    agent_rank: Tensor | None  # [rows] float, for algorithms that read it (uses_agent_rank)
    sde_eps: Tensor | None  # [rows, L, D] each row's exploration matrix, with --use_sde (algo/sde.py)

    def head(self, n: int) -> Inputs:
        return Inputs({k: v[:n] for k, v in self.obs.items()}, *(None if t is None else t[:n] for t in self[1:]))

    def tensors(self) -> list[Tensor]:
        return [*self.obs.values(), *(t for t in self[1:] if t is not None)]

    def to(self, device: torch.device) -> Inputs:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        obs = {k: v.to(device, non_blocking=True) for k, v in self.obs.items()}
        return Inputs(obs, move(self.rnn_states), move(self.is_first), move(self.agent_rank), move(self.sde_eps))


def bucket_sizes(max_rows: int) -> list[int]:
    """Powers of two from MIN_BUCKET below `max_rows`, then `max_rows` itself (at most MAX_BUCKET)."""
    top = min(max(max_rows, 1), MAX_BUCKET)
    sizes, b = [], MIN_BUCKET
    while b < top:
        sizes.append(b)
        b *= 2
    return [*sizes, top]


def resolve_mode(cfg: Config, device: torch.device, log: Callable[[str], None]) -> str:
    """--inference_cuda_graphs on `device`: "graphs" or "eager". auto: graphs for recurrent models on CUDA (whole runs
    1.15-1.2x faster with them), eager for feed-forward ones, where whole runs measured no gain yet (Pong 0.96x,
    CartPole 0.83-0.94x on an H100, 2026-11-26, with the learner of before issue 31's loop change:
    benchmarks/notebook.md), and never with --torch_compile_worker (whose mode=reduce-overhead captures its own)."""
    setting = str(cfg.inference_cuda_graphs)
    if setting == "False":
        return "eager"
    if device.type != "cuda":
        if setting == "True":
            log(f"--inference_cuda_graphs=True needs a CUDA device, not {device}; inferring eagerly")
        return "eager"
    if setting == "auto" and (cfg.torch_compile_worker or not cfg.use_rnn):
        return "eager"
    return "graphs"


class _Bucket:
    """Static inputs of `rows` rows and how to compute the outputs from them (a graph replay, or an eager call)."""

    def __init__(self, inputs: Inputs):
        self.inputs = inputs
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: ActResult | None = None  # the graph's static outputs, or the last eager call's


class BatchedInference:
    """`staging(n)`: where the caller writes a batch of n rows; `run(n, deterministic)`: act on them, outputs on the
    host ([n, ...] each, in `out_dtypes` where given; valid until the next run)."""

    def __init__(
        self,
        cfg: Config,
        model: ActorCritic,
        algo_class: type[Algorithm],
        obs_spec: dict[str, tuple[tuple[int, ...], torch.dtype]],
        device: torch.device,
        max_rows: int,
        mode: str,
        log: Callable[[str], None],
        out_dtypes: dict[str, torch.dtype] | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.cfg, self.model, self.device, self.mode, self.log = cfg, model, device, mode, log
        self.algo_class = algo_class
        self.obs_spec = obs_spec
        self.state_size = model.rnn_state_size if model.recurrent else 0
        self.with_rank = algo_class.uses_agent_rank
        self.sde_shape = getattr(model, "sde_shape", None)  # [L, D] with --use_sde
        self.out_dtypes = out_dtypes or {}
        self.sizes = bucket_sizes(max_rows)
        self.cuda = device.type == "cuda"
        self.capacity = max(max_rows, 1)
        self._staging = self._alloc(self.capacity, torch.device("cpu"), pin=self.cuda)
        self._host_out: dict[str, Tensor] = {}  # pinned output buffers (CUDA), by ActResult field
        self._buckets: dict[tuple[int, bool], _Bucket] = {}
        self._pool: Any = None  # graph memory pool, shared by the buckets' graphs (they never run concurrently)
        self.captures = 0  # graphs captured
        self.failure: str | None = None  # the note logged when graphs failed

    # ---- buffers -------------------------------------------------------------------------------------------------

    def _alloc(self, rows: int, device: torch.device, pin: bool = False) -> Inputs:
        def make(shape: tuple[int, ...], dtype: torch.dtype, fill: int = 0) -> Tensor:
            t = torch.empty((rows, *shape), dtype=dtype, device=device, pin_memory=pin)
            return t.fill_(fill)

        obs = {k: make(shape, dtype, int(k == ACTION_MASK_KEY)) for k, (shape, dtype) in self.obs_spec.items()}
        rnn = make((self.state_size,), torch.float32) if self.state_size else None
        first = make((), torch.bool) if self.state_size else None
        rank = make((), torch.float32) if self.with_rank else None
        sde = make(self.sde_shape, torch.float32) if self.sde_shape else None
        return Inputs(obs, rnn, first, rank, sde)

    def staging(self, n: int) -> Inputs:
        """Host tensors of n rows to write a batch into (pinned on CUDA); the rows are read by the next `run(n)`."""
        if n > self.capacity:  # more rows than the worker expected: grow (never shrinks)
            self.capacity = n
            self._staging = self._alloc(n, torch.device("cpu"), pin=self.cuda)
            self._host_out.clear()
        return self._staging.head(n)

    # ---- inference -----------------------------------------------------------------------------------------------

    def _act(self, x: Inputs, deterministic: bool) -> ActResult:
        h = None
        if x.rnn_states is not None and x.is_first is not None:
            h = x.rnn_states * (~x.is_first).unsqueeze(-1)
        mask = x.obs.get(ACTION_MASK_KEY)
        extra = {} if x.sde_eps is None else {"sde_eps": x.sde_eps}  # (an algorithm may not know the argument)
        return self.algo_class.act(
            self.cfg, self.model, x.obs, h, mask, deterministic, agent_rank=x.agent_rank, **extra
        )

    def bucket_for(self, n: int) -> int | None:
        """The bucket size a batch of n rows pads to (None: runs unpadded, eagerly)."""
        if self.mode == "eager":
            return None
        return next((b for b in self.sizes if b >= n), None)

    @torch.inference_mode()
    def run(self, n: int, deterministic: bool) -> ActResult:
        src = self._staging.head(n)
        rows = self.bucket_for(n)
        bucket = self._bucket(rows, deterministic) if rows is not None else None
        if bucket is None:
            return self._to_host(self._act(src.to(self.device), deterministic), n)
        for dst, s in zip(bucket.inputs.head(n).tensors(), src.tensors(), strict=True):
            dst.copy_(s, non_blocking=True)
        if bucket.graph is None:
            bucket.outputs = self._act(bucket.inputs, deterministic)
        else:
            try:
                bucket.graph.replay()
            except Exception as e:  # noqa: BLE001 - as for a failed capture: run eagerly from now on
                self._fail("replaying", e)
                return self.run(n, deterministic)
        assert bucket.outputs is not None  # captured, or the eager call above
        return self._to_host(bucket.outputs, n)

    def _to_host(self, out: ActResult, n: int) -> ActResult:
        """The first n rows of each output, on the host, in its `out_dtypes` dtype."""
        if not self.cuda:
            return ActResult._make(
                None if t is None else t[:n].to(self.out_dtypes.get(f, t.dtype)) for f, t in _items(out)
            )
        host: list[Tensor | None] = []
        for f, t in _items(out):
            if t is None:
                host.append(None)
                continue
            dtype = self.out_dtypes.get(f, t.dtype)
            buf = self._host_out.get(f)
            if buf is None or buf.shape[1:] != t.shape[1:] or buf.dtype != dtype:
                buf = self._host_out[f] = torch.empty((self.capacity, *t.shape[1:]), dtype=dtype, pin_memory=True)
            host.append(buf[:n].copy_(t[:n], non_blocking=True))
        torch.cuda.current_stream(self.device).synchronize()  # once, for every output
        return ActResult._make(host)

    # ---- buckets and graphs --------------------------------------------------------------------------------------

    def _bucket(self, rows: int, deterministic: bool) -> _Bucket | None:
        """The bucket of `rows` rows, made (and in mode "graphs", captured) on first use; None if graphs failed."""
        key = (rows, deterministic)
        bucket = self._buckets.get(key)
        if bucket is not None or self.mode == "eager":
            return bucket
        bucket = _Bucket(self._alloc(rows, self.device))
        if self.mode == "graphs":
            try:
                bucket.graph, bucket.outputs = self._capture(bucket.inputs, deterministic)
            except Exception as e:  # noqa: BLE001 - graphs are an optimization, never required
                self._fail(f"capturing batch size {rows} of", e)
                return None
            self.captures += 1
        self._buckets[key] = bucket
        return bucket

    def _capture(self, inputs: Inputs, deterministic: bool) -> tuple[torch.cuda.CUDAGraph, ActResult]:
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)  # warm-up off the current stream, as torch.cuda.graphs asks
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self._act(inputs, deterministic)
        current.wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # A failed capture ends before it hands the CUDA generator back: every later random op in this process then
        # raises ("Offset increment outside graph capture"). Its state from before the capture is put back.
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        rng = torch.cuda.default_generators[index]
        saved = rng.clone_state()
        try:
            # thread_local: CUDA calls of other threads (none of ours) cannot invalidate the capture
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                outputs = self._act(inputs, deterministic)
        except Exception:
            rng.graphsafe_set_state(saved)
            raise
        return graph, outputs

    def _fail(self, what: str, e: Exception) -> None:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        self.failure = (
            f"CUDA graph {what} the inference step failed ({type(e).__name__}: {first[:200]}); inferring eagerly"
        )
        self.log(self.failure)
        self.mode = "eager"
        self._buckets.clear()
        self._pool = None


def _items(out: ActResult) -> list[tuple[str, Tensor | None]]:
    return list(zip(ActResult._fields, out, strict=True))


def obs_spec_of(obs: dict[str, Tensor], leading: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """{key: (shape of one row, dtype)} of tensors {key: [*leading dims, *shape]}."""
    return {k: (tuple(v.shape[leading:]), v.dtype) for k, v in obs.items()}
