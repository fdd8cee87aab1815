"""Actor worker: steps `num_envs_per_worker` envs split into `worker_num_splits` groups (double buffering: while
the policy workers compute actions for one split, this process steps another).

One env step of split s, in this file:
  ACTIONS_READY(s) arrives -> actions are read from buffers.actions[slot, t] -> EnvGroup.step (envs/env_group.py) ->
  rewards/dones/truncated written at [slot, t], next observations at obs[key][slot, t + 1] ->
  REQUEST(slot, t + 1) to the policy workers.
At t + 1 == T the request asks for the bootstrap position of the rollout; when it is served the slot goes to the
learner (ROLLOUT) and the split continues in a fresh slot from this worker's pool, or waits for FREE_SLOTS.

Several policies (--num_policies): every column (agent) has a policy, recorded per step in buffers.policy_id and
chosen when its env starts an episode, so every episode is played and credited by one policy: an env passes to the
next policy at each episode start (fair shares), or in multi-agent envs with --pbt_mix_policies_in_one_env each
agent's policy is drawn (policy_mapping.py). A request goes to every policy present in the split, and the finished
slot to every learner whose policy acted in it (it comes back to the pool when all of them returned it); each
learner copies out only the columns its policy acted in.
"""

from __future__ import annotations

import time

import numpy as np
import psutil

from sample_factory.config import Config
from sample_factory.envs.env_group import EnvGroup
from sample_factory.envs.env_utils import make_env
from sample_factory.runtime.component import Component
from sample_factory.runtime.messages import (
    ACTIONS_READY,
    FREE_SLOTS,
    REQUEST,
    RESEND,
    ROLLOUT,
    SET_REWARD_SHAPING,
    Channels,
)
from sample_factory.runtime.shared_buffers import SlotPool, TrajectoryBuffers
from sample_factory.workers.policy_mapping import checked_mapping, get_policy_mapping

# Position T of a finished slot that the next slot starts from: inputs (and the observation dict), and (async) the
# outputs already computed.
_CARRY_INPUTS = ("is_first",)
_CARRY_OUTPUTS = ("actions", "log_probs", "values", "policy_version", "policy_id")


class ActorWorker(Component):
    role = "actor"

    def __init__(self, cfg: Config, index: int, buffers: TrajectoryBuffers, channels: Channels):
        super().__init__(index, channels.actor[index], channels.report)
        self.gen = int(buffers.generation[index])  # > 0 when this worker replaces a crashed one
        self.cfg, self.buffers, self.channels = cfg, buffers, channels
        self.T = cfg.rollout
        self.num_splits = cfg.worker_num_splits

    def init(self) -> None:
        cfg = self.cfg
        if cfg.force_envs_single_thread and not cfg.serial_mode:
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        if cfg.set_workers_cpu_affinity and not cfg.serial_mode:
            cores = psutil.Process().cpu_affinity() or list(range(psutil.cpu_count()))
            psutil.Process().cpu_affinity([cores[self.index % len(cores)]])
        self.bind_views()
        self.pool = SlotPool(self.buffers.slots_of_worker(self.index))
        base_seed = None if cfg.seed is None else cfg.seed * 1000 + cfg.env_seed_offset
        self.rng = np.random.default_rng(None if base_seed is None else base_seed + self.index)
        self.groups = [self._make_group(s, base_seed) for s in range(self.num_splits)]
        self.P = cfg.num_policies
        num_agents = self.groups[0].num_agents
        # Agents of one env drawn separately (a registered mapping, or random mixing), or an env's agents together
        # passing to the next policy at each episode start.
        mix = self.P > 1 and num_agents > 1 and cfg.pbt_mix_policies_in_one_env
        self.mapping = get_policy_mapping(cfg.policy_mapping) if (mix or cfg.policy_mapping) else None
        # [n] policy of every column of split s (what policy_id[slot, t] gets at each request)
        self.col_policy = [np.zeros(self.groups[s].n, dtype=np.int64) for s in range(self.num_splits)]
        self.answers_due: list[set[int]] = [set() for _ in range(self.num_splits)]  # policies yet to answer
        self.slot_holders: dict[int, int] = {}  # slot -> learners that still hold it
        self.shaping: dict[int, dict[str, float]] = {}  # PBT: reward-shaping coefficients per policy
        self.slot: list[int | None] = [None] * self.num_splits
        self.t = [0] * self.num_splits
        self.carry: list[dict | None] = [None] * self.num_splits
        self.waiting: list[int] = []  # splits parked until the learner returns a slot
        self.request_time = [0.0] * self.num_splits
        self.seq = [0] * self.num_splits
        self.last_request: list[tuple | None] = [None] * self.num_splits
        self.wait_since = [0.0] * self.num_splits
        self.env_steps = [0] * self.cfg.num_policies
        self.episodes: list[list[tuple[float, int]]] = [[] for _ in range(self.cfg.num_policies)]
        for s in range(self.num_splits):
            self._start_split(s)
        self.activity = "stepping envs"

    def _make_group(self, s: int, base_seed: int | None) -> EnvGroup:
        """The envs of split s: env ids (global, also the seed offsets) are consecutive per split."""
        cfg, n = self.cfg, self.cfg.num_envs_per_worker // self.num_splits
        first = (self.index * self.num_splits + s) * n
        ids = list(range(first, first + n))
        if cfg.env_backend == "envpool":
            from sample_factory.envs.envpool_group import make_envpool_group

            return make_envpool_group(cfg, n, None if base_seed is None else base_seed + first, ids)
        envs, seeds = [], []
        for env_idx in ids:
            envs.append(make_env(cfg, {"worker_index": self.index, "split": s, "env_index": env_idx}))
            seeds.append(None if base_seed is None else base_seed + env_idx)
            if base_seed is not None:
                envs[-1].action_space.seed(base_seed + env_idx)
        return EnvGroup(envs, seeds, env_ids=ids, action_bounds=cfg.action_bounds)

    _view_attrs = ("np", "np_obs", "np_final_obs")

    def bind_views(self) -> None:
        # numpy views of the shared tensors
        self.np = {k: v.numpy() for k, v in self.buffers.tensors().items()}
        self.np_obs = {k: v.numpy() for k, v in self.buffers.obs.items()}
        self.np_final_obs = {k: v.numpy() for k, v in self.buffers.final_obs.items()}

    def _start_split(self, s: int) -> None:
        group = self.groups[s]
        group.reset()
        if self.cfg.decorrelate_envs_on_one_worker:
            group.random_steps([int(self.rng.integers(0, 2 * self.T)) for _ in range(group.num_envs)])
        slot = self.pool.acquire()
        assert slot is not None, "a fresh worker always has a slot per split"
        self.slot[s], self.t[s] = slot, 0
        if self.P > 1:
            for i in range(group.num_envs):
                self._draw_policies(s, i, first=True)
        for k, v in group.obs.items():
            self.np_obs[k][slot, 0] = v
        self.np["is_first"][slot, 0] = True
        self.np["rnn_states"][slot, 0] = 0.0
        self._request(s, has_truncations=False)

    def _draw_policies(self, s: int, env: int, first: bool = False) -> None:
        """The policies of the agents of env `env` of split s for the episode it starts."""
        A, group = self.groups[s].num_agents, self.groups[s]
        cols = slice(env * A, (env + 1) * A)
        if self.mapping is not None:
            ids = checked_mapping(self.mapping(group.env_ids[env], A, self.P, self.rng), A, self.P)
        else:  # rotation: envs start spread over the policies
            ids = group.env_ids[env] % self.P if first else (self.col_policy[s][env * A] + 1) % self.P
        self.col_policy[s][cols] = ids
        self._apply_shaping(s, env)

    def _apply_shaping(self, s: int, env: int | None = None) -> None:
        """Give the envs of split s (or only env `env`) the reward shaping of the policies controlling them."""
        if not self.shaping:
            return
        group = self.groups[s]
        A = group.num_agents
        for i in range(group.num_envs) if env is None else (env,):
            setter = group.envs[i].get_wrapper_attr("set_reward_shaping")
            for a in range(A):
                p = int(self.col_policy[s][i * A + a])
                if p in self.shaping:
                    setter(self.shaping[p], a)

    def _request(self, s: int, has_truncations: bool) -> None:
        slot, t = self.slot[s], self.t[s]
        self.request_time[s] = time.monotonic()
        self.seq[s] += 1
        self.np["request_seq"][self.index, s] = self.seq[s]
        pol = self.col_policy[s]
        self.np["policy_id"][slot, t] = pol
        if self.P == 1:
            due = {0}
        else:
            due = set(np.unique(pol).tolist())
            if has_truncations:  # V(final obs) is computed by the policy that acted at t - 1
                b = self.np
                due.update(np.unique(b["policy_id"][slot, t - 1][b["truncated"][slot, t - 1]]).tolist())
        msg = (REQUEST, self.index, s, slot, t, has_truncations, self.gen, self.seq[s])
        self.last_request[s] = msg
        self.answers_due[s] = due
        for p in due:
            self.channels.policy[p].put(msg)

    def on_message(self, msg: tuple) -> None:
        kind = msg[0]
        if kind in (ACTIONS_READY, FREE_SLOTS) and msg[2] != self.gen:
            return  # addressed to the crashed worker this one replaced
        if kind == ACTIONS_READY:
            policy = msg[3]
            for s, seq in msg[1]:
                if seq == self.seq[s] and self.request_time[s]:  # a re-sent request may be answered twice
                    self.answers_due[s].discard(policy)
                    if not self.answers_due[s]:
                        self._advance(s)
        elif kind == FREE_SLOTS:
            returned = []
            for slot in msg[1]:
                self.slot_holders[slot] -= 1
                if self.slot_holders[slot] == 0:
                    del self.slot_holders[slot]
                    returned.append(slot)
            self.pool.release(returned)
            while self.waiting and self.pool.free:
                self._continue_in_new_slot(self.waiting.pop(0))
        elif kind == SET_REWARD_SHAPING:
            self.shaping[msg[1]] = msg[2]
            if hasattr(self, "groups"):
                for s in range(self.num_splits):
                    self._apply_shaping(s)
        elif kind == RESEND:
            # A policy worker was restarted: requests it had taken are lost. Old ones are sent again.
            now = time.monotonic()
            for s, msg_s in enumerate(self.last_request):
                if self.request_time[s] and now - self.request_time[s] > 0.2:
                    for p in self.answers_due[s]:
                        self.channels.policy[p].put(msg_s)
                    self.request_time[s] = now  # the replacement policy worker gets a full timeout
        else:
            raise RuntimeError(f"actor {self.index}: unexpected message {msg!r}")

    def _advance(self, s: int) -> None:
        self.request_time[s] = 0.0
        if self.t[s] == self.T:
            self._finish_rollout(s)
        else:
            self._step_envs(s)

    def _step_envs(self, s: int) -> None:
        slot, t, group, b = self.slot[s], self.t[s], self.groups[s], self.np
        with self.timing.add("env_step"):
            finished = group.step(b["actions"][slot, t])
        b["rewards"][slot, t] = group.rewards
        b["dones"][slot, t] = group.dones
        b["truncated"][slot, t] = group.truncated
        for k, v in group.obs.items():
            self.np_obs[k][slot, t + 1] = v
        b["is_first"][slot, t + 1] = group.first
        b["active"][slot, t] = group.active
        has_truncations = bool(group.truncated.any())
        if has_truncations:
            split = self.index * self.num_splits + s
            for k, v in group.final_obs.items():
                self.np_final_obs[k][split] = v
        pol = self.col_policy[s]  # the policies that acted in this step
        if self.P == 1:
            self.env_steps[0] += group.n
            self.episodes[0].extend(finished)
        else:
            for p, count in enumerate(np.bincount(pol, minlength=self.P)):
                self.env_steps[p] += int(count)
            for episode, col in zip(finished, group.finished_columns, strict=True):
                self.episodes[pol[col]].append(episode)
            for i in np.flatnonzero(group.env_reset):
                self._draw_policies(s, int(i))
        self.t[s] = t + 1
        self._request(s, has_truncations)

    def _finish_rollout(self, s: int) -> None:
        slot, T = self.slot[s], self.T
        # Keep position T before the slot leaves: the learner may return it and it may be reused at once.
        carry = {k: getattr(self.buffers, k)[slot, T].clone() for k in (*_CARRY_INPUTS, *_CARRY_OUTPUTS)}
        carry["obs"] = {k: v[slot, T].clone() for k, v in self.buffers.obs.items()}
        carry["rnn_in"] = self.buffers.rnn_states[slot, T].clone()
        carry["rnn_out"] = self.buffers.rnn_states[slot, T + 1].clone()
        self.carry[s] = carry
        # the learners of every policy that acted at positions 0..T-1 (T only bootstraps)
        holders = [0] if self.P == 1 else np.unique(self.np["policy_id"][slot, :T]).tolist()
        self.slot_holders[slot] = len(holders)
        for p in holders:
            self.channels.learner[p].put((ROLLOUT, self.index, slot, self.gen))
        self._report_progress()
        self.slot[s] = None
        if self.pool.free:
            self._continue_in_new_slot(s)
        else:
            self.wait_since[s] = time.monotonic()
            self.waiting.append(s)
            self.activity = "waiting for a trajectory buffer"

    def _continue_in_new_slot(self, s: int) -> None:
        slot = self.pool.acquire()
        carry, buf = self.carry[s], self.buffers
        self.slot[s], self.t[s], self.carry[s] = slot, 0, None
        for k in _CARRY_INPUTS:
            getattr(buf, k)[slot, 0] = carry[k]
        for k, v in carry["obs"].items():
            buf.obs[k][slot, 0] = v
        buf.rnn_states[slot, 0] = carry["rnn_in"]
        self.activity = "stepping envs"
        if self.cfg.async_rl:
            for k in _CARRY_OUTPUTS:
                getattr(buf, k)[slot, 0] = carry[k]
            buf.rnn_states[slot, 1] = carry["rnn_out"]
            self._step_envs(s)
        else:
            # Synchronous PPO: act on position 0 again with the weights trained on the previous batch.
            self._request(s, has_truncations=False)

    def on_idle(self) -> None:
        now = time.monotonic()
        limit = self.cfg.heartbeat_timeout_sec
        # Longer than the runner's detection of a hung policy worker (limit) plus its restart, so a policy-worker
        # hang costs one restart, not one per actor waiting on it.
        actions_limit = 2 * limit
        for s in range(self.num_splits):
            if self.request_time[s] and now - self.request_time[s] > actions_limit:
                raise RuntimeError(f"split {s}: no actions from the policy workers for {actions_limit:.0f} s")
        for s in self.waiting:
            if now - self.wait_since[s] > limit:
                raise RuntimeError(f"split {s}: no trajectory buffer returned by the learner for {limit:.0f} s")

    def _report_progress(self) -> None:
        """Sent once per finished rollout (not on a timer), so serial runs stop at the same point every time."""
        for p in range(self.cfg.num_policies):
            if self.env_steps[p] or self.episodes[p]:
                self.report("samples", (p, self.env_steps[p], self.episodes[p]))
                self.env_steps[p], self.episodes[p] = 0, []

    def finish(self) -> None:
        if hasattr(self, "groups"):
            self._report_progress()
            for g in self.groups:
                g.close()
