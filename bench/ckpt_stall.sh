#!/usr/bin/env bash
# The step-time stall of a checkpoint, synchronous against train.async_checkpoint, in one run:
# ROUNDS alternating pairs of `boost train` (the 1b preset cut to 2 layers, checkpoints every
# 4 of 12 steps) with the extra `--set`s given (the layout, threads). The stall of one
# checkpoint is the time the two step intervals after it took beyond two ordinary steps
# (an interval is the time between two metrics.jsonl records: the step, plus the checkpoint
# after it); the printed figure is the median over the run's checkpoints.
# Usage: bench/ckpt_stall.sh BOOST_BINARY WORKDIR ROUNDS [--set KEY=VALUE ...]
# e.g. bench/ckpt_stall.sh target/release/boost /tmp/stall 3 --set parallel.tp=2 --set parallel.pp=2
set -euo pipefail
boost=$1 work=$2 rounds=$3
shift 3
mkdir -p "$work"
for r in $(seq 1 "$rounds"); do
  for mode in false true; do
    dir="$work/async-$mode-$r"
    rm -rf "$dir"
    "$boost" train --quiet --set model.preset=1b --set model.layers=2 --set train.micro_batch=1 \
      --set train.accumulation=2 --set train.steps=12 --set train.eval_every=0 \
      --set train.warmup_steps=2 --set train.checkpoint_every=4 \
      --set train.async_checkpoint=$mode --set run.dir="$dir" "$@" >/dev/null
    python3 - "$dir/metrics.jsonl" "$mode" "$r" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["elapsed_s"] for r in rows]
gaps = [b - a for a, b in zip(t, t[1:])]  # gaps[i]: from step i+1's record to step i+2's
ckpt = [i for i in range(len(gaps) - 1) if (i + 1) % 4 == 0]  # after steps 4 and 8
plain = [g for i, g in enumerate(gaps) if i > 0 and all(i not in (c, c + 1) for c in ckpt)]
step = statistics.median(plain)
stall = statistics.median(gaps[c] + gaps[c + 1] - 2 * step for c in ckpt)
mode = "async" if sys.argv[2] == "true" else "sync"
print(f"round {sys.argv[3]} {mode}: ordinary step {step:.3f} s, stall per checkpoint {stall:.3f} s")
PY
    rm -rf "$dir"
  done
done
