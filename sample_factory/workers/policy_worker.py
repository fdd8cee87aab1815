"""Policy worker: drains every pending inference request of its policy, runs one batched forward pass, writes
actions, log-probs, values and core states into its own answer area (shared_buffers.py, `answer_*`), and tells
each actor which of its splits are ready; the actor copies the answer into the slot. New weights are picked up
between batches when the learner has published a newer version.

Why not write into the slot directly: after a policy-worker restart the actors re-send outstanding requests, so
one request may be answered twice, by two workers or by one worker in two batches. A policy worker checks that a
request is current when it takes it, but the actor may accept another answer, step its envs and move on before
this worker writes: a write into the slot would replace the data of a step already taken (and the core state the
next request reads). Writing into an area only this worker writes, which the actor reads only for the one answer
it accepts, leaves nothing to race on (see `_serve`)."""

from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import torch

from sample_factory.algo.base import Algorithm, reduced_precision_dtype, sde_period
from sample_factory.algo.registry import algorithm_class
from sample_factory.algo.sde import ExplorationMatrices, matrices_seed
from sample_factory.config import Config, reproducible
from sample_factory.model.activations import pin_kernels
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.compile import compile_for_role, warm_up
from sample_factory.runtime.component import Component
from sample_factory.runtime.device import bind_device, torch_device
from sample_factory.runtime.messages import REQUEST, STOP, ActionsReady, Channels, Request, Stop, decode
from sample_factory.runtime.reproducible import request_seed
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers
from sample_factory.workers.batched_inference import BatchedInference, obs_spec_of, resolve_mode


class PolicyWorker(Component):
    role = "policy"
    # Set up by `init`, in the worker's own process:
    device: torch.device
    model: ActorCritic
    _algo_class: type[Algorithm]  # the algorithm class (`algo_class`)
    sampling_generator: torch.Generator  # the device's default generator
    # Shared views (bind_views): actor generations [num_workers], latest request numbers [num_workers, splits]
    generation: np.ndarray
    request_seq: np.ndarray
    answer_version_np: np.ndarray  # [W, splits] versions of the answers

    def __init__(
        self,
        cfg: Config,
        policy_id: int,
        worker_idx: int,
        buffers: TrajectoryBuffers,
        channels: Channels,
        weights: SharedWeights,
        obs_space: gym.Space,
        action_space: gym.Space,
    ):
        super().__init__((policy_id, worker_idx), channels.policy[policy_id], channels.report)
        self.cfg, self.policy_id, self.buffers, self.channels = cfg, policy_id, buffers, channels
        self.weights, self.obs_space, self.action_space = weights, obs_space, action_space
        self.num_splits = cfg.worker_num_splits
        self.niceness = cfg.default_niceness or None  # 0: the runner's
        self.multi_policy = cfg.num_policies > 1
        # one forward pass per request, its draws seeded per request: answers independent of the batching
        self.reproducible = reproducible(cfg)
        self.answer_area = policy_id * cfg.policy_workers_per_policy + worker_idx  # first index of answer_*
        # (actor_idx, split_idx) -> (gen, seq) of the latest request this worker answered: it answers each once
        self.answered: dict[tuple[int, int], tuple[int, int]] = {}
        self.all_columns = torch.arange(buffers.spec.agents_per_split)
        self.num_agents = buffers.spec.num_workers * buffers.spec.splits_per_worker * buffers.spec.agents_per_split
        self.requests_served = 0  # since the last "inference" report
        self.batches = 0  # since the last "inference" report
        self.version = -1  # of the weights in self.model
        self.deterministic = False
        self.agent_ranks = False  # set from the algorithm class in init
        self.inference: BatchedInference | None = None  # the inference step (staging buffers, CUDA graphs): init
        # --use_sde: each agent's exploration matrix, kept by this worker (with several workers per policy an agent
        # served by two holds one in each: its noise changes more often, its distribution is the same)
        self.sde: ExplorationMatrices | None = None
        self.answer_np: dict[str, np.ndarray] = {}  # this worker's area [splits, n, ...] of each answer tensor

    def init(self) -> None:
        self.device = torch_device(self.cfg.device)
        if self.reproducible:
            pin_kernels(self.device)
        bind_device(self.device)
        self.model = ActorCritic(self.cfg, self.obs_space, self.action_space).to(self.device).eval()
        dtype = reduced_precision_dtype(self.cfg.inference_precision, self.device)
        if dtype is not None and self.model.run_conv_encoders_in(dtype):
            self.report("note", f"policy worker: conv encoders infer in {str(dtype).removeprefix('torch.')}")
        self.version = self.weights.load_into(self.model)  # converts to the model's dtypes
        if compile_for_role(self.model, self.cfg, "worker", lambda line: self.report("note", line)):
            warm_up(self.model, self.obs_space, self.device, rows=4, train=False)
        self.algo_class = algorithm_class(self.cfg)  # how to act (act, values), no training state
        self.agent_ranks = self.algo_class.uses_agent_rank  # whether act() reads them (DQN's per-agent exploration)
        self.deterministic = bool(self.cfg.evaluation_run and self.cfg.eval_deterministic)
        if self.model.sde_shape is not None:
            seed = matrices_seed(self.cfg.seed, self.cfg.env_seed_offset, self.answer_area, self.version)
            self.sde = ExplorationMatrices(self.num_agents, self.model.sde_shape, sde_period(self.cfg), seed)
        self.bind_views()
        self.activity = "waiting for requests"

    # inference: not pickled (serial-mode snapshots): CUDA graphs do not pickle; remade by bind_views, it holds no state
    # that outlives a batch. sampling_generator: the device's default generator (seeded per request)
    _view_attrs = ("generation", "request_seq", "answer_np", "answer_version_np", "inference", "sampling_generator")

    def bind_views(self) -> None:
        b = self.buffers
        cuda = self.device.type == "cuda"
        self.sampling_generator = (
            torch.cuda.default_generators[self.device.index or 0] if cuda else torch.default_generator
        )
        self.generation = b.generation.numpy()
        self.request_seq = b.request_seq.numpy()
        names = ("answer_actions", "answer_log_probs", "answer_values", "answer_rnn_states")
        self.answer_np = {name: getattr(b, name).numpy()[self.answer_area] for name in names}
        self.answer_version_np = b.answer_version.numpy()
        if self.inference is None:
            self.inference = BatchedInference(
                self.cfg,
                self.model,
                self.algo_class,
                obs_spec_of(b.obs, leading=3),
                self.device,
                max_rows=self.num_agents,  # every split's request in one batch
                # reproducible: eager, so that each request's seed reaches the sampling kernels (a graph replays
                # its own generator offsets)
                mode="eager" if self.reproducible else resolve_mode(self.cfg, self.device, self._note),
                log=self._note,
                out_dtypes={f: getattr(b, f"answer_{f}").dtype for f in ("actions", "log_probs", "values")}
                | {"new_rnn_states": b.answer_rnn_states.dtype},
            )

    @property
    def algo_class(self) -> type[Algorithm]:
        """The algorithm class whose `act` and `values` this worker calls; replacing it (a test's recorder, say)
        replaces it in the batched inference too."""
        return self._algo_class

    @algo_class.setter
    def algo_class(self, cls: type[Algorithm]) -> None:
        self._algo_class = cls
        if self.inference is not None:
            self.inference.algo_class = cls

    def _note(self, line: str) -> None:
        self.report("note", f"policy worker: {line}")

    def on_messages(self, msgs: list[tuple]) -> None:
        # Plain ints (copied once per batch) compare faster than numpy scalars: this runs per request.
        gen, seq = self.generation.tolist(), self.request_seq.tolist()
        answered = self.answered
        requests: list[Request] = []
        others = []
        for m in map(decode, msgs):
            if m.kind != REQUEST:
                others.append(m)
            elif m.gen == gen[m.actor_idx] and m.seq == seq[m.actor_idx][m.split_idx]:
                # neither from a replaced worker nor a re-send that was already answered; and never answered twice
                # by this worker (a second answer would rewrite the answer area while the actor may copy from it)
                key = (m.actor_idx, m.split_idx)
                if answered.get(key) != (m.gen, m.seq):
                    answered[key] = (m.gen, m.seq)
                    requests.append(m)
        if others:
            stops = [m for m in others if m.kind == STOP]
            # The inbox is shared by this policy's workers: pass on STOPs meant for the others.
            for _ in stops[1:]:
                self.inbox.put(Stop.wire())
            for m in [m for m in others if m.kind != STOP] + stops[:1]:
                self.handle(m)
        if requests:
            self.activity = "inference"
            with self.timing.add("weight_update"):
                self._maybe_update_weights()
            with self.timing.add("inference"):
                if self.reproducible:
                    for r in requests:
                        self._serve([r])
                else:
                    self._serve(requests)
            self.activity = "waiting for requests"

    def _maybe_update_weights(self) -> None:
        if self.weights.version != self.version:
            # copies into the model's own tensors: the inference's CUDA graphs read them by address
            self.version = self.weights.load_into(self.model)
        self.deterministic = bool(self.cfg.evaluation_run and self.cfg.eval_deterministic)

    def _columns(self, slot: int, t: int, within: torch.Tensor | None = None) -> torch.Tensor:
        """[k] columns of slot at position t that this policy acts for (all of them with a single policy),
        optionally only among the columns where `within` [n] is True."""
        b = self.buffers
        mine = b.policy_id[slot, t] == self.policy_id if self.multi_policy else None
        if within is not None:
            mine = within if mine is None else mine & within
        return self.all_columns if mine is None else torch.nonzero(mine).squeeze(1)

    @torch.inference_mode()
    def _serve(self, requests: list[Request]) -> None:
        """Inputs are read from the slots, outputs written into this worker's answer area only (rows: the
        requests' splits). The area of a split is rewritten only for a newer request of it, which the actor sends
        after it has copied the previous answer, so the actor never reads an area while it is being written."""
        b, w = self.buffers, self.answer_area
        cols = [self._columns(r.slot, r.t) for r in requests]
        rows = [r.actor_idx * self.num_splits + r.split_idx for r in requests]  # [R] split rows of the answers
        N = sum(len(c) for c in cols)
        if N:
            inference = self.inference
            assert inference is not None  # made by bind_views
            # gathered from the slots straight into the inference's staging rows (pinned on CUDA)
            x = inference.staging(N)
            for k, v in b.obs.items():
                self._rows(v, requests, cols, out=x.obs[k])
            if self.model.recurrent:  # reset where is_first: inside the inference step
                self._rows(b.rnn_states, requests, cols, out=x.rnn_states)
                self._rows(b.is_first, requests, cols, out=x.is_first)
            if self.agent_ranks:
                assert x.agent_rank is not None  # staged for an algorithm that uses_agent_rank
                x.agent_rank.copy_(self._agent_rank(rows, cols))
            if self.reproducible:  # one request here: its own random streams (sampling, exploration, gSDE)
                r = requests[0]
                assert self.cfg.seed is not None  # a reproducible run has one
                seed = request_seed(self.cfg.seed, self.policy_id, r.actor_idx, r.split_idx, r.seq)
                # the generator sampling draws from; not torch.manual_seed, which also visits every device type
                # (160 us a call against 5)
                self.sampling_generator.manual_seed(seed)
                if self.sde is not None:
                    self.sde.gen.manual_seed(seed)
            if self.sde is not None:
                self.sde.draw(self._agents(rows, cols), out=x.sde_eps)
            # host tensors; values: real scale, as the buffers hold them
            actions, log_probs, values, h_new = inference.run(N, self.deterministic)
            answers = {
                "answer_actions": actions.view(N, *b.answer_actions.shape[3:]),
                "answer_log_probs": log_probs,
                "answer_values": values,
            }
            if h_new is not None:
                answers["answer_rnn_states"] = h_new
            self._write_answers(answers, rows, cols)
        self.answer_version_np[w, rows] = self.version
        for r in requests:
            if r.has_truncations:
                self._final_values(r)
        # (actor_idx, gen) -> [(split_idx, seq), ...] answered
        ready: dict[tuple[int, int], list[tuple[int, int]]] = collections.defaultdict(list)
        for r in requests:
            ready[r.actor_idx, r.gen].append((r.split_idx, r.seq))
        for (actor_idx, gen), splits in ready.items():
            self.channels.actor[actor_idx].put(ActionsReady.wire(splits, gen, self.policy_id, w))
        self.requests_served += len(requests)
        self.batches += 1

    def _agents(self, rows: list[int], cols: list[torch.Tensor]) -> torch.Tensor:
        """[N] each row's agent: its global column (actor, split, column)."""
        n = self.buffers.spec.agents_per_split
        return torch.cat([c + row * n for row, c in zip(rows, cols)])

    def _agent_rank(self, rows: list[int], cols: list[torch.Tensor]) -> torch.Tensor:
        """[N] each row's agent as a fraction of all agents."""
        return self._agents(rows, cols).float() / max(self.num_agents - 1, 1)

    def _write_answers(self, answers: dict[str, torch.Tensor], rows: list[int], cols: list[torch.Tensor]) -> None:
        """answers {name of an answer tensor [W, splits, n, ...]: values [N, ...]}: the values of request k go to its
        split row and columns of this worker's area. Where every request has all columns (a single policy), one
        numpy slice per request and tensor: advanced indexing over (row, column) pairs (repeat_interleave, then
        index_put per tensor) cost 50 of CartPole's 205 us per batch of inference."""
        w = self.answer_area
        if all(c is self.all_columns for c in cols):
            n = self.all_columns.numel()
            for name, values in answers.items():
                dtype = getattr(self.buffers, name).dtype  # a model's bf16 outputs, say: numpy has no bf16
                area, v = self.answer_np[name], values.to("cpu", dtype).numpy()
                for k, row in enumerate(rows):
                    area[row] = v[k * n : (k + 1) * n]
            return
        ri = torch.tensor(rows).repeat_interleave(torch.tensor([len(c) for c in cols]))  # [N]
        ci = torch.cat(cols)  # [N]
        for name, values in answers.items():
            area = getattr(self.buffers, name)
            area[w, ri, ci] = values.to("cpu", area.dtype)

    def _rows(
        self, v: torch.Tensor, requests: list[Request], cols: list[torch.Tensor], out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[N, ...] copy of the rows of a slot tensor v [S, T+1, n, ...] at each request's (slot, t) and columns, in
        request order, into `out` [N, ...] if given. A slice (or index_select) per request, then one cat: advanced
        indexing over (slot, t, column) copied Atari frames 15-17x slower (8 rows: 142 us against 9 us; 1 thread), a
        tenth of the policy worker's time. Always a copy: the model (a custom encoder, say) may change its input in
        place, and the learner reads these buffers."""
        parts = [
            v[r.slot, r.t] if c is self.all_columns else v[r.slot, r.t].index_select(0, c)
            for r, c in zip(requests, cols)
        ]
        return torch.cat(parts, out=out) if out is not None else torch.cat(parts)

    def _final_values(self, request: Request) -> None:
        """V(final observation) of this policy's agents whose episode was truncated at step t - 1 (value
        bootstrap), into the answer area; the actor copies exactly these columns into final_values[slot, t - 1]."""
        slot, t = request.slot, request.t
        b = self.buffers
        cols = self._columns(slot, t - 1, within=b.truncated[slot, t - 1])
        if not cols.numel():
            return
        split = request.actor_idx * self.num_splits + request.split_idx
        final_obs = {k: v[split, cols].to(self.device) for k, v in b.final_obs.items()}  # {key: [k, *shape]}
        h = b.rnn_states[slot, t, cols].to(self.device) if self.model.recurrent else None  # state before the reset
        b.answer_final_values[self.answer_area, split, cols] = self.algo_class.values(
            self.cfg, self.model, final_obs, h
        ).cpu()

    def on_idle(self) -> None:
        if self.batches >= 200:
            self.report("inference", (self.policy_id, self.requests_served, self.batches))
            self.requests_served = self.batches = 0
