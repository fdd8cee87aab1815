"""Actor worker: steps `num_envs_per_worker` envs split into `worker_num_splits` groups (double buffering: while
the policy workers compute actions for one split, this process steps another).

One env step of split s, in this file:
  ACTIONS_READY(s) arrives -> the answer is copied from the policy worker's answer area into the slot at [slot, t]
  (core state at t + 1; `_take_answer`) -> actions are read from buffers.actions[slot, t] -> EnvGroup.step
  (envs/env_group.py) -> rewards/dones/truncated written at [slot, t], next observations at obs[key][slot, t + 1] ->
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

import contextlib
import os
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import psutil

from sample_factory.algo.registry import algorithm_class
from sample_factory.config import Config, reproducible
from sample_factory.envs.env_group import EnvGroup, SplitEnvs
from sample_factory.envs.env_utils import env_backend, make_env
from sample_factory.experiment.callbacks import (
    Callbacks,
    EpisodeEnd,
    call_hook,
    episode_stats,
    hook_stats,
    make_callbacks,
    overrides,
)
from sample_factory.experiment.folder import experiment_dir
from sample_factory.runtime.component import Component
from sample_factory.runtime.messages import (
    ACTIONS_READY,
    FREE_SLOTS,
    RESEND,
    SET_REWARD_SHAPING,
    Channels,
    Message,
    Request,
    Rollout,
)
from sample_factory.runtime.reproducible import load_actor_state, save_actor_state
from sample_factory.runtime.shared_buffers import SharedWeights, SlotPool, TrajectoryBuffers
from sample_factory.workers.policy_mapping import PolicyMapping, checked_mapping, get_policy_mapping

# Position T of a finished slot that the next slot starts from: inputs (and the observation dict), and (async) the
# outputs already computed.
_CARRY_INPUTS = ("is_first",)
_CARRY_OUTPUTS = ("actions", "log_probs", "values", "policy_version", "policy_id")


@dataclass
class Split:
    """One split of an actor worker: its envs and where its rollout stands. A plain dataclass, so it pickles with
    the worker (serial-mode snapshots)."""

    index: int  # within the worker (request_seq[worker, index]; final_obs row worker * num_splits + index)
    group: SplitEnvs  # the envs, stepped together
    col_policy: np.ndarray  # [n] policy of every column (what policy_id[slot, t] gets at each request)
    slot: int | None = None  # the slot being filled; None while waiting for the learner to return one
    t: int = 0  # position in the slot of the latest request
    carry: dict | None = None  # position T of the finished slot, until the next slot starts from it
    request_time: float = 0.0  # when the outstanding request was sent; 0.0 while none is outstanding
    seq: int = 0  # number of the latest request (policy workers drop answered re-sends)
    last_request: tuple | None = None  # the latest request as sent (re-sent on RESEND)
    has_truncations: bool = False  # the latest request also asked for V(final obs) of steps truncated at t - 1
    wait_since: float = 0.0  # when it started waiting for a slot
    answers_due: set[int] = field(default_factory=set)  # policies yet to answer the latest request
    start_at: float = 0.0  # --decorrelate_experience_max_seconds: when the first request goes out; 0: sent
    rollouts: int = 0  # rollouts finished (sync mode: tags its sample reports)


class ActorWorker(Component):
    role = "actor"
    flushes_denormals = False  # the envs' own arithmetic, exactly (runtime/component.py::flush_denormals)
    # Set by `init` in the worker's own process (or restored with the envs' state):
    rng: np.random.Generator
    callbacks: Callbacks | None  # the user's hooks (--callbacks)
    # numpy views of the shared tensors (bind_views): {name: array}, {obs key: array}, {obs key: array}
    arrays: dict[str, np.ndarray]
    obs_arrays: dict[str, np.ndarray]
    final_obs_arrays: dict[str, np.ndarray]

    def __init__(
        self,
        cfg: Config,
        index: int,
        buffers: TrajectoryBuffers,
        channels: Channels,
        resumed: bool = False,
        weights: list[SharedWeights] | None = None,
        resume_point: tuple[tuple[int, ...], int] | None = None,
    ):
        """weights, resume_point: reproducible runs save the envs at the stop and restore them on resume
        (runtime/reproducible.py): the published weights (their versions at the stop), and the checkpoints' (policy
        versions, env frames of all policies) this run resumes from."""
        super().__init__(index, channels.actor[index], channels.report)
        self.gen = int(buffers.generation[index])  # > 0 when this worker replaces a crashed one
        # Random decorrelation steps only where the policy has not trained yet: a resumed run's (or a replacement
        # worker's) first episodes would start with random actions and fill the reward window with falls.
        self.decorrelate = cfg.decorrelate_envs_on_one_worker and not resumed and self.gen == 0
        self.cfg, self.buffers, self.channels = cfg, buffers, channels
        # never below the runner's niceness: lowering it needs privileges, and a user's `nice` stays in effect
        self.niceness = max(
            os.getpriority(os.PRIO_PROCESS, 0), min(cfg.default_niceness + cfg.actor_worker_niceness, 19)
        )
        self.rollout = cfg.rollout  # T: env steps per slot
        self.num_splits = cfg.worker_num_splits
        self.num_policies = cfg.num_policies
        self.recurrent = buffers.spec.rnn_size > 0
        # Sync mode: each split fills its own slots and reports its own samples, tagged, so that the learner's batch
        # and the runner's counts are the same whichever split finishes first (runtime/reproducible.py).
        self.sync = not cfg.async_rl
        self.tagged_reports = self.sync and not cfg.evaluation_run  # an evaluation counts episodes as they end
        # the envs' state saved at the stop, restored on resume (not by a replacement worker: it starts afresh)
        self.saves_state = reproducible(cfg) and not cfg.evaluation_run and not cfg.serial_mode and weights is not None
        self.weights, self.resume_point = weights, resume_point
        self.base_env_frames = resume_point[1] if resume_point else 0  # env frames trained before this session
        # Everything below is set up by `init`, in the worker's own process.
        self.pools: list[SlotPool] = []  # per split: one shared pool (async), or each split's own slots (sync)
        self.splits: list[Split] = []
        # draws each agent's policy where an env's agents play different policies; None: rotation per env
        self.mapping: PolicyMapping | None = None
        self.slot_holders: dict[int, int] = {}  # slot -> learners that still hold it
        self.shaping: dict[int, dict[str, float]] = {}  # PBT: reward-shaping coefficients per policy
        self.waiting: list[Split] = []  # splits parked until the learner returns a slot
        P = self.num_policies
        # per split, per policy, since the split's last progress report: agent steps, (return, length) of the finished
        # episodes, and {key: [value per episode]} from the final info (--episode_info_keys) and on_episode_end
        splits = range(self.num_splits)
        self.agent_steps = [[0] * P for _ in splits]
        self.episodes: list[list[list[tuple[float, int]]]] = [[[] for _ in range(P)] for _ in splits]
        self.episode_stats: list[list[dict[str, list[float]]]] = [[{} for _ in range(P)] for _ in splits]
        self.episode_hook = False  # on_episode_end is overridden
        # the algorithm's rank from which agents report the training return (DQN: the least-exploring third, see
        # _exploring_episodes); None: every agent does, as in evaluation runs
        self.reported_rank = None if cfg.evaluation_run else algorithm_class(cfg).reported_rank
        # per split, [n] bool: the column reports the training return (set in init where reported_rank is set)
        self.reported_columns: list[np.ndarray] | None = None

    def init(self) -> None:
        cfg = self.cfg
        if cfg.force_envs_single_thread and not cfg.serial_mode:
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        if cfg.set_workers_cpu_affinity and not cfg.serial_mode:
            cores = psutil.Process().cpu_affinity() or list(range(psutil.cpu_count()))
            psutil.Process().cpu_affinity([cores[self.index % len(cores)]])
        self.callbacks = make_callbacks(cfg)
        self.episode_hook = overrides(self.callbacks, "on_episode_end")
        self.bind_views()
        slots = self.buffers.slots_of_worker(self.index)
        if self.sync:
            k = len(slots) // self.num_splits
            self.pools = [SlotPool(slots[s * k : (s + 1) * k]) for s in range(self.num_splits)]
        else:
            self.pools = [SlotPool(slots)] * self.num_splits
        base_seed = None if cfg.seed is None else cfg.seed * 1000 + cfg.env_seed_offset
        self.rng = np.random.default_rng(None if base_seed is None else base_seed + self.index)
        # Envs start one by one (a VizDoom engine takes a second or more, on its first reset): a STOP that arrives
        # meanwhile ends start-up between two of them (raise_if_stopped), and `finish` closes the splits made.
        if self._restore_state():
            return
        for s in range(self.num_splits):
            group = self._make_group(s, base_seed)
            self.splits.append(Split(s, group, np.zeros(group.n, dtype=np.int64)))
        num_agents = self.splits[0].group.num_agents
        # Agents of one env drawn separately (a registered mapping, or random mixing), or an env's agents together
        # passing to the next policy at each episode start.
        mix = self.num_policies > 1 and num_agents > 1 and cfg.pbt_mix_policies_in_one_env
        self.mapping = get_policy_mapping(cfg.policy_mapping) if (mix or cfg.policy_mapping) else None
        if self.reported_rank is not None:
            self.reported_columns = [self._least_exploring(s.index, s.group.n) for s in self.splits]
        for split, delay in zip(self.splits, self._decorrelation_delays(), strict=True):
            self.raise_if_stopped()
            self._start_split(split, delay)
        self.activity = "stepping envs" if not any(s.start_at for s in self.splits) else "decorrelating experience"

    def _restore_state(self) -> bool:
        """A resumed reproducible run: the splits (envs included) and random state saved at the stop, if they
        belong to the checkpoints resumed; every split then starts the next iteration where the stopped run would
        have. False: fresh envs (with a note saying why, where a state was saved)."""
        if not self.saves_state or self.resume_point is None or self.gen > 0:
            return False
        state, why = load_actor_state(experiment_dir(self.cfg), self.index, self.cfg, self.resume_point)
        if state is None:
            if not why.startswith("no "):
                self.report("note", f"envs start afresh, the run will not match an uninterrupted one: {why}")
            return False
        self.splits, self.rng, self.shaping = state["splits"], state["rng"], state["shaping"]
        num_agents = self.splits[0].group.num_agents
        mix = self.num_policies > 1 and num_agents > 1 and self.cfg.pbt_mix_policies_in_one_env
        self.mapping = get_policy_mapping(self.cfg.policy_mapping) if (mix or self.cfg.policy_mapping) else None
        if self.reported_rank is not None:
            self.reported_columns = [self._least_exploring(s.index, s.group.n) for s in self.splits]
        for split in self.splits:
            split.rollouts = 0  # report tags count this session's iterations
            self._continue_in_new_slot(split)
        self.activity = "stepping envs"
        return True

    def _save_state(self) -> None:
        """At the stop of a reproducible run, if every split is parked at the end of the same iteration (the
        learners keep the last iteration's slots): the splits and random state, for an exact resume."""
        rollouts = {s.rollouts for s in self.splits}
        if len(self.waiting) != self.num_splits or len(rollouts) != 1 or any(s.start_at for s in self.splits):
            return
        spec = self.buffers.spec
        iteration_frames = spec.num_slots * spec.samples_per_slot * self.cfg.frames_per_env_step  # all policies
        env_frames = self.base_env_frames + rollouts.pop() // spec.slots_per_split * iteration_frames
        assert self.weights is not None  # saves_state: a run with published weights
        point = (tuple(w.version for w in self.weights), env_frames)
        state = {"splits": self.splits, "rng": self.rng, "shaping": self.shaping}
        try:
            save_actor_state(experiment_dir(self.cfg), self.index, self.cfg, point, state)
        except Exception as e:  # noqa: BLE001 - envs that do not pickle (EnvPool, engines): a resume starts afresh
            self.report("note", f"envs not saved for an exact resume ({type(e).__name__}: {str(e)[:200]})")

    def _decorrelation_delays(self) -> list[float]:
        """Seconds each split waits before its first request, uniform in [0, --decorrelate_experience_max_seconds]
        (the workers' first rollouts then do not all finish at once). No delay in serial mode (it would only stall
        the one thread) nor for a replacement worker (the others are already spread out)."""
        max_s = self.cfg.decorrelate_experience_max_seconds
        if max_s <= 0 or self.cfg.serial_mode or self.gen > 0:
            return [0.0] * self.num_splits
        return [float(x) for x in self.rng.uniform(0.0, max_s, self.num_splits)]

    def _least_exploring(self, split_idx: int, n: int) -> np.ndarray:
        """[n] bool: columns of the split whose global agent index i (as the policy workers number agents)
        has rank i / (N - 1) >= reported_rank (DQN: the smallest Ape-X epsilons); every column when there is one
        agent."""
        assert self.reported_rank is not None and self.cfg.num_workers is not None, "parse_cfg resolves --num_workers"
        total = self.cfg.num_workers * self.num_splits * n
        agents = (self.index * self.num_splits + split_idx) * n + np.arange(n)
        return agents / max(total - 1, 1) >= self.reported_rank if total > 1 else np.ones(n, dtype=bool)

    def _make_group(self, s: int, base_seed: int | None) -> SplitEnvs:
        """The envs of split s: env ids (global, also the seed offsets) are consecutive per split."""
        cfg, n = self.cfg, self.cfg.num_envs_per_worker // self.num_splits
        first = (self.index * self.num_splits + s) * n
        ids = list(range(first, first + n))
        backend = env_backend(cfg)
        self.raise_if_stopped()  # also where a batched backend below starts all of its envs in one call
        if backend == "envpool":
            from sample_factory.envs.envpool_group import make_envpool_group

            return make_envpool_group(cfg, n, base_seed, ids)  # it adds each env id itself
        if backend == "gymnasium_vector":
            from sample_factory.envs.vector_group import make_vector_group

            return make_vector_group(cfg, n, base_seed, ids)
        envs: list[gym.Env] = []
        seeds: list[int | None] = []
        try:
            for env_idx in ids:
                if envs:
                    self.raise_if_stopped()
                envs.append(make_env(cfg, {"worker_index": self.index, "split": s, "env_index": env_idx}))
                seeds.append(None if base_seed is None else base_seed + env_idx)
                if base_seed is not None:
                    envs[-1].action_space.seed(base_seed + env_idx)
            return EnvGroup(envs, seeds, env_ids=ids, action_bounds=cfg.action_bounds)
        except BaseException:
            for env in envs:  # a group that is not made is not closed by `finish`
                with contextlib.suppress(Exception):  # the error that stopped start-up is the one to report
                    env.close()
            raise

    _view_attrs = ("arrays", "obs_arrays", "final_obs_arrays")

    def bind_views(self) -> None:
        self.arrays = {k: v.numpy() for k, v in self.buffers.tensors().items()}
        self.obs_arrays = {k: v.numpy() for k, v in self.buffers.obs.items()}
        self.final_obs_arrays = {k: v.numpy() for k, v in self.buffers.final_obs.items()}

    def _start_split(self, split: Split, delay: float = 0.0) -> None:
        group = split.group
        # Start-up: STOP is read between two envs here too (a VizDoom env starts its engine on its first reset).
        group.reset(between=self.raise_if_stopped)
        if self.decorrelate:
            counts = [int(self.rng.integers(0, 2 * self.rollout)) for _ in range(group.num_envs)]
            group.random_steps(counts, between=self.raise_if_stopped)
        slot = self.pools[split.index].acquire()
        assert slot is not None, "a fresh worker always has a slot per split"
        split.slot, split.t = slot, 0
        if self.num_policies > 1:
            for i in range(group.num_envs):
                self._draw_policies(split, i, first=True)
        for k, v in group.obs.items():
            self.obs_arrays[k][slot, 0] = v
        self.arrays["is_first"][slot, 0] = True
        self.arrays["rnn_states"][slot, 0] = 0.0
        if delay > 0:
            split.start_at = time.monotonic() + delay  # on_idle sends the first request then
        else:
            self._request(split, has_truncations=False)

    def _draw_policies(self, split: Split, env: int, first: bool = False) -> None:
        """The policies of the agents of env `env` of the split for the episode it starts."""
        group, P = split.group, self.num_policies
        A = group.num_agents
        cols = slice(env * A, (env + 1) * A)
        ids: np.ndarray | int
        if self.mapping is not None:
            ids = checked_mapping(self.mapping(group.env_ids[env], A, P, self.rng), A, P)
        else:  # rotation: envs start spread over the policies
            ids = group.env_ids[env] % P if first else (split.col_policy[env * A] + 1) % P
        split.col_policy[cols] = ids
        self._apply_shaping(split, env)

    def _apply_shaping(self, split: Split, env: int | None = None) -> None:
        """Give the envs of the split (or only env `env`) the reward shaping of the policies controlling them."""
        if not self.shaping:
            return
        group = split.group
        assert isinstance(group, EnvGroup), "reward shaping is set on env objects; a batched env has none"
        A = group.num_agents
        for i in range(group.num_envs) if env is None else (env,):
            setter = group.envs[i].get_wrapper_attr("set_reward_shaping")
            for a in range(A):
                p = int(split.col_policy[i * A + a])
                if p in self.shaping:
                    setter(self.shaping[p], a)

    def _request(self, split: Split, has_truncations: bool) -> None:
        slot, t, arrays = split.slot, split.t, self.arrays
        assert slot is not None, "a request for a split between two slots"
        split.request_time = time.monotonic()
        split.seq += 1
        arrays["request_seq"][self.index, split.index] = split.seq
        pol = split.col_policy
        arrays["policy_id"][slot, t] = pol
        if self.num_policies == 1:
            due = {0}
        else:
            due = set(np.unique(pol).tolist())
            if has_truncations:  # V(final obs) is computed by the policy that acted at t - 1
                acted = arrays["policy_id"][slot, t - 1][arrays["truncated"][slot, t - 1]]
                due.update(np.unique(acted).tolist())
        msg = Request.wire(self.index, split.index, slot, t, has_truncations, self.gen, split.seq)
        split.last_request = msg
        split.has_truncations = has_truncations
        split.answers_due = due
        for p in due:
            self.channels.policy[p].put(msg)

    def on_message(self, msg: Message) -> None:
        if msg.kind in (ACTIONS_READY, FREE_SLOTS) and msg.gen != self.gen:
            return  # addressed to the crashed worker this one replaced
        if msg.kind == ACTIONS_READY:
            for s, seq in msg.splits:
                split = self.splits[s]
                # A re-sent request may be answered twice: the first answer of each policy is taken, once.
                if seq == split.seq and split.request_time and msg.policy_id in split.answers_due:
                    self._take_answer(split, msg.policy_id, msg.worker)
                    split.answers_due.discard(msg.policy_id)
                    if not split.answers_due:
                        self._advance(split)
        elif msg.kind == FREE_SLOTS:
            returned = []
            for slot in msg.slots:
                self.slot_holders[slot] -= 1
                if self.slot_holders[slot] == 0:
                    del self.slot_holders[slot]
                    returned.append(slot)
            returned.sort()  # a split takes its free slots lowest first, however the learners returned them
            for pool in self.pools[: 1 if not self.sync else None]:
                pool.release([slot for slot in returned if slot in pool.owned])
            for split in list(self.waiting):
                if self.pools[split.index].free:
                    self.waiting.remove(split)
                    self._continue_in_new_slot(split)
        elif msg.kind == SET_REWARD_SHAPING:
            self.shaping[msg.policy_id] = msg.coefficients
            for split in self.splits:
                self._apply_shaping(split)
        elif msg.kind == RESEND:
            # A policy worker was restarted: requests it had taken are lost. Old ones are sent again.
            now = time.monotonic()
            for split in self.splits:
                if split.request_time and now - split.request_time > 0.2:
                    for p in split.answers_due:
                        self.channels.policy[p].put(split.last_request)
                    split.request_time = now  # the replacement policy worker gets a full timeout
        else:
            raise RuntimeError(f"actor {self.index}: unexpected message {msg!r}")

    def _take_answer(self, split: Split, policy: int, worker: int) -> None:
        """Copy the answer of `policy` to the split's current request from the answer area of policy worker
        `worker` into the slot: its columns' actions, log-probs, values and versions at [slot, t], core states at
        [slot, t + 1], and V(final obs) at [slot, t - 1] where its agents' episodes were truncated. Only this
        process writes these slot positions, and only here, so a late answer can never replace a step's data."""
        a, slot, t = self.arrays, split.slot, split.t
        row = self.index * self.num_splits + split.index
        cols = slice(None) if self.num_policies == 1 else np.flatnonzero(a["policy_id"][slot, t] == policy)
        a["actions"][slot, t, cols] = a["answer_actions"][worker, row, cols]
        a["log_probs"][slot, t, cols] = a["answer_log_probs"][worker, row, cols]
        a["values"][slot, t, cols] = a["answer_values"][worker, row, cols]
        a["policy_version"][slot, t, cols] = a["answer_version"][worker, row]
        if self.recurrent:
            a["rnn_states"][slot, t + 1, cols] = a["answer_rnn_states"][worker, row, cols]
        if split.has_truncations:
            truncated = a["truncated"][slot, t - 1]  # [n]
            if self.num_policies > 1:
                truncated = truncated & (a["policy_id"][slot, t - 1] == policy)
            a["final_values"][slot, t - 1, truncated] = a["answer_final_values"][worker, row, truncated]

    def _advance(self, split: Split) -> None:
        split.request_time = 0.0
        if split.t == self.rollout:
            self._finish_rollout(split)
        else:
            self._step_envs(split)

    def _step_envs(self, split: Split) -> None:
        slot, t, group, arrays = split.slot, split.t, split.group, self.arrays
        with self.timing.add("env_step"):
            finished = group.step(arrays["actions"][slot, t])
        arrays["rewards"][slot, t] = group.rewards
        arrays["dones"][slot, t] = group.dones
        arrays["truncated"][slot, t] = group.truncated
        for k, v in group.obs.items():
            self.obs_arrays[k][slot, t + 1] = v
        arrays["is_first"][slot, t + 1] = group.first
        arrays["active"][slot, t] = group.active
        has_truncations = bool(group.truncated.any())
        if has_truncations:
            row = self.index * self.num_splits + split.index
            for k, v in group.final_obs.items():
                self.final_obs_arrays[k][row] = v
        pol = split.col_policy  # the policies that acted in this step
        if finished:
            self._episode_stats(split, finished)
        if self.reported_columns is not None and finished:
            finished = self._exploring_episodes(split, finished, self.reported_columns[split.index])
        agent_steps, episodes = self.agent_steps[split.index], self.episodes[split.index]
        if self.num_policies == 1:
            agent_steps[0] += group.n
            episodes[0].extend(finished)
        else:
            for p, count in enumerate(np.bincount(pol, minlength=self.num_policies)):
                agent_steps[p] += int(count)
            for episode, col in zip(finished, group.finished_columns, strict=True):
                if episode is not None:
                    episodes[pol[col]].append(episode)
            for i in np.flatnonzero(group.env_reset):
                self._draw_policies(split, int(i))
        split.t = t + 1
        self._request(split, has_truncations)

    def _exploring_episodes(self, split: Split, finished: list[tuple[float, int]], reported: np.ndarray) -> list:
        """DQN (Ape-X): only the least-exploring third of the agents report the training return (as RLlib does);
        the others' returns go to the episode statistics as exploring_return. With several policies, excluded
        episodes stay in the list as None (it is matched with the finished columns)."""
        kept: list = []
        for episode, col in zip(finished, split.group.finished_columns, strict=True):
            if reported[col]:
                kept.append(episode)
            else:
                p = int(split.col_policy[col])
                self.episode_stats[split.index][p].setdefault("exploring_return", []).append(episode[0])
                if self.num_policies > 1:
                    kept.append(None)
        return kept

    def _episode_stats(self, split: Split, finished: list[tuple[float, int]]) -> None:
        """Numbers from the final infos of the episodes that just ended (and the user's on_episode_end)."""
        group, keys = split.group, self.cfg.episode_info_keys
        for (ret, length), col, info in zip(finished, group.finished_columns, group.finished_infos, strict=True):
            stats = episode_stats(info, keys) if info else {}
            p = int(split.col_policy[col])
            if self.episode_hook:
                A = group.num_agents
                episode = EpisodeEnd(self.index, group.env_ids[col // A], col % A, p, ret, length, info)
                stats.update(hook_stats(call_hook(self.callbacks, "on_episode_end", episode), "on_episode_end"))
            for k, v in stats.items():
                self.episode_stats[split.index][p].setdefault(k, []).append(v)

    def _finish_rollout(self, split: Split) -> None:
        slot, T = split.slot, self.rollout
        assert slot is not None
        # Keep position T before the slot leaves: the learner may return it and it may be reused at once.
        carry = {k: getattr(self.buffers, k)[slot, T].clone() for k in (*_CARRY_INPUTS, *_CARRY_OUTPUTS)}
        carry["obs"] = {k: v[slot, T].clone() for k, v in self.buffers.obs.items()}
        carry["rnn_in"] = self.buffers.rnn_states[slot, T].clone()
        carry["rnn_out"] = self.buffers.rnn_states[slot, T + 1].clone()
        split.carry = carry
        # the learners of every policy that acted at positions 0..T-1 (T only bootstraps)
        # (sync mode: every learner, so each knows when it has the whole iteration)
        if self.num_policies == 1:
            holders = [0]
        elif self.sync:
            holders = list(range(self.num_policies))
        else:
            holders = np.unique(self.arrays["policy_id"][slot, :T]).tolist()
        self.slot_holders[slot] = len(holders)
        for p in holders:
            self.channels.learner[p].put(Rollout.wire(self.index, slot, self.gen))
        split.rollouts += 1
        self._report_progress(split)
        split.slot = None
        if self.pools[split.index].free:
            self._continue_in_new_slot(split)
        else:
            split.wait_since = time.monotonic()
            self.waiting.append(split)
            self.activity = "waiting for a trajectory buffer"

    def _continue_in_new_slot(self, split: Split) -> None:
        slot = self.pools[split.index].acquire()
        carry, buf = split.carry, self.buffers
        assert carry is not None, "a new slot continues where a finished one left"
        split.slot, split.t, split.carry = slot, 0, None
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
            self._step_envs(split)
        else:
            # Synchronous PPO: act on position 0 again with the weights trained on the previous batch.
            self._request(split, has_truncations=False)

    def on_idle(self) -> None:
        now = time.monotonic()
        for split in self.splits:
            if split.start_at and now >= split.start_at:
                split.start_at = 0.0
                self._request(split, has_truncations=False)
                if not any(s.start_at for s in self.splits):
                    self.activity = "stepping envs"
        limit = self.cfg.heartbeat_timeout_sec
        # Longer than the runner's detection of a hung policy worker (limit) plus its restart, so a policy-worker
        # hang costs one restart, not one per actor waiting on it.
        actions_limit = 2 * limit
        for split in self.splits:
            if split.request_time and now - split.request_time > actions_limit:
                raise RuntimeError(f"split {split.index}: no actions from the policy workers for {actions_limit:.0f} s")
        # A learner that is working (SGD steps, a long checkpoint write) keeps its slots legitimately: DQN's
        # --training_intensity makes actors wait for it by design. Only waiting on an idle or silent learner is a
        # fault (a lost slot; a hung learner also stops the run from the runner's side).
        learner_busy_for = now - float(self.arrays["learner_busy"].max())
        for split in self.waiting:
            if now - split.wait_since > limit and learner_busy_for > limit:
                raise RuntimeError(
                    f"split {split.index}: no trajectory buffer returned by the learner for {limit:.0f} s"
                )

    def _report_progress(self, split: Split) -> None:
        """Sent once per finished rollout of the split (not on a timer), so serial runs stop at the same point every
        time. Sync mode: one report per rollout, tagged (split, rollout number), which the runner counts one whole
        iteration at a time (experiment/progress.py::IterationSamples)."""
        s = split.index
        agent_steps, episodes, stats = self.agent_steps[s], self.episodes[s], self.episode_stats[s]
        reports = []
        for p in range(self.num_policies):
            if agent_steps[p] or episodes[p]:
                env_frames = agent_steps[p] * self.cfg.frames_per_env_step
                reports.append((p, env_frames, episodes[p], stats[p]))
                agent_steps[p], episodes[p], stats[p] = 0, [], {}
        if self.tagged_reports and split.slot is not None:
            self.report("split_samples", (s, split.rollouts - 1, reports))
        else:
            for r in reports:
                self.report("samples", r)

    def finish(self) -> None:
        if self.saves_state and self.initialized and self.gen == 0:
            self._save_state()
        if not self.tagged_reports:  # sync: what the splits collected since their last rollout is trained on by no one
            for split in self.splits:
                self._report_progress(split)
        for split in self.splits:
            split.group.close()
