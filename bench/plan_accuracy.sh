#!/usr/bin/env bash
# `boost plan` against this machine: short training runs of CoLA and full rank at the cola-60m
# shape (seq 256 × 8, the demo corpus's vocabulary), on one rank and in-process tp2, pp2 and
# dp2, each followed by `boost plan --validate` on `--cluster cpu`. Each run's plan calibrates
# afresh (a cache directory of its own) right after the run's steps, so that the calibration
# and the steps are measured within a minute of each other on a shared machine whose speed
# drifts; a second calibration made right before the steps gives a second plan, and the two
# plans' difference is the host's drift over the run (not the model's error). Writes one JSON
# record: every run's predicted and measured parts, both plans' step, the command, the commit
# and the machine.
#
#   cargo build --release && bash bench/plan_accuracy.sh [OUT.json]
#
# STEPS (default 8) sets the steps of each run; medians leave the first out.
set -euo pipefail
cd "$(dirname "$0")/.."
boost=target/release/boost
out=${1:-bench/results/plan-accuracy.json}
steps=${STEPS:-8}
# OUT is replaced only when it is an earlier benchmark record; checked before the runs.
python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
if os.path.lexists(out):
    try:
        ours = os.path.isfile(out) and not os.path.islink(out) and json.load(open(out)).get("schema") == "boost-bench-record/1"
    except (OSError, ValueError):
        ours = False
    if not ours:
        sys.exit(f"{out} exists and is not a benchmark record (boost-bench-record/1); it is left as it is: choose another OUT")
EOF
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for arch in cola full; do
  for layout in 1 tp2 pp2 dp2; do
    sets=(--set model.preset=cola-60m --set "model.arch=$arch" --set train.seq_len=256
      --set train.micro_batch=8 --set "train.steps=$steps" --set train.eval_every=0
      --set train.checkpoint_every=0 --set "run.dir=$work/$arch-$layout")
    case $layout in
      tp2) sets+=(--set parallel.tp=2) ;;
      pp2) sets+=(--set parallel.pp=2) ;;
      dp2) sets+=(--set parallel.dp=2) ;;
    esac
    "$boost" plan --calibrate-cpu "$work/before-$arch-$layout.toml" --json >/dev/null
    echo "$arch $layout: training $steps steps" >&2
    "$boost" train "${sets[@]}" --quiet
    BOOST_CACHE_DIR="$work/cache-$arch-$layout" \
      "$boost" plan --cluster cpu --validate "$work/$arch-$layout" --json >"$work/$arch-$layout.json"
    "$boost" plan --cluster "$work/before-$arch-$layout.toml" --validate "$work/$arch-$layout" --json \
      >"$work/$arch-$layout-before.json"
  done
done
mkdir -p "$(dirname "$out")"
python3 - "$work" "$out" "$steps" <<'EOF'
import json, os, platform, subprocess, sys, tempfile
work, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
simd = "AVX-512" if " avx512f" in flags else ("AVX2" if " avx2" in flags else "other")
runs = []
for arch in ["cola", "full"]:
    for layout in ["1", "tp2", "pp2", "dp2"]:
        v = json.load(open(os.path.join(work, f"{arch}-{layout}.json")))
        before = json.load(open(os.path.join(work, f"{arch}-{layout}-before.json")))
        step_before = next(p for p in before["parts"] if p["name"] == "step")
        runs.append({"arch": arch, "layout": layout, "steps": v["steps"], "cluster": v["cluster"], "parts": v["parts"],
                     "step_planned_before_s": step_before["predicted_s"]})
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
step = lambda r: next(p for p in r["parts"] if p["name"] == "step")
figures = [{"name": f"{r['arch']} {r['layout']}", "value": round(step(r)["error"] * 100, 1), "unit": "%"} for r in runs]
worst = max(abs(f["value"]) for f in figures)
record = {
    "schema": "boost-bench-record/1",
    "id": "plan-accuracy",
    "group": "other",
    "title": "boost plan --cluster cpu against measured steps: cola-60m shape, seq 256 × 8, 1 rank, tp2, pp2, dp2 (step error, predicted / measured − 1)",
    "command": f"STEPS={steps} bash bench/plan_accuracy.sh",
    "commit": commit,
    "machine": {"cpu": cpu, "simd": simd, "gpu": None, "threads": os.cpu_count()},
    "statistic": f"median of steps 2–{steps} of each run; each run's calibration made right after its steps (drift: the plan of a calibration made right before them, against it)",
    "figures": figures,
    "headline": f"step within ±{worst:.0f} % on 8 layouts",
    "runs": runs,
}
tmp = tempfile.NamedTemporaryFile("w", dir=os.path.dirname(out) or ".", suffix=".tmp", delete=False)
with tmp:
    json.dump(record, tmp, indent=1)
os.replace(tmp.name, out)
print(f"{'run':<12} {'predicted s':>12} {'measured s':>11} {'error':>8} {'drift':>8}")
for r in runs:
    s = step(r)
    drift = r["step_planned_before_s"] / s["predicted_s"] - 1
    print(f"{r['arch'] + ' ' + r['layout']:<12} {s['predicted_s']:>12.3f} {s['measured_s']:>11.3f} {s['error'] * 100:>+7.1f}% {drift * 100:>+7.1f}%")
print(f"wrote {out}")
EOF
