#!/usr/bin/env bash
# The whole GPU check of issue 31, prepared to run on a lent GPU machine (16 cores, one H100/H200, no network):
#
#   here, once:   bash benchmarks/gpu_wheels.sh        (wheels into the ignored folder .whl/)
#   there:        bash benchmarks/gpu_check.sh quick    (~2 min: CUDA tests, learner loop, inference)
#                 bash benchmarks/gpu_check.sh full     (~8 min: ceiling, Pong time to +18, SF2 side by side)
#                 bash benchmarks/gpu_check.sh scores   (~8 min: Ape-X DQN on Pong for DQN_SECONDS=420 s; with
#                                                                   APPO_SECONDS=170 also APPO Pong to +18 (then set
#                                                                   DQN_SECONDS=280); curves kept as *_progress.csv)
#                 bash benchmarks/gpu_check.sh frames   (~7 min: the atari preset's Pong time to +18; frames/s vs the old one)
#
# with the device tool's `carry: [".whl"]`. Results go to $OUT (the device tool brings them back) or ./gpu_check_out.
# Each step has its own time limit and a failed step does not stop the others.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
OUT=${OUT:-$REPO/gpu_check_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=python3

# The atari preset's GPU setup before issue 50 (56e054f: Sample Factory 2's fast Atari setup), as flags on today's
OLD_GPU_SETUP="--async_rl=True --num_envs_per_worker=8 --rollout=32 --batch_size=1024 --num_batches_per_epoch=4 \
  --num_epochs=4 --nonlinearity=relu --learning_rate=2.5e-4 --lr_schedule=constant --with_vtrace=True \
  --ppo_clip_ratio=0.1 --ppo_clip_value=1.0 --value_loss_coeff=0.5 --max_grad_norm=0.5"

# Our package's dependencies that the GPU image lacks, from carried wheels, into a private folder; SF2's own stack
# goes elsewhere (benchmark_sf2 installs it) and never shares a PYTHONPATH with ours.
if [ -d .whl/ours ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_ours .whl/ours/*.whl \
    >"$OUT/pip_ours.log" 2>&1 || echo "pip install of .whl/ours failed (see pip_ours.log)"
fi
export PYTHONPATH=$REPO:/tmp/site_ours

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, say how it ended
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --signal=INT --kill-after=20 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc after $((SECONDS - t0)) s"
  tail -n 4 "$OUT/$name.log"
}

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
$PY -c "import torch, sys; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
nproc

case "${1:-quick}" in
quick)
  # the train.py command forks its fork server after parsing, which picks the atari preset's GPU values with
  # --device=auto: a CUDA runtime query there would leave every component unable to use CUDA (runtime/fork_server.py)
  step forked_fork_server_cuda 90 $PY -m sample_factory.train --env=atari_pong --num_workers=2 \
    --train_for_env_steps=40000 --train_dir=/tmp/gpu_check_td --experiment=forked_fork_server_cuda
  step cuda_tests 120 $PY -m pytest -q -p no:cacheprovider tests/algo/test_transfer.py tests/integration/test_cuda.py \
    tests/workers/test_batched_inference.py tests/workers/test_policy_worker.py -k "transfer or learner_loop or graph"
  for algo in APPO DQN; do
    step "learner_loop_$algo" 90 $PY -m benchmarks.benchmark_learner --loop --algo=$algo --device=cuda \
      --env=atari_pong --iterations=6 --threads=2
    tail -n 1 "$OUT/learner_loop_$algo.log" >>"$OUT/learner_loop.jsonl"
  done
  # CleanRL's / SF2's Atari work per sample: minibatches of 256 (the issue's ~15 ms a step in the loop, 3.0 isolated)
  step learner_loop_APPO_256 90 $PY -m benchmarks.benchmark_learner --loop --algo=APPO --device=cuda \
    --env=atari_pong --iterations=4 --threads=2 \
    --train_flags="--rollout=128 --batch_size=256 --num_batches_per_epoch=4 --num_epochs=4"
  tail -n 1 "$OUT/learner_loop_APPO_256.log" >>"$OUT/learner_loop.jsonl"
  # the SGD step's encoder through torch.compile, with CUDA graphs (reduce-overhead) and without
  for mode in reduce-overhead; do
    step "learner_loop_APPO_compiled_$mode" 150 $PY -m benchmarks.benchmark_learner --loop --algo=APPO \
      --device=cuda --env=atari_pong --iterations=6 --threads=2 \
      --train_flags="--torch_compile_learner=True --torch_compile_dynamo_mode=$mode"
    tail -n 1 "$OUT/learner_loop_APPO_compiled_$mode.log" >>"$OUT/learner_loop.jsonl"
  done
  step inference 90 $PY -m benchmarks.benchmark_learner --device=cuda --inference --rounds=20 \
    --inference_batches=16,64,128,256
  ;;
full)
  step raw_ceiling 40 $PY -c "
from sample_factory.tools.timed_run import raw_ceiling
import os
n = os.cpu_count()
print(f'raw ceiling, {n} processes, random actions: {raw_ceiling(\"atari_pong\", n, 20.0) * 4:,.0f} frames/s')"
  step time_to_score 270 $PY -m benchmarks.time_to_score --tasks=pong --max_seconds=230 \
    --output="$OUT/time_to_score.md"
  if [ -d .whl/sf2 ]; then
    # SF2's clock starts at its first trained frames (after its ~40 s start-up); it never shares our PYTHONPATH
    step sf2_side_by_side 300 $PY -m benchmarks.benchmark_sf2 --sf2_wheels=.whl/sf2 --sf2_site=/tmp/sf2 \
      --device=gpu --num_workers="$(nproc)" --cases=same_work,fast --seconds=30 --rounds=1 \
      --sf2_clock=first_frames --start_timeout=120 --ceiling_seconds=0 --output="$OUT/sf2_side_by_side.md"
  fi
  ;;
scores)
  # the atari_dqn preset's learning curve (issue 33) and the atari preset's time to +18 (issue 31), in one lease
  # (measured on an H200: APPO +18 after 163 s from launch, 2026-11-27; DQN with the replay buffer on the GPU, 2026-11-28,
  # DQN_SECONDS=500 in one call of 523 s: -21 -> -17.6 at 11.37M frames, 22.7k frames/s; docs/results.md)
  dqn_s=${DQN_SECONDS:-420}
  step pong_dqn $((dqn_s + 80)) $PY -m benchmarks.time_to_score --tasks=pong_dqn --max_seconds="$dqn_s" \
    --output="$OUT/pong_dqn.md" --progress_dir="$OUT"
  if [ "${APPO_SECONDS:-0}" -gt 0 ]; then
    step pong $((APPO_SECONDS + 80)) $PY -m benchmarks.time_to_score --tasks=pong --max_seconds="$APPO_SECONDS" \
      --output="$OUT/pong.md" --progress_dir="$OUT"
  fi
  ;;
frames)
  # issue 50: the atari preset's GPU setup (H: rl_games' Pong recipe, synchronous, minibatches of 512, PPO's clip of
  # 0.1, 64 envs; frames to +18 measured on 2 CPU cores in docs/results.md) from launch to +18, then the GPU setup
  # before issue 50 (as flags: OLD_GPU_SETUP) for OLD_SECONDS: the two frames/s side by side (the issue's bound: at
  # most 10% fewer).
  # FRAMES_SECONDS caps the first run (default 240).
  fs=${FRAMES_SECONDS:-240}
  step frames_to_score $((fs + 60)) $PY -m benchmarks.frames_to_score --env=atari_pong --target=18 --seeds=1 \
    --max_frames=8e6 --out_dir="$OUT/frames_to_score" -- --device=gpu --train_for_seconds="$fs"
  # shellcheck disable=SC2086  # $OLD_GPU_SETUP is a list of flags
  step old_gpu_setup $((${OLD_SECONDS:-90} + 60)) $PY -m sample_factory.train --env=atari_pong --device=gpu \
    --train_for_seconds="${OLD_SECONDS:-90}" --train_dir=/tmp/gpu_check_td --experiment=old_gpu_setup $OLD_GPU_SETUP
  ;;
esac
echo "== done: $(ls "$OUT")"
